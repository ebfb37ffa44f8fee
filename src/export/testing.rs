//! Reading the exports back with the machine's own Python, as their readers do.

use std::io::Write;
use std::process::{Command, Stdio};

/// Runs `script` in `python3` with `data` (the export's bytes) bound to `data` and `pickle`,
/// `pickletools` and `json` imported; its standard output. Panics, with Python's error, when
/// the script fails.
pub(crate) fn python(data: &[u8], script: &str) -> String {
    let program = format!(
        "import sys, pickle, pickletools, json\ndata = sys.stdin.buffer.read()\n{script}\n"
    );
    let mut child = Command::new("python3")
        .args(["-c", &program])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut stdin = child.stdin.take().unwrap();
    let data = data.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&data));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        out.status.success(),
        "python3 failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
