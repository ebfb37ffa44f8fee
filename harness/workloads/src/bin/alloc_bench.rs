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
//! The parent prints a markdown table of medians over rounds and the ratios between
//! configurations, and writes every figure to `--json FILE`. With `--baseline PATH`, every
//! configuration that loads the shim also runs with the shim at PATH (another build, say the one
//! before a change), interleaved with it, as `NAME@baseline`; a last table gives this build's
//! figures over the baseline's.
//!
//! Usage: `alloc_bench [--shim PATH] [--baseline PATH] [--rounds N] [--quick] [--json FILE]
//! [--tests a,b] [--variants a,b]`
//! (the driver is whatever `libcuda.so.1` the loader finds: the real one, or the simulated one).

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
        assert!(!h.is_null(), "libcuda.so.1 not found");
        let sym = |name: &str| {
            let c = CString::new(name).unwrap();
            let p = libc::dlsym(h, c.as_ptr());
            assert!(!p.is_null(), "{name} missing");
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

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

/// Median ns per pair of `op`, timed in batches.
fn time_pairs(batches: usize, per_batch: usize, mut op: impl FnMut()) -> f64 {
    for _ in 0..per_batch.max(8) {
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

struct Variant {
    name: &'static str,
    env: &'static [(&'static str, &'static str)],
    shim: bool,
}

const VARIANTS: &[Variant] = &[
    Variant {
        name: "bare",
        env: &[],
        shim: false,
    },
    Variant {
        name: "passthrough",
        env: &[("CUGUARD_POOL", "0"), ("CUGUARD_STACK_DEPTH", "0")],
        shim: true,
    },
    Variant {
        name: "passthrough+stacks",
        env: &[("CUGUARD_POOL", "0"), ("CUGUARD_STACK_DEPTH", "32")],
        shim: true,
    },
    Variant {
        name: "pool",
        env: &[("CUGUARD_POOL", "1"), ("CUGUARD_STACK_DEPTH", "0")],
        shim: true,
    },
    Variant {
        name: "pool-nocache",
        env: &[
            ("CUGUARD_POOL", "1"),
            ("CUGUARD_STACK_DEPTH", "0"),
            ("CUGUARD_POOL_THREAD_CACHE", "0"),
        ],
        shim: true,
    },
    Variant {
        name: "pool-fence",
        env: &[
            ("CUGUARD_POOL", "1"),
            ("CUGUARD_STACK_DEPTH", "0"),
            ("CUGUARD_POOL_STREAM_REUSE", "0"),
        ],
        shim: true,
    },
    Variant {
        name: "pool+stacks",
        env: &[("CUGUARD_POOL", "1"), ("CUGUARD_STACK_DEPTH", "32")],
        shim: true,
    },
    Variant {
        name: "pool-nohistory",
        env: &[
            ("CUGUARD_POOL", "1"),
            ("CUGUARD_STACK_DEPTH", "0"),
            ("CUGUARD_HISTORY", "0"),
        ],
        shim: true,
    },
    Variant {
        name: "pool+stacks-nohistory",
        env: &[
            ("CUGUARD_POOL", "1"),
            ("CUGUARD_STACK_DEPTH", "32"),
            ("CUGUARD_HISTORY", "0"),
        ],
        shim: true,
    },
    Variant {
        name: "pool-untracked",
        env: &[
            ("CUGUARD_POOL", "1"),
            ("CUGUARD_STACK_DEPTH", "0"),
            ("CUGUARD_TEST_NO_TRACKING", "1"),
        ],
        shim: true,
    },
];

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

#[path = "../bench_args.rs"]
mod bench_args;

const USAGE: &str = "\
alloc_bench: device allocation costs under several configurations, side by side in one run

Usage: alloc_bench [--shim PATH] [--baseline PATH] [--rounds N] [--quick] [--json FILE]
                   [--tests a,b] [--variants a,b]

  --shim PATH       the shim to measure (default libcuguard.so, found by the loader)
  --baseline PATH   another build's shim, run interleaved as NAME@baseline
  --rounds N        rounds over every configuration (default 3; 1 with --quick)
  --quick           fewer pairs per measurement
  --json FILE       every figure, as JSON
  --tests a,b       only these tests (pair, async, live1000, random1, random64, random256,
                    threads, streampair)
  --variants a,b    only these configurations (bare, passthrough, passthrough+stacks, pool,
                    pool-nocache, pool-fence, pool+stacks, pool-untracked,
                    pool-nohistory, pool+stacks-nohistory: the history is on in the others)

The driver is whatever libcuda.so.1 the loader finds: the real one, or the simulated one.

Example (on the GPU machine, after scripts/gpu/stage.sh):
  .gpu/alloc_bench --shim .gpu/libcuguard.so --quick --tests pair,async";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--child") {
        bench_args::Options {
            valued: &[
                "--shim",
                "--baseline",
                "--rounds",
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
    let shim = arg("--shim").unwrap_or_else(|| "libcuguard.so".into());
    let rounds: usize = arg("--rounds")
        .and_then(|r| r.parse().ok())
        .unwrap_or(if quick { 1 } else { 3 });
    let only_tests: Option<Vec<String>> =
        arg("--tests").map(|t| t.split(',').map(String::from).collect());
    let only_variants: Option<Vec<String>> =
        arg("--variants").map(|t| t.split(',').map(String::from).collect());
    let baseline = arg("--baseline");
    let exe = std::env::current_exe().expect("current_exe");
    let dir = std::env::temp_dir().join(format!("alloc_bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");

    let runs = runs(&shim, baseline.as_deref(), only_variants.as_deref());
    let names: Vec<String> = runs.iter().map(|(n, _, _)| n.clone()).collect();
    let plan = Plan {
        runs: &runs,
        quick,
        exe: &exe,
        dir: &dir,
    };
    let figures = plan.measure(rounds, only_tests.as_deref());
    let _ = std::fs::remove_dir_all(&dir);

    let med = medians(&figures);
    print_table(&names, &med);
    println!();
    print_ratios(&med);
    if baseline.is_some() {
        print_baseline(&med);
    }
    if let Some(path) = arg("--json") {
        write_json(&path, &med);
    }
}

/// One configuration's run: its name, its variant, and the shim it preloads (none for the bare
/// driver).
type Run<'a> = (String, &'a Variant, Option<String>);

/// Each run's median of each figure over rounds.
type Medians<'a> = BTreeMap<&'a str, BTreeMap<String, f64>>;

/// Every run: (name, variant, shim to preload). A baseline run follows each shim run.
fn runs(shim: &str, baseline: Option<&str>, only_variants: Option<&[String]>) -> Vec<Run<'static>> {
    let mut runs: Vec<Run<'static>> = Vec::new();
    for v in VARIANTS {
        if only_variants.is_some_and(|o| !o.iter().any(|x| x == v.name)) {
            continue;
        }
        runs.push((v.name.to_string(), v, v.shim.then(|| shim.to_string())));
        if let (true, Some(b)) = (v.shim, baseline) {
            runs.push((format!("{}@baseline", v.name), v, Some(b.to_string())));
        }
    }
    runs
}

/// What every child is run with.
struct Plan<'a> {
    runs: &'a [Run<'a>],
    quick: bool,
    exe: &'a std::path::Path,
    dir: &'a std::path::Path,
}

impl Plan<'_> {
    /// Runs every test in every configuration, `rounds` times, interleaved; the figures, as
    /// figures[run][metric] = samples over rounds.
    fn measure(
        &self,
        rounds: usize,
        only_tests: Option<&[String]>,
    ) -> BTreeMap<String, BTreeMap<String, Vec<f64>>> {
        let mut figures: BTreeMap<String, BTreeMap<String, Vec<f64>>> = BTreeMap::new();
        for round in 0..rounds {
            for test in TESTS {
                if only_tests.is_some_and(|o| !o.iter().any(|t| t == test)) {
                    continue;
                }
                for run in self.runs {
                    self.child(run, test, round, &mut figures);
                }
            }
        }
        figures
    }

    /// Runs `test` once in a child for `run`, adding its figures (and, for the random tests
    /// under the shim, the peak reserved over peak live bytes its report gives) to `figures`.
    fn child(
        &self,
        (name, v, preload): &Run<'_>,
        test: &str,
        round: usize,
        figures: &mut BTreeMap<String, BTreeMap<String, Vec<f64>>>,
    ) {
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
        let out = cmd.output().expect("running child");
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

/// The median over rounds of each run's figures.
fn medians(figures: &BTreeMap<String, BTreeMap<String, Vec<f64>>>) -> Medians<'_> {
    figures
        .iter()
        .map(|(v, m)| {
            (
                v.as_str(),
                m.iter()
                    .map(|(k, s)| (k.clone(), median(&mut s.clone())))
                    .collect(),
            )
        })
        .collect()
}

/// Run `v`'s median of figure `k`; NaN when there is none.
fn figure(med: &Medians<'_>, v: &str, k: &str) -> f64 {
    med.get(v)
        .and_then(|m| m.get(k))
        .copied()
        .unwrap_or(f64::NAN)
}

/// The table of every figure, one column a run.
fn print_table(names: &[String], med: &Medians<'_>) {
    let mut metrics: Vec<String> = med.values().flat_map(|m| m.keys().cloned()).collect();
    metrics.sort();
    metrics.dedup();
    println!("| metric | {} |", names.join(" | "));
    println!(
        "|---|{}|",
        names.iter().map(|_| "---").collect::<Vec<_>>().join("|")
    );
    for k in &metrics {
        let cells: Vec<String> = names
            .iter()
            .map(|v| {
                med.get(v.as_str())
                    .and_then(|m| m.get(k))
                    .map_or("-".into(), |x| format!("{x:.3}"))
            })
            .collect();
        println!("| {k} | {} |", cells.join(" | "));
    }
}

/// The ratios between configurations.
fn print_ratios(med: &Medians<'_>) {
    let get = |v: &str, k: &str| figure(med, v, k);
    println!("| ratio | value |");
    println!("|---|---|");
    for size in ["4KiB", "1MiB"] {
        let k = format!("overhead_{size}_ns");
        println!(
            "| pass-through overhead per pair, {size}, interleaved in one process (ns) | {:.1} |",
            get("passthrough", &k)
        );
        println!(
            "| pass-through + stacks overhead per pair, {size} (ns) | {:.1} |",
            get("passthrough+stacks", &k)
        );
    }
    for size in ["256B", "4KiB", "1MiB", "64MiB"] {
        let k = format!("pair_{size}_ns");
        println!(
            "| bare / pool, {size} pair | {:.1} |",
            get("bare", &k) / get("pool", &k)
        );
        println!(
            "| pool+stacks / pool, {size} pair | {:.2} |",
            get("pool+stacks", &k) / get("pool", &k)
        );
    }
    println!(
        "| bare async pair / pool 4KiB pair | {:.1} |",
        get("bare", "async_pair_4KiB_ns") / get("pool", "pair_4KiB_ns")
    );
    println!(
        "| pool: live1000 / single 4KiB pair | {:.2} |",
        get("pool", "live1000_pair_4KiB_ns") / get("pool", "pair_4KiB_ns")
    );
    println!(
        "| pool: 16 threads / 1 thread throughput | {:.2} |",
        get("pool", "threads16_pairs_per_s") / get("pool", "threads1_pairs_per_s")
    );
    println!(
        "| pool-nocache: 16 threads / 1 thread throughput | {:.2} |",
        get("pool-nocache", "threads16_pairs_per_s") / get("pool-nocache", "threads1_pairs_per_s")
    );
    for size in ["256B", "4KiB", "1MiB", "64MiB"] {
        let k = format!("pair_{size}_ns");
        println!(
            "| pool-nocache / pool (thread cache off / on), {size} pair | {:.2} |",
            get("pool-nocache", &k) / get("pool", &k)
        );
    }
    for size in ["4KiB", "1MiB"] {
        let k = format!("streampair_{size}_ns");
        println!(
            "| pool-fence / pool (stream-aware reuse off / on), {size} pair with a memset on a stream | {:.2} |",
            get("pool-fence", &k) / get("pool", &k)
        );
        println!(
            "| bare / pool, {size} pair with a memset on a stream | {:.2} |",
            get("bare", &k) / get("pool", &k)
        );
    }
}

/// This build's figures over the baseline's.
fn print_baseline(med: &Medians<'_>) {
    let get = |v: &str, k: &str| figure(med, v, k);
    println!();
    println!("| this build / baseline (lower is faster for ns, higher for pairs/s) | value |");
    println!("|---|---|");
    for v in ["passthrough", "pool", "pool+stacks"] {
        for k in [
            "pair_256B_ns",
            "pair_4KiB_ns",
            "pair_1MiB_ns",
            "live1000_pair_4KiB_ns",
            "threads1_pairs_per_s",
            "threads16_pairs_per_s",
        ] {
            let (now, before) = (get(v, k), get(&format!("{v}@baseline"), k));
            if now.is_finite() && before.is_finite() {
                println!("| {v} {k}: {now:.1} / {before:.1} | {:.3} |", now / before);
            }
        }
    }
}

/// Every median, as JSON, to `path`.
fn write_json(path: &str, med: &Medians<'_>) {
    let mut s = String::from("{");
    for (i, (v, m)) in med.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&format!("\"{v}\":{}", serde_like(m)));
    }
    s.push('}');
    let _ = std::fs::write(path, s);
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
