//! The handler of every `submit` row of the driver-entry table: entries that submit device work
//! (kernels, copies, sets, graph launches, stream memory operations, external semaphores, host
//! functions). Each is forwarded and then counted, which is how the pool knows whether any work
//! issued before a free could still touch the freed block ([`crate::pool::fence`]).

use crate::ffi::CUresult;

/// Counts one submission after the driver enqueued it; returns the driver's answer.
#[inline(always)]
pub fn counted(result: CUresult) -> CUresult {
    crate::pool::fence::submitted();
    result
}
