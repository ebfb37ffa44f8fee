//! `cuguard_snapshot`: the report as it stands now, built by the report writer's own code
//! ([`crate::writer::build`]) under the writer's turn, as the shim's snapshots on request are
//! (`reason` `request`, `complete` false). It is handed to the caller, and written to the
//! caller's path when one is given; the process's own report file is not touched.
//!
//! A process that has not used the driver yet has no tracker: its snapshot is built from an
//! empty one, so that asking creates nothing (no report at exit because of it).

use std::ffi::c_char;
use std::path::Path;

use crate::writer::{Occasion, Reason};

use super::{E_ENDING, E_INVALID, E_IO, call, clear, out_json, text};

/// The occasion of a snapshot asked for through the API.
const API: Occasion = Occasion {
    reason: Reason::Request,
    complete: false,
    signal: None,
    cut_short: Some("snapshot through the in-process API: the process was still running"),
};

/// The report now, as JSON (one line and a newline); `None` once the final report is claimed.
pub fn json() -> Option<Vec<u8>> {
    crate::lifecycle::with_writer_turn(|| {
        let report = match crate::tracker::if_any() {
            Some(t) => crate::writer::build(t, &API),
            None => crate::writer::build(&crate::tracker::Tracker::new(), &API),
        };
        cuguard_format::to_vec(&report)
    })
}

/// Writes `bytes` to `path` as every file cuguard writes is written
/// ([`cuguard_files::replace`]: never through a link, never over another user's file), with the
/// report's mode.
fn write_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    cuguard_files::replace_with(path, crate::writer::file::report_mode(), bytes)
}

/// The report now in `*json`; also written to `path` unless it is NULL.
///
/// # Safety
///
/// `path` is NULL or a NUL-terminated string; `json` is valid for one pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuguard_snapshot(path: *const c_char, json: *mut *mut c_char) -> i32 {
    // SAFETY: the caller promises `json` is NULL or valid for a write.
    if !unsafe { clear(json) } {
        return E_INVALID;
    }
    let path = if path.is_null() {
        None
    } else {
        // SAFETY: not NULL, so a NUL-terminated string by the caller's promise.
        match unsafe { text(path, 4096) } {
            Ok(p) if !p.is_empty() => Some(p),
            _ => return E_INVALID,
        }
    };
    call(|| {
        let Some(bytes) = self::json() else {
            return E_ENDING;
        };
        if let Some(p) = path
            && let Err(e) = write_file(Path::new(p), &bytes)
        {
            // SAFETY: __errno_location is the calling thread's errno.
            unsafe { *libc::__errno_location() = e.raw_os_error().unwrap_or(libc::EIO) };
            return E_IO;
        }
        let mut bytes = bytes;
        if bytes.last() == Some(&b'\n') {
            bytes.pop();
        }
        // SAFETY: `json` was checked above.
        unsafe { out_json(json, bytes) }
    })
}
