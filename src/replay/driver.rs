//! `driver`: every request its own `cuMemAlloc`, as a program without a pool gets: rounded up
//! to the driver's granularity (2 MiB, [`GRANULARITY`]), given back at once by its free. Nothing
//! is ever idle; the device refuses a request only when what is live, rounded, and the request
//! would not fit.

use super::model::{Device, FastMap, GRANULARITY, Idle, Model, Request, round_up};

/// The driver alone.
pub struct Driver {
    device: Device,
    /// Bytes each live request takes, by id.
    live: FastMap<u64, u64>,
}

impl Driver {
    pub fn new(capacity: u64) -> Driver {
        Driver {
            device: Device::new(capacity),
            live: FastMap::default(),
        }
    }
}

impl Model for Driver {
    fn alloc(&mut self, r: &Request) -> bool {
        let taken = round_up(r.size.max(1), GRANULARITY);
        if !self.device.take(taken) {
            return false;
        }
        self.live.insert(r.id, taken);
        true
    }

    fn free(&mut self, id: u64) {
        if let Some(taken) = self.live.remove(&id) {
            self.device.give(taken);
        }
    }

    fn peak_reserved(&self) -> u64 {
        self.device.peak
    }

    fn idle(&self) -> Idle {
        Idle::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::model::MIB;

    fn req(id: u64, size: u64) -> Request {
        Request {
            id,
            size,
            stream: 0,
            thread: 1,
        }
    }

    #[test]
    fn each_request_is_rounded_to_two_mib_and_freed_at_once() {
        let mut d = Driver::new(10 * MIB);
        assert!(d.alloc(&req(1, 1)), "1 byte takes 2 MiB");
        assert!(d.alloc(&req(2, 5 * MIB)), "5 MiB takes 6");
        assert!(
            !d.alloc(&req(3, 2 * MIB + 1)),
            "8 MiB taken: 4 MiB more do not fit"
        );
        assert!(d.alloc(&req(4, 2 * MIB)));
        assert_eq!(d.peak_reserved(), 10 * MIB);
        d.free(2);
        assert!(d.alloc(&req(5, 6 * MIB)), "the free gave its 6 MiB back");
        d.free(99);
        assert_eq!(d.idle(), Idle::default());
    }
}
