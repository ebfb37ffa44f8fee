//! `cuguard_cache_blocks` and `cuguard_cache_block_frames`: whether the shim records a
//! framework's cache blocks with their stacks (PyTorch's tensors, through
//! `crate::hooks::torch_blocks`), and the Python frames of the live ones. The Python package
//! asks the first before it would turn on PyTorch's own memory history, and the second for the
//! lines of the blocks it finds live at the end of the program and at an out-of-memory. The
//! frames are the stacks' Python frames as recorded, no native frame named: an out-of-memory
//! observer waits for them (on the H100, naming the native frames as well made a refusal 0.1 s
//! slower, run 42).

use std::ffi::c_char;

use cuguard_format::api::{BlockAddresses, BlockFrames};

use super::{E_INVALID, E_OFF, OK, call, clear, out_json, text};

/// [`OK`] when the shim records `framework`'s (`pytorch`) blocks with their stacks in this
/// process; [`E_OFF`] when it does not (the history off, `CUGUARD_CACHE_BLOCKS=0`, the shim
/// not preloaded); [`E_INVALID`] for another framework.
///
/// # Safety
///
/// `framework` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuguard_cache_blocks(framework: *const c_char) -> i32 {
    // SAFETY: the caller promises a NUL-terminated string or NULL.
    if let Err(code) = unsafe { super::framework_arg(framework) } {
        return code;
    }
    call(|| {
        if crate::hooks::torch_blocks::recorded() {
            OK
        } else {
            E_OFF
        }
    })
}

/// The longest document taken, in bytes (about 400,000 addresses).
const MAX_DOCUMENT: usize = 8 << 20;

/// For each address of `json` (`cuguard_format::api::BlockAddresses`), the Python frames of the
/// live block recorded there, in `*out` (`cuguard_format::api::BlockFrames`).
///
/// # Safety
///
/// `json` is NULL or a NUL-terminated string; `out` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuguard_cache_block_frames(
    json: *const c_char,
    out: *mut *mut c_char,
) -> i32 {
    // SAFETY: the caller promises `out` is NULL or valid for a write.
    if !unsafe { clear(out) } {
        return E_INVALID;
    }
    // SAFETY: the caller promises a NUL-terminated string (NULL is refused by `text`).
    let json = match unsafe { text(json, MAX_DOCUMENT) } {
        Ok(j) => j,
        Err(code) => return code,
    };
    call(|| {
        let Ok(asked) = BlockAddresses::from_json(json) else {
            return E_INVALID;
        };
        let stacks = crate::tracker::cache_blocks::stacks_of(&asked.addresses);
        let answer = if asked.shared {
            // Each distinct stack named once, in the order first met.
            let mut index: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
            let mut ids = Vec::new();
            let of = stacks
                .iter()
                .map(|s| {
                    s.map(|id| {
                        *index.entry(id).or_insert_with(|| {
                            ids.push(id);
                            ids.len() as u32 - 1
                        })
                    })
                })
                .collect();
            BlockFrames {
                frames: Vec::new(),
                stacks: crate::writer::stacks::python_frames_now(&ids),
                of,
            }
        } else {
            let ids: Vec<u32> = stacks.iter().flatten().copied().collect();
            let mut named = crate::writer::stacks::python_frames_now(&ids).into_iter();
            BlockFrames {
                frames: stacks
                    .iter()
                    .map(|s| s.and_then(|_| named.next()))
                    .collect(),
                ..Default::default()
            }
        };
        // SAFETY: `out` was checked above.
        unsafe { out_json(out, cuguard_format::api::to_vec(&answer)) }
    })
}
