//! Models run side by side over one stream of [`Op`]s ([`Run`]): each [`Instance`] is an
//! allocator at a capacity, fed until a request fails in it ([`Failure`]: the request, what the
//! program held live then, what the model held idle).

use super::allocators::{Allocator, Settings, build};
use super::model::{Idle, Model};
use super::requests::{Asked, Op};

/// Where an allocator could not serve a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    pub asked: Asked,
    /// Bytes the program held live when it asked (what it asked, not what the model took).
    pub live_bytes: u64,
    /// What the model held idle then.
    pub idle: Idle,
}

/// One allocator at one capacity.
pub struct Instance {
    pub allocator: Allocator,
    pub capacity: u64,
    model: Box<dyn Model>,
    /// The first request it could not serve; it is fed nothing after it.
    pub failure: Option<Failure>,
}

impl Instance {
    pub fn new(allocator: Allocator, capacity: u64, settings: &Settings) -> Instance {
        Instance {
            allocator,
            capacity,
            model: build(allocator, capacity, settings),
            failure: None,
        }
    }

    /// The most device memory it held.
    pub fn peak_reserved(&self) -> u64 {
        self.model.peak_reserved()
    }
}

/// Instances fed the same requests.
pub struct Run {
    pub instances: Vec<Instance>,
    /// Bytes the program holds live.
    live_bytes: u64,
    /// Instances that have not failed.
    going: usize,
}

impl Run {
    pub fn new(instances: Vec<Instance>) -> Run {
        let going = instances.len();
        Run {
            instances,
            live_bytes: 0,
            going,
        }
    }

    /// Whether every instance has failed (nothing more to feed).
    pub fn done(&self) -> bool {
        self.going == 0
    }

    /// Feeds one request to every instance that has not failed.
    pub fn feed(&mut self, op: &Op) {
        match *op {
            Op::Alloc(asked) => {
                let live = self.live_bytes;
                self.live_bytes += asked.request.size;
                if self.going > 0 {
                    self.each(|i| {
                        if i.model.alloc(&asked.request) {
                            None
                        } else {
                            Some(i.failed(asked, live))
                        }
                    });
                }
            }
            Op::Free { id, size } => {
                self.live_bytes = self.live_bytes.saturating_sub(size);
                if self.going > 0 {
                    self.each(|i| {
                        i.model.free(id);
                        None
                    });
                }
            }
            Op::Refused(asked) => {
                let live = self.live_bytes;
                if self.going > 0 {
                    self.each(|i| {
                        if i.model.alloc(&asked.request) {
                            i.model.free(asked.request.id);
                            None
                        } else {
                            Some(i.failed(asked, live))
                        }
                    });
                }
            }
        }
    }

    /// Calls `f` on every instance still going; a failure it returns stops that instance.
    fn each(&mut self, mut f: impl FnMut(&mut Instance) -> Option<Failure>) {
        for i in self.instances.iter_mut().filter(|i| i.failure.is_none()) {
            if let Some(failure) = f(i) {
                i.failure = Some(failure);
                self.going -= 1;
            }
        }
    }
}

impl Instance {
    /// The failure of `asked`, with the program's `live` bytes and what the model holds idle.
    fn failed(&self, asked: Asked, live: u64) -> Failure {
        Failure {
            asked,
            live_bytes: live,
            idle: self.model.idle(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::model::{MIB, Request};

    fn asked(id: u64, size: u64) -> Asked {
        Asked {
            request: Request {
                id,
                size,
                stream: 0,
                thread: 1,
            },
            time_ns: id * 1000,
            stack: 7,
        }
    }

    #[test]
    fn an_instance_stops_at_its_first_failure_with_what_was_live() {
        let settings = Settings::default();
        let mut run = Run::new(vec![
            Instance::new(Allocator::Driver, 10 * MIB, &settings),
            Instance::new(Allocator::Driver, 100 * MIB, &settings),
        ]);
        run.feed(&Op::Alloc(asked(1, 6 * MIB)));
        run.feed(&Op::Refused(asked(2, 6 * MIB)));
        run.feed(&Op::Free {
            id: 1,
            size: 6 * MIB,
        });
        run.feed(&Op::Alloc(asked(3, 8 * MIB)));
        let small = run.instances[0].failure.expect("10 MiB: the refusal fails");
        assert_eq!((small.asked.request.id, small.live_bytes), (2, 6 * MIB));
        assert_eq!(
            run.instances[0].peak_reserved(),
            6 * MIB,
            "fed nothing after"
        );
        assert!(run.instances[1].failure.is_none());
        assert_eq!(run.instances[1].peak_reserved(), 12 * MIB);
        assert!(!run.done());
    }
}
