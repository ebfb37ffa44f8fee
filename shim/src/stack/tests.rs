//! Tests of stack capture against libgcc's unwinder, through C code built without frame
//! pointers and loaded with dlopen after the first capture; and the capture benchmark.

use std::ffi::{CString, c_int, c_void};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use super::loaded::{absolute, mapped_at};
use super::*;

/// Depth of the C chain.
const CHAIN: usize = 30;

/// C source of a chain of CHAIN distinct functions, `-O2 -fomit-frame-pointer`, each one
/// zeroing rbp before its call so a frame-pointer unwinder would stop at once; the last calls
/// back into Rust.
fn chain_source() -> String {
    let mut c = String::from("typedef void (*cb_t)(void *);\nvolatile long sink;\n");
    c += &format!(
        "__attribute__((noinline)) long f{CHAIN}(long x, cb_t cb, void *a) {{ cb(a); sink += x; return x; }}\n"
    );
    for k in (0..CHAIN).rev() {
        c += &format!(
            "__attribute__((noinline)) long f{k}(long x, cb_t cb, void *a) {{\n\
             volatile char pad[{pad}]; pad[0] = (char)x;\n\
             __asm__ volatile(\"xor %%ebp, %%ebp\" ::: \"rbp\");\n\
             long r = f{next}(x + {k}, cb, a);\n\
             sink += r; return r + pad[0];\n}}\n",
            pad = 8 + 24 * k,
            next = k + 1
        );
    }
    c += "long chain_entry(cb_t cb, void *a) { return f0(1, cb, a) + 1; }\n";
    c
}

type ChainEntry = unsafe extern "C" fn(extern "C" fn(*mut c_void), *mut c_void) -> std::ffi::c_long;

struct Chain {
    entry: ChainEntry,
    range: (u64, u64),
}

/// Builds and dlopens the chain library once per test process.
fn chain() -> &'static Chain {
    static CHAIN_LIB: OnceLock<Chain> = OnceLock::new();
    CHAIN_LIB.get_or_init(|| {
        // A prebuilt chain (for running the bench where there is no compiler) or a fresh one.
        let lib = match std::env::var_os("CUGUARD_TEST_CHAIN_LIB") {
            Some(p) => PathBuf::from(p),
            None => {
                let dir = std::env::temp_dir().join("cuguard-stack-test");
                std::fs::create_dir_all(&dir).unwrap();
                let src = dir.join(format!("chain{}.c", std::process::id()));
                let lib = dir.join(format!("libchain{}.so", std::process::id()));
                std::fs::write(&src, chain_source()).unwrap();
                let st = Command::new("cc")
                    .args(["-O2", "-fomit-frame-pointer", "-shared", "-fPIC", "-o"])
                    .arg(&lib)
                    .arg(&src)
                    .status()
                    .expect("cc (gcc) is needed to build the test chain");
                assert!(st.success());
                lib
            }
        };
        // Make sure a snapshot exists before the library is loaded, so the refresh path runs.
        let _ = unwind::snapshot();
        let path = CString::new(lib.to_str().unwrap()).unwrap();
        // SAFETY: plain dlopen/dlsym of a library we just built; the symbol has the declared type.
        unsafe {
            let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW);
            assert!(!h.is_null());
            let f = libc::dlsym(h, c"chain_entry".as_ptr());
            assert!(!f.is_null());
            let m = phdr::all()
                .into_iter()
                .find(|m| m.start <= f as u64 && (f as u64) < m.end)
                .unwrap();
            Chain {
                entry: std::mem::transmute::<*mut c_void, ChainEntry>(f),
                range: (m.start, m.end),
            }
        }
    })
}

fn ips_of(id: StackId) -> Vec<u64> {
    dedup::all().into_iter().find(|s| s.0 == id).unwrap().1
}

/// libgcc's view of the current stack, as call-site addresses (return address - 1).
fn libgcc_backtrace() -> Vec<u64> {
    unsafe extern "C" {
        fn _Unwind_Backtrace(
            f: extern "C" fn(*mut c_void, *mut c_void) -> c_int,
            arg: *mut c_void,
        ) -> c_int;
        fn _Unwind_GetIP(ctx: *mut c_void) -> usize;
    }
    extern "C" fn each(ctx: *mut c_void, arg: *mut c_void) -> c_int {
        // SAFETY: arg is the Vec below; ctx is libgcc's context for this frame.
        let v = unsafe { &mut *(arg as *mut Vec<u64>) };
        // SAFETY: ctx is libgcc's context for this frame.
        let ip = unsafe { _Unwind_GetIP(ctx) } as u64;
        if ip == 0 {
            return 1;
        }
        v.push(ip - 1);
        if v.len() >= 256 { 1 } else { 0 }
    }
    let mut v = Vec::new();
    // SAFETY: the callback only pushes to the Vec it is given.
    unsafe { _Unwind_Backtrace(each, &mut v as *mut _ as *mut c_void) };
    v
}

struct Probe {
    depth: usize,
    ours: Option<StackId>,
    theirs: Vec<u64>,
}

extern "C" fn probe_cb(arg: *mut c_void) {
    // SAFETY: arg is the Probe passed to chain_entry.
    let p = unsafe { &mut *(arg as *mut Probe) };
    p.ours = capture_with(Skip::Frames(0), p.depth, true);
    p.theirs = libgcc_backtrace();
}

fn run_chain(depth: usize) -> Probe {
    let mut p = Probe {
        depth,
        ours: None,
        theirs: Vec::new(),
    };
    // SAFETY: chain_entry calls probe_cb with the pointer it is given.
    unsafe { (chain().entry)(probe_cb, &mut p as *mut _ as *mut c_void) };
    p
}

fn common_suffix(a: &[u64], b: &[u64]) -> usize {
    a.iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(x, y)| x == y)
        .count()
}

#[test]
fn unwinds_through_code_without_frame_pointers_like_libgcc() {
    let c = chain();
    // The library was loaded after the snapshot: its first capture misses, finds the library
    // loaded, rebuilds the module list and unwinds through it at once.
    let p = run_chain(MAX_DEPTH);
    let ours = ips_of(p.ours.expect("captured"));
    let theirs = p.theirs;
    let in_chain = ours
        .iter()
        .filter(|&&ip| c.range.0 <= ip && ip < c.range.1)
        .count();
    assert!(in_chain >= CHAIN + 2, "chain frames {in_chain}: {ours:x?}");
    // Everything from the callback outward agrees with libgcc, up to the thread's root.
    let common = common_suffix(&ours, &theirs);
    assert!(
        common >= CHAIN + 5,
        "common {common}\nours   {ours:x?}\ntheirs {theirs:x?}"
    );
    // Ours only adds its own few innermost frames (capture and the callback's call site).
    assert!(
        common + 8 >= ours.len(),
        "ours has {} frames, {common} shared",
        ours.len()
    );
}

#[test]
fn same_site_same_id_other_site_other_id_and_depth_limit() {
    // Captures from one line: once the module list has settled (the chain library may be new
    // to the unwinder), they all get one id.
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(run_chain(MAX_DEPTH).ours.unwrap());
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    assert_eq!(ids[3..], [ids[3]; 3], "{ids:?}");
    let other = capture_with(Skip::Frames(0), MAX_DEPTH, true);
    assert!(other.is_some());
    assert_ne!(other, Some(ids[5]));
    let short = run_chain(5).ours.unwrap();
    assert_eq!(ips_of(short).len(), 5);
    assert_eq!(capture_with(Skip::Frames(0), 0, true), None);
}

/// A capture from one call site (the `black_box`es keep the two sites' code apart).
#[inline(never)]
fn capture_at_site_a() -> Option<StackId> {
    std::hint::black_box(1u8);
    let id = capture_with(Skip::Frames(0), 8, true);
    std::hint::black_box(id)
}

/// A capture from another call site.
#[inline(never)]
fn capture_at_site_b() -> Option<StackId> {
    std::hint::black_box(2u16);
    let id = capture_with(Skip::Frames(0), 8, true);
    std::hint::black_box(id)
}

#[test]
fn the_threads_last_stack_answers_only_for_itself() {
    // Each capture's id comes from the thread's last stack when it is that one again, else
    // from the table: alternating sites must still get each its own id. (Each site is called
    // from one line, so its whole stack is the same every time.)
    let capture = |at_a: bool| {
        if at_a {
            capture_at_site_a()
        } else {
            capture_at_site_b()
        }
    };
    let order = [true, false, true, true, false, false, true, false, true];
    let ids: Vec<Option<StackId>> = order.iter().map(|&at_a| capture(at_a)).collect();
    let (a, b) = (ids[0].unwrap(), ids[1].unwrap());
    assert_ne!(a, b);
    let expected: Vec<Option<StackId>> = order
        .iter()
        .map(|&at_a| Some(if at_a { a } else { b }))
        .collect();
    assert_eq!(ids, expected);
    assert_ne!(ips_of(a), ips_of(b));
}

#[test]
fn many_threads_agree() {
    let _ = run_chain(MAX_DEPTH);
    std::thread::sleep(std::time::Duration::from_millis(30));
    let _ = run_chain(MAX_DEPTH);
    let ids: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(|| {
                (0..200)
                    .map(|_| {
                        let mut p = Probe {
                            depth: MAX_DEPTH,
                            ours: None,
                            theirs: Vec::new(),
                        };
                        extern "C" fn cb(arg: *mut c_void) {
                            // SAFETY: arg is the Probe below.
                            let p = unsafe { &mut *(arg as *mut Probe) };
                            p.ours = capture_with(Skip::Frames(0), p.depth, true);
                        }
                        // SAFETY: chain_entry calls cb with the pointer it is given.
                        unsafe { (chain().entry)(cb, &mut p as *mut _ as *mut c_void) };
                        p.ours.unwrap()
                    })
                    .collect::<std::collections::BTreeSet<_>>()
            })
        })
        .map(|t| t.join().unwrap())
        .collect();
    // Each thread has its own root frames (one stack per thread), and each thread sees
    // exactly one stack for its 200 identical captures.
    for s in &ids {
        assert_eq!(s.len(), 1, "{ids:?}");
    }
}

#[test]
fn public_capture_skips_own_module_and_modules_locate() {
    // In this test binary the "shim module" is the test executable itself, so everything
    // Rust is skipped and what remains are the frames outside it (libc's thread start).
    let id = capture();
    let mods = modules();
    if let Some(id) = id {
        let exe = &mods[0];
        for ip in ips_of(id) {
            assert!(!(exe.start <= ip && ip < exe.end));
            let (i, off) = locate(ip, &mods).expect("ip in a module");
            assert_eq!(off, ip - mods[i].base);
        }
    }
    let exe = &mods[0];
    assert!(exe.path.contains("cuguard"), "{}", exe.path);
    assert!(
        mods.iter()
            .any(|m| m.path.contains("libc.so") && m.build_id.is_some())
    );
    let here = public_capture_skips_own_module_and_modules_locate as *const () as u64;
    assert_eq!(locate(here, &mods).map(|x| x.0), Some(0));
    assert_eq!(locate(1, &mods), None);
}

#[test]
fn capture_in_thread_local_destructor_is_safe() {
    struct D;
    impl Drop for D {
        fn drop(&mut self) {
            // Our own thread state may already be gone; must not crash or hang.
            let _ = capture_with(Skip::Frames(0), 16, true);
        }
    }
    thread_local!(static EARLY: D = const { D });
    std::thread::spawn(|| {
        EARLY.with(|_| {});
        let _ = capture_with(Skip::Frames(0), 16, true); // registers our state's destructor after D's
    })
    .join()
    .unwrap();
}

/// Micro benchmark: ns per capture from inside the 30-deep C chain (no frame pointers), warm
/// caches, median and minimum over 50 rounds, versus libgcc's `_Unwind_Backtrace` over the
/// same stack. "skip 8" also unwinds, without recording, 8 frames more, as the shim does for
/// its own frames (hook, tracker, capture): the production cost at that depth.
///
/// `cargo test -p cuguard-shim --release --lib -- --ignored bench_capture --nocapture`
#[test]
#[ignore]
fn bench_capture() {
    struct B {
        depth: usize,
        skip: usize,
        capture: Vec<f64>,
        unwind: Vec<f64>,
        libgcc: Vec<f64>,
        frames: usize,
    }
    const ROUNDS: usize = 50;
    const ITERS: u32 = 4000;
    fn per_iter(t: std::time::Instant, n: u32) -> f64 {
        t.elapsed().as_nanos() as f64 / f64::from(n)
    }
    extern "C" fn cb(arg: *mut c_void) {
        // SAFETY: arg is the B below.
        let b = unsafe { &mut *(arg as *mut B) };
        let skip = Skip::Frames(b.skip);
        let mut id = None;
        for _ in 0..1000 {
            id = capture_with(skip, b.depth, true);
        }
        b.frames = ips_of(id.unwrap()).len();
        let snap = unwind::snapshot().unwrap();
        for _ in 0..ROUNDS {
            let t = std::time::Instant::now();
            for _ in 0..ITERS {
                std::hint::black_box(capture_with(skip, b.depth, true));
            }
            b.capture.push(per_iter(t, ITERS));
            // The unwind alone, without hash and table probe.
            let t = std::time::Instant::now();
            for _ in 0..ITERS {
                unwind::with_thread(|cache, bounds| {
                    let mut buf = [MaybeUninit::<u64>::uninit(); MAX_DEPTH];
                    Some(std::hint::black_box(unwind::unwind(
                        snap,
                        cache,
                        bounds,
                        skip,
                        &mut buf[..b.depth],
                    )))
                });
            }
            b.unwind.push(per_iter(t, ITERS));
            let t = std::time::Instant::now();
            for _ in 0..ITERS / 50 {
                std::hint::black_box(libgcc_backtrace());
            }
            b.libgcc.push(per_iter(t, ITERS / 50));
        }
        eprintln!(
            "rule cache (hits, misses): {:?}",
            unwind::with_thread(|c, _| Some(c.stats()))
        );
    }
    fn med_min(v: &mut [f64]) -> (f64, f64) {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[0])
    }
    let _ = run_chain(MAX_DEPTH);
    std::thread::sleep(std::time::Duration::from_millis(30));
    for (depth, skip) in [(32, 0), (32, 8), (64, 0)] {
        let mut b = B {
            depth,
            skip,
            capture: Vec::new(),
            unwind: Vec::new(),
            libgcc: Vec::new(),
            frames: 0,
        };
        // SAFETY: chain_entry calls cb with the pointer it is given.
        unsafe { (chain().entry)(cb, &mut b as *mut _ as *mut c_void) };
        let (c, cmin) = med_min(&mut b.capture);
        let (u, umin) = med_min(&mut b.unwind);
        let (l, _) = med_min(&mut b.libgcc);
        println!(
            "depth {depth} skip {skip}: {} frames; capture median {c:.0} ns (min {cmin:.0}); \
             unwind only {u:.0} ns (min {umin:.0}); libgcc _Unwind_Backtrace, whole stack: {l:.0} ns",
            b.frames
        );
    }
}

#[test]
fn capture_on_an_alternate_signal_stack_gives_up_safely() {
    // The handler runs on a sigaltstack, outside the thread's stack bounds: capture must not
    // read outside them (it returns None instead of crashing).
    static RESULT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(7);
    extern "C" fn handler(_: c_int) {
        let r = capture_with(Skip::Frames(0), 32, true);
        RESULT.store(
            r.map_or(u32::MAX, |_| 1),
            std::sync::atomic::Ordering::SeqCst,
        );
    }
    std::thread::spawn(|| {
        let _ = capture_with(Skip::Frames(0), 8, true); // thread state and bounds exist
        let mut stack = vec![0u8; 1 << 16];
        // SAFETY: a valid alternate stack for this thread and a handler that only captures;
        // both are undone before `stack` is freed.
        unsafe {
            let ss = libc::stack_t {
                ss_sp: stack.as_mut_ptr() as *mut c_void,
                ss_flags: 0,
                ss_size: stack.len(),
            };
            assert_eq!(libc::sigaltstack(&ss, std::ptr::null_mut()), 0);
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = handler as *const () as usize;
            sa.sa_flags = libc::SA_ONSTACK;
            assert_eq!(libc::sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut()), 0);
            libc::pthread_kill(libc::pthread_self(), libc::SIGUSR2);
            let off = libc::stack_t {
                ss_sp: std::ptr::null_mut(),
                ss_flags: libc::SS_DISABLE,
                ss_size: 0,
            };
            libc::sigaltstack(&off, std::ptr::null_mut());
        }
        drop(stack);
    })
    .join()
    .unwrap();
    assert_eq!(RESULT.load(std::sync::atomic::Ordering::SeqCst), u32::MAX);
}

#[test]
fn after_dlclose_and_invalidate_the_module_list_is_rebuilt() {
    // Build a second small library, load it, capture through it, unload it.
    let dir = std::env::temp_dir().join("cuguard-stack-test");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(format!("unload{}.c", std::process::id()));
    let lib = dir.join(format!("libunload{}.so", std::process::id()));
    std::fs::write(
        &src,
        "typedef void (*cb_t)(void *);\n\
         __attribute__((noinline)) void call_back(cb_t cb, void *a) { cb(a); __asm__ volatile(\"\"); }\n",
    )
    .unwrap();
    let Ok(st) = Command::new("cc")
        .args(["-O2", "-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
    else {
        eprintln!("no cc: skipped");
        return;
    };
    assert!(st.success());
    extern "C" fn cb(arg: *mut c_void) {
        // SAFETY: arg is the Option<StackId> below.
        unsafe { *(arg as *mut Option<StackId>) = capture_with(Skip::Frames(0), 64, true) };
    }
    let path = CString::new(lib.to_str().unwrap()).unwrap();
    let before = unwind::snapshot().unwrap() as *const _;
    // SAFETY: dlopen/dlsym/dlclose of the library just built; the symbol has the declared type.
    unsafe {
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW);
        assert!(!h.is_null());
        let f: extern "C" fn(extern "C" fn(*mut c_void), *mut c_void) =
            std::mem::transmute(libc::dlsym(h, c"call_back".as_ptr()));
        let mut id: Option<StackId> = None;
        // No wait: the capture's miss on the library just loaded rebuilds the module list.
        f(cb, &mut id as *mut _ as *mut c_void);
        let ips = ips_of(id.expect("captured"));
        let at = f as usize as u64;
        assert!(
            ips.iter().any(|&ip| ip >= at && ip < at + 64),
            "call_back's frame is in the stack: {ips:x?}"
        );
        assert!(
            unwind::snapshot().unwrap().knows(at),
            "the library just loaded is in the snapshot"
        );
        assert_eq!(libc::dlclose(h), 0);
    }
    invalidate_modules();
    let after = unwind::snapshot().expect("rebuilt") as *const _;
    assert_ne!(before, after, "a new snapshot after invalidate");
    assert!(capture_with(Skip::Frames(0), 32, true).is_some());
    // The unloaded library is still listed (from the history), after the loaded ones.
    let mods = modules();
    assert!(
        mods.iter().any(|m| m.path.contains("libunload")),
        "{mods:?}"
    );
}

#[test]
fn an_origins_word_ends_a_stack_and_is_neither_an_ip_nor_a_python_frame() {
    let py = python::tests_word(3, 42);
    let with_both = [0x1000, 0x2000, py, ORIGIN_TAG | 17];
    assert_eq!(origin_of(&with_both), Some(17));
    assert_eq!(split(&with_both), (&with_both[..2], &with_both[2..3]));
    let native_only = [0x1000, ORIGIN_TAG | 5];
    assert_eq!(origin_of(&native_only), Some(5));
    assert_eq!(split(&native_only), (&native_only[..1], &[][..]));
    let plain = [0x1000, py];
    assert_eq!(origin_of(&plain), None);
    assert_eq!(split(&plain), (&plain[..1], &plain[1..]));
    assert_eq!(origin_of(&[]), None);
    assert!(!is_tail(ORIGIN_TAG | 5));
}

#[test]
fn capture_works_in_a_forked_child() {
    let _ = capture_with(Skip::Frames(0), 16, true);
    // SAFETY: the child only captures, writes one byte and _exits.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0);
        if pid == 0 {
            after_fork_child();
            let ok = capture_with(Skip::Frames(0), 16, true).is_some() && !stacks().is_empty();
            libc::_exit(if ok { 0 } else { 1 });
        }
        let mut status = 0;
        assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{status}"
        );
    }
}

#[test]
fn a_module_loaded_by_a_relative_name_gets_its_absolute_path() {
    let maps = "\
559d3a1f2000-559d3a1f3000 r--p 00000000 fd:01 42 /usr/bin/python3.12
7f1c2a0d0000-7f1c2a0d1000 r--p 00000000 fd:01 77 /tmp/my work/libdeep.so
7f1c2a0d1000-7f1c2a0d2000 r-xp 00001000 fd:01 77 /tmp/my work/libdeep.so
7ffd1b3fe000-7ffd1b400000 r-xp 00000000 00:00 0                          [vdso]
";
    assert_eq!(
        mapped_at(maps, 0x7f1c2a0d0000, "libdeep.so").as_deref(),
        Some("/tmp/my work/libdeep.so")
    );
    assert_eq!(mapped_at(maps, 0x7f1c2a0d0000, "other.so"), None);
    assert_eq!(mapped_at(maps, 0x7f1c2a0d2000, "libdeep.so"), None);
    // The names that stay: absolute ones, and the loader's pseudo-modules.
    assert_eq!(absolute("/lib/libc.so.6".into(), 0), "/lib/libc.so.6");
    assert_eq!(absolute("linux-vdso.so.1".into(), 0), "linux-vdso.so.1");
    // A relative name no longer mapped: from the current directory.
    let here = std::env::current_dir().unwrap();
    assert_eq!(
        absolute("./gone/libx.so".into(), 0),
        here.join("./gone/libx.so").to_string_lossy()
    );
}
