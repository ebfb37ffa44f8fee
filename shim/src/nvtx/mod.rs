//! The NVTX tool of the process (compute-sanitizer's, when it runs the program), attached the way
//! an NVTX-using program attaches it, so that the pool can tell it where its blocks are
//! ([`crate::serving::regions`]).
//!
//! NVIDIA's `nvtx3` headers find the tool through `NVTX_INJECTION64_PATH` and nothing else (they
//! do not look for one already loaded): [`core`] is their core injection (`dlopen(path,
//! RTLD_LAZY)`, `InitializeInjectionNvtx2(nvtxGetExportTable)`, the tool's `nvtxInitialize`),
//! [`mem`] their memory extension (`dlopen` again, `InitializeInjectionNvtxExtension` with the
//! module's function slots). The shim implements that protocol instead of linking an NVTX crate:
//! the protocol is two entry points and a few fixed tables, and the crates build NVIDIA's C
//! headers with a C compiler (and carry their own copy of the globals) for the sake of calls the
//! pool makes five of.
//!
//! On whenever `NVTX_INJECTION64_PATH` names a tool (compute-sanitizer sets it), unless
//! `CUGUARD_NVTX=0`. Checked with compute-sanitizer 13.0 on the H200 (docs/compatibility.md,
//! 2026-12-02 runs 11–13), after the faults runs 9 and 11 showed: the memory extension's callback ids are
//! numbered from 0 in CUDA 13.0's headers ([`mem`]), and a heap must not be unregistered once its
//! memory is gone ([`crate::serving::regions`]). `CUGUARD_NVTX_TRACE=1` writes every call into the
//! tool, with its arguments, result, thread and current context, to stderr. Nothing happens
//! while the shim loads. The tool is attached by [`start`] (which reads the variable then, as the
//! headers do at their first call), which the pool calls when it makes its first pool (a context
//! exists: compute-sanitizer wants CUDA initialized before NVTX calls), once per process. When
//! the variable is unset nothing is loaded, ever, and the pool's fast paths read one word
//! ([`on`]). A tool that cannot be loaded or initialized gets one line on stderr and the pool
//! runs as without it; a tool without the memory API (a profiler's) gets none (`CUGUARD_LOG=1`
//! says it).
//!
//! Calls into the tool run with [`InTool`] held: should the tool reach the shim's driver entries
//! from inside one, the pool leaves those allocations, and the pointer queries, to the driver (it
//! holds a lock of its own around some of these calls, and the tool must see the chunk it was told
//! of, not a block).

mod core;
mod mem;
pub mod tool;

use std::cell::Cell;
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};

pub use mem::Heap;

/// No tool: not started yet, or `NVTX_INJECTION64_PATH` unset.
const IDLE: u8 = 0;
/// One thread is attaching the tool.
const STARTING: u8 = 1;
/// The tool is attached: the pool registers its chunks and blocks.
const ON: u8 = 2;
/// Not to be tried again: no variable, or the tool failed.
const OFF: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(IDLE);
/// The domain the tool gave (0: the default domain).
static DOMAIN: AtomicUsize = AtomicUsize::new(0);
/// `CUGUARD_POOL_REDZONE`, read when the tool attached.
static REDZONE: AtomicU64 = AtomicU64::new(0);
/// `CUGUARD_NVTX_TRACE=1`, read when the tool is attached: every call into the tool on stderr.
static TRACE: AtomicBool = AtomicBool::new(false);

/// One `cuguard: nvtx: …` line on stderr under `CUGUARD_NVTX_TRACE=1`, with the calling thread
/// and its current context (a tool may tie a heap to either).
fn trace(line: impl FnOnce() -> String) {
    if !TRACE.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let ctx = crate::driver::current_context().unwrap_or(0);
    crate::process::diag::warn(&format!("nvtx: [tid {tid} ctx {ctx:#x}] {}", line()));
}

/// The bytes the pool keeps unused after each block while the tool is attached.
#[inline]
pub fn redzone() -> u64 {
    REDZONE.load(Ordering::Relaxed)
}

thread_local! {
    // Const-initialized and destructor-free: usable while the thread exits.
    static IN_TOOL: Cell<bool> = const { Cell::new(false) };
}

/// Whether a tool is attached (one relaxed load).
#[inline]
pub fn on() -> bool {
    STATE.load(Ordering::Relaxed) == ON
}

/// Whether a tool may be attached, now or once the first pool is made (one relaxed load): false
/// for good once there is none, so the pool's pair then reads this one word and nothing else.
#[inline]
pub fn maybe() -> bool {
    STATE.load(Ordering::Relaxed) != OFF
}

/// Whether the calling thread is inside a call into the tool.
#[inline]
pub fn in_tool() -> bool {
    IN_TOOL.try_with(Cell::get).unwrap_or(false)
}

/// Held while the thread is inside a call into the tool.
struct InTool;

impl InTool {
    fn enter() -> InTool {
        let _ = IN_TOOL.try_with(|c| c.set(true));
        InTool
    }
}

impl Drop for InTool {
    fn drop(&mut self) {
        let _ = IN_TOOL.try_with(|c| c.set(false));
    }
}

/// Attaches the tool named by `NVTX_INJECTION64_PATH`, the first time it is called with CUDA
/// initialized; afterwards (and on other threads while one attaches) returns at once.
pub fn start() {
    if STATE
        .compare_exchange(IDLE, STARTING, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    // `CUGUARD_NVTX=0`: a tool in the process sees the pool's chunks as the driver's allocations.
    if std::env::var_os("CUGUARD_NVTX").is_some_and(|v| v == "0") {
        STATE.store(OFF, Ordering::Release);
        return;
    }
    // Read now, as NVTX's headers read it at their first call (the program may have set it since
    // the shim loaded).
    let Some(path) = std::env::var_os("NVTX_INJECTION64_PATH")
        .filter(|p| !p.is_empty())
        .and_then(|p| std::ffi::CString::new(std::os::unix::ffi::OsStringExt::into_vec(p)).ok())
    else {
        STATE.store(OFF, Ordering::Release);
        return;
    };
    let path = path.as_c_str();
    if tool::is_self(path) {
        // cuguard is the tool ([`tool`]): the ranges are the history's phases, and there is no
        // other tool to tell of the pool's blocks.
        STATE.store(OFF, Ordering::Release);
        return;
    }
    TRACE.store(
        std::env::var_os("CUGUARD_NVTX_TRACE").is_some_and(|v| v == "1"),
        Ordering::Relaxed,
    );
    trace(|| format!("attaching {}", path.to_string_lossy()));
    let outcome = {
        let _inside = InTool::enter();
        attach(path)
    };
    match outcome {
        Ok(domain) => {
            DOMAIN.store(domain, Ordering::Relaxed);
            let redzone = crate::config::redzone_from(std::env::var("CUGUARD_POOL_REDZONE").ok())
                .unwrap_or_else(|why| {
                    crate::process::diag::warn(&why);
                    crate::process::faults::record(why);
                    crate::config::DEFAULT_REDZONE
                });
            REDZONE.store(redzone, Ordering::Relaxed);
            STATE.store(ON, Ordering::Release);
            crate::process::diag::log(|| {
                format!(
                    "NVTX tool {} attached: the pool's chunks and blocks are registered with it",
                    path.to_string_lossy()
                )
            });
        }
        Err(mem::Unusable::Refused(why)) => {
            STATE.store(OFF, Ordering::Release);
            let line = format!(
                "NVTX_INJECTION64_PATH={}: {why}; the pool runs without telling it of its blocks",
                path.to_string_lossy()
            );
            crate::process::diag::warn(&line);
            crate::process::faults::record(line);
        }
        Err(mem::Unusable::NoMemoryApi(why)) => {
            // A tool of another kind (a profiler's): nothing to say unless asked.
            STATE.store(OFF, Ordering::Release);
            crate::process::diag::log(|| {
                format!(
                    "NVTX tool {}: {why}; the pool's blocks are not registered with it",
                    path.to_string_lossy()
                )
            });
        }
    }
}

/// The last `dlerror()`, or a placeholder.
fn dlerror() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl call.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: checked non-null; NUL-terminated.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// The address of `name` in the library `handle`, through libc's own `dlsym`.
fn symbol(handle: *mut libc::c_void, name: &CStr) -> Option<usize> {
    let dlsym = crate::driver::loader::real_dlsym()?;
    // SAFETY: handle is a live dlopen handle; name is NUL-terminated.
    let p = unsafe { dlsym(handle, name.as_ptr()) };
    (!p.is_null()).then_some(p as usize)
}

/// The headers' two loads, in their order; the domain on success.
fn attach(path: &CStr) -> Result<usize, mem::Unusable> {
    // The core injection (`nvtxInitializeInjectionLibrary`). Its failure leaves the core API
    // without a tool; the headers go on to the extension all the same.
    // SAFETY: a NUL-terminated path; the loader runs the library's constructors.
    let core_handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_LAZY) };
    if core_handle.is_null() {
        return Err(mem::Unusable::Refused(format!(
            "could not be loaded ({})",
            dlerror()
        )));
    }
    match symbol(core_handle, c"InitializeInjectionNvtx2") {
        Some(init) => {
            // SAFETY: the tool's InitializeInjectionNvtx2 has this signature.
            let init: core::InitFn = unsafe { std::mem::transmute(init) };
            // SAFETY: get_export_table and what it returns live for the process.
            let status = unsafe { init(core::get_export_table) };
            let (domain_fn, initialize_fn) = core::filled();
            trace(|| {
                format!(
                    "InitializeInjectionNvtx2 -> {status}; tables asked: modules {:?}; \
                     nvtxDomainCreateA {}, nvtxInitialize {}",
                    core::modules_asked(),
                    if domain_fn { "filled" } else { "not filled" },
                    if initialize_fn {
                        "filled"
                    } else {
                        "not filled"
                    },
                )
            });
            if status == 0 {
                // SAFETY: the handle this function opened.
                unsafe { libc::dlclose(core_handle) };
            }
        }
        None => {
            trace(|| "no InitializeInjectionNvtx2 (no core tool)".into());
            // SAFETY: the handle this function opened.
            unsafe { libc::dlclose(core_handle) };
        }
    }
    // The program's domain, then its first memory call: `nvtxMemHeapRegister` first runs
    // `nvtxInitialize(0)`, then loads the extension.
    let domain = core::domain_create(c"cuguard") as usize;
    trace(|| format!("nvtxDomainCreateA(\"cuguard\") -> {domain:#x}"));
    core::initialize();
    // The memory extension (`nvtxExtLoadInjectionLibrary`, `nvtxExtInitOnce`).
    // SAFETY: as above.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_LAZY) };
    if handle.is_null() {
        return Err(mem::Unusable::Refused(format!(
            "could not be loaded ({})",
            dlerror()
        )));
    }
    let Some(init) = symbol(handle, c"InitializeInjectionNvtxExtension") else {
        // SAFETY: the handle this function opened.
        unsafe { libc::dlclose(handle) };
        return Err(mem::Unusable::NoMemoryApi(
            "it has no InitializeInjectionNvtxExtension (no NVTX memory API)".into(),
        ));
    };
    // SAFETY: the tool's InitializeInjectionNvtxExtension has this signature.
    let init: mem::InitFn = unsafe { std::mem::transmute(init) };
    let attached = mem::attach(init);
    trace(|| {
        format!(
            "InitializeInjectionNvtxExtension: {}; callbacks numbered from {}; filled \
             (callback ids from 1): {:?}",
            match &attached {
                Ok(()) => "ok",
                Err(mem::Unusable::Refused(why) | mem::Unusable::NoMemoryApi(why)) => why,
            },
            mem::numbered_from(),
            mem::filled()
        )
    });
    attached?;
    Ok(domain)
}

/// The name every chunk's heap gets.
const HEAP_NAME: &CStr = c"cuguard pool chunk";

/// Registers `[base, base + size)` as a sub-allocator's heap; the tool's handle, `None` when it
/// gave none.
pub fn heap_register(base: u64, size: u64) -> Option<Heap> {
    let domain = DOMAIN.load(Ordering::Relaxed);
    let heap = {
        let _inside = InTool::enter();
        mem::heap_register(domain, base, size, HEAP_NAME)
    };
    trace(|| {
        format!(
            "nvtxMemHeapRegister(domain {domain:#x}, base {base:#x}, size {size}) -> {:#x}",
            heap.unwrap_or(0)
        )
    });
    heap
}

/// Unregisters a heap (the heap of the chunk at `base`), whose regions were unregistered first.
pub fn heap_unregister(heap: Heap, base: u64) {
    let domain = DOMAIN.load(Ordering::Relaxed);
    trace(|| {
        format!("nvtxMemHeapUnregister(domain {domain:#x}, heap {heap:#x}) (chunk {base:#x})")
    });
    let _inside = InTool::enter();
    mem::heap_unregister(domain, heap);
}

/// Registers the region `[addr, addr + size)` of `heap`.
pub fn region_register(heap: Heap, addr: u64, size: u64) {
    let domain = DOMAIN.load(Ordering::Relaxed);
    trace(|| {
        format!("nvtxMemRegionsRegister(domain {domain:#x}, heap {heap:#x}, {addr:#x}, {size})")
    });
    let _inside = InTool::enter();
    mem::region_register(domain, heap, addr, size);
}

/// Unregisters the regions that start at `addrs`, in one call.
pub fn regions_unregister(addrs: &[u64]) {
    let domain = DOMAIN.load(Ordering::Relaxed);
    trace(|| {
        let list: Vec<String> = addrs.iter().map(|a| format!("{a:#x}")).collect();
        format!(
            "nvtxMemRegionsUnregister(domain {domain:#x}, [{}])",
            list.join(", ")
        )
    });
    let _inside = InTool::enter();
    mem::regions_unregister(domain, addrs);
}

/// Under `CUGUARD_NVTX_TRACE=1`: the heap of the chunk at `base` was forgotten without a call,
/// its memory having gone with its context (the tool drops a heap whose memory is freed).
pub fn heap_dropped(heap: Option<Heap>, base: u64) {
    if let Some(h) = heap {
        trace(|| {
            format!(
                "heap {h:#x} of chunk {base:#x} forgotten, not unregistered: its memory went with \
                 its context"
            )
        });
    }
}
