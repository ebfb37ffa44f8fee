//! The real driver's entries, typed: one function per form of [`super::entry_table`], `None`
//! when the driver is not loaded or lacks the entry (its address from [`super::loader`]); and
//! the calling thread's current context, as the real driver has it.
#![allow(non_snake_case, dead_code)]

use super::entry_table::{Entry, sig};
use super::loader::pointer;
use crate::ffi::*;

/// One typed accessor per form of the table.
macro_rules! define_real {
    (() $( $role:ident [$($form:ident),+ $(,)?] fn $sig:tt; )*) => {
        $($(
            #[inline]
            pub fn $form() -> Option<sig::$form> {
                let p = pointer(Entry::$form);
                // SAFETY: p is the driver's export of exactly this name, whose C signature is
                // the one the table declares for it.
                (p != 0).then(|| unsafe { std::mem::transmute::<usize, sig::$form>(p) })
            }
        )+)*
    };
}

crate::driver::entry_table::for_each_entry!(define_real);

/// The calling thread's current context, as the real driver has it.
#[inline]
pub fn current_context() -> Option<u64> {
    let get = cuCtxGetCurrent()?;
    let mut ctx: CUcontext = std::ptr::null_mut();
    // SAFETY: valid out-parameter.
    (unsafe { get(&mut ctx) } == CUDA_SUCCESS && !ctx.is_null()).then_some(ctx as u64)
}
