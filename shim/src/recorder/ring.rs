//! The history's per-thread buffers, shim side: the allocation path appends one fixed-size
//! record to its thread's ring and nothing else; the cuguard thread drains every ring.
//!
//! - One ring per thread, single producer (its thread) and single consumer (whoever holds the
//!   ring's drain lock: the cuguard thread, or the thread itself as it exits). The producer
//!   writes the slot, then publishes `head` (Release); the consumer reads up to `head` (Acquire)
//!   and then publishes `tail`. No lock and no locked instruction on the allocation path.
//! - A full ring is drained by its own thread before the event goes in (back-pressure, as
//!   memray's writer does): the thread asks the history's writer to drain every ring now
//!   ([`set_make_room`]), waiting for the drain in progress if there is one. Only when that
//!   cannot be (the history is not started, has ended or stopped, or its writer stays busy past
//!   its bound) is the event dropped, and counted with the first and last moment of the drop
//!   ([`Ring::lost`]): never silent.
//! - Rings are leaked and reused: a thread that exits moves what its ring holds to the orphans
//!   list ([`take_orphans`]) and frees the ring for the next thread, so thousands of
//!   short-lived threads use as many rings as ever ran at once.
//! - A thread whose thread-local storage is already gone (it is exiting) appends to the orphans
//!   list directly, under its lock.
//!
//! - A slot is 32 bytes ([`Slot`]: two to a cache line); an event on a stream other than the
//!   default takes a second slot right after it, holding the stream ([`STREAM_MARK`]), written
//!   with it and published with it, so a drain never splits the two.
//!
//! Fork: the child keeps only its own thread's ring, emptied (what it held is the parent's).

use std::cell::{Cell, RefCell, UnsafeCell};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use cuguard_history::Raw;

use crate::process::global::lock;

/// Events a ring holds: 16,384 (512 KiB, written once when the thread first records, so that
/// no page fault lands on the allocation path later), drained every 50 ms, more often while
/// busy (down to every millisecond: 16 million events a second from one thread).
pub const CAP: usize = 1 << 14;

/// Events kept for exited threads between two drains before more are counted lost.
const MAX_ORPHANS: usize = 1 << 20;

/// One event as a ring holds it: [`Raw`] without its stream, 32 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
struct Slot {
    tsc: u64,
    addr: u64,
    size: u64,
    stack: u32,
    context: u16,
    kind: u8,
    device: u8,
}

/// The kind of a slot that holds the stream (in `addr`) of the event in the slot before it: no
/// action's (actions are 1 to 8).
const STREAM_MARK: u8 = 0x0f;

impl Slot {
    fn of(r: &Raw) -> Slot {
        Slot {
            tsc: r.tsc,
            addr: r.addr,
            size: r.size,
            stack: r.stack,
            context: r.context,
            kind: r.kind,
            device: r.device,
        }
    }

    fn raw(&self) -> Raw {
        Raw {
            tsc: self.tsc,
            addr: self.addr,
            size: self.size,
            stack: self.stack,
            context: self.context,
            kind: self.kind,
            device: self.device,
            stream: 0,
        }
    }
}

/// The events of slots read in order: a stream mark gives its stream to the event before it.
fn events(slots: impl Iterator<Item = Slot>) -> Vec<Raw> {
    let mut out: Vec<Raw> = Vec::new();
    for s in slots {
        match (s.kind, out.last_mut()) {
            (STREAM_MARK, Some(last)) => last.stream = s.addr,
            (STREAM_MARK, None) => {}
            _ => out.push(s.raw()),
        }
    }
    out
}

/// One thread's ring.
pub struct Ring {
    /// Events written (producer).
    head: AtomicU64,
    /// Events read (consumer).
    tail: AtomicU64,
    /// The thread the events are of (set when a thread takes the ring).
    thread: AtomicU32,
    /// Held by whoever drains.
    draining: AtomicBool,
    /// Events dropped in all (producer), those the consumer has reported, and the moments of
    /// the first and last drop since then.
    lost: AtomicU64,
    lost_seen: AtomicU64,
    lost_first: AtomicU64,
    lost_last: AtomicU64,
    slots: Box<[UnsafeCell<Slot>]>,
}

// SAFETY: a slot is written only by the producer before it publishes `head`, and read only by
// the one consumer (under `draining`) for indexes below the published `head` and at or above
// `tail`; the producer never writes a slot the consumer may still read (it stops at CAP ahead
// of the published `tail`).
unsafe impl Sync for Ring {}

impl Ring {
    fn new() -> Ring {
        Ring {
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            thread: AtomicU32::new(0),
            draining: AtomicBool::new(false),
            lost: AtomicU64::new(0),
            lost_seen: AtomicU64::new(0),
            lost_first: AtomicU64::new(0),
            lost_last: AtomicU64::new(0),
            slots: zeroed_slots(),
        }
    }

    /// Whether the ring has room for one more event (and its stream's slot).
    pub fn has_room(&self) -> bool {
        self.head.load(Ordering::Relaxed) - self.tail.load(Ordering::Acquire) < CAP as u64 - 1
    }

    /// Appends one event (the producer only): one slot, two on a stream other than the default.
    #[inline]
    fn push(&self, raw: Raw) {
        let head = self.head.load(Ordering::Relaxed);
        let need = 1 + u64::from(raw.stream != 0);
        if head - self.tail.load(Ordering::Acquire) + need > CAP as u64 && !self.make_room() {
            let lost = self.lost.load(Ordering::Relaxed);
            if lost == self.lost_seen.load(Ordering::Relaxed) {
                self.lost_first.store(raw.tsc, Ordering::Relaxed);
            }
            self.lost_last.store(raw.tsc, Ordering::Relaxed);
            self.lost.store(lost + 1, Ordering::Release);
            return;
        }
        // SAFETY: see the `Sync` impl: this slot is the producer's until `head` passes it.
        unsafe { *self.slots[head as usize & (CAP - 1)].get() = Slot::of(&raw) };
        if raw.stream == 0 {
            self.head.store(head + 1, Ordering::Release);
            return;
        }
        let mark = Slot {
            addr: raw.stream,
            kind: STREAM_MARK,
            ..Slot::default()
        };
        // SAFETY: as above; there was room for two slots.
        unsafe { *self.slots[(head + 1) as usize & (CAP - 1)].get() = mark };
        self.head.store(head + 2, Ordering::Release);
    }

    /// The ring is full: has the history's writer drain it now (see the module doc); whether it
    /// has room after.
    #[cold]
    #[inline(never)]
    fn make_room(&self) -> bool {
        let Some(make_room) = MAKE_ROOM.get() else {
            return false;
        };
        make_room(self);
        self.has_room()
    }

    /// Hands what the ring holds to `f` (its thread, then the events, oldest first) and what it
    /// dropped since the last drain to `lost` (count, first and last moment); false when
    /// another consumer is at it.
    pub fn drain(
        &self,
        f: &mut dyn FnMut(u32, &[Raw]),
        lost: &mut dyn FnMut(u64, u64, u64),
    ) -> bool {
        if self.draining.swap(true, Ordering::Acquire) {
            return false;
        }
        let tail = self.tail.load(Ordering::Relaxed);
        let head = self.head.load(Ordering::Acquire);
        let thread = self.thread.load(Ordering::Relaxed);
        if head > tail {
            // SAFETY: see the `Sync` impl: published, not yet consumed.
            let batch =
                events((tail..head).map(|i| unsafe { *self.slots[i as usize & (CAP - 1)].get() }));
            self.tail.store(head, Ordering::Release);
            f(thread, &batch);
        }
        let total = self.lost.load(Ordering::Acquire);
        let seen = self.lost_seen.load(Ordering::Relaxed);
        if total > seen {
            lost(
                total - seen,
                self.lost_first.load(Ordering::Relaxed),
                self.lost_last.load(Ordering::Relaxed),
            );
            self.lost_seen.store(total, Ordering::Relaxed);
        }
        self.draining.store(false, Ordering::Release);
        true
    }
}

/// The slots of a ring, zeroed and every page written now (the first event of a thread pays
/// for them, not every 128th event after it).
fn zeroed_slots() -> Box<[UnsafeCell<Slot>]> {
    let layout = std::alloc::Layout::array::<UnsafeCell<Slot>>(CAP).expect("a ring's layout");
    // SAFETY: the layout is non-zero in size; a null return is handled.
    let p = unsafe { std::alloc::alloc_zeroed(layout) } as *mut UnsafeCell<Slot>;
    if p.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    // SAFETY: p holds CAP zeroed slots, allocated with the global allocator and this layout; an
    // all-zero `Slot` (plain integers) is a valid value.
    let slots: Box<[UnsafeCell<Slot>]> =
        unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, CAP)) };
    // Fresh pages from the kernel are mapped at their first write: write each now.
    for s in slots.iter().step_by(4096 / std::mem::size_of::<Slot>()) {
        // SAFETY: the ring is not shared yet.
        unsafe { std::ptr::write_volatile(s.get(), Slot::default()) };
    }
    slots
}

/// What drains a full ring now (the history's writer), once the history's thread started.
static MAKE_ROOM: std::sync::OnceLock<fn(&Ring)> = std::sync::OnceLock::new();

/// Sets what a thread whose ring is full calls to have it drained (the history's writer).
pub fn set_make_room(f: fn(&Ring)) {
    let _ = MAKE_ROOM.set(f);
}

/// Every ring (in use and free), and the free ones to reuse.
struct Registry {
    all: Vec<&'static Ring>,
    free: Vec<&'static Ring>,
    /// Events of exited threads not yet drained, and how many did not fit.
    orphans: Vec<(u32, Raw)>,
    orphans_lost: u64,
}

static REGISTRY: AtomicPtr<Mutex<Registry>> = AtomicPtr::new(std::ptr::null_mut());

fn registry() -> &'static Mutex<Registry> {
    crate::process::global::get_or_create(&REGISTRY, || {
        Mutex::new(Registry {
            all: Vec::new(),
            free: Vec::new(),
            orphans: Vec::new(),
            orphans_lost: 0,
        })
    })
}

/// Gives the thread's ring back when the thread exits, with what it holds moved to the orphans.
struct Owner(&'static Ring);

impl Drop for Owner {
    fn drop(&mut self) {
        let ring = self.0;
        let mut held: Vec<(u32, Raw)> = Vec::new();
        let mut lost = 0u64;
        // The cuguard thread may be draining it right now: wait for it (it takes microseconds).
        for _ in 0..100_000 {
            if ring.drain(
                &mut |thread, events| held.extend(events.iter().map(|e| (thread, *e))),
                &mut |n, _, _| lost += n,
            ) {
                break;
            }
            std::hint::spin_loop();
        }
        let _ = RING.try_with(|r| r.set(std::ptr::null()));
        let mut r = lock(registry());
        let room = MAX_ORPHANS.saturating_sub(r.orphans.len());
        r.orphans_lost += lost + held.len().saturating_sub(room) as u64;
        held.truncate(room);
        r.orphans.extend(held);
        r.free.push(ring);
    }
}

thread_local! {
    static RING: Cell<*const Ring> = const { Cell::new(std::ptr::null()) };
    static OWNER: RefCell<Option<Owner>> = const { RefCell::new(None) };
}

/// Appends `raw` to the calling thread's ring (taking one on its first event).
#[inline(always)]
pub fn push(raw: Raw) {
    match RING.try_with(|r| r.get()) {
        Ok(p) if !p.is_null() => {
            // SAFETY: rings are leaked and never freed.
            unsafe { &*p }.push(raw)
        }
        Ok(_) => match take_ring() {
            Some(ring) => ring.push(raw),
            None => orphan(raw),
        },
        Err(_) => orphan(raw),
    }
}

#[cold]
fn take_ring() -> Option<&'static Ring> {
    let ring = {
        let mut r = lock(registry());
        match r.free.pop() {
            Some(ring) => ring,
            None => {
                let ring: &'static Ring = Box::leak(Box::new(Ring::new()));
                r.all.push(ring);
                ring
            }
        }
    };
    ring.thread
        .store(crate::process::clock::thread_id(), Ordering::Relaxed);
    if OWNER
        .try_with(|o| *o.borrow_mut() = Some(Owner(ring)))
        .is_err()
    {
        lock(registry()).free.push(ring);
        return None;
    }
    RING.try_with(|p| p.set(ring)).ok()?;
    Some(ring)
}

/// An event of a thread without a ring (it is exiting).
#[cold]
fn orphan(raw: Raw) {
    let mut r = lock(registry());
    if r.orphans.len() < MAX_ORPHANS {
        let thread = crate::process::clock::thread_id();
        r.orphans.push((thread, raw));
    } else {
        r.orphans_lost += 1;
    }
}

/// Every ring there is, for the drain.
pub fn rings() -> Vec<&'static Ring> {
    lock(registry()).all.clone()
}

/// The orphans' events (exited threads') and how many were lost, taken.
pub fn take_orphans() -> (Vec<(u32, Raw)>, u64) {
    let mut r = lock(registry());
    (
        std::mem::take(&mut r.orphans),
        std::mem::take(&mut r.orphans_lost),
    )
}

/// In the child of a fork: the other threads' rings are gone with them; this thread's is
/// emptied (what it held is its parent's history).
pub fn reset_after_fork() {
    crate::process::global::replace(
        &REGISTRY,
        Mutex::new(Registry {
            all: Vec::new(),
            free: Vec::new(),
            orphans: Vec::new(),
            orphans_lost: 0,
        }),
    );
    if let Ok(p) = RING.try_with(|r| r.get())
        && !p.is_null()
    {
        // SAFETY: rings are leaked and never freed.
        let ring = unsafe { &*p };
        let head = ring.head.load(Ordering::Relaxed);
        ring.tail.store(head, Ordering::Relaxed);
        ring.lost_seen
            .store(ring.lost.load(Ordering::Relaxed), Ordering::Relaxed);
        ring.draining.store(false, Ordering::Relaxed);
        ring.thread
            .store(crate::process::clock::thread_id(), Ordering::Relaxed);
        lock(registry()).all.push(ring);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(tsc: u64) -> Raw {
        Raw {
            tsc,
            ..Raw::default()
        }
    }

    #[test]
    fn a_full_ring_counts_what_it_drops_and_drains_in_order() {
        let ring = Ring::new();
        for i in 0..CAP as u64 + 5 {
            ring.push(ev(i));
        }
        let (mut got, mut lost) = (Vec::new(), Vec::new());
        assert!(ring.drain(
            &mut |_, e| got.extend(e.iter().map(|r| r.tsc)),
            &mut |n, a, b| lost.push((n, a, b))
        ));
        assert_eq!(got, (0..CAP as u64).collect::<Vec<_>>());
        assert_eq!(lost, vec![(5, CAP as u64, CAP as u64 + 4)]);
        ring.push(ev(7));
        got.clear();
        lost.clear();
        ring.drain(
            &mut |_, e| got.extend(e.iter().map(|r| r.tsc)),
            &mut |n, a, b| lost.push((n, a, b)),
        );
        assert_eq!((got, lost), (vec![7], vec![]));
    }

    #[test]
    fn an_event_on_a_stream_drains_with_it_and_takes_two_slots() {
        let ring = Ring::new();
        let on = |tsc, stream| Raw { stream, ..ev(tsc) };
        ring.push(on(1, 0));
        ring.push(on(2, 0x5e00_0000_0030));
        ring.push(on(3, 0));
        ring.push(on(4, 2));
        let mut got = Vec::new();
        ring.drain(
            &mut |_, e| got.extend(e.iter().map(|r| (r.tsc, r.stream))),
            &mut |_, _, _| {},
        );
        assert_eq!(got, vec![(1, 0), (2, 0x5e00_0000_0030), (3, 0), (4, 2)]);
        // Full: the last slot takes an event on the default stream, not one with its stream.
        for i in 0..CAP as u64 - 1 {
            ring.push(on(i, 0));
        }
        ring.push(on(100_000, 7));
        ring.push(on(100_001, 0));
        let (mut n, mut lost) = (0, Vec::new());
        ring.drain(&mut |_, e| n += e.len(), &mut |c, a, b| {
            lost.push((c, a, b))
        });
        assert_eq!((n, lost), (CAP, vec![(1, 100_000, 100_000)]));
    }

    #[test]
    fn a_thread_that_exits_leaves_its_events_to_the_orphans() {
        std::thread::spawn(|| {
            push(ev(1));
            push(ev(2));
        })
        .join()
        .unwrap();
        let (orphans, _) = take_orphans();
        let mine: Vec<u64> = orphans.iter().map(|(_, r)| r.tsc).collect();
        assert!(mine.windows(2).any(|w| w == [1, 2]), "{mine:?}");
    }
}
