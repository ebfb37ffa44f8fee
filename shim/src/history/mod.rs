//! The history, shim side: every allocation and free the shim sees, appended by the allocation
//! path to its thread's ring ([`ring`]) as one fixed-size record, and drained by the cuguard
//! thread into a bounded file beside the report ([`writer`]). The layout is the
//! `cuguard-history` crate's.
//!
//! On unless `CUGUARD_HISTORY=0`; `CUGUARD_HISTORY=SIZE` bounds the files (256 MiB by default).
//! What the allocation path does here: one relaxed load to see whether the history is on, a
//! time-stamp-counter read where the record has none, and [`ring::push`].

pub mod ring;
pub mod writer;

use std::sync::atomic::{AtomicU8, Ordering};

use cuguard_history::{Action, Memory as Mem, Raw, kind};

use crate::tracker::{Memory, NONE, Record};

/// 0: not decided yet; 1: on; 2: off.
static STATE: AtomicU8 = AtomicU8::new(0);

/// Whether the history is recorded in this process.
#[inline]
pub fn on() -> bool {
    match STATE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => decide(),
    }
}

#[cold]
fn decide() -> bool {
    let on = crate::config::get().history_bytes > 0;
    if on {
        writer::first_clock();
    }
    STATE.store(if on { 1 } else { 2 }, Ordering::Relaxed);
    on
}

fn memory(m: Memory) -> Mem {
    match m {
        Memory::Device => Mem::Device,
        Memory::Pitched => Mem::Pitched,
        Memory::Managed => Mem::Managed,
        Memory::Async => Mem::Async,
        Memory::Vmm => Mem::Vmm,
        Memory::HostPinned => Mem::HostPinned,
    }
}

#[inline]
fn context(id: u32) -> u16 {
    if id == NONE {
        u16::MAX
    } else {
        id.min(u32::from(u16::MAX - 1)) as u16
    }
}

#[inline]
fn device(ordinal: i32) -> u8 {
    if ordinal < 0 {
        0
    } else {
        (ordinal + 1).min(255) as u8
    }
}

/// A moment for [`freed`], taken before the memory is given back (0 when the history is off):
/// the free of an address is then always before the next allocation that receives it, whose
/// moment [`allocated`] takes after it was received.
#[inline]
pub fn stamp() -> u64 {
    if on() {
        crate::tracker::counters::order_key()
    } else {
        0
    }
}

/// The program received the allocation `r` at `addr` (from its own pool block when `pooled`).
#[inline]
pub fn allocated(addr: u64, r: &Record, pooled: bool) {
    if !on() {
        return;
    }
    let m = if pooled {
        Mem::PoolBlock
    } else {
        memory(r.memory)
    };
    ring::push(Raw {
        tsc: crate::tracker::counters::order_key(),
        addr,
        size: r.size,
        stack: r.stack,
        context: context(r.context),
        kind: kind(Action::Alloc, m),
        device: device(r.device),
    });
}

/// The program freed the allocation `r` at `addr`, from the moment `tsc` ([`stamp`]).
#[inline]
pub fn freed(addr: u64, r: &Record, tsc: u64) {
    if !on() {
        return;
    }
    ring::push(Raw {
        tsc,
        addr,
        size: 0,
        stack: NONE,
        context: context(r.context),
        kind: kind(Action::Free, memory(r.memory)),
        device: device(r.device),
    });
}

/// An allocation of `size` bytes was refused for lack of memory.
pub fn refused(size: u64, stack: u32, ordinal: i32, tsc: u64) {
    if !on() {
        return;
    }
    ring::push(Raw {
        tsc,
        addr: 0,
        size,
        stack,
        context: u16::MAX,
        kind: kind(Action::Oom, Mem::Device),
        device: device(ordinal),
    });
}

/// The context `id` was destroyed or reset: its live memory went with it.
pub fn context_released(id: u32, ordinal: i32) {
    if !on() {
        return;
    }
    ring::push(Raw {
        tsc: crate::tracker::counters::order_key(),
        addr: u64::from(id),
        size: 0,
        stack: NONE,
        context: context(id),
        kind: kind(Action::ContextRelease, Mem::Device),
        device: device(ordinal),
    });
}

/// The pool took a chunk of `size` bytes at `base` from the driver (`taken`), or gave it back.
pub fn chunk(taken: bool, base: u64, size: u64, context_handle: u64, ordinal: i32) {
    if !on() {
        return;
    }
    let ctx = crate::tracker::if_any()
        .and_then(|t| t.contexts.lookup(context_handle))
        .map_or(NONE, |(id, _)| id);
    let action = if taken {
        Action::SegmentAlloc
    } else {
        Action::SegmentFree
    };
    ring::push(Raw {
        tsc: crate::tracker::counters::order_key(),
        addr: base,
        size: if taken { size } else { 0 },
        stack: NONE,
        context: context(ctx),
        kind: kind(action, Mem::Device),
        device: device(ordinal),
    });
}

/// In the child of a fork: its history is its own, in its own file.
pub fn reset_after_fork() {
    ring::reset_after_fork();
    writer::reset_after_fork();
}
