//! Process-wide state that lives in a leaked box behind an atomic pointer: created on first use
//! (never at load), never freed, and replaced wholesale in a forked child without touching the
//! old value's locks (which a thread that does not exist in the child may hold). And [`lock`],
//! for the shim's mutexes.

use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, Ordering};

/// Locks a mutex, taking it back from a thread that panicked while holding it (the shim keeps
/// plain records there, consistent after each operation).
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The value in `slot`, created with `make` on first use. Racing first uses agree on one value.
pub fn get_or_create<T>(slot: &AtomicPtr<T>, make: impl FnOnce() -> T) -> &'static T {
    let p = slot.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: a non-null pointer in a slot is a leaked box, never freed.
        return unsafe { &*p };
    }
    let fresh = Box::into_raw(Box::new(make()));
    match slot.compare_exchange(
        std::ptr::null_mut(),
        fresh,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        // SAFETY: we just published our own leaked box.
        Ok(_) => unsafe { &*fresh },
        Err(existing) => {
            // SAFETY: fresh was never published, so it is ours to free; existing is a leaked
            // box that lives forever.
            unsafe {
                drop(Box::from_raw(fresh));
                &*existing
            }
        }
    }
}

/// The value in `slot` if it was created; never creates it.
pub fn get<T>(slot: &AtomicPtr<T>) -> Option<&'static T> {
    let p = slot.load(Ordering::Acquire);
    // SAFETY: as in `get_or_create`.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Puts a fresh value in `slot`, leaking the old one (for the child of a fork).
pub fn replace<T>(slot: &AtomicPtr<T>, value: T) {
    slot.store(Box::into_raw(Box::new(value)), Ordering::Release);
}
