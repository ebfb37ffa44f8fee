//! `cuguard_end_expect`, `cuguard_end_begin`, `cuguard_end_classify`: how cuguard's Python
//! bootstrap tells the shim where a Python program's code ended, and what held its memory then
//! ([`crate::tracker::end`]; the report's `python` section, `docs/report.schema.json`).
//!
//! 1. At start-up the bootstrap calls `cuguard_end_expect()`: a report written without a mark
//!    then says the program left without running its `atexit` handlers (`os._exit`, a fatal
//!    signal), where without the promise it says the bootstrap did not run.
//! 2. At the end (its `atexit` handler, registered first so that it runs last)
//!    `cuguard_end_begin(how, exception, &json)` records the moment and a copy of every live
//!    allocation's record, and hands the live allocations back as `cuguard_live_allocations`
//!    does (all of them, largest first).
//! 3. The bootstrap finds what holds each one and sends it with `cuguard_end_classify(json)`
//!    (`cuguard_format::Classification`). If that never comes (a signal, the walk failing), the
//!    mark stands and the report lists the allocations as `unclassified`.

use std::ffi::c_char;

use cuguard_format::Classification;
use cuguard_format::api::LiveAllocations;

use super::track::{described, live};
use super::{E_INVALID, OK, call, clear, out_json, text};
use crate::tracker::end::{self, Mark};

/// The longest classification accepted, bytes.
const MAX_CLASSIFICATION: usize = 1 << 30;

/// The bootstrap will mark the end of the program's code.
#[unsafe(no_mangle)]
pub extern "C" fn cuguard_end_expect() -> i32 {
    call(|| {
        end::expect();
        OK
    })
}

/// Marks the end of the program's code now; the live allocations, as JSON, in `*json`.
///
/// # Safety
///
/// `how` is a NUL-terminated string; `exception` is NULL or one; `json` is valid for one
/// pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuguard_end_begin(
    how: *const c_char,
    exception: *const c_char,
    json: *mut *mut c_char,
) -> i32 {
    // SAFETY: the caller promises `json` is NULL or valid for a write.
    if !unsafe { clear(json) } {
        return E_INVALID;
    }
    // SAFETY: the caller promises a NUL-terminated string (NULL is refused by `text`).
    let how = match unsafe { text(how, 64) } {
        Ok(h) if !h.is_empty() => h.to_string(),
        _ => return E_INVALID,
    };
    let exception = if exception.is_null() {
        None
    } else {
        // SAFETY: not NULL, so a NUL-terminated string by the caller's promise.
        match unsafe { text(exception, 256) } {
            Ok(e) => Some(e.to_string()),
            Err(code) => return code,
        }
    };
    call(|| {
        let mut records = crate::tracker::if_any().map(live).unwrap_or_default();
        records.sort_by(|a, b| b.1.size.cmp(&a.1.size).then(a.1.seq.cmp(&b.1.seq)));
        let time_ms = crate::process::clock::since_start_ms();
        let listed = LiveAllocations {
            allocations: described(&records),
            now_ms: Some(time_ms),
        };
        end::mark(Mark {
            how,
            exception,
            time_ms,
            live: records,
            classification: None,
        });
        // SAFETY: `json` was checked above.
        unsafe { out_json(json, cuguard_format::api::to_vec(&listed)) }
    })
}

/// Attaches what holds each allocation live at the end (`cuguard_format::Classification` as
/// JSON) to the mark `cuguard_end_begin` made.
///
/// # Safety
///
/// `json` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuguard_end_classify(json: *const c_char) -> i32 {
    // SAFETY: the caller promises a NUL-terminated string (NULL is refused by `text`).
    let json = match unsafe { text(json, MAX_CLASSIFICATION) } {
        Ok(j) => j,
        Err(code) => return code,
    };
    call(|| {
        let Ok(c) = Classification::from_json(json) else {
            return E_INVALID;
        };
        if end::classify(c) { OK } else { E_INVALID }
    })
}
