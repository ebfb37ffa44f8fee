//! Tests of the Python frame reader: versions and modes, frame words, and a capture with no
//! interpreter; an ignored timing test.

use super::*;

#[test]
fn versions_and_modes() {
    assert_eq!(minor_of(b"3.11.7 (main, Dec  8 2023)"), Some(11));
    assert_eq!(minor_of(b"3.9.18"), Some(9));
    assert_eq!(minor_of(b"2.7.18"), None);
    assert!(layout(8).is_none() && layout(14).is_none());
    assert!(layout(9).unwrap().objects && !layout(11).unwrap().objects);
    assert_eq!(Mode::parse(""), Some(Mode::Own));
    assert_eq!(Mode::parse("GIL"), Some(Mode::Gil));
    assert_eq!(Mode::parse("off"), Some(Mode::Off));
    assert_eq!(Mode::parse("sometimes"), None);
}

#[test]
fn the_history_reads_frame_words_as_they_are_made() {
    use cuguard_history::replay::Word;
    assert_eq!(
        Word::of(word(5, 42, true)),
        Word::Python {
            code: 5,
            line: Some(42),
            entry: true
        }
    );
    assert_eq!(
        Word::of(word(0x7f_fffe, -1, false)),
        Word::Python {
            code: 0x7f_fffe,
            line: None,
            entry: false
        }
    );
    assert_eq!(Word::of(super::super::ORIGIN_TAG | 17), Word::Origin(17));
    assert_eq!(Word::of(0x7fff_1234_5678), Word::Native(0x7fff_1234_5678));
}

#[test]
fn words_round_trip() {
    let w = word(5, 42, false);
    assert!(super::super::is_tail(w));
    let none: [&'static Code; 0] = [];
    assert_eq!(decode(w, &none).line, Some(42));
    assert_eq!(decode(word(5, -1, false), &none).line, None);
    assert_eq!(decode(word(5, 1 << 30, false), &none).line, None);
    assert_eq!(decode(w, &none).file, "<unknown>");
    // The entry bit survives, and is set apart from the code id and the line.
    let e = word(0x7f_fffe, 0xff_fffe, true);
    assert!(super::super::is_tail(e));
    assert!(decode(e, &none).entry && !decode(w, &none).entry);
    assert_eq!(decode(e, &none).line, Some(0xff_fffe));
    assert_eq!(e >> 24 & 0x7f_ffff, 0x7f_fffe);
}

#[test]
fn nothing_without_a_python_thread_state() {
    // No interpreter in this test binary (or, when the bench below runs in the same
    // process, none on this thread).
    let mut out = [MaybeUninit::uninit(); 8];
    assert_eq!(capture(&mut out), 0);
}

/// What the bench's callback measured, ns per call: (Python frames only, whole capture
/// with Python frames, whole capture without), minimum and median over rounds.
static RESULT: std::sync::Mutex<Vec<(usize, usize, [f64; 6])>> = std::sync::Mutex::new(Vec::new());
static DEPTH: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

extern "C" fn bench_cb() {
    const ROUNDS: usize = 60;
    const ITERS: u32 = 2000;
    let python_depth = DEPTH.load(Ordering::Relaxed);
    let mut buf = [MaybeUninit::<u64>::uninit(); 32];
    let frames = capture(&mut buf);
    let (mut py, mut with, mut without) = (Vec::new(), Vec::new(), Vec::new());
    let time = |f: &mut dyn FnMut()| {
        let t = std::time::Instant::now();
        for _ in 0..ITERS {
            f();
        }
        t.elapsed().as_nanos() as f64 / f64::from(ITERS)
    };
    for _ in 0..ROUNDS {
        py.push(time(&mut || {
            std::hint::black_box(capture(&mut buf));
        }));
        configure(Mode::Own);
        with.push(time(&mut || {
            std::hint::black_box(super::super::capture_with(
                super::super::Skip::Frames(0),
                32,
                true,
            ));
        }));
        configure(Mode::Off);
        without.push(time(&mut || {
            std::hint::black_box(super::super::capture_with(
                super::super::Skip::Frames(0),
                32,
                true,
            ));
        }));
        configure(Mode::Own);
    }
    let mm = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[0], v[v.len() / 2])
    };
    let (a, b, c) = (mm(&mut py), mm(&mut with), mm(&mut without));
    RESULT
        .lock()
        .unwrap()
        .push((python_depth, frames, [a.0, a.1, b.0, b.1, c.0, c.1]));
}

/// Micro benchmark: the cost of reading Python frames, from inside a real interpreter
/// (libpython loaded into this test process, calling back through ctypes with the GIL
/// released), at three Python stack depths; warm caches.
///
/// `cargo test -p cuguard-shim --release --lib -- --ignored bench_python_capture --nocapture`
/// (`CUGUARD_BENCH_LIBPYTHON=/path/libpython3.x.so` picks the interpreter; default: the
/// one `python3` on PATH was built with).
#[test]
#[ignore]
fn bench_python_capture() {
    let lib = std::env::var("CUGUARD_BENCH_LIBPYTHON").unwrap_or_else(|_| {
        let out = std::process::Command::new("python3")
            .args([
                "-c",
                "import sysconfig as s; print(s.get_config_var('LIBDIR') + '/' + s.get_config_var('INSTSONAME'))",
            ])
            .output()
            .expect("python3");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    });
    let c_lib = std::ffi::CString::new(lib.clone()).unwrap();
    // SAFETY: loading a shared library by path; its constructors are CPython's.
    let h = unsafe { libc::dlopen(c_lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    assert!(!h.is_null(), "dlopen {lib}");
    type InitEx = unsafe extern "C" fn(c_int);
    type RunString = unsafe extern "C" fn(*const c_char) -> c_int;
    // SAFETY: CPython's Py_InitializeEx and PyRun_SimpleString, by their C signatures.
    unsafe {
        let init: InitEx = std::mem::transmute(libc::dlsym(h, c"Py_InitializeEx".as_ptr()));
        let run: RunString = std::mem::transmute(libc::dlsym(h, c"PyRun_SimpleString".as_ptr()));
        init(0);
        for depth in [1usize, 10, 30] {
            DEPTH.store(depth, Ordering::Relaxed);
            let code = format!(
                "import ctypes\n\
                 cb = ctypes.CFUNCTYPE(None)({addr})\n\
                 def nest(k):\n    return cb() if k <= 1 else nest(k - 1)\n\
                 nest({depth})\n",
                addr = bench_cb as *const () as usize
            );
            let code = std::ffi::CString::new(code).unwrap();
            assert_eq!(run(code.as_ptr()), 0);
        }
    }
    if API.get().is_some_and(Option::is_none) {
        println!("skipped: Python was looked up before libpython was loaded");
        return;
    }
    for (depth, frames, r) in RESULT.lock().unwrap().iter() {
        println!(
            "{lib}: Python depth {depth} ({frames} frames read): Python frames min {:.0} ns (median {:.0}); \
             capture with them min {:.0} (median {:.0}), without min {:.0} (median {:.0})",
            r[0], r[1], r[2], r[3], r[4], r[5]
        );
    }
}
