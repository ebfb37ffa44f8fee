//! Unit tests of the rules: tiers and their order, site kinds, owners, user additions.

use super::*;

fn f<'a>(module: &'a str, function: Option<&'a str>) -> SiteFrame<'a> {
    SiteFrame {
        module,
        function,
        ..Default::default()
    }
}

fn py<'a>(file: &'a str, function: &'a str, line: u32) -> SiteFrame<'a> {
    SiteFrame {
        module: "",
        function: Some(function),
        file: Some(file),
        line: Some(line),
        offset: 0,
    }
}

const CUDART: &str = "/venv/nvidia/cu13/lib/libcudart.so.13";
const LIBRMM: &str = "/site/librmm/lib64/librmm.so";

#[test]
fn the_first_matching_rule_gives_the_tier() {
    let r = Rules::builtin();
    // RMM: resources never, containers framework, unnamed librmm code never.
    let resource = f(
        LIBRMM,
        Some(
            "rmm::_RMM_26_10::mr::cuda_memory_resource::allocate(cuda::__4::stream_ref, unsigned long, unsigned long)",
        ),
    );
    assert_eq!(r.tier(&resource), Some(Tier::NeverSite));
    let buffer = f(
        LIBRMM,
        Some("rmm::_RMM_26_10::device_buffer::allocate_async(unsigned long)"),
    );
    assert_eq!(r.tier(&buffer), Some(Tier::Framework));
    assert_eq!(r.tier(&f(LIBRMM, None)), Some(Tier::NeverSite));
    // cuDF: detail is framework, the public API an operation.
    assert_eq!(
        r.tier(&f(
            "/x/libcudf.so",
            Some("cudf::io::parquet::detail::reader::read()")
        )),
        Some(Tier::Framework)
    );
    assert_eq!(
        r.tier(&f(
            "/x/libcudf.so",
            Some("cudf::io::read_parquet(cudf::io::parquet_reader_options const&)")
        )),
        Some(Tier::Operation)
    );
    // PyTorch: the caching allocator never, the autograd node an operation, ATen framework.
    let torch = "/venv/torch/lib/libtorch_cpu.so";
    assert_eq!(
        r.tier(&f(
            "/venv/torch/lib/libc10_cuda.so",
            Some("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)")
        )),
        Some(Tier::NeverSite)
    );
    assert_eq!(
        r.tier(&f(torch, Some("torch::autograd::generated::ReluBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)"))),
        Some(Tier::Operation)
    );
    assert_eq!(
        r.tier(&f(torch, Some("torch::autograd::generated::ReluBackward0_apply_functional(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)"))),
        Some(Tier::Framework)
    );
    // Python: the standard library never, site-packages' frameworks framework, the rest the user's.
    assert_eq!(
        r.tier(&py("/usr/lib/python3.12/contextlib.py", "__enter__", 137)),
        Some(Tier::NeverSite)
    );
    assert_eq!(
        r.tier(&py("<frozen runpy>", "_run_code", 88)),
        Some(Tier::NeverSite)
    );
    assert_eq!(
        r.tier(&py(
            "/v/lib/python3.12/site-packages/torch/nn/modules/module.py",
            "_call_impl",
            1
        )),
        Some(Tier::Framework)
    );
    assert_eq!(
        r.tier(&py("/v/lib/python3.12/site-packages/mylib/x.py", "f", 1)),
        None
    );
    assert_eq!(
        r.tier(&py("/home/u/lib/python3-tools/train.py", "main", 1)),
        None
    );
    // Rust: the standard library (by file, as line-tables-only builds name it) and cudarc.
    let rs = |function, file| SiteFrame {
        module: "/app/prog",
        function: Some(function),
        file: Some(file),
        ..Default::default()
    };
    assert_eq!(
        r.tier(&rs(
            "try_fold<u8>",
            "/rustc/59807616e/library/core/src/iter/traits/iterator.rs"
        )),
        Some(Tier::NeverSite)
    );
    assert_eq!(
        r.tier(&rs("malloc_async", "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cudarc-0.19.10/src/driver/result.rs")),
        Some(Tier::NeverSite)
    );
    assert_eq!(r.tier(&rs("app::main", "/src/app/src/main.rs")), None);
}

#[test]
fn site_kinds_user_operation_fallback_none() {
    let r = Rules::builtin();
    let torch = "/venv/torch/lib/libtorch_cpu.so";
    let mut frames = vec![
        f(CUDART, Some("cudaMalloc")),
        f(torch, Some("at::native::empty_cuda(c10::ArrayRef<long>)")),
        f(
            torch,
            Some(
                "torch::autograd::generated::MulBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)",
            ),
        ),
        f(
            torch,
            Some(
                "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)",
            ),
        ),
        f("/lib/x86_64-linux-gnu/libc.so.6", Some("start_thread")),
    ];
    let (site, kind) = r.find_site_with_kind(&frames).unwrap();
    assert_eq!((site.index, kind), (2, SiteKind::Operation));
    assert_eq!(site.fingerprint, fingerprint(&frames[2]));
    // A user frame outside wins over the operation.
    frames.insert(4, py("/home/u/train.py", "step", 12));
    assert_eq!(
        r.find_site_with_kind(&frames).map(|(s, k)| (s.index, k)),
        Some((4, SiteKind::User))
    );
    frames.remove(4);
    // Without the node: the first framework frame.
    frames.remove(2);
    assert_eq!(
        r.find_site_with_kind(&frames).map(|(s, k)| (s.index, k)),
        Some((1, SiteKind::Fallback))
    );
    // Nothing but never-a-site frames and unknown ones: none.
    let frames = [f("", None), f(CUDART, Some("cudaMalloc")), f(CUDART, None)];
    assert_eq!(r.find_site_with_kind(&frames), None);
    assert_eq!(r.find_site_with_kind(&[]), None);
    // No rules: every known frame is the user's.
    assert_eq!(
        Rules::none()
            .find_site_with_kind(&frames)
            .map(|(s, k)| (s.index, k)),
        Some((1, SiteKind::User))
    );
}

#[test]
fn owners_innermost_rule_first_then_driver_or_program() {
    let r = Rules::builtin();
    let c10 = "/venv/torch/lib/libc10_cuda.so";
    let cached = [
        f(CUDART, Some("cudaMalloc")),
        f(
            c10,
            Some(
                "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::alloc_block(AllocParams&, bool)",
            ),
        ),
        f(
            c10,
            Some(
                "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)",
            ),
        ),
        f(
            "/venv/torch/lib/libtorch_cuda.so",
            Some("at::cuda::getCUDABlasLtWorkspace()"),
        ),
    ];
    let o = r.owner(&cached, Some("device"));
    assert_eq!(
        (o.id.as_str(), o.kind, o.label.as_str()),
        (
            "pytorch_caching_allocator",
            OwnerKind::FrameworkCache,
            "PyTorch's caching allocator"
        )
    );
    assert!(
        o.hint
            .as_deref()
            .unwrap()
            .contains("PYTORCH_NO_CUDA_MEMORY_CACHING=1")
    );
    // Caching off: the workspace rule outside the allocator decides.
    let uncached = [cached[0], cached[2], cached[3]];
    assert_eq!(r.owner(&uncached, Some("device")).id, "cublas");
    assert_eq!(r.owner(&uncached[..2], Some("device")).id, "program");
    // The memory kind: pinned host memory in librmm is cuDF's pinned pool, device memory not.
    let rmm = [
        f(LIBRMM, None),
        f(LIBRMM, None),
        py("/home/u/etl.py", "load", 3),
    ];
    assert_eq!(
        r.owner(&rmm, Some("host_pinned")).id,
        "rmm_pinned_host_pool"
    );
    assert_eq!(r.owner(&rmm, Some("device")).id, "program");
    assert_eq!(r.owner(&rmm, None).id, "program");
    // Only the driver and runtime (and thread start): the driver's; not for an empty stack.
    let driver = [
        f("/usr/lib/libcuda.so.1", None),
        f(CUDART, None),
        f("", None),
        f("/lib/x86_64-linux-gnu/libc.so.6", Some("start_thread")),
    ];
    let o = r.owner(&driver, Some("device"));
    assert_eq!((o.id.as_str(), o.kind), ("driver", OwnerKind::Driver));
    assert_eq!(r.owner(&[], Some("device")).id, "program");
    assert_eq!(r.owner(&driver[2..], Some("device")).id, "program");
    let with_user = [driver[0], f("/app/prog", Some("run"))];
    assert_eq!(r.owner(&with_user, Some("device")).id, "program");
    // No rules: the program's, or the driver's... only with driver frames known, which none has.
    assert_eq!(Rules::none().owner(&cached, Some("device")).id, "program");
    assert_eq!(Rules::none().owner(&driver, Some("device")).id, "program");
}

#[test]
fn nccl_memory_is_nccls() {
    let r = Rules::builtin();
    let libcuda = f(
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        Some("cuMemCreate"),
    );
    let torch = f(
        "/venv/torch/lib/libtorch_cuda.so",
        Some("c10d::ProcessGroupNCCL::getNCCLComm(std::string const&, c10::Device&, c10d::OpType)"),
    );
    let user = py("/home/u/train.py", "main", 12);
    // libnccl.so's own frames, named or not, through VMM (the communicator's buffers).
    let shared = [
        libcuda,
        f("/venv/nvidia/nccl/lib/libnccl.so.2", None),
        f(
            "/venv/nvidia/nccl/lib/libnccl.so.2",
            Some("ncclCommInitRank"),
        ),
        torch,
        user,
    ];
    for memory in ["vmm", "device"] {
        let o = r.owner(&shared, Some(memory));
        assert_eq!(
            (o.id.as_str(), o.kind, o.label.as_str()),
            ("nccl", OwnerKind::Library, "NCCL"),
            "{memory}"
        );
    }
    // NCCL linked into the program: by its names, C (ncclXxx, templates too) and C++ (nccl::).
    let prog = "/app/allreduce";
    let by_cumemalloc = [
        f("/usr/lib/libcuda.so.1", Some("cuMemAlloc_v2")),
        f(
            prog,
            Some("ncclResult_t ncclCudaCalloc<char>(char**, unsigned long, ncclMemoryStack*)"),
        ),
        f(prog, Some("main")),
    ];
    assert_eq!(r.owner(&by_cumemalloc, Some("device")).id, "nccl");
    let by_namespace = [
        libcuda,
        f(
            prog,
            Some("nccl::symmetric::Window::register_(void*, unsigned long)"),
        ),
        f(prog, Some("main")),
    ];
    assert_eq!(r.owner(&by_namespace, Some("vmm")).id, "nccl");
    // Neither is ever the site: the program's line that called into NCCL is.
    assert_eq!(r.tier(&by_namespace[1]), Some(Tier::NeverSite));
    assert_eq!(r.tier(&by_cumemalloc[1]), Some(Tier::NeverSite));
    // A buffer the program allocated and hands to NCCL is the program's.
    let buffer = [
        f("/usr/lib/libcuda.so.1", Some("cuMemAlloc_v2")),
        f(prog, Some("make_send_buffer(unsigned long)")),
        f(prog, Some("main")),
    ];
    assert_eq!(r.owner(&buffer, Some("device")).id, "program");
    // Names that merely start with "nccl" in lower case are not NCCL's.
    let lookalike = [
        f("/usr/lib/libcuda.so.1", Some("cuMemAlloc_v2")),
        f(prog, Some("ncclient_buffer_alloc")),
    ];
    assert_eq!(r.owner(&lookalike, Some("device")).id, "program");
}

#[test]
fn every_builtin_owner_is_reachable_and_caches_have_hints() {
    let r = Rules::builtin();
    assert_eq!(r.owners()[PROGRAM].id, "program");
    assert_eq!(r.owners()[DRIVER].id, "driver");
    for (i, o) in r.owners().iter().enumerate() {
        let ruled = r.owner_rules.iter().any(|rule| rule.owner == i);
        assert!(ruled || i == PROGRAM || i == DRIVER, "{} has no rule", o.id);
        assert_eq!(
            o.hint.is_some(),
            o.kind == OwnerKind::FrameworkCache,
            "{}",
            o.id
        );
        assert!(r.owner_by_id(&o.id).is_some());
    }
    let ids: std::collections::HashSet<&str> = r.owners().iter().map(|o| o.id.as_str()).collect();
    assert_eq!(ids.len(), r.owners().len(), "ids are unique");
}

#[test]
fn user_owner_rules_come_first_and_define_owners() {
    let mut r = Rules::builtin();
    let pool = [
        f(
            LIBRMM,
            Some(
                "rmm::mr::cuda_memory_resource::do_allocate(unsigned long, rmm::cuda_stream_view)",
            ),
        ),
        f(
            LIBRMM,
            Some(
                "rmm::mr::pool_memory_resource<rmm::mr::cuda_memory_resource>::expand_pool(unsigned long)",
            ),
        ),
        f("/app/prog", Some("myapp::Arena::grow(unsigned long)")),
    ];
    assert_eq!(r.owner(&pool, Some("device")).id, "rmm_pool");
    r.add_owner_spec(
        " my_arena:framework_cache = function:myapp::Arena::* , program=function:rmm::*pool_memory_resource* & memory:device,,",
    )
    .unwrap();
    // The user's rule for the pool frame overrides the built-in one.
    assert_eq!(r.owner(&pool, Some("device")).id, "program");
    assert_eq!(r.owner(&pool, Some("vmm")).id, "rmm_pool");
    assert_eq!(r.owner(&pool[2..], None).id, "my_arena");
    let mine = r.owner_by_id("my_arena").unwrap();
    assert_eq!(
        (mine.kind, mine.label.as_str(), mine.hint.as_deref()),
        (
            OwnerKind::FrameworkCache,
            "my_arena",
            Some(owner::USER_CACHE_HINT)
        )
    );
    // A later entry may use an owner defined earlier, with the same kind.
    r.add_owner_spec("my_arena=module:libarena.so, my_arena:framework_cache=file:arena.cpp")
        .unwrap();
    assert_eq!(r.owner(&[f("/x/libarena.so", None)], None).id, "my_arena");
}

#[test]
fn bad_owner_specs_are_reported_together_and_the_good_ones_kept() {
    let mut r = Rules::builtin();
    let n = r.owners().len();
    let e = r
        .add_owner_spec(
            "nonsense, nobody=module:x, x:cache=module:y, Bad-Id=module:z, cublas=symbol:q, \
             cublas:framework_cache=module:w, ok:library=module:libok.so",
        )
        .unwrap_err();
    assert_eq!(e.problems.len(), 6, "{e}");
    let text = e.to_string();
    assert!(
        text.starts_with("6 bad owner rules: \"nonsense\": expected OWNER="),
        "{text}"
    );
    assert!(text.contains("unknown owner \"nobody\""), "{text}");
    assert!(text.contains("unknown owner kind \"cache\""), "{text}");
    assert!(text.contains("bad owner \"Bad-Id\""), "{text}");
    assert!(text.contains("unknown field \"symbol\""), "{text}");
    assert!(
        text.contains("owner \"cublas\" is already a library"),
        "{text}"
    );
    assert_eq!(r.owners().len(), n + 1);
    assert_eq!(r.owner(&[f("/x/libok.so", None)], None).id, "ok");
    let one = Rules::builtin().add_owner_spec("x").unwrap_err();
    assert!(
        one.to_string()
            .starts_with("bad owner rule \"x\": expected"),
        "{one}"
    );
    assert!(Rules::builtin().add_owner_spec("").is_ok());
}

#[test]
fn user_site_rules_come_first() {
    let mut r = Rules::builtin();
    let frames = [
        f(CUDART, Some("cudaMalloc")),
        f("/app/libpool.so", Some("mypool::grow(unsigned long)")),
        f("/app/prog", Some("main")),
    ];
    assert_eq!(
        r.find_site_with_kind(&frames).map(|(s, k)| (s.index, k)),
        Some((1, SiteKind::User))
    );
    r.add_site_rule(Tier::Operation, "function:mypool::grow & module:libpool.so")
        .unwrap();
    assert_eq!(r.tier(&frames[1]), Some(Tier::Operation));
    assert_eq!(
        r.site_rules().next(),
        Some((Tier::Operation, "function:mypool::grow & module:libpool.so"))
    );
    assert_eq!(
        r.find_site_with_kind(&frames).map(|(s, k)| (s.index, k)),
        Some((2, SiteKind::User))
    );
    // A user rule overrides a built-in one: cudaMalloc as the user's is not possible, but as
    // an operation it is.
    r.add_site_rule(Tier::Operation, "function:cudaMalloc")
        .unwrap();
    assert_eq!(r.tier(&frames[0]), Some(Tier::Operation));
    assert!(r.add_site_rule(Tier::Framework, "memory:device").is_err());
    assert!(r.add_site_rule(Tier::Framework, "function:").is_err());
}

#[test]
fn kinds_and_tiers_have_names() {
    assert_eq!(
        OwnerKind::ALL.map(OwnerKind::as_str),
        ["program", "framework_cache", "library", "driver"]
    );
    for k in OwnerKind::ALL {
        assert_eq!(OwnerKind::parse(k.as_str()), Some(k));
        assert_eq!(k.to_string(), k.as_str());
    }
    assert_eq!(OwnerKind::parse("cache"), None);
    assert_eq!(
        [SiteKind::User, SiteKind::Operation, SiteKind::Fallback].map(SiteKind::as_str),
        ["user", "operation", "fallback"]
    );
    assert_eq!(
        [Tier::NeverSite, Tier::Framework, Tier::Operation].map(Tier::as_str),
        ["never_site", "framework", "operation"]
    );
}

#[test]
fn builtin_specs_parse_and_plumbing_lists_them() {
    let r = Rules::builtin();
    assert_eq!(r.site_rules().count(), SITE_SPECS.len());
    assert!(
        r.site_rules()
            .map(|(_, s)| s)
            .eq(SITE_SPECS.iter().copied())
    );
    assert!(
        builtin::OWNER_RULES
            .iter()
            .all(|(_, s)| Pattern::parse(s, true).is_ok())
    );
}
