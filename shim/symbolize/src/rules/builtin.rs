//! The built-in rules, as data: site tiers, owners, owner rules and the frames of the driver and
//! runtime. Order matters in the two rule lists: the first rule that matches a frame decides.
//!
//! Function globs are written against qualified paths (`rmm::*mr::*` matches RMM's versioned
//! namespaces, `rmm::_RMM_26_10::mr::…`). Where a stack was recorded on a real GPU, the rule's
//! frames are in `tests/fixtures/stacks.txt`.

use super::owner::OwnerKind::{self, Driver, FrameworkCache, Library, Program};
use super::tier::Tier::{self, Framework, NeverSite, Operation};

/// Defines [`SITE_RULES`] and, for [`crate::site::BUILTIN`], their specs alone.
macro_rules! site_rules {
    ($(($tier:ident, $spec:literal)),* $(,)?) => {
        /// The built-in site rules, in order: (tier, spec).
        pub(crate) const SITE_RULES: &[(Tier, &str)] = &[$(($tier, $spec)),*];
        /// The specs of [`SITE_RULES`].
        pub(crate) const SITE_SPECS: &[&str] = &[$($spec),*];
    };
}

site_rules![
    // cuguard, the driver and the runtime (shared, and linked statically into nvcc programs,
    // where its internal functions are named libcudart_static_<hash>), and bindings to them.
    (NeverSite, "module:libcuguard*.so*"),
    (NeverSite, "module:libcuda.so*"),
    (NeverSite, "module:libcudart.so*"),
    (NeverSite, "module:libnvidia-*.so*"),
    (NeverSite, "function:cuda[A-Z]*"),
    (NeverSite, "function:cudart::*"),
    (NeverSite, "function:__cudart*"),
    (NeverSite, "function:libcudart_static_*"),
    // Driver entry points, and bindings named after them (cudarc's `sys::cuMemAlloc_v2`).
    (NeverSite, "function:cu[A-Z]*"),
    (NeverSite, "function:cudarc::*"),
    // cudarc's code inlined into a program built with line tables only.
    (NeverSite, "file:*/cudarc-*/src/*"),
    // cuda-python's bindings and cuda.core.
    (NeverSite, "module:*/cuda/bindings/*"),
    (NeverSite, "module:*/cuda/core/*"),
    (NeverSite, "function:cuda_core::*"),
    // CUDA libraries.
    (NeverSite, "module:libcublas*.so*"),
    (NeverSite, "module:libcudnn*.so*"),
    (NeverSite, "module:libcufft*.so*"),
    (NeverSite, "module:libcurand*.so*"),
    (NeverSite, "module:libcusparse*.so*"),
    (NeverSite, "module:libcusolver*.so*"),
    (NeverSite, "module:libcutensor*.so*"),
    (NeverSite, "module:libnccl*.so*"),
    (NeverSite, "module:libnvrtc*.so*"),
    (NeverSite, "module:libnvJitLink*.so*"),
    (NeverSite, "module:libnvjpeg*.so*"),
    (NeverSite, "function:cublas[A-Z]*"),
    (NeverSite, "function:cudnn[A-Z]*"),
    (NeverSite, "function:cufft[A-Z]*"),
    (NeverSite, "function:curand[A-Z]*"),
    (NeverSite, "function:cusparse[A-Z]*"),
    (NeverSite, "function:cusolver[A-Z]*"),
    (NeverSite, "function:cutensor[A-Z]*"),
    (NeverSite, "function:nccl[A-Z]*"),
    (NeverSite, "function:nccl::*"),
    // PyTorch: its caching allocators (device, and pinned host); autograd nodes, which name
    // the operation on the engine's threads, where no Python frame is; the framework.
    (NeverSite, "function:c10::cuda::CUDACachingAllocator::*"),
    (NeverSite, "function:at::*CachingHostAllocator*"),
    (Operation, "function:torch::autograd::*::apply"),
    (Operation, "function:torch::autograd::*validate_outputs*"),
    (
        Operation,
        "function:torch::autograd::Engine::evaluate_function"
    ),
    (Framework, "function:c10::*"),
    (Framework, "function:at::*"),
    (Framework, "function:torch::*"),
    (Framework, "module:libc10*.so*"),
    (Framework, "module:libtorch*.so*"),
    (Framework, "file:*/torch/*"),
    // RMM: its memory resources; its containers. cuDF: public functions name the operation,
    // `detail` ones do not. Unnamed code in librmm is its resources and the runtime it links.
    (NeverSite, "function:rmm::*mr::*"),
    (Framework, "function:rmm::*"),
    (NeverSite, "module:librmm*.so*"),
    (Framework, "function:cudf::*detail::*"),
    (Operation, "function:cudf::*"),
    (Framework, "module:libcudf*.so*"),
    (Framework, "module:*/rmm/*"),
    (Framework, "module:*/cudf/*"),
    (Framework, "module:*/pylibcudf/*"),
    (Framework, "file:*/rmm/*"),
    (Framework, "file:*/cudf/*"),
    // CuPy: its memory module (Memory, the pools, the allocator), its runtime wrappers, the rest.
    (NeverSite, "function:__pyx_*4cupy_4cuda_6memory_*"),
    (NeverSite, "function:__pyx_*4cupy_4cuda_13pinned_memory_*"),
    (NeverSite, "function:__pyx_*13cupy_backends_*"),
    (NeverSite, "module:*/cupy_backends/*"),
    (NeverSite, "module:*/cupy/cuda/memory.*"),
    (NeverSite, "module:*/cupy/cuda/pinned_memory.*"),
    (Framework, "module:*/cupy/*"),
    (Framework, "file:*/cupy/*"),
    (Framework, "file:*/cupy_backends/*"),
    // numba-cuda: its driver module (memory manager, deferred frees), the rest.
    (NeverSite, "file:*/numba/cuda/cudadrv/*"),
    (Framework, "file:*/numba/cuda/*"),
    (NeverSite, "module:libffi.so*"),
    (NeverSite, "module:_ctypes*.so"),
    // JAX / XLA: its allocators; running a compiled computation (the operation); the rest.
    (NeverSite, "function:tsl::*Alloc*"),
    (NeverSite, "function:tensorflow::*Alloc*"),
    (NeverSite, "function:stream_executor::*Alloc*"),
    (NeverSite, "function:xla::*Allocator*"),
    (Operation, "function:xla::*LoadedExecutable::Execute*"),
    (Framework, "function:xla::*"),
    (Framework, "function:stream_executor::*"),
    (Framework, "function:tsl::*"),
    (Framework, "function:jax::*"),
    (Framework, "function:pjrt::*"),
    (Framework, "module:*/jaxlib/*"),
    (Framework, "module:*/jax_cuda*/*"),
    (Framework, "module:*/jax_plugins/*"),
    (Framework, "file:*/jax/*"),
    (Framework, "file:*/jaxlib/*"),
    // IPython and Jupyter's kernel: the machinery that runs a notebook's cells, never the
    // user's line (the cell is).
    (Framework, "file:*/IPython/*"),
    (Framework, "file:*/ipykernel/*"),
    // cuguard's own Python package where it sits on a stack: the wrapper that opens an origin
    // around PyTorch's backward pass (`cuguard/_origin.py`), whose caller is the user's line;
    // PyTorch's out-of-memory observer (`cuguard/_oom.py`) and the ABI it calls
    // (`cuguard/_abi.py`), on the stack of the request PyTorch refused.
    (NeverSite, "file:*/cuguard/_origin.py"),
    (NeverSite, "file:*/cuguard/_oom.py"),
    (NeverSite, "file:*/cuguard/_abi.py"),
    // Binding layers, the C/C++ and Rust runtimes, the Python interpreter and its standard
    // library: never the user's line.
    (NeverSite, "function:nanobind::*"),
    (NeverSite, "function:pybind11::*"),
    (NeverSite, "function:std::*"),
    (NeverSite, "function:__gnu_cxx::*"),
    (NeverSite, "file:/rustc/*/library/*"),
    (NeverSite, "file:*/rustlib/src/rust/library/*"),
    (NeverSite, "module:libc.so*"),
    (NeverSite, "module:libstdc++.so*"),
    (NeverSite, "module:libgcc_s.so*"),
    (NeverSite, "module:ld-linux*.so*"),
    (NeverSite, "module:libpthread.so*"),
    (NeverSite, "module:libpython*.so*"),
    (NeverSite, "module:python"),
    (NeverSite, "module:python3"),
    (NeverSite, "module:python3.*"),
    (
        NeverSite,
        "file:*/lib/python3.[0-9]*/* & !file:*-packages/*"
    ),
    (NeverSite, "file:<frozen *>"),
];

/// The built-in owners: (id, kind, label, hint). The first two are the program and the driver.
pub(crate) const OWNERS: &[(&str, OwnerKind, &str, Option<&str>)] = &[
    ("program", Program, "the program", None),
    ("driver", Driver, "the CUDA driver and runtime", None),
    (
        "pytorch_caching_allocator",
        FrameworkCache,
        "PyTorch's caching allocator",
        Some(
            "its cache, not necessarily your tensors; PYTORCH_NO_CUDA_MEMORY_CACHING=1 shows each tensor",
        ),
    ),
    (
        "pytorch_host_caching_allocator",
        FrameworkCache,
        "PyTorch's pinned host memory cache",
        Some("its cache of pinned host buffers for copies, not necessarily your tensors"),
    ),
    (
        "cupy_memory_pool",
        FrameworkCache,
        "CuPy's memory pool",
        Some(
            "its cache, not necessarily your arrays; cupy.cuda.set_allocator(None) shows each array",
        ),
    ),
    (
        "cupy_pinned_memory_pool",
        FrameworkCache,
        "CuPy's pinned memory pool",
        Some(
            "its cache of pinned host buffers; cupy.cuda.set_pinned_memory_allocator(None) shows each one",
        ),
    ),
    (
        "rmm_pool",
        FrameworkCache,
        "RMM's pool memory resource",
        Some(
            "its pool, not necessarily your buffers; RMM's default resource (cuda_memory_resource) shows each buffer",
        ),
    ),
    (
        "rmm_arena",
        FrameworkCache,
        "RMM's arena memory resource",
        Some(
            "its arenas, not necessarily your buffers; RMM's default resource (cuda_memory_resource) shows each buffer",
        ),
    ),
    (
        "rmm_fixed_size",
        FrameworkCache,
        "RMM's fixed-size memory resource",
        Some(
            "its blocks, not necessarily your buffers; RMM's default resource (cuda_memory_resource) shows each buffer",
        ),
    ),
    (
        "rmm_pinned_host_pool",
        FrameworkCache,
        "RMM's pinned host memory pool (for cuDF's copies)",
        Some("pinned host memory kept for copies between host and device, not your data"),
    ),
    (
        "xla_bfc_allocator",
        FrameworkCache,
        "XLA's BFC allocator (JAX)",
        Some(
            "its pool, not necessarily your arrays; XLA_PYTHON_CLIENT_ALLOCATOR=platform shows each array (XLA_PYTHON_CLIENT_PREALLOCATE=false stops the reservation made up front)",
        ),
    ),
    (
        "xla_runtime",
        Library,
        "XLA's runtime (StreamExecutor)",
        None,
    ),
    ("cublas", Library, "cuBLAS/cuBLASLt", None),
    ("cudnn", Library, "cuDNN", None),
    ("nccl", Library, "NCCL", None),
    ("cufft", Library, "cuFFT", None),
    ("cusparse", Library, "cuSPARSE", None),
    ("cusolver", Library, "cuSOLVER", None),
    ("curand", Library, "cuRAND", None),
    ("cutensor", Library, "cuTENSOR", None),
    ("nvjpeg", Library, "nvJPEG", None),
];

/// The built-in owner rules, in order: (owner id, spec). Checked frame by frame from the
/// allocation outward; at each frame, the first rule that matches decides.
pub(crate) const OWNER_RULES: &[(&str, &str)] = &[
    // PyTorch: a segment of the caching allocator is made under DeviceCachingAllocator
    // (alloc_block, or expandable segments); with caching off (PYTORCH_NO_CUDA_MEMORY_CACHING=1)
    // NativeCachingAllocator::allocate calls cudaMalloc for the tensor itself: the program's.
    (
        "pytorch_caching_allocator",
        "function:c10::cuda::CUDACachingAllocator::*DeviceCachingAllocator::*",
    ),
    (
        "pytorch_caching_allocator",
        "function:c10::cuda::CUDACachingAllocator::*ExpandableSegment::*",
    ),
    (
        "pytorch_host_caching_allocator",
        "function:at::*CachingHostAllocator*",
    ),
    // PyTorch's cuBLAS workspaces (with caching on, the cache's segment is found first).
    ("cublas", "function:at::cuda::getCUDABlasLtWorkspace*"),
    ("cublas", "function:at::cuda::setWorkspaceForHandle*"),
    // CuPy's pools (Cython names); with cupy.cuda.set_allocator(None) an array's memory comes
    // from cupy.cuda.memory._malloc without them: the program's.
    (
        "cupy_memory_pool",
        "function:__pyx_*4cupy_4cuda_6memory_*MemoryPool*",
    ),
    (
        "cupy_pinned_memory_pool",
        "function:__pyx_*4cupy_4cuda_13pinned_memory_*PinnedMemoryPool*",
    ),
    // RMM: pinned host memory made inside librmm (cuDF's pinned pool, at unnamed offsets);
    // the caching resources. A binning resource is not one: its bins are (fixed-size or pool
    // resources, found first), and what it sends straight upstream is the program's, as is
    // what the default cuda_memory_resource allocates.
    (
        "rmm_pinned_host_pool",
        "module:librmm*.so* & memory:host_pinned",
    ),
    (
        "rmm_fixed_size",
        "function:rmm::*fixed_size_memory_resource*",
    ),
    ("rmm_arena", "function:rmm::*arena_memory_resource*"),
    ("rmm_arena", "function:rmm::*mr::detail::arena::*"),
    ("rmm_pool", "function:rmm::*pool_memory_resource*"),
    // XLA: the BFC allocator (its sub-allocators are called from it); the executor's context.
    // With XLA_PYTHON_CLIENT_ALLOCATOR=platform arrays are allocated one by one: the program's.
    ("xla_bfc_allocator", "function:tsl::*BFCAllocator::*"),
    ("xla_bfc_allocator", "function:tensorflow::*BFCAllocator::*"),
    (
        "xla_runtime",
        "function:stream_executor::gpu::CudaContext::*",
    ),
    (
        "xla_runtime",
        "function:stream_executor::gpu::CudaExecutor::Init*",
    ),
    // CUDA libraries' handles and workspaces.
    ("cublas", "module:libcublas*.so*"),
    ("cublas", "function:cublas[A-Z]*"),
    ("cudnn", "module:libcudnn*.so*"),
    ("cudnn", "function:cudnn[A-Z]*"),
    // NCCL: its communicators' buffers, made through cuMem* (VMM) or cuMemAlloc, from
    // libnccl.so or from NCCL linked into a program (its C entries and internals are named
    // ncclXxx, its C++ code lives in the nccl namespace).
    ("nccl", "module:libnccl*.so*"),
    ("nccl", "function:nccl[A-Z]*"),
    ("nccl", "function:nccl::*"),
    ("cufft", "module:libcufft*.so*"),
    ("cufft", "function:cufft[A-Z]*"),
    ("cusparse", "module:libcusparse*.so*"),
    ("cusparse", "function:cusparse[A-Z]*"),
    ("cusolver", "module:libcusolver*.so*"),
    ("cusolver", "function:cusolver[A-Z]*"),
    ("curand", "module:libcurand*.so*"),
    ("curand", "function:curand[A-Z]*"),
    ("cutensor", "module:libcutensor*.so*"),
    ("cutensor", "function:cutensor[A-Z]*"),
    ("nvjpeg", "module:libnvjpeg*.so*"),
    ("nvjpeg", "function:nvjpeg[A-Z]*"),
];

/// Frames of the driver and the runtime. A stack with at least one of them and nothing else but
/// [`SYSTEM_FRAMES`] and unknown frames is the driver's.
pub(crate) const DRIVER_FRAMES: &[&str] = &[
    "module:libcuguard*.so*",
    "module:libcuda.so*",
    "module:libcudart.so*",
    "module:libnvidia-*.so*",
    "function:cuda[A-Z]*",
    "function:cudart::*",
    "function:__cudart*",
    "function:libcudart_static_*",
];

/// Frames that start processes and threads, which a driver's stack may also hold.
pub(crate) const SYSTEM_FRAMES: &[&str] = &[
    "module:libc.so*",
    "module:ld-linux*.so*",
    "module:libpthread.so*",
    "module:libstdc++.so*",
    "module:libgcc_s.so*",
    "function:_start",
    "function:__libc_start*",
    "function:start_thread",
    "function:clone*",
];
