//! How the program reached the driver: calls through the shim's exported symbols (counted per
//! thread in [`super::counters`]) and the functions each lookup door handed out (the report's
//! `doors`).

use std::sync::atomic::{AtomicU64, Ordering};

/// A lookup door.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Door {
    Dlsym,
    GetProcAddress,
}

/// How many functions each lookup door handed out, by [`Door`].
static HANDED_OUT: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// One function handed out by `door`.
pub fn handed_out(door: Door) {
    HANDED_OUT[door as usize].fetch_add(1, Ordering::Relaxed);
}

/// What each door let through: (calls of the exported symbols, functions handed out by `dlsym`,
/// functions handed out by `cuGetProcAddress`).
pub fn counts() -> (u64, u64, u64) {
    (
        super::counters::exported_calls(),
        HANDED_OUT[Door::Dlsym as usize].load(Ordering::Relaxed),
        HANDED_OUT[Door::GetProcAddress as usize].load(Ordering::Relaxed),
    )
}
