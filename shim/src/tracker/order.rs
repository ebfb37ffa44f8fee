//! The raw order key of allocations and events ([`order_key`]), below everything else of the
//! tracker: reports renumber the keys densely ([`super::dense_order`]).

/// A raw order key for allocations and events: the time-stamp counter where there is one, else
/// a shared counter. Reports renumber these densely (ties broken by thread id).
#[inline]
pub fn order_key() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        NEXT.fetch_add(1, Relaxed)
    }
}
