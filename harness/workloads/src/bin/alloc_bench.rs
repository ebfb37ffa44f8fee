//! alloc_bench: measures device allocation costs under several configurations, side by side in
//! one run.
//!
//! The parent runs this same program as children, one per configuration (bare driver, shim in
//! pass-through, shim with pool, each with stacks off and on), interleaved over several rounds so
//! that drift on the machine hits every configuration alike. Each child measures:
//!
//! - `pair`: the median cuMemAlloc_v2+cuMemFree_v2 pair, one thread, for 256 B, 4 KiB, 1 MiB and
//!   64 MiB (batches of pairs timed together, median over batches), `cuCtxGetCurrent`, and the
//!   machine's cost of the steps a tracked pair is made of (`step_*`: the time-stamp counter,
//!   the monotonic and coarse clocks, a system call, an atomic add);
//! - `async`: the median cuMemAllocAsync+cuMemFreeAsync pair (4 KiB) on the legacy stream;
//! - `live1000`: the 4 KiB pair with 1,000 live blocks of mixed sizes around it;
//! - `random`: RMM's random_allocations pattern (sizes uniform in [1, max], allocate with
//!   probability 0.73, else free a random live block), for max = 1, 64 and 256 MiB; the parent
//!   reads the peak reserved and peak live bytes from the child's cuguard report;
//! - `threads`: pairs per second with 1 and 16 threads (4 KiB).
//! - `streampair`: the median pair (4 KiB and 1 MiB) with a kernel-like submission on one
//!   non-blocking stream between them (`cuMemsetD8Async` of the block, then its free, then the
//!   next allocation of the same size: what PyTorch without its caching allocator does), the
//!   stream synchronized once at the end.
//!
//! `pool-nocache` is `pool` with the per-thread cache off (`CUGUARD_POOL_THREAD_CACHE=0`), so
//! the cache's effect shows side by side in one run; `pool-fence` is `pool` with stream-aware
//! reuse off (`CUGUARD_POOL_STREAM_REUSE=0`: the fence rule alone), for `streampair`.
//!
//! # The method (issue 56)
//!
//! - Every child is pinned to one core, the same for all (`--core N`; by default the last core
//!   this process may run on), before it runs: the whole process, the shim's own threads
//!   included, so what they do is paid on the measured core. `threads` alone is not pinned (it
//!   measures 16 threads against one); `--core none` pins nothing.
//! - Rounds: in each, every test runs once in every configuration, each its own child, in an
//!   order shuffled anew every round by a fixed seed ([`pair_stats::Shuffle`]): no configuration
//!   always runs first or always after the same other. `--warmup N` more rounds run first and
//!   are discarded; inside each child, the first quarter of every test's batches (at least two)
//!   are run and discarded before the counted ones.
//! - Each figure is the median over the counted rounds, with its interquartile range
//!   (`median [q1–q3]` in the tables; the lowest and highest rounds in the JSON).
//! - `--control NAME` runs configuration NAME twice, as `NAME` and `NAME@control`: the A/A
//!   control. A last table then sets every A/B difference (the settings against each other, this
//!   build against `--baseline`'s) beside the control's difference for the same figure, and a
//!   difference no larger than the control's is reported as none ([`pair_stats`]).
//!
//! The parent prints a markdown table of medians over rounds and the ratios between
//! configurations, and writes every figure to `--json FILE`. With `--baseline PATH`, every
//! configuration that loads the shim also runs with the shim at PATH (another build, say the one
//! before a change), interleaved with it, as `NAME@baseline`; a last table gives this build's
//! figures over the baseline's.
//!
//! Usage: `alloc_bench [--shim PATH] [--baseline PATH] [--rounds N] [--warmup N] [--core N]
//! [--control NAME] [--quick] [--json FILE] [--tests a,b] [--variants a,b]`
//! (the driver is whatever `libcuda.so.1` the loader finds: the real one, or the simulated one;
//! `scripts/pair-bench.sh` runs the pair this way).

use std::collections::BTreeMap;
use std::ffi::{CString, c_void};
use std::process::Command;
use std::time::Instant;

type CuResult = u32;
type Ptr = u64;

/// The driver entries the benchmark calls, looked up through `dlsym` (so the shim, when
/// preloaded, answers with its hooks exactly as it does for cudarc or numba).
struct Driver {
    init: unsafe extern "C" fn(u32) -> CuResult,
    device_get: unsafe extern "C" fn(*mut i32, i32) -> CuResult,
    retain: unsafe extern "C" fn(*mut *mut c_void, i32) -> CuResult,
    set_current: unsafe extern "C" fn(*mut c_void) -> CuResult,
    alloc: unsafe extern "C" fn(*mut Ptr, usize) -> CuResult,
    free: unsafe extern "C" fn(Ptr) -> CuResult,
    alloc_async: unsafe extern "C" fn(*mut Ptr, usize, *mut c_void) -> CuResult,
    free_async: unsafe extern "C" fn(Ptr, *mut c_void) -> CuResult,
    synchronize: unsafe extern "C" fn() -> CuResult,
    get_current: unsafe extern "C" fn(*mut *mut c_void) -> CuResult,
    memset_async: unsafe extern "C" fn(Ptr, u8, usize, *mut c_void) -> CuResult,
    stream_create: unsafe extern "C" fn(*mut *mut c_void, u32) -> CuResult,
    stream_synchronize: unsafe extern "C" fn(*mut c_void) -> CuResult,
}

fn load() -> Driver {
    // SAFETY: dlopen/dlsym with NUL-terminated names; each symbol is cast to the signature the
    // CUDA driver API documents for it (the field's type names it).
    #[allow(clippy::missing_transmute_annotations)]
    unsafe {
        let h = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW);
        if h.is_null() {
            let why = std::ffi::CStr::from_ptr(libc::dlerror()).to_string_lossy();
            eprintln!("alloc_bench: the driver (libcuda.so.1) could not be loaded: {why}");
            std::process::exit(3);
        }
        let sym = |name: &str| {
            let p = CString::new(name).map_or(std::ptr::null_mut(), |c| libc::dlsym(h, c.as_ptr()));
            if p.is_null() {
                eprintln!("alloc_bench: the driver has no {name}");
                std::process::exit(3);
            }
            p
        };
        Driver {
            init: std::mem::transmute(sym("cuInit")),
            device_get: std::mem::transmute(sym("cuDeviceGet")),
            retain: std::mem::transmute(sym("cuDevicePrimaryCtxRetain")),
            set_current: std::mem::transmute(sym("cuCtxSetCurrent")),
            alloc: std::mem::transmute(sym("cuMemAlloc_v2")),
            free: std::mem::transmute(sym("cuMemFree_v2")),
            alloc_async: std::mem::transmute(sym("cuMemAllocAsync")),
            free_async: std::mem::transmute(sym("cuMemFreeAsync")),
            synchronize: std::mem::transmute(sym("cuCtxSynchronize")),
            get_current: std::mem::transmute(sym("cuCtxGetCurrent")),
            memset_async: std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(Ptr, u8, usize, *mut c_void) -> CuResult,
            >(sym("cuMemsetD8Async")),
            stream_create: std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(*mut *mut c_void, u32) -> CuResult,
            >(sym("cuStreamCreate")),
            stream_synchronize: std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(*mut c_void) -> CuResult,
            >(sym("cuStreamSynchronize")),
        }
    }
}

/// The driver's own entries, bypassing any shim: the address of `name` in the loaded
/// libcuda.so.1, read from the file's dynamic symbol table plus the library's load bias (found
/// with dl_iterate_phdr). Used to time the shim's overhead against the bare driver in one process.
fn real_entry(name: &str) -> Option<usize> {
    use object::{Object, ObjectSymbol};
    struct Found {
        path: Option<(String, usize)>,
    }
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> i32 {
        // SAFETY: dl_iterate_phdr passes valid info; data is our Found.
        unsafe {
            let found = &mut *(data as *mut Found);
            let name = std::ffi::CStr::from_ptr((*info).dlpi_name)
                .to_string_lossy()
                .into_owned();
            if name.contains("libcuda.so") {
                found.path = Some((name, (*info).dlpi_addr as usize));
                return 1;
            }
        }
        0
    }
    let mut found = Found { path: None };
    // SAFETY: visit matches dl_iterate_phdr's callback type; found outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut found as *mut Found as *mut c_void) };
    let (path, bias) = found.path?;
    let bytes = std::fs::read(&path).ok()?;
    let file = object::File::parse(&*bytes).ok()?;
    let sym = file.dynamic_symbols().find(|s| s.name() == Ok(name))?;
    Some(bias + sym.address() as usize)
}

fn check(r: CuResult, what: &str) {
    if r != 0 {
        eprintln!("{what} failed: CUresult {r}");
        std::process::exit(3);
    }
}

struct Ctx {
    d: Driver,
    ctx: *mut c_void,
}

// SAFETY: the context handle is process-wide; each thread makes it current before use.
unsafe impl Sync for Ctx {}

impl Ctx {
    fn new() -> Ctx {
        let d = load();
        let mut dev = 0;
        let mut ctx = std::ptr::null_mut();
        // SAFETY: valid out-parameters.
        unsafe {
            check((d.init)(0), "cuInit");
            check((d.device_get)(&mut dev, 0), "cuDeviceGet");
            check((d.retain)(&mut ctx, dev), "cuDevicePrimaryCtxRetain");
            check((d.set_current)(ctx), "cuCtxSetCurrent");
        }
        Ctx { d, ctx }
    }

    fn make_current(&self) {
        // SAFETY: ctx is a retained primary context.
        check(unsafe { (self.d.set_current)(self.ctx) }, "cuCtxSetCurrent");
    }

    fn alloc(&self, size: usize) -> Ptr {
        let mut p = 0;
        // SAFETY: valid out-parameter.
        check(unsafe { (self.d.alloc)(&mut p, size) }, "cuMemAlloc_v2");
        p
    }

    fn free(&self, p: Ptr) {
        // SAFETY: p came from alloc and is freed once.
        check(unsafe { (self.d.free)(p) }, "cuMemFree_v2");
    }
}

/// Median ns per pair of `op`, timed in batches, after a quarter as many batches (at least two)
/// run and discarded: the warm-up.
fn time_pairs(batches: usize, per_batch: usize, mut op: impl FnMut()) -> f64 {
    for _ in 0..(batches / 4).max(2) * per_batch {
        op();
    }
    let mut samples = Vec::with_capacity(batches);
    for _ in 0..batches {
        let t = Instant::now();
        for _ in 0..per_batch {
            op();
        }
        samples.push(t.elapsed().as_nanos() as f64 / per_batch as f64);
    }
    median(&mut samples)
}

/// What this machine charges for the steps a tracked pair is made of, measured in the same
/// child (the same for every configuration: the machine's, not the shim's): the time-stamp
/// counter (the record's order key), the monotonic clock (the bill's sampled timing), the
/// coarse clock (the record's time), a system call (what every cached thread-local saves), an
/// uncontended atomic add (a shared counter).
fn primitives(out: &mut BTreeMap<String, f64>, scale: usize) {
    let clock = |id: libc::clockid_t| {
        move || {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: a valid out-parameter; clock_gettime has no other effect.
            unsafe { libc::clock_gettime(id, &mut ts) };
            std::hint::black_box(ts);
        }
    };
    let counter = std::sync::atomic::AtomicU64::new(0);
    type Step<'a> = (&'static str, Box<dyn Fn() + 'a>);
    let steps: [Step<'_>; 5] = [
        #[cfg(target_arch = "x86_64")]
        (
            "step_rdtsc_ns",
            Box::new(|| {
                // SAFETY: rdtsc has no preconditions.
                std::hint::black_box(unsafe { core::arch::x86_64::_rdtsc() });
            }),
        ),
        #[cfg(not(target_arch = "x86_64"))]
        ("step_rdtsc_ns", Box::new(|| {})),
        (
            "step_clock_monotonic_ns",
            Box::new(clock(libc::CLOCK_MONOTONIC)),
        ),
        (
            "step_clock_monotonic_coarse_ns",
            Box::new(clock(libc::CLOCK_MONOTONIC_COARSE)),
        ),
        (
            "step_syscall_gettid_ns",
            Box::new(|| {
                // SAFETY: gettid has no arguments and cannot fail.
                std::hint::black_box(unsafe { libc::syscall(libc::SYS_gettid) });
            }),
        ),
        (
            "step_atomic_add_ns",
            Box::new(|| {
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }),
        ),
    ];
    for (name, op) in steps {
        let ns = time_pairs(200 / scale, 200, op);
        out.insert(name.into(), ns);
    }
}

/// A small deterministic generator (xorshift), so every configuration sees the same sequence.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Runs one test in this process (a child) and returns its figures.
fn child(test: &str, quick: bool) -> BTreeMap<String, f64> {
    let c = Ctx::new();
    let mut out = BTreeMap::new();
    let scale = if quick { 10 } else { 1 };
    match test {
        "pair" => pair(&c, &mut out, scale),
        "overhead" => overhead(&c, &mut out, scale),
        "live1000" => live1000(&c, &mut out, scale),
        t if t.starts_with("random") => random(&c, &mut out, t, quick),
        "streampair" => streampair(&c, &mut out, scale),
        "threads" => threads(&c, &mut out, quick),
        other => {
            eprintln!("unknown test {other}");
            std::process::exit(2);
        }
    }
    out
}

/// `pair`: the synchronous pair at four sizes, the asynchronous pair, `cuCtxGetCurrent`, and
/// the machine's steps ([`primitives`]).
fn pair(c: &Ctx, out: &mut BTreeMap<String, f64>, scale: usize) {
    for (label, size) in [
        ("256B", 256usize),
        ("4KiB", 4096),
        ("1MiB", 1 << 20),
        ("64MiB", 64 << 20),
    ] {
        let ns = time_pairs(200 / scale, 20, || {
            let p = c.alloc(size);
            c.free(p);
        });
        out.insert(format!("pair_{label}_ns"), ns);
    }
    let mut s = 0u64;
    let ns = time_pairs(200 / scale, 20, || {
        let mut p = 0;
        // SAFETY: legacy stream (null), valid out-parameter; freed once.
        unsafe {
            check(
                (c.d.alloc_async)(&mut p, 4096, std::ptr::null_mut()),
                "cuMemAllocAsync",
            );
            check((c.d.free_async)(p, std::ptr::null_mut()), "cuMemFreeAsync");
        }
        s = s.wrapping_add(p);
    });
    // SAFETY: plain synchronize of the current context.
    unsafe { (c.d.synchronize)() };
    out.insert("async_pair_4KiB_ns".into(), ns);
    let ns = time_pairs(200 / scale, 200, || {
        let mut ctx = std::ptr::null_mut();
        // SAFETY: valid out-parameter.
        unsafe { (c.d.get_current)(&mut ctx) };
        std::hint::black_box(ctx);
    });
    out.insert("cuCtxGetCurrent_ns".into(), ns);
    primitives(out, scale);
}

/// `overhead`: the hooks' cost per pair against the driver's own entries, in one process.
fn overhead(c: &Ctx, out: &mut BTreeMap<String, f64>, scale: usize) {
    // Interleaved batches through the hooks (what the program calls) and straight to the
    // driver's own entries: the per-batch difference cancels the driver's drift.
    let (Some(a), Some(f)) = (real_entry("cuMemAlloc_v2"), real_entry("cuMemFree_v2")) else {
        eprintln!("overhead: the driver's own entries were not found");
        return;
    };
    // SAFETY: the driver's cuMemAlloc_v2 and cuMemFree_v2, with their C signatures.
    let (ra, rf): (
        unsafe extern "C" fn(*mut Ptr, usize) -> CuResult,
        unsafe extern "C" fn(Ptr) -> CuResult,
    ) = unsafe {
        (
            std::mem::transmute::<usize, unsafe extern "C" fn(*mut Ptr, usize) -> CuResult>(a),
            std::mem::transmute::<usize, unsafe extern "C" fn(Ptr) -> CuResult>(f),
        )
    };
    for (label, size) in [("4KiB", 4096usize), ("1MiB", 1 << 20)] {
        let mut diffs = Vec::new();
        let mut hooked = Vec::new();
        let mut bare = Vec::new();
        for _ in 0..(400 / scale) {
            let t = Instant::now();
            for _ in 0..10 {
                let p = c.alloc(size);
                c.free(p);
            }
            let h = t.elapsed().as_nanos() as f64 / 10.0;
            let t = Instant::now();
            for _ in 0..10 {
                let mut p = 0;
                // SAFETY: valid out-parameter; freed once.
                unsafe {
                    check(ra(&mut p, size), "cuMemAlloc_v2");
                    check(rf(p), "cuMemFree_v2");
                }
            }
            let b = t.elapsed().as_nanos() as f64 / 10.0;
            diffs.push(h - b);
            hooked.push(h);
            bare.push(b);
        }
        out.insert(format!("overhead_{label}_ns"), median(&mut diffs));
        out.insert(format!("overhead_{label}_hooked_ns"), median(&mut hooked));
        out.insert(format!("overhead_{label}_bare_ns"), median(&mut bare));
    }
}

/// `live1000`: the 4 KiB pair with 1,000 live blocks of mixed sizes around it.
fn live1000(c: &Ctx, out: &mut BTreeMap<String, f64>, scale: usize) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let live: Vec<Ptr> = (0..1000)
        .map(|_| {
            let shift = 8 + rng.below(13); // 256 B .. 1 MiB
            c.alloc(1usize << shift)
        })
        .collect();
    let ns = time_pairs(200 / scale, 20, || {
        let p = c.alloc(4096);
        c.free(p);
    });
    out.insert("live1000_pair_4KiB_ns".into(), ns);
    for p in live {
        c.free(p);
    }
}

/// `random1`, `random64`, `random256`: RMM's random_allocations pattern, sizes up to that many
/// MiB.
fn random(c: &Ctx, out: &mut BTreeMap<String, f64>, test: &str, quick: bool) {
    let max_mib: u64 = test.trim_start_matches("random").parse().unwrap_or(1);
    let steps = if quick { 2_000 } else { 20_000 };
    let mut rng = Rng(42 + max_mib);
    let mut live: Vec<Ptr> = Vec::new();
    let t0 = Instant::now();
    let mut ops = 0u64;
    for _ in 0..steps {
        if live.is_empty() || rng.below(100) < 73 {
            let size = 1 + rng.below(max_mib << 20) as usize;
            live.push(c.alloc(size));
        } else {
            let i = rng.below(live.len() as u64) as usize;
            c.free(live.swap_remove(i));
        }
        ops += 1;
        // Keep the working set within a few GiB, like RMM's benchmark.
        if live.len() > 4096 / max_mib.max(1) as usize {
            let i = rng.below(live.len() as u64) as usize;
            c.free(live.swap_remove(i));
            ops += 1;
        }
    }
    out.insert(
        format!("random{max_mib}_ns_per_op"),
        t0.elapsed().as_nanos() as f64 / ops as f64,
    );
    for p in live {
        c.free(p);
    }
}

/// `streampair`: the pair with a memset on a non-blocking stream between allocation and free.
fn streampair(c: &Ctx, out: &mut BTreeMap<String, f64>, scale: usize) {
    let mut stream = std::ptr::null_mut();
    // SAFETY: valid out-parameter; CU_STREAM_NON_BLOCKING = 1.
    check(
        unsafe { (c.d.stream_create)(&mut stream, 1) },
        "cuStreamCreate",
    );
    for (label, size) in [("4KiB", 4096usize), ("1MiB", 1 << 20)] {
        let ns = time_pairs(200 / scale, 20, || {
            let p = c.alloc(size);
            // SAFETY: p is a live block of `size` bytes; stream is ours.
            check(
                unsafe { (c.d.memset_async)(p, 0, size, stream) },
                "cuMemsetD8Async",
            );
            c.free(p);
        });
        // SAFETY: the stream created above.
        check(
            unsafe { (c.d.stream_synchronize)(stream) },
            "cuStreamSynchronize",
        );
        out.insert(format!("streampair_{label}_ns"), ns);
    }
}

/// `threads`: pairs per second with 1 and 16 threads.
fn threads(c: &Ctx, out: &mut BTreeMap<String, f64>, quick: bool) {
    let budget = std::time::Duration::from_millis(if quick { 50 } else { 500 });
    for threads in [1usize, 16] {
        let total = std::sync::atomic::AtomicU64::new(0);
        let t0 = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    c.make_current();
                    let start = Instant::now();
                    let mut n = 0u64;
                    while start.elapsed() < budget {
                        for _ in 0..64 {
                            let p = c.alloc(4096);
                            c.free(p);
                        }
                        n += 64;
                    }
                    total.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                });
            }
        });
        let secs = t0.elapsed().as_secs_f64();
        let pairs = total.load(std::sync::atomic::Ordering::Relaxed) as f64;
        out.insert(format!("threads{threads}_pairs_per_s"), pairs / secs);
    }
}

const TESTS: &[&str] = &[
    "pair",
    "overhead",
    "live1000",
    "random1",
    "random64",
    "random256",
    "threads",
    "streampair",
];

#[path = "../alloc_report.rs"]
mod alloc_report;
#[path = "../alloc_variants.rs"]
mod alloc_variants;
#[path = "../bench_args.rs"]
mod bench_args;
#[path = "../pair_stats.rs"]
mod pair_stats;

use alloc_variants::{Choice, Run};

use pair_stats::{Summaries, Summary, median};

const USAGE: &str = "\
alloc_bench: device allocation costs under several configurations, side by side in one run

Usage: alloc_bench [--shim PATH] [--baseline PATH] [--rounds N] [--warmup N] [--core N]
                   [--control NAME] [--quick] [--json FILE] [--tests a,b] [--variants a,b]

  --shim PATH       the shim to measure (default libcuguard.so, found by the loader)
  --baseline PATH   another build's shim, run interleaved as NAME@baseline
  --rounds N        counted rounds over every configuration (default 3; 1 with --quick)
  --warmup N        rounds run first and discarded (default 0)
  --core N          the core every child is pinned to (default: the last this process may
                    use; `none`: no pinning); `threads` is never pinned
  --control NAME    run configuration NAME twice (NAME and NAME@control, the A/A control) and
                    report every A/B difference beside the control's: none when no larger
  --quick           fewer pairs per measurement
  --json FILE       every figure (median, quartiles, extremes) and comparison, as JSON
  --tests a,b       only these tests (pair: the pairs, the async pair and the machine's steps;
                    overhead, live1000, random1, random64, random256, threads, streampair)
  --variants a,b    only these configurations (bare, passthrough, passthrough+stacks, pool,
                    pool-nocache, pool-fence, pool+stacks, pool-untracked,
                    pool-nohistory, pool+stacks-nohistory: the history is on in the others)

Each round runs the configurations in an order shuffled by a fixed seed; each figure is the
median over the counted rounds with its interquartile range [q1-q3].
The driver is whatever libcuda.so.1 the loader finds: the real one, or the simulated one.

Example (on the GPU machine, after scripts/gpu/stage.sh):
  .gpu/alloc_bench --shim .gpu/libcuguard.so --quick --tests pair,async
  scripts/pair-bench.sh --short      (the pair with its A/A control)";

/// Stops the program with `message` and the exit status of a wrong command line.
fn usage_error(message: &str) -> ! {
    eprintln!("alloc_bench: {message}");
    std::process::exit(2);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--child") {
        bench_args::Options {
            valued: &[
                "--shim",
                "--baseline",
                "--rounds",
                "--warmup",
                "--core",
                "--control",
                "--json",
                "--tests",
                "--variants",
            ],
            flags: &["--quick"],
            usage: USAGE,
        }
        .check(&args);
    }
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let quick = args.iter().any(|a| a == "--quick");
    if let Some(test) = arg("--child") {
        let out = child(&test, quick);
        println!("{}", serde_like(&out));
        return;
    }
    let count = |name: &str, default: usize| match arg(name) {
        None => default,
        Some(n) => n
            .parse()
            .unwrap_or_else(|_| usage_error(&format!("{name} {n}: not a count"))),
    };
    let rounds = count("--rounds", if quick { 1 } else { 3 }).max(1);
    let warmup = count("--warmup", 0);
    let only_tests: Option<Vec<String>> =
        arg("--tests").map(|t| t.split(',').map(String::from).collect());
    for t in only_tests.iter().flatten() {
        if !TESTS.contains(&t.as_str()) {
            eprintln!("alloc_bench: no test is named {t} (ignored)");
        }
    }
    let only_variants: Option<Vec<String>> =
        arg("--variants").map(|t| t.split(',').map(String::from).collect());
    let control = arg("--control");
    let choice = Choice {
        shim: arg("--shim").unwrap_or_else(|| "libcuguard.so".into()),
        baseline: arg("--baseline"),
        only: only_variants,
        control: control.clone(),
    };
    let runs = choice.runs().unwrap_or_else(|e| usage_error(&e));
    let core = pinned_core(arg("--core").as_deref());
    let exe = std::env::current_exe().unwrap_or_else(|e| {
        eprintln!("alloc_bench: cannot find this program's own path to run it as children: {e}");
        std::process::exit(1);
    });
    let dir = private_dir();
    let plan = Plan {
        runs: &runs,
        quick,
        exe: &exe,
        dir: &dir,
        pin: core.map(cpu_set),
    };
    let figures = plan.measure(warmup, rounds, only_tests.as_deref());
    let _ = std::fs::remove_dir_all(&dir);

    let summaries: Summaries = figures
        .iter()
        .map(|(run, m)| {
            let m = m.iter().map(|(k, s)| (k.clone(), Summary::of(s))).collect();
            (run.clone(), m)
        })
        .collect();
    let names: Vec<String> = runs.iter().map(|(n, _, _)| n.clone()).collect();
    let method = alloc_report::Method {
        rounds,
        warmup,
        core,
        control: control.map(|c| (c.clone(), format!("{c}@control"))),
    };
    let report = alloc_report::Report {
        names: &names,
        summaries: &summaries,
        method: &method,
        pairs: choice.pairs(&names),
    };
    // The file first: a reader of the table that stops early (`| head`) loses no figure.
    if let Some(path) = arg("--json") {
        report.write_json(std::path::Path::new(&path));
    }
    report.print();
}

/// The core children are pinned to: `--core N` (one this process may run on), none for
/// `--core none`, by default the last this process may run on.
fn pinned_core(asked: Option<&str>) -> Option<usize> {
    let allowed = allowed_cores();
    match asked {
        Some("none") => None,
        Some(n) => {
            let core: usize = n
                .parse()
                .unwrap_or_else(|_| usage_error(&format!("--core {n}: not a core number")));
            if !allowed.contains(&core) {
                usage_error(&format!(
                    "--core {core}: not one of the cores this process may run on ({allowed:?})"
                ));
            }
            Some(core)
        }
        None => allowed.last().copied(),
    }
}

/// The cores this process may run on, in order (none when the kernel does not say).
fn allowed_cores() -> Vec<usize> {
    // SAFETY: an all-zero cpu_set_t is the empty set; sched_getaffinity fills it, of its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// The set of the one core `core`.
fn cpu_set(core: usize) -> libc::cpu_set_t {
    // SAFETY: an all-zero cpu_set_t is the empty set; core is below CPU_SETSIZE (it was one of
    // sched_getaffinity's).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        set
    }
}

/// A new directory of this user's alone (mode 0700) under the temporary directory, for the
/// children's reports: made, not found, so a directory or link someone put at the name is
/// refused.
fn private_dir() -> std::path::PathBuf {
    use std::os::unix::fs::DirBuilderExt;
    let dir = std::env::temp_dir().join(format!("alloc_bench-{}", std::process::id()));
    if let Err(e) = std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        eprintln!(
            "alloc_bench: cannot make the directory for the children's reports, {}: {e}",
            dir.display()
        );
        std::process::exit(1);
    }
    dir
}

/// What every child is run with.
struct Plan<'a> {
    runs: &'a [Run<'a>],
    quick: bool,
    exe: &'a std::path::Path,
    dir: &'a std::path::Path,
    /// The one core each child is pinned to (none: not pinned).
    pin: Option<libc::cpu_set_t>,
}

/// Each run's samples of each figure, one a counted round.
type Figures = BTreeMap<String, BTreeMap<String, Vec<f64>>>;

impl Plan<'_> {
    /// Runs every test in every configuration, `warmup` rounds discarded then `rounds` counted,
    /// the configurations in a new order every round; the figures, as
    /// figures[run][metric] = samples over the counted rounds.
    fn measure(&self, warmup: usize, rounds: usize, only_tests: Option<&[String]>) -> Figures {
        let mut figures = Figures::new();
        let mut discarded = Figures::new();
        let mut order = pair_stats::Shuffle::new(pair_stats::ORDER_SEED);
        for round in 0..warmup + rounds {
            for test in TESTS {
                if only_tests.is_some_and(|o| !o.iter().any(|t| t == test)) {
                    continue;
                }
                let into = if round < warmup {
                    &mut discarded
                } else {
                    &mut figures
                };
                for i in order.order(self.runs.len()) {
                    self.child(&self.runs[i], test, round, into);
                }
            }
        }
        figures
    }

    /// Runs `test` once in a child for `run`, adding its figures (and, for the random tests
    /// under the shim, the peak reserved over peak live bytes its report gives) to `figures`.
    fn child(&self, (name, v, preload): &Run<'_>, test: &str, round: usize, figures: &mut Figures) {
        let report = self.dir.join(format!(
            "{}-{test}-{round}.json",
            name.replace(['+', '@'], "_")
        ));
        let mut cmd = Command::new(self.exe);
        cmd.args(["--child", test]);
        if self.quick {
            cmd.arg("--quick");
        }
        cmd.env_remove("LD_PRELOAD");
        if let Some(preload) = preload {
            cmd.env("LD_PRELOAD", preload)
                .env("CUGUARD_REPORT", &report)
                .env("CUGUARD_QUIET", "1");
        }
        for (k, val) in v.env {
            cmd.env(k, val);
        }
        if let Some(set) = self.pin.filter(|_| test != "threads") {
            use std::os::unix::process::CommandExt;
            // SAFETY: between fork and exec the closure makes one system call,
            // sched_setaffinity (async-signal-safe), on a set made before the fork; it
            // allocates nothing. The whole process it becomes, every thread it starts, keeps
            // the one core.
            unsafe {
                cmd.pre_exec(move || {
                    let size = std::mem::size_of::<libc::cpu_set_t>();
                    match libc::sched_setaffinity(0, size, &set) {
                        0 => Ok(()),
                        _ => Err(std::io::Error::last_os_error()),
                    }
                });
            }
        }
        let out = cmd.output().unwrap_or_else(|e| {
            eprintln!("alloc_bench: cannot run {name} {test} as a child (pinned to one core): {e}");
            std::process::exit(1);
        });
        if !out.status.success() {
            eprintln!(
                "{name} {test}: {}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            return;
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let m = figures.entry(name.clone()).or_default();
        for (k, val) in parse_like(text.trim()) {
            m.entry(k).or_default().push(val);
        }
        if test.starts_with("random")
            && v.shim
            && let Some((reserved, live)) = peaks(&report)
            && live > 0.0
        {
            m.entry(format!("{test}_peak_reserved_over_peak_live"))
                .or_default()
                .push(reserved / live);
        }
        let _ = std::fs::remove_file(&report);
    }
}

/// Peak pool reserved bytes and peak live bytes from a cuguard report (device 0), without a JSON
/// dependency: the fields are plain integers.
fn peaks(report: &std::path::Path) -> Option<(f64, f64)> {
    let text = std::fs::read_to_string(report).ok()?;
    let num = |key: &str| -> Option<f64> {
        let i = text.find(&format!("\"{key}\":"))? + key.len() + 3;
        let rest = &text[i..];
        let end = rest.find(|c: char| !c.is_ascii_digit())?;
        rest[..end].parse().ok()
    };
    Some((num("peak_reserved_bytes")?, num("peak_live_bytes")?))
}

fn serde_like(m: &BTreeMap<String, f64>) -> String {
    let parts: Vec<String> = m.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
    format!("{{{}}}", parts.join(","))
}

fn parse_like(s: &str) -> Vec<(String, f64)> {
    s.trim_matches(|c| c == '{' || c == '}')
        .split(',')
        .filter_map(|kv| {
            let (k, v) = kv.split_once(':')?;
            Some((
                k.trim().trim_matches('"').to_string(),
                v.trim().parse().ok()?,
            ))
        })
        .collect()
}
