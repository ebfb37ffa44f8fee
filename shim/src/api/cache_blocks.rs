//! `cuguard_cache_blocks` and `cuguard_cache_block_sites`: whether the shim records a
//! framework's cache blocks with their stacks (PyTorch's tensors, through
//! `crate::hooks::torch_blocks`), and the lines of the live ones. The Python package asks the
//! first before it would turn on PyTorch's own memory history, and the second for the lines of
//! the blocks it finds live at the end of the program and at an out-of-memory.

use std::ffi::c_char;

use cuguard_format::api::{BlockAddresses, BlockSites};

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
    // SAFETY: the caller promises a NUL-terminated string (NULL is refused by `text`).
    let framework = match unsafe { text(framework, 64) } {
        Ok(f) => f,
        Err(code) => return code,
    };
    call(|| {
        if framework != cuguard_format::verdict::PYTORCH {
            return E_INVALID;
        }
        if crate::hooks::torch_blocks::recorded() {
            OK
        } else {
            E_OFF
        }
    })
}

/// The longest document taken, in bytes (about 400,000 addresses).
const MAX_DOCUMENT: usize = 8 << 20;

/// For each address of `json` (`cuguard_format::api::BlockAddresses`), the site of the live
/// block recorded there, in `*out` (`cuguard_format::api::BlockSites`).
///
/// # Safety
///
/// `json` is NULL or a NUL-terminated string; `out` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuguard_cache_block_sites(
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
        let answer = BlockSites {
            sites: sites(&asked.addresses),
        };
        // SAFETY: `out` was checked above.
        unsafe { out_json(out, cuguard_format::api::to_vec(&answer)) }
    })
}

/// The site of the recorded live block at each of `addresses`, named now.
fn sites(addresses: &[u64]) -> Vec<Option<cuguard_format::api::Site>> {
    let stacks = crate::tracker::cache_blocks::stacks_of(addresses);
    let asks: Vec<(u32, &'static str)> = stacks
        .iter()
        .flatten()
        .map(|&s| (s, cuguard_format::MemoryKind::CacheBlock.as_str()))
        .collect();
    let mut named = crate::writer::stacks::named_now(&asks).into_iter();
    stacks
        .iter()
        .map(|s| {
            s.as_ref()?;
            let n = named.next()?;
            (n.site != cuguard_format::api::Site::default()).then_some(n.site)
        })
        .collect()
}
