//! Module names that are not regular files: a report or a history names its modules, and may
//! name a FIFO or a device. The symbolizer never blocks on one nor reads one: such a module, or
//! such a separate debug file, is one that cannot be read, as a missing one is.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use cuguard_symbolize::{Frame, Symbolizer};

const SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/c/symbols.c");

/// Far more than a lookup needs; less than forever (a blocked `open` of a FIFO).
const LIMIT: Duration = Duration::from_secs(20);

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("cuguard-symbolize-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn sh(cmd: &mut Command) {
    let st = cmd.status().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(st.success(), "{cmd:?}");
}

fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: c is a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// `symbolize(module, build_id, offset)` on a fresh symbolizer with `debug_dirs`, or a failed
/// test if it has not answered within [`LIMIT`] (the thread is left blocked).
fn symbolize(
    module: &Path,
    build_id: Option<&str>,
    offset: u64,
    debug_dirs: Vec<PathBuf>,
) -> Vec<Frame> {
    let (tx, rx) = mpsc::channel();
    let (module, build_id) = (module.to_path_buf(), build_id.map(str::to_owned));
    std::thread::spawn(move || {
        let mut s = Symbolizer::new(None).with_debug_dirs(debug_dirs);
        let _ = tx.send(s.symbolize(&module, build_id.as_deref(), offset));
    });
    rx.recv_timeout(LIMIT)
        .unwrap_or_else(|_| panic!("symbolize did not answer within {LIMIT:?}: it blocks"))
}

#[test]
fn a_module_that_is_a_fifo_or_a_device_gives_nothing_at_once() {
    let fifo = dir().join("libfifo.so");
    mkfifo(&fifo);
    assert_eq!(symbolize(&fifo, None, 0x1000, vec![]), []);
    assert_eq!(symbolize(Path::new("/dev/zero"), None, 0x1000, vec![]), []);
    assert_eq!(symbolize(Path::new("/dev/null"), None, 0x1000, vec![]), []);
}

#[test]
fn a_separate_debug_file_that_is_a_fifo_is_not_read_and_the_module_keeps_its_symbols() {
    // A program stripped of its DWARF (its symbol tables kept), whose debug file would be
    // looked for by build-id and by debuglink: both names are FIFOs.
    let d = dir();
    let exe = d.join("prog");
    let dbg = d.join("prog.debug");
    sh(Command::new("cc")
        .args(["-O0", "-g", "-Wl,--build-id", "-o"])
        .arg(&exe)
        .arg(SOURCE)
        .arg("-pthread"));
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let offset = text
        .lines()
        .find_map(|l| l.strip_prefix("static "))
        .map(|hex| u64::from_str_radix(hex, 16).unwrap())
        .expect("the program prints its static function's offset");
    sh(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&exe)
        .arg(&dbg));
    sh(Command::new("objcopy").arg("--strip-debug").arg(&exe));
    sh(Command::new("objcopy")
        .arg("--add-gnu-debuglink=prog.debug")
        .arg(&exe)
        .current_dir(&d));
    let id = {
        use object::Object;
        let data = std::fs::read(&exe).unwrap();
        let obj = object::File::parse(&*data).unwrap();
        let id: String = obj
            .build_id()
            .unwrap()
            .expect("a build-id")
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect();
        id
    };
    let root = d.join("debugroot");
    let by_id = root
        .join(".build-id")
        .join(&id[..2])
        .join(format!("{}.debug", &id[2..]));
    std::fs::create_dir_all(by_id.parent().unwrap()).unwrap();
    mkfifo(&by_id);
    mkfifo(&dbg);
    let frames = symbolize(&exe, Some(&id), offset, vec![root]);
    // The function's name, from the program's own symbol table; no file or line (DWARF was in
    // the debug file, never read).
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0].function.as_deref(), Some("static_leaker"));
    assert_eq!((frames[0].file.as_deref(), frames[0].line), (None, None));
}
