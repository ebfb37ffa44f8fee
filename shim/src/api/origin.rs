//! `cuguard_origin_begin` / `cuguard_origin_end`: where work that other threads do for this one
//! was started. PyTorch runs a backward pass on the autograd engine's own threads, which have no
//! Python frames, while the thread that called `backward()` waits in it; the Python package
//! opens an origin around the engine's run (`cuguard._origin.install_torch`).
//!
//! `begin` captures the calling thread's stack as an allocation would (native and Python
//! frames) and makes it the current origin ([`crate::stack::origin`]: a table of
//! [`crate::stack::origin::SLOTS`] open origins, the most recent one current). Until `end`, an
//! allocation on a thread without Python frames of its own gets a stack that names the origin,
//! and the report gives that stack `origin`: the id of the origin's stack in `stacks[]`
//! (`docs/report.schema.json`). `cuguard` then names the site with the line that started the
//! work (`on the autograd thread: AddmmBackward0::apply (…), backward from train.py:42`).

use crate::stack::{self, origin::OriginError};

use super::{E_FULL, E_INVALID, OK, call};

fn code(e: OriginError) -> i32 {
    match e {
        OriginError::Full => E_FULL,
        OriginError::Unknown => E_INVALID,
    }
}

/// Opens an origin at the calling thread's stack; its token in `*token`.
///
/// # Safety
///
/// `token` is NULL or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuguard_origin_begin(token: *mut u64) -> i32 {
    if token.is_null() {
        return E_INVALID;
    }
    call(|| match stack::origin::begin(stack::capture_origin()) {
        Ok(t) => {
            // SAFETY: checked not NULL; the caller promises it is valid.
            unsafe { token.write(t) };
            OK
        }
        Err(e) => code(e),
    })
}

/// Closes the origin `token` names.
#[unsafe(no_mangle)]
pub extern "C" fn cuguard_origin_end(token: u64) -> i32 {
    call(|| match stack::origin::end(token) {
        Ok(()) => OK,
        Err(e) => code(e),
    })
}
