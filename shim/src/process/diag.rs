//! The shim's own messages on stderr: one line each, prefixed `cuguard:`, written with a single
//! `write(2)` so they never interleave with the program's output mid-line.

use std::sync::atomic::{AtomicBool, Ordering};

/// Writes one line to stderr.
pub fn warn(message: &str) {
    // Names from the program (its executable, script, paths) are in messages: nothing in them
    // may drive the terminal or reorder the line ([`cuguard_format::needs_escape`]).
    let mut line = String::with_capacity(message.len() + 10);
    line.push_str("cuguard: ");
    cuguard_format::push_escaped(&mut line, message);
    line.push('\n');
    write_stderr(line.as_bytes());
}

/// Writes `line` (ending in a newline) to stderr as it is, without the prefix, in one `write`
/// (a JSON alert line, which collectors parse whole).
pub fn raw(line: &str) {
    write_stderr(line.as_bytes());
}

/// `CUGUARD_LOG=1`: diagnostics on stderr (set when the settings are read).
static VERBOSE: AtomicBool = AtomicBool::new(false);

/// Turns [`log`]'s lines on or off.
pub fn set_verbose(on: bool) {
    VERBOSE.store(on, Ordering::Relaxed);
}

/// Writes one line to stderr only when `CUGUARD_LOG=1`.
pub fn log(message: impl FnOnce() -> String) {
    if VERBOSE.load(Ordering::Relaxed) {
        warn(&message());
    }
}

/// Writes `message` once per `flag`, only when `CUGUARD_LOG=1`.
pub fn log_once(flag: &AtomicBool, message: &str) {
    if VERBOSE.load(Ordering::Relaxed) && !flag.swap(true, Ordering::Relaxed) {
        warn(message);
    }
}

/// Writes `message` once per `flag`.
pub fn warn_once(flag: &AtomicBool, message: &str) {
    if !flag.swap(true, Ordering::Relaxed) {
        warn(message);
    }
}

fn write_stderr(mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: bytes is a valid buffer of the given length.
        let n = unsafe { libc::write(2, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            return;
        }
        bytes = &bytes[n as usize..];
    }
}
