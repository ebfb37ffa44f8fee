//! `cuguard_track_begin` / `cuguard_track_end`: a window over every thread of the process
//! (PyTorch's backward pass allocates on its own thread), and `cuguard_live_allocations`.
//!
//! The window's peak and allocated bytes are counted as it goes ([`crate::tracker::windows`]).
//! Its leaks are found when it closes: the live allocations (the same ones the report lists:
//! the driver's, the pool's, VMM handles) whose order key falls inside it, i.e. made after it
//! opened, on any thread, and still live. Only those have their sites named
//! ([`crate::writer::stacks::named_now`], the report's site and owner rules), so closing a
//! window costs one walk of the live allocations plus the naming of its own leaks.
//!
//! Windows nest and overlap freely: each has its own slot and token.

use std::ffi::c_char;

use cuguard_format::api::{Allocation, LiveAllocations, Window};
use cuguard_format::wire::device_ordinal;

use crate::tracker::windows::{self, WindowError};
use crate::tracker::{Record, Tracker};

use super::{E_FORKED, E_FULL, E_INVALID, OK, call, clear, out_json};

/// Every live allocation the report would list as live (not those lost with their context).
pub(super) fn live(t: &Tracker) -> Vec<(u64, Record)> {
    let mut all = crate::serving::serve::live_allocations(t);
    all.extend(t.vmm.live().into_iter().map(|(a, _, r)| (a, r)));
    all
}

/// `records` with their sites and owners named.
pub(super) fn described(records: &[(u64, Record)]) -> Vec<Allocation> {
    let asks: Vec<(u32, &'static str)> = records
        .iter()
        .map(|(_, r)| (r.stack, r.memory.as_str()))
        .collect();
    let named = crate::writer::stacks::named_now(&asks);
    records
        .iter()
        .zip(named)
        .map(|((address, r), n)| Allocation {
            address: *address,
            size: r.size,
            requested: r.requested,
            api: r.api.name().into(),
            memory: r.memory.into(),
            device: (r.device >= 0).then(|| device_ordinal(r.device)),
            thread: r.thread.into(),
            time_ms: r.time_ms,
            owner: Some(n.owner),
            owner_kind: n.owner_kind,
            site: n.site,
        })
        .collect()
}

/// What the window saw, with its leaks named.
pub fn window(closed: &windows::Closed) -> Window {
    let mut leaks: Vec<(u64, Record)> = match crate::tracker::if_any() {
        Some(t) => live(t)
            .into_iter()
            .filter(|(_, r)| (closed.begin_key..closed.end_key).contains(&r.seq))
            .collect(),
        None => Vec::new(),
    };
    leaks.sort_by_key(|(_, r)| (r.seq, r.thread));
    Window {
        peak_bytes: closed.peak_bytes,
        allocated_bytes: closed.allocated_bytes,
        leaked_bytes: leaks.iter().map(|(_, r)| r.size).sum(),
        leaks: described(&leaks),
    }
}

/// The live allocations of at least `min_bytes`, largest first.
pub fn live_allocations(min_bytes: u64) -> LiveAllocations {
    let mut all: Vec<(u64, Record)> = match crate::tracker::if_any() {
        Some(t) => live(t)
            .into_iter()
            .filter(|(_, r)| r.size >= min_bytes)
            .collect(),
        None => Vec::new(),
    };
    all.sort_by(|a, b| b.1.size.cmp(&a.1.size).then(a.1.seq.cmp(&b.1.seq)));
    LiveAllocations {
        allocations: described(&all),
        now_ms: None,
    }
}

fn code(e: WindowError) -> i32 {
    match e {
        WindowError::Full => E_FULL,
        WindowError::Unknown => E_INVALID,
        WindowError::BeforeFork => E_FORKED,
    }
}

/// Opens a window; its token in `*token`.
///
/// # Safety
///
/// `token` is valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuguard_track_begin(token: *mut u64) -> i32 {
    if token.is_null() {
        return E_INVALID;
    }
    call(|| match windows::open() {
        Ok(t) => {
            // SAFETY: checked not NULL; the caller promises it is valid.
            unsafe { token.write(t) };
            OK
        }
        Err(e) => code(e),
    })
}

/// Closes window `token`; what it saw, as JSON, in `*json`.
///
/// # Safety
///
/// `json` is valid for one pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuguard_track_end(token: u64, json: *mut *mut c_char) -> i32 {
    // SAFETY: the caller promises `json` is NULL or valid for a write.
    if !unsafe { clear(json) } {
        return E_INVALID;
    }
    call(|| match windows::close(token) {
        Ok(closed) => {
            let w = window(&closed);
            // SAFETY: `json` was checked above.
            unsafe { out_json(json, cuguard_format::api::to_vec(&w)) }
        }
        Err(e) => code(e),
    })
}

/// The live allocations of at least `min_bytes`, largest first, as JSON, in `*json`.
///
/// # Safety
///
/// `json` is valid for one pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuguard_live_allocations(min_bytes: u64, json: *mut *mut c_char) -> i32 {
    // SAFETY: the caller promises `json` is NULL or valid for a write.
    if !unsafe { clear(json) } {
        return E_INVALID;
    }
    call(|| {
        let all = live_allocations(min_bytes);
        // SAFETY: `json` was checked above.
        unsafe { out_json(json, cuguard_format::api::to_vec(&all)) }
    })
}
