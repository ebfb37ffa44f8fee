//! The in-process C ABI: what a program under the shim can ask cuguard about itself. The Python
//! package (`src/python/cuguard/`) calls it through ctypes; any language can. Documented for
//! users in `docs/python.md` ("The C ABI").
//!
//! # The ABI, version 1 ([`ABI_VERSION`])
//!
//! ```c
//! uint32_t    cuguard_api_version(void);        // 1
//! const char *cuguard_version(void);            // the shim's version, "0.1.0" (static)
//! int32_t     cuguard_status(void);             // 0 while the shim tracks, else why not (< 0)
//! const char *cuguard_error_name(int32_t code); // "CUGUARD_E_OFF: …" (static; never NULL)
//!
//! struct cuguard_device_live {                  // 48 bytes, 8-aligned
//!     int32_t  device;                          // ordinal
//!     uint32_t _reserved;                       // 0
//!     uint64_t live_bytes;                      // the program's live device memory
//!     uint64_t peak_bytes;                      // its peak so far
//!     uint64_t pool_reserved_bytes;             // what cuguard's pool holds from the driver
//!     uint64_t live_allocations;                // device allocations not freed
//!     uint64_t allocated_bytes;                 // bytes allocated so far, in all
//! };
//! int32_t cuguard_live(struct cuguard_device_live *out, uint32_t cap, uint32_t *count);
//! int32_t cuguard_snapshot(const char *path, char **json);
//! int32_t cuguard_track_begin(uint64_t *token);
//! int32_t cuguard_track_end(uint64_t token, char **json);
//! int32_t cuguard_live_allocations(uint64_t min_bytes, char **json);
//! int32_t cuguard_label(const char *key, const char *value);
//! int32_t cuguard_end_expect(void);
//! int32_t cuguard_end_begin(const char *how, const char *exception, char **json);
//! int32_t cuguard_end_classify(const char *json);
//! int32_t cuguard_origin_begin(uint64_t *token);
//! int32_t cuguard_origin_end(uint64_t token);
//! int32_t cuguard_file_alias(const char *file, const char *display);
//! int32_t cuguard_phase_begin(const char *name);
//! int32_t cuguard_phase_end(void);
//! int32_t cuguard_tag_push(const char *name);
//! int32_t cuguard_tag_pop(void);
//! int32_t cuguard_annotate(uint64_t ptr, const char *name);
//! int32_t cuguard_framework_oom(const char *json);
//! int32_t cuguard_framework_watch(const char *framework);
//! int32_t cuguard_cache_blocks(const char *framework);
//! int32_t cuguard_cache_block_frames(const char *json, char **json_out);
//! void    cuguard_free(char *p);
//! ```
//!
//! | function | what it does | cost |
//! |---|---|---|
//! | `cuguard_api_version` | [`ABI_VERSION`]; a caller built for another refuses to go on | none |
//! | `cuguard_version` | the shim's crate version; the Python package refuses another | none |
//! | `cuguard_status` | [`OK`] while the shim tracks; [`E_OFF`], [`E_BROKEN`] or [`E_ENDING`] | one load |
//! | `cuguard_error_name` | a code's name and meaning, for messages | none |
//! | `cuguard_live` | per device that allocated, in ordinal order: writes `min(cap, n)` entries to `out` (which may be NULL when `cap` is 0) and `n` to `*count` ([`live`]) | sums the per-thread counters: no lock the allocation path takes, no JSON; microseconds |
//! | `cuguard_snapshot` | the report as it stands now (the shim's report format, `docs/report.schema.json`; `reason` `request`, `complete` false) in `*json`; also written to `path` when it is not NULL ([`snapshot`]) | a report: milliseconds to seconds (names frames within `CUGUARD_SYMBOLIZE_SECS`) |
//! | `cuguard_track_begin` | opens a window over every thread of the process; its token in `*token` ([`track`]) | a few atomics |
//! | `cuguard_track_end` | closes it; what it saw, as JSON in `*json` (`cuguard_format::api::Window`: `peak_bytes`, `allocated_bytes`, `leaked_bytes`, `leaks`) | walks the live allocations; names the leaks' sites only |
//! | `cuguard_live_allocations` | the live allocations of at least `min_bytes`, largest first, with site and owner (`cuguard_format::api::LiveAllocations`) | walks the live allocations; names their sites |
//! | `cuguard_label` | sets `process.labels[key] = value` in the reports written from now on ([`label`]) | a short lock |
//! | `cuguard_end_expect` | cuguard's Python bootstrap will mark the end of the program's code ([`end`]) | one store |
//! | `cuguard_end_begin` | marks the end now (`how`: `finished`, `raised`, `interrupted`, `kernel_shutdown`; `exception`: NULL or the type's name) and copies every live allocation's record; they are in `*json` as `cuguard_live_allocations` gives them | walks the live allocations; names their sites |
//! | `cuguard_end_classify` | what holds each of them (`cuguard_format::Classification`), for the report's `python` section | parses the JSON |
//! | `cuguard_origin_begin` | captures the calling thread's stack (native and Python) and makes it the *origin* of allocations on threads without Python frames (PyTorch's autograd threads) until `cuguard_origin_end`; its token in `*token` ([`origin`]; 16 open at once, the most recent one current) | one stack capture and a short lock |
//! | `cuguard_origin_end` | closes it; the most recent other open origin is current again | a short lock |
//! | `cuguard_file_alias` | names source file `file` `display` for people in the reports written from now on: Python frames in it get `display` (IPython's `Cell In[2]`), shown `Cell In[2], line 5` ([`alias`]; 4096 files, a file up to 4096 bytes, a name up to 256) | a short lock |
//! | `cuguard_phase_begin` | begins a phase named `name` (at most 256 bytes) on the calling thread, recorded in the history as an NVTX range is; phases nest on their thread ([`phases`]) | a name look-up (a short lock) and one record |
//! | `cuguard_phase_end` | ends the calling thread's innermost phase begun by `cuguard_phase_begin` | one record |
//! | `cuguard_tag_push` | opens tag `name` (1 to 256 bytes) on the calling thread: every allocation it makes until the matching `cuguard_tag_pop` carries it, in the reports (`leaks[].tag`) and the history; tags nest, the innermost names ([`tags`]; 16 kept open, deeper ones counted) | a name look-up (the thread's recent names, else a short lock) |
//! | `cuguard_tag_pop` | closes the calling thread's innermost tag ([`E_INVALID`] when none is open) | one thread-local write |
//! | `cuguard_annotate` | names the live allocation at `ptr`, or the one holding it, `name` from now on ([`E_NOT_FOUND`] when no live allocation the shim tracks holds it) | a look-up by address; an inner pointer walks every live allocation |
//! | `cuguard_framework_oom` | a framework's allocator refused a request (`cuguard_format::api::FrameworkOom`: PyTorch's, from its out-of-memory observer, CuPy's and JAX's, as their errors are made; the Python package tells them): an out-of-memory card like the driver's, with the framework's cache's idle memory, pieces and pinning lines, asked from the calling thread's stack ([`framework_oom`]; [`E_INVALID`] for a document that does not read) | a stack capture, parsing the JSON, the card's figures (the driver's pools asked) |
//! | `cuguard_framework_watch` | a framework's out-of-memory observer is registered (`pytorch`, `cupy`): the one stderr line at a driver's refusal then waits for the framework's card, which explains a refusal inside its allocator, or for the final report ([`framework_oom`]) | one store |
//! | `cuguard_cache_blocks` | whether the shim records `framework`'s (`pytorch`) cache blocks with their stacks in this process: [`OK`] when it does (its hook receives PyTorch's blocks, the history is on, `CUGUARD_CACHE_BLOCKS` is not 0), [`E_OFF`] when not; the package then leaves PyTorch's own memory history off ([`cache_blocks`]) | a symbol look-up |
//! | `cuguard_cache_block_frames` | for each address of `json` (`{"addresses": [...]}`, `cuguard_format::api::BlockAddresses`), the Python frames (innermost first: `file`, `line`, `function`) of the stack that made the live cache block recorded there, or null, in order (`{"frames": [...]}`, `cuguard_format::api::BlockFrames`) in `*json_out`: the lines of PyTorch's live blocks at the end and at an out-of-memory | a look-up per address; no native frame is named |
//! | `cuguard_free` | frees a string this ABI returned; NULL is ignored | — |
//!
//! Every function but the first four and `cuguard_free` returns [`OK`] (0) or a negative code:
//!
//! | code | name | meaning |
//! |---:|---|---|
//! | 0 | `CUGUARD_OK` | done |
//! | -1 | `CUGUARD_E_INVALID` | a NULL, non-UTF-8 or too long argument, or a token that names no open window or origin |
//! | -2 | `CUGUARD_E_OFF` | the shim is loaded but does not track (`CUGUARD_DISABLE=1`) |
//! | -3 | `CUGUARD_E_BROKEN` | the shim's own code failed earlier; it forwards only now |
//! | -4 | `CUGUARD_E_ENDING` | the process is ending: the final report is being written, or written |
//! | -5 | `CUGUARD_E_FORKED` | the window was opened before a `fork`, in the parent |
//! | -6 | `CUGUARD_E_FULL` | no room: 64 windows open at once, 256 label keys, 16 origins, or 4096 file aliases |
//! | -7 | `CUGUARD_E_INTERNAL` | the shim's own code failed in this call (it is off from now on) |
//! | -8 | `CUGUARD_E_IO` | `path` could not be written; `errno` says why |
//! | -9 | `CUGUARD_E_REENTERED` | called from inside the shim (a hook), or while the thread is being torn down |
//! | -10 | `CUGUARD_E_NO_HISTORY` | the history is off (`CUGUARD_HISTORY=0`): phases are not recorded |
//! | -11 | `CUGUARD_E_NOT_FOUND` | no live allocation the shim tracks holds the pointer |
//!
//! On any code but [`OK`], `*json` is set to NULL. Strings are NUL-terminated UTF-8, owned by
//! the caller, freed with `cuguard_free`.
//!
//! # Promises
//!
//! - Never a panic across the ABI: each call runs under [`crate::guard::shield`].
//! - Never a deadlock: nothing here waits on a lock the allocation path holds for long; a
//!   snapshot waits for the writer's turn ([`crate::lifecycle::with_writer_turn`]) as the
//!   shim's own interim reports do.
//! - Unused, it costs nothing: no thread, no allocation, nothing at load. The only thing the
//!   allocation path does for it is one relaxed load for the windows
//!   ([`crate::tracker::windows`]).
//! - Safe from any thread, in a forked child (which starts over, as its report does), and
//!   while the program exits until the final report is claimed ([`E_ENDING`] after).

pub mod alias;
pub mod cache_blocks;
pub mod end;
pub mod framework_oom;
pub mod label;
pub mod live;
pub mod origin;
pub mod phases;
pub mod snapshot;
pub mod tags;
pub mod track;

use std::ffi::{CStr, c_char};

use crate::guard::Guard;
use crate::phase::{self, Phase};

/// The ABI's version: bumped on any change a caller built against it would notice.
pub const ABI_VERSION: u32 = 1;

/// Done.
pub const OK: i32 = 0;
/// A NULL, non-UTF-8 or too long argument, or a token naming no open window.
pub const E_INVALID: i32 = -1;
/// The shim is loaded but does not track (`CUGUARD_DISABLE=1`).
pub const E_OFF: i32 = -2;
/// The shim's own code failed earlier; it forwards only.
pub const E_BROKEN: i32 = -3;
/// The process is ending: the final report is claimed.
pub const E_ENDING: i32 = -4;
/// The window was opened before a fork.
pub const E_FORKED: i32 = -5;
/// No room: too many windows open, or too many label keys.
pub const E_FULL: i32 = -6;
/// The shim's own code failed in this call.
pub const E_INTERNAL: i32 = -7;
/// The path could not be written (`errno` says why).
pub const E_IO: i32 = -8;
/// Called from inside the shim, or while the thread is torn down.
pub const E_REENTERED: i32 = -9;
/// The history is off: phases are not recorded.
pub const E_NO_HISTORY: i32 = -10;
/// No live allocation the shim tracks holds the pointer (`cuguard_annotate`).
pub const E_NOT_FOUND: i32 = -11;

/// The ABI's version ([`ABI_VERSION`]).
#[unsafe(no_mangle)]
pub extern "C" fn cuguard_api_version() -> u32 {
    ABI_VERSION
}

/// The shim's version, a static NUL-terminated string.
#[unsafe(no_mangle)]
pub extern "C" fn cuguard_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// [`OK`] while the shim tracks; else why not.
#[unsafe(no_mangle)]
pub extern "C" fn cuguard_status() -> i32 {
    match state() {
        Ok(()) => OK,
        Err(code) => code,
    }
}

/// A code's name and meaning: a static NUL-terminated string, never NULL.
#[unsafe(no_mangle)]
pub extern "C" fn cuguard_error_name(code: i32) -> *const c_char {
    let s: &'static CStr = match code {
        OK => c"CUGUARD_OK: done",
        E_INVALID => {
            c"CUGUARD_E_INVALID: a NULL, non-UTF-8 or too long argument, or a token that names no open window or origin"
        }
        E_OFF => c"CUGUARD_E_OFF: the shim is loaded but does not track (CUGUARD_DISABLE=1)",
        E_BROKEN => {
            c"CUGUARD_E_BROKEN: the shim's own code failed earlier and turned tracking off (see its line on stderr)"
        }
        E_ENDING => c"CUGUARD_E_ENDING: the process is ending; its final report is being written",
        E_FORKED => c"CUGUARD_E_FORKED: the window was opened before a fork, in the parent process",
        E_FULL => {
            c"CUGUARD_E_FULL: no room: 64 windows open at once, 256 label keys, 16 origins, or 4096 file aliases"
        }
        E_INTERNAL => {
            c"CUGUARD_E_INTERNAL: the shim's own code failed in this call; tracking is off from now on"
        }
        E_IO => c"CUGUARD_E_IO: the file could not be written (errno says why)",
        E_REENTERED => {
            c"CUGUARD_E_REENTERED: called from inside the shim, or while the thread is being torn down"
        }
        E_NO_HISTORY => {
            c"CUGUARD_E_NO_HISTORY: the history is off (CUGUARD_HISTORY=0): phases are not recorded"
        }
        E_NOT_FOUND => {
            c"CUGUARD_E_NOT_FOUND: no live allocation cuguard tracks holds that pointer"
        }
        _ => c"unknown cuguard error code",
    };
    s.as_ptr()
}

/// Frees a string this ABI returned; NULL is ignored.
///
/// # Safety
///
/// `p` is NULL or a pointer this ABI returned and that was not freed yet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuguard_free(p: *mut c_char) {
    if p.is_null() {
        return;
    }
    // SAFETY: the caller passes a pointer made by `CString::into_raw` in `out_json`, once.
    drop(unsafe { std::ffi::CString::from_raw(p) });
}

/// Whether the shim tracks now, or the code saying why not.
fn state() -> Result<(), i32> {
    match phase::get() {
        Phase::Inert => return Err(E_OFF),
        Phase::Broken => return Err(E_BROKEN),
        Phase::Writing | Phase::Final => return Err(E_ENDING),
        Phase::Loading | Phase::Armed | Phase::ForkedChild => {}
    }
    if phase::unloading() {
        return Err(E_ENDING);
    }
    if crate::config::get().no_tracking {
        return Err(E_OFF);
    }
    Ok(())
}

/// Runs one call of the ABI: checks that the shim tracks, enters it (so that nothing the call
/// does is tracked) and runs `f` under the panic shield. Returns `f`'s code, or why it did not
/// run.
fn call(f: impl FnOnce() -> i32) -> i32 {
    if let Err(code) = state() {
        return code;
    }
    crate::guard::shield(E_INTERNAL, || {
        crate::lifecycle::first_use();
        let Some(_inside) = Guard::enter() else {
            return E_REENTERED;
        };
        f()
    })
}

/// A C string argument as UTF-8 of at most `max` bytes.
///
/// # Safety
///
/// `p` is NULL or points to a NUL-terminated string.
unsafe fn text<'a>(p: *const c_char, max: usize) -> Result<&'a str, i32> {
    if p.is_null() {
        return Err(E_INVALID);
    }
    // SAFETY: the caller promises a NUL-terminated string; the length is bounded below before
    // anything is copied.
    let c = unsafe { CStr::from_ptr(p) };
    let s = c.to_str().map_err(|_| E_INVALID)?;
    if s.len() > max {
        return Err(E_INVALID);
    }
    Ok(s)
}

/// Hands `bytes` (JSON, without NUL) to the caller through `out`.
///
/// # Safety
///
/// `out` is valid for one pointer write.
unsafe fn out_json(out: *mut *mut c_char, bytes: Vec<u8>) -> i32 {
    // JSON has no NUL byte; one would only cut the string short.
    let Ok(c) = std::ffi::CString::new(bytes) else {
        return E_INTERNAL;
    };
    // SAFETY: the caller checked `out` is not NULL; it is valid for a write.
    unsafe { *out = c.into_raw() };
    OK
}

/// A framework's name as the ABI takes it: `pytorch`, `cupy` or `jax`, those whose allocators
/// cuguard reads ([`cuguard_format::frameworks`]; [`E_INVALID`] for another, a NULL or a name
/// that does not read).
///
/// # Safety
///
/// `p` is NULL or a NUL-terminated string.
unsafe fn framework_arg(p: *const c_char) -> Result<(), i32> {
    // SAFETY: the caller's promise, passed on (NULL is refused by `text`).
    let name = unsafe { text(p, 64) }?;
    if cuguard_format::frameworks::named(name).is_some() {
        Ok(())
    } else {
        Err(E_INVALID)
    }
}

/// Sets `*out` to NULL when `out` is not NULL (so that every failure leaves it NULL); returns
/// whether it was not NULL.
///
/// # Safety
///
/// `out` is NULL or valid for one pointer write.
unsafe fn clear(out: *mut *mut c_char) -> bool {
    if out.is_null() {
        return false;
    }
    // SAFETY: not NULL, and the caller promises it is valid for a write.
    unsafe { *out = std::ptr::null_mut() };
    true
}
