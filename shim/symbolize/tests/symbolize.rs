//! Symbolizer tests against small C programs built here with gcc (static function, inlined
//! function, thread start routine; -O0, -O2, non-PIE, no DWARF, separate debug files by
//! debuglink and by build-id), against this Rust test binary, qualified names in a Rust program
//! (full debug info and line tables only) and a C++ program built here, and a benchmark.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use cuguard_symbolize::{Frame, Symbolizer};

const SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/c/symbols.c");

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cuguard-symbolize-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn sh(cmd: &mut Command) {
    let st = cmd.status().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(st.success(), "{cmd:?}");
}

/// Builds the C program with `flags`, runs it, and returns its path and tag → offset.
fn build_and_run(name: &str, flags: &[&str]) -> (PathBuf, HashMap<String, u64>) {
    let exe = tmp(name);
    sh(Command::new("cc")
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(SOURCE)
        .arg("-pthread"));
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success());
    let offsets = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (tag, hex) = l.split_once(' ').unwrap();
            (tag.to_owned(), u64::from_str_radix(hex, 16).unwrap())
        })
        .collect();
    (exe, offsets)
}

fn line_of(mark: &str) -> u32 {
    line_in(SOURCE, mark)
}

fn line_in(source: &str, mark: &str) -> u32 {
    let src = std::fs::read_to_string(source).unwrap();
    let needle = format!("MARK:{mark} ");
    src.lines()
        .position(|l| l.contains(&needle))
        .unwrap_or_else(|| panic!("no {needle}")) as u32
        + 1
}

fn build_id(path: &Path) -> Option<String> {
    use object::Object;
    let data = std::fs::read(path).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    obj.build_id()
        .unwrap()
        .map(|b| b.iter().map(|x| format!("{x:02x}")).collect())
}

fn check(f: &Frame, function: &str, mark: Option<&str>, inlined: bool) {
    assert_eq!(f.function.as_deref(), Some(function), "{f:?}");
    assert_eq!(f.inlined, inlined, "{f:?}");
    match mark {
        Some(m) => {
            assert!(
                f.file.as_deref().unwrap_or("").ends_with("symbols.c"),
                "{f:?}"
            );
            assert_eq!(f.line, Some(line_of(m)), "{f:?} (mark {m})");
        }
        None => assert_eq!((f.file.as_deref(), f.line), (None, None), "{f:?}"),
    }
}

/// The full expectations for a build with DWARF.
fn check_all_with_dwarf(exe: &Path, offsets: &HashMap<String, u64>, s: &mut Symbolizer) {
    let id = build_id(exe);
    let sym = |s: &mut Symbolizer, tag: &str| s.symbolize(exe, id.as_deref(), offsets[tag]);

    let f = sym(s, "static");
    assert_eq!(f.len(), 1, "{f:?}");
    check(&f[0], "static_leaker", Some("static"), false);

    let f = sym(s, "inlined");
    assert_eq!(f.len(), 2, "{f:?}");
    check(&f[0], "inlined_leaker", Some("inlined"), true);
    check(&f[1], "outer_of_inlined", Some("outer"), false);

    let f = sym(s, "thread");
    assert_eq!(f.len(), 1, "{f:?}");
    check(&f[0], "thread_start", Some("thread"), false);
}

#[test]
fn c_program_o0_and_o2_pie_and_non_pie() {
    for (name, flags) in [
        ("o0", &["-O0", "-g"][..]),
        ("o2", &["-O2", "-g"][..]),
        ("o2-nopie", &["-O2", "-g", "-no-pie", "-fno-pie"][..]),
    ] {
        let (exe, offsets) = build_and_run(name, flags);
        let mut s = Symbolizer::new(None);
        check_all_with_dwarf(&exe, &offsets, &mut s);
        // Asking again hits the cache and gives the same answer.
        check_all_with_dwarf(&exe, &offsets, &mut s);
    }
}

#[test]
fn no_dwarf_still_names_static_functions_from_symtab() {
    let (exe, offsets) = build_and_run("nodwarf", &["-O2"]);
    let mut s = Symbolizer::new(None);
    let f = s.symbolize(&exe, None, offsets["static"]);
    assert_eq!(f.len(), 1);
    check(&f[0], "static_leaker", None, false);
    // Inlined code belongs, without DWARF, to the function it was inlined into.
    let f = s.symbolize(&exe, None, offsets["inlined"]);
    check(&f[0], "outer_of_inlined", None, false);
    let f = s.symbolize(&exe, None, offsets["thread"]);
    check(&f[0], "thread_start", None, false);
}

#[test]
fn separate_debug_file_by_debuglink() {
    let (exe, offsets) = build_and_run("dbglink", &["-O2", "-g"]);
    let dbg = tmp("dbglink.debug");
    sh(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&exe)
        .arg(&dbg));
    sh(Command::new("objcopy")
        .arg("--strip-debug")
        .arg("--strip-unneeded")
        .arg(&exe));
    sh(Command::new("objcopy")
        .arg(format!("--add-gnu-debuglink={}", dbg.display()))
        .arg(&exe)
        .current_dir(dbg.parent().unwrap()));
    let mut s = Symbolizer::new(None).with_debug_dirs(vec![]);
    check_all_with_dwarf(&exe, &offsets, &mut s);
}

#[test]
fn separate_debug_file_by_build_id() {
    let (exe, offsets) = build_and_run("buildid", &["-O2", "-g", "-Wl,--build-id"]);
    let id = build_id(&exe).expect("gcc emits a build-id");
    let dir = tmp("debugroot");
    let dbg = dir
        .join(".build-id")
        .join(&id[..2])
        .join(format!("{}.debug", &id[2..]));
    std::fs::create_dir_all(dbg.parent().unwrap()).unwrap();
    sh(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&exe)
        .arg(&dbg));
    sh(Command::new("strip").arg("--strip-all").arg(&exe));
    // Without the debug dir: a stripped program knows nothing of static functions.
    let mut s = Symbolizer::new(None).with_debug_dirs(vec![]);
    let f = s.symbolize(&exe, Some(&id), offsets["static"]);
    assert!(
        f.iter()
            .all(|f| f.function.as_deref() != Some("static_leaker")),
        "{f:?}"
    );
    let mut s = Symbolizer::new(None).with_debug_dirs(vec![dir]);
    check_all_with_dwarf(&exe, &offsets, &mut s);
}

#[test]
fn build_id_mismatch_and_missing_files_give_nothing() {
    let (exe, offsets) = build_and_run("mismatch", &["-O0", "-g"]);
    let mut s = Symbolizer::new(None);
    assert!(
        s.symbolize(
            &exe,
            Some("00112233445566778899aabbccddeeff00112233"),
            offsets["static"]
        )
        .is_empty()
    );
    assert!(!s.symbolize(&exe, None, offsets["static"]).is_empty());
    let id = build_id(&exe).unwrap().to_uppercase();
    assert!(!s.symbolize(&exe, Some(&id), offsets["static"]).is_empty());
    assert!(
        s.symbolize(Path::new("/nonexistent/lib.so"), None, 0x1000)
            .is_empty()
    );
    assert!(
        s.symbolize(Path::new("linux-vdso.so.1"), None, 0x1000)
            .is_empty()
    );
    assert!(s.symbolize(&exe, None, 0x7fff_0000_0000).is_empty());
}

#[test]
fn deadline_in_the_past_gives_nothing() {
    let (exe, offsets) = build_and_run("deadline", &["-O0", "-g"]);
    let mut s = Symbolizer::new(Some(std::time::Instant::now()));
    assert!(s.symbolize(&exe, None, offsets["static"]).is_empty());
    assert!(s.timed_out());
}

const RUST_NAMES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/rust/names.rs");
const CPP_NAMES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cpp/names.cpp");

/// Runs a built test program; returns tag → offset from its output.
fn offsets_of(exe: &Path) -> HashMap<String, u64> {
    let out = Command::new(exe).output().unwrap();
    assert!(out.status.success(), "{exe:?}: {out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (tag, hex) = l.split_once(' ').unwrap();
            (tag.to_owned(), u64::from_str_radix(hex, 16).unwrap())
        })
        .collect()
}

/// The frames at `tag`'s offset, as (function, line, inlined).
fn named_frames(
    s: &mut Symbolizer,
    exe: &Path,
    offsets: &HashMap<String, u64>,
    tag: &str,
) -> Vec<(String, u32, bool)> {
    s.symbolize(exe, None, offsets[tag])
        .into_iter()
        .map(|f| {
            (
                f.function.unwrap_or_default(),
                f.line.unwrap_or(0),
                f.inlined,
            )
        })
        .collect()
}

fn build_rust_names(name: &str, debuginfo: &str) -> (PathBuf, HashMap<String, u64>) {
    let exe = tmp(name);
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    sh(Command::new(rustc)
        .args(["--edition", "2024", "-O", "-C"])
        .arg(format!("debuginfo={debuginfo}"))
        .arg("-o")
        .arg(&exe)
        .arg(RUST_NAMES));
    let offsets = offsets_of(&exe);
    (exe, offsets)
}

#[test]
fn rust_names_are_qualified_with_full_debug_info() {
    let (exe, offsets) = build_rust_names("names-full", "2");
    let line = |m| line_in(RUST_NAMES, m);
    let mut s = Symbolizer::new(None);
    let outer = ("names::outer::inner::outer_fn".to_owned(), 0, false);
    let f = named_frames(&mut s, &exe, &offsets, "inlined");
    assert_eq!(
        f[0],
        ("names::outer::inner::helper".into(), line("inlined"), true)
    );
    assert_eq!((&f[1].0, f[1].2), (&outer.0, outer.2), "{f:?}");
    assert_eq!(f[1].1, line("outer"));
    let f = named_frames(&mut s, &exe, &offsets, "method");
    assert_eq!(
        f[0],
        (
            "names::outer::inner::Widget::grow".into(),
            line("method"),
            true
        )
    );
    let f = named_frames(&mut s, &exe, &offsets, "bare");
    assert_eq!(
        f[0],
        ("names::outer::inner::bare".into(), line("bare"), true)
    );
    let f = named_frames(&mut s, &exe, &offsets, "generic");
    assert!(f[0].0.starts_with("names::outer::inner::generic"), "{f:?}");
    let f = named_frames(&mut s, &exe, &offsets, "main");
    assert_eq!(f, [("names::main".into(), line("main"), false)]);
    let f = named_frames(&mut s, &exe, &offsets, "closure");
    assert_eq!(
        f[0],
        ("names::main::{{closure}}".into(), line("closure"), true)
    );
    // The iterator adapters in between, from the standard library's linkage names.
    assert!(
        f[1..f.len() - 1].iter().all(|(n, _, inl)| *inl
            && (n.starts_with("core::")
                || n.starts_with("<core::")
                || n.starts_with("<u64 as core::"))),
        "{f:?}"
    );
    assert_eq!(f.last().unwrap().0, "names::main");
}

/// With `debug = "line-tables-only"` (the workspace's release profile), DWARF has only short
/// names: the outermost frame takes its symbol's path, a closure the path of the function whose
/// closure environment other names mention, an inlined function the path of a symbol under it
/// (here `helper`'s static) when there is one, and keeps its short name otherwise.
#[test]
fn rust_names_are_qualified_with_line_tables_only() {
    let (exe, offsets) = build_rust_names("names-lines", "line-tables-only");
    let line = |m| line_in(RUST_NAMES, m);
    let mut s = Symbolizer::new(None);
    let f = named_frames(&mut s, &exe, &offsets, "inlined");
    assert_eq!(
        f,
        [
            ("names::outer::inner::helper".into(), line("inlined"), true),
            ("names::outer::inner::outer_fn".into(), line("outer"), false)
        ]
    );
    let f = named_frames(&mut s, &exe, &offsets, "bare");
    assert_eq!(
        f[0],
        ("bare".into(), line("bare"), true),
        "nothing names its path"
    );
    assert_eq!(f[1].0, "names::outer::inner::outer_fn");
    let f = named_frames(&mut s, &exe, &offsets, "generic");
    assert_eq!(
        f,
        [(
            "names::outer::inner::generic<u32>".into(),
            line("generic"),
            false
        )]
    );
    let f = named_frames(&mut s, &exe, &offsets, "main");
    assert_eq!(f, [("names::main".into(), line("main"), false)]);
    // A closure: the function whose closure environment the unit's names mention.
    let f = named_frames(&mut s, &exe, &offsets, "closure");
    assert_eq!(
        f[0],
        ("names::main::{closure#0}".into(), line("closure"), true)
    );
    assert_eq!(f.last().unwrap().0, "names::main");
}

#[test]
fn cpp_names_are_qualified() {
    let exe = tmp("names-cpp");
    sh(Command::new("c++")
        .args(["-O2", "-g", "-o"])
        .arg(&exe)
        .arg(CPP_NAMES));
    let offsets = offsets_of(&exe);
    let line = |m| line_in(CPP_NAMES, m);
    let mut s = Symbolizer::new(None);
    let run = "outer::inner::run(int)".to_owned();
    let f = named_frames(&mut s, &exe, &offsets, "ctor");
    assert_eq!(
        f,
        [
            (
                "outer::inner::Widget::Widget(int)".into(),
                line("ctor"),
                true
            ),
            (run.clone(), line("run"), false)
        ]
    );
    // The lambda's class has no name in DWARF; its function is inside `run`.
    let lambda = "outer::inner::run(int)::{unnamed type}::operator()".to_owned();
    let f = named_frames(&mut s, &exe, &offsets, "lambda");
    assert_eq!(f[0], (lambda.clone(), line("lambda"), true));
    assert_eq!((&f[1].0, f[1].2), (&run, false));
    let f = named_frames(&mut s, &exe, &offsets, "method");
    assert_eq!(
        f[0],
        (
            "int outer::inner::Widget::grow<double>(double)".into(),
            line("method"),
            true
        )
    );
    assert_eq!(f[1].0, lambda);
    let f = named_frames(&mut s, &exe, &offsets, "dtor");
    assert_eq!(
        f,
        [(
            "outer::inner::Widget::~Widget()".into(),
            line("dtor"),
            false
        )]
    );
}

/// The main program's load bias.
fn own_bias() -> u64 {
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        _: usize,
        data: *mut libc::c_void,
    ) -> i32 {
        // SAFETY: data is the u64 below; info is valid during the callback.
        unsafe { *(data as *mut u64) = (*info).dlpi_addr };
        1
    }
    let mut bias = 0u64;
    // SAFETY: the callback writes only the u64 it is given.
    unsafe { libc::dl_iterate_phdr(Some(cb), &mut bias as *mut u64 as *mut libc::c_void) };
    bias
}

const MARKER_LINE: u32 = line!() + 2;
#[inline(never)]
fn rust_marker_function(x: u64) -> u64 {
    std::hint::black_box(x).wrapping_mul(3)
}

#[test]
fn rust_function_in_this_test_binary() {
    assert_eq!(rust_marker_function(2), 6);
    let exe = std::fs::read_link("/proc/self/exe").unwrap();
    let offset = rust_marker_function as *const () as u64 - own_bias();
    let mut s = Symbolizer::new(None);
    let f = s.symbolize(&exe, None, offset);
    let last = f.last().expect("frames");
    assert_eq!(
        last.function.as_deref(),
        Some("symbolize::rust_marker_function"),
        "{f:?}"
    );
    assert!(
        last.file
            .as_deref()
            .unwrap_or("")
            .ends_with("tests/symbolize.rs"),
        "{f:?}"
    );
    let line = last.line.unwrap();
    assert!(
        (MARKER_LINE..=MARKER_LINE + 1).contains(&line),
        "{line} vs {MARKER_LINE}"
    );
}

/// Benchmark: a report of 100,000 leaks over 1,000 distinct stacks of 32 frames, with (worst
/// case) nearly every frame a distinct address, spread over this test binary (Rust, with
/// DWARF) and libc (symbol tables only). Times a fresh Symbolizer on every distinct ip, then
/// the per-leak assembly.
///
/// `cargo test -p cuguard-symbolize --release --test symbolize -- --ignored bench --nocapture`
#[test]
#[ignore]
fn bench_100k_leaks_1000_stacks() {
    use object::{Object, ObjectSymbol};
    let exe = std::fs::read_link("/proc/self/exe").unwrap();
    let libc_path = [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
    .unwrap();
    // Function ranges to draw ips from.
    let ranges = |p: &Path| -> Vec<(u64, u64)> {
        let data = std::fs::read(p).unwrap();
        let obj = object::File::parse(&*data).unwrap();
        obj.symbols()
            .chain(obj.dynamic_symbols())
            .filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 4)
            .map(|s| (s.address(), s.size()))
            .collect()
    };
    let mods = [
        (exe.clone(), ranges(&exe)),
        (libc_path.clone(), ranges(&libc_path)),
    ];
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let stacks: Vec<Vec<(usize, u64)>> = (0..1000)
        .map(|_| {
            (0..32)
                .map(|_| {
                    let m = if next() % 4 == 0 { 1 } else { 0 };
                    let r = &mods[m].1;
                    let (a, size) = r[(next() % r.len() as u64) as usize];
                    (m, a + next() % size)
                })
                .collect()
        })
        .collect();
    let leaks: Vec<usize> = (0..100_000).map(|_| (next() % 1000) as usize).collect();

    let t = std::time::Instant::now();
    let mut s = Symbolizer::new(Some(t + std::time::Duration::from_secs(60)));
    let mut by_ip: HashMap<(usize, u64), Vec<Frame>> = HashMap::new();
    for st in &stacks {
        for &(m, off) in st {
            by_ip
                .entry((m, off))
                .or_insert_with(|| s.symbolize(&mods[m].0, None, off));
        }
    }
    let symbolized = t.elapsed();
    // Per stack, once (a report's leaks name stack ids); then per leak, its stack's frames.
    let stack_frames: Vec<Vec<&Frame>> = stacks
        .iter()
        .map(|st| st.iter().flat_map(|ip| &by_ip[ip]).collect())
        .collect();
    let mut frames_out = 0usize;
    for &l in &leaks {
        frames_out += std::hint::black_box(&stack_frames[l]).len();
    }
    let total = t.elapsed();
    let all: Vec<&Frame> = stack_frames.iter().flatten().copied().collect();
    let named = all.iter().filter(|f| f.function.is_some()).count();
    let with_line = all.iter().filter(|f| f.line.is_some()).count();
    println!(
        "{} distinct ips over 1000 stacks: symbolized in {:.3} s; 100,000 leaks ({frames_out} frames) \
         assembled, total {:.3} s; of {} frames (inlined ones included) {:.1}% named, {:.1}% with a line",
        by_ip.len(),
        symbolized.as_secs_f64(),
        total.as_secs_f64(),
        all.len(),
        100.0 * named as f64 / all.len() as f64,
        100.0 * with_line as f64 / all.len() as f64,
    );
    assert!(!s.timed_out());
}
