//! `cuguard_tag_push`, `cuguard_tag_pop` and `cuguard_annotate`: the program's names for its
//! memory (Python's `with cuguard.tag("kv_cache"):` and `cuguard.annotate`), on any backend:
//! every allocation a thread makes between a push and its pop carries the tag, in the report
//! (`leaks[].tag`) and the history ([`crate::tracker::tags`]).

use std::ffi::c_char;

use crate::recorder::names;
use crate::tracker::tags;

use super::{E_INVALID, E_NOT_FOUND, OK, call, text};

/// The longest tag taken, in bytes (longer ones are refused, not cut).
pub const MAX_TAG_BYTES: usize = names::MAX_NAME_BYTES;

/// Opens tag `name` on the calling thread: its allocations carry it until the matching
/// [`cuguard_tag_pop`].
///
/// # Safety
///
/// `name` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuguard_tag_push(name: *const c_char) -> i32 {
    // SAFETY: the caller promises a NUL-terminated string (NULL is refused).
    let Ok(name) = (unsafe { text(name, MAX_TAG_BYTES) }) else {
        return E_INVALID;
    };
    if name.is_empty() {
        return E_INVALID;
    }
    call(|| {
        tags::push(names::intern(name.as_bytes()));
        OK
    })
}

/// Closes the calling thread's innermost tag ([`E_INVALID`] when none is open).
#[unsafe(no_mangle)]
pub extern "C" fn cuguard_tag_pop() -> i32 {
    call(|| if tags::pop() { OK } else { E_INVALID })
}

/// Names the live allocation at `ptr` (or the one that holds it) `name`, from now on in the
/// reports and from this moment in the history; [`E_NOT_FOUND`] when no live allocation the
/// shim tracks holds `ptr`.
///
/// # Safety
///
/// `name` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuguard_annotate(ptr: u64, name: *const c_char) -> i32 {
    // SAFETY: the caller promises a NUL-terminated string (NULL is refused).
    let Ok(name) = (unsafe { text(name, MAX_TAG_BYTES) }) else {
        return E_INVALID;
    };
    if name.is_empty() {
        return E_INVALID;
    }
    call(|| {
        let Some(t) = crate::tracker::if_any() else {
            return E_NOT_FOUND;
        };
        let Some((addr, record)) = t
            .live
            .holding(ptr)
            .or_else(|| crate::serving::registry::holding(ptr))
        else {
            return E_NOT_FOUND;
        };
        tags::annotate(addr, &record, names::intern(name.as_bytes()));
        OK
    })
}
