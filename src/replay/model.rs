//! What every allocator model is: a [`Model`] serves [`Request`]s from a [`Device`] of a fixed
//! capacity, gives them back, and says what it holds idle ([`Idle`]) when it cannot serve one.

use cuguard_history::bounded::Mix;
use serde::Serialize;

/// A mebibyte.
pub const MIB: u64 = 1 << 20;

/// The driver's allocation granularity (large pages): every `cuMemAlloc` takes a multiple of
/// it, and so does every chunk a pool takes from the driver.
pub const GRANULARITY: u64 = 2 * MIB;

/// One allocation the program asked for, as the models see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Its number among the replayed requests (allocations and refusals, in time order), from
    /// 1: what a failure names as its event.
    pub id: u64,
    /// Bytes asked.
    pub size: u64,
    /// The stream it was made on (0: the legacy default stream, or a call that takes none).
    pub stream: u64,
    /// The thread that asked.
    pub thread: u32,
}

/// What a model holds from the device but lends to nobody: its free memory, in how many
/// pieces, the largest of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Idle {
    pub bytes: u64,
    pub pieces: u64,
    pub largest: u64,
}

impl Idle {
    /// Adds one piece of `bytes`.
    pub fn add(&mut self, bytes: u64) {
        if bytes == 0 {
            return;
        }
        self.bytes += bytes;
        self.pieces += 1;
        self.largest = self.largest.max(bytes);
    }

    /// Adds every piece of `other`.
    pub fn join(&mut self, other: Idle) {
        self.bytes += other.bytes;
        self.pieces += other.pieces;
        self.largest = self.largest.max(other.largest);
    }
}

/// An allocator, modelled: it serves requests from a [`Device`] of a fixed capacity. Models
/// run on worker threads (`pipeline.rs`).
pub trait Model: Send {
    /// Serves `r`, kept by its id until [`Model::free`]; false when the device has no room for
    /// it (the model's own retries, such as giving back what it caches, already tried).
    fn alloc(&mut self, r: &Request) -> bool;
    /// Gives back what request `id` was served (nothing when it was not served).
    fn free(&mut self, id: u64);
    /// The most device memory it held at once.
    fn peak_reserved(&self) -> u64;
    /// What it holds idle now.
    fn idle(&self) -> Idle;
}

/// A map keyed by ids or addresses, hashed with the history's [`Mix`] (splitmix64's finalizer:
/// many times faster than SipHash on these keys).
pub type FastMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<Mix>>;

/// `n` rounded up to a multiple of `to` (saturating).
pub fn round_up(n: u64, to: u64) -> u64 {
    n.div_ceil(to).saturating_mul(to)
}

/// A device's memory as a model takes it: a capacity, what is taken, the most ever taken.
#[derive(Clone, Copy, Debug)]
pub struct Device {
    pub capacity: u64,
    pub used: u64,
    pub peak: u64,
}

impl Device {
    /// A device of `capacity` bytes, nothing taken.
    pub fn new(capacity: u64) -> Device {
        Device {
            capacity,
            used: 0,
            peak: 0,
        }
    }

    /// Takes `n` bytes, or nothing and false when they do not fit.
    pub fn take(&mut self, n: u64) -> bool {
        match self.used.checked_add(n) {
            Some(total) if total <= self.capacity => {
                self.used = total;
                self.peak = self.peak.max(total);
                true
            }
            _ => false,
        }
    }

    /// Whether `n` more bytes would fit.
    pub fn fits(&self, n: u64) -> bool {
        self.used.checked_add(n).is_some_and(|t| t <= self.capacity)
    }

    /// Gives `n` bytes back.
    pub fn give(&mut self, n: u64) {
        self.used = self.used.saturating_sub(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_refuses_past_its_capacity_and_keeps_its_peak() {
        let mut d = Device::new(10 * MIB);
        assert!(d.take(6 * MIB));
        assert!(!d.take(5 * MIB), "nothing taken on a refusal");
        assert_eq!(d.used, 6 * MIB);
        assert!(d.take(4 * MIB));
        d.give(8 * MIB);
        assert_eq!((d.used, d.peak), (2 * MIB, 10 * MIB));
        assert!(!d.take(u64::MAX));
    }

    #[test]
    fn rounding_and_idle_pieces() {
        assert_eq!(round_up(1, GRANULARITY), GRANULARITY);
        assert_eq!(round_up(GRANULARITY, GRANULARITY), GRANULARITY);
        assert_eq!(round_up(0, GRANULARITY), 0);
        assert_eq!(round_up(u64::MAX, GRANULARITY), u64::MAX);
        let mut i = Idle::default();
        i.add(3);
        i.add(0);
        i.add(7);
        assert_eq!(
            i,
            Idle {
                bytes: 10,
                pieces: 2,
                largest: 7
            }
        );
    }
}
