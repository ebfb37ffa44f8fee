//! The requests a history holds, in time order ([`Requests`]): what the models are asked, as
//! [`Op`]s, from the steps [`cuguard_history::bounded::History::walk`] yields.
//!
//! - A request is a block the program was handed on the device replayed (`Step::Made`, and
//!   `Step::Restated` for what was live where the history begins): its memory, whatever call
//!   made it (`cuMemAlloc`, `cuMemAllocAsync`, managed, VMM, cuguard's pool blocks). Not
//!   requests: segments (what a pool carves its blocks from) and pinned host memory.
//! - Where the history holds the blocks inside a framework's cache (PyTorch's tensors,
//!   `Step::CacheMade`), they are what the program asked for: they are the requests, and the
//!   cache's segments that hold them ([`Requests::carved`], found by a first walk) are not;
//!   the `torch` model makes its own segments for them, as PyTorch did. Without them (the
//!   blocks not recorded), the cache's segments are the requests.
//! - A refusal the run met (`Step::Oom`) is a request too: it asked for memory and got none.
//!   It is tried, and given back at once when it fits (it made no block in the run).
//! - A block's end (`Step::Ended`: its free, or its context's release) frees its request.
//!
//! Requests are numbered from 1 in time order, allocations and refusals together: a failure
//! names its request by that number (its event). A refusal has no stream in the history: it is
//! tried on the stream its thread last allocated on.

use std::collections::{BTreeSet, HashSet};
use std::hash::BuildHasherDefault;

use cuguard_format::MemoryKind;
use cuguard_history::bounded::Step;
use cuguard_history::replay::Block;

use super::model::{FastMap, Request};
use cuguard_history::bounded::Mix;

/// The segments of a framework's cache whose blocks the history holds, by (address, when it
/// was made).
pub type Carved = HashSet<(u64, u64), BuildHasherDefault<Mix>>;

/// A request with where and when it was asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Asked {
    pub request: Request,
    /// When, nanoseconds since the process started.
    pub time_ns: u64,
    /// Its stack's id in the history ([`cuguard_history::NONE`]: none).
    pub stack: u32,
}

/// One thing the program did, as the models are asked it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// An allocation, kept until its free.
    Alloc(Asked),
    /// The free of request `id`, of `size` bytes.
    Free { id: u64, size: u64 },
    /// A refusal the run met: tried, and given back at once.
    Refused(Asked),
}

/// A live request: its id, its size, when it was made.
#[derive(Clone, Copy)]
struct Live {
    id: u64,
    size: u64,
    start_ns: u64,
}

/// The requests of one device of a history, read step by step.
#[derive(Default)]
pub struct Requests {
    /// The device replayed; `None` until the first request when none was asked.
    device: Option<u32>,
    /// Live requests by address.
    live: FastMap<u64, Live>,
    /// The stream each thread last allocated on.
    streams: FastMap<u32, u64>,
    /// Requests so far.
    count: u64,
    /// Of them, blocks live where the history begins.
    pub restated: u64,
    /// Of them, refusals.
    pub refusals: u64,
    /// Bytes live now, and at most.
    live_bytes: u64,
    pub peak_live: u64,
    /// Other devices the history allocates on.
    pub others: BTreeSet<u32>,
    /// The cache's segments not replayed: their blocks are.
    carved: Carved,
    /// Of the requests, blocks inside a framework's cache (PyTorch's tensors).
    pub cache_blocks: u64,
    /// Segments of a framework's cache left out for their blocks, on the device replayed.
    pub cache_segments: u64,
}

/// Whether a block of `memory` is a request (see the module documentation).
fn requested(memory: MemoryKind) -> bool {
    !matches!(memory, MemoryKind::HostPinned | MemoryKind::CacheBlock)
}

impl Requests {
    /// Requests on `device`, or on the first device the history allocates on; the blocks
    /// inside the cache segments `carved` in place of those segments.
    pub fn new(device: Option<u32>, carved: Carved) -> Requests {
        Requests {
            device,
            carved,
            ..Requests::default()
        }
    }

    /// The device replayed, once known.
    pub fn device(&self) -> Option<u32> {
        self.device
    }

    /// Requests read so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Whether `device` is the one replayed (the first one seen becomes it).
    fn on(&mut self, device: u32) -> bool {
        match self.device {
            Some(d) if d == device => true,
            Some(_) => {
                self.others.insert(device);
                false
            }
            None => {
                self.device = Some(device);
                true
            }
        }
    }

    /// Reads one step, telling `out` what the models are asked.
    pub fn step(&mut self, step: Step, out: &mut impl FnMut(Op)) {
        match step {
            Step::Restated(b) | Step::Made(b) => {
                if !requested(b.memory) || !self.on(b.device) {
                    return;
                }
                if self.carved.contains(&(b.addr, b.start_ns)) {
                    self.cache_segments += 1;
                    return;
                }
                if matches!(step, Step::Restated(_)) {
                    self.restated += 1;
                }
                self.made(&b, out);
            }
            Step::CacheMade(b) => {
                if self.carved.is_empty() || !self.on(b.device) {
                    return;
                }
                self.cache_blocks += 1;
                self.made(&b, out);
            }
            Step::Ended(b) | Step::CacheEnded(b) => {
                if let Some(l) = self.live.get(&b.addr)
                    && l.start_ns == b.start_ns
                    && (requested(b.memory) || !self.carved.is_empty())
                {
                    let l = self.live.remove(&b.addr).expect("just found");
                    self.live_bytes -= l.size;
                    out(Op::Free {
                        id: l.id,
                        size: l.size,
                    });
                }
            }
            Step::Oom(o) => {
                if !self.on(o.device) {
                    return;
                }
                self.count += 1;
                self.refusals += 1;
                out(Op::Refused(Asked {
                    request: Request {
                        id: self.count,
                        size: o.size,
                        stream: self.streams.get(&o.thread).copied().unwrap_or(0),
                        thread: o.thread,
                    },
                    time_ns: o.time_ns,
                    stack: o.stack,
                }));
            }
            // Segments: what the models make for themselves; a request's size and stream are
            // its block's.
            Step::SegmentMade(_)
            | Step::SegmentEnded(_)
            | Step::Tagged(_)
            | Step::Carved(_)
            | Step::Field(..) => {}
        }
    }

    /// A block made: a request, after the free of one whose end the history missed at its
    /// address.
    fn made(&mut self, b: &Block, out: &mut impl FnMut(Op)) {
        if let Some(old) = self.live.remove(&b.addr) {
            self.live_bytes -= old.size;
            out(Op::Free {
                id: old.id,
                size: old.size,
            });
        }
        self.count += 1;
        self.streams.insert(b.thread, b.stream);
        self.live.insert(
            b.addr,
            Live {
                id: self.count,
                size: b.size,
                start_ns: b.start_ns,
            },
        );
        self.live_bytes += b.size;
        self.peak_live = self.peak_live.max(self.live_bytes);
        out(Op::Alloc(Asked {
            request: Request {
                id: self.count,
                size: b.size,
                stream: b.stream,
                thread: b.thread,
            },
            time_ns: b.start_ns,
            stack: b.stack,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuguard_history::replay::Oom;

    fn block(addr: u64, size: u64, device: u32, memory: MemoryKind, t: u64) -> Block {
        Block {
            start_ns: t,
            end_ns: None,
            addr,
            size,
            stack: 3,
            thread: 9,
            memory,
            device,
            context: 0,
            released: false,
            stream: 0x50,
            tag: cuguard_history::NONE,
            carved: false,
        }
    }

    fn ops(steps: Vec<Step>) -> (Vec<Op>, Requests) {
        let mut r = Requests::new(None, Carved::default());
        let mut out = Vec::new();
        for s in steps {
            r.step(s, &mut |op| out.push(op));
        }
        (out, r)
    }

    #[test]
    fn blocks_of_one_device_are_requests_and_refusals_are_numbered_with_them() {
        let a = block(0x1000, 100, 0, MemoryKind::Async, 10);
        let pinned = block(0x2000, 50, 0, MemoryKind::HostPinned, 11);
        let cached = block(0x3000, 50, 0, MemoryKind::CacheBlock, 12);
        let other = block(0x4000, 70, 1, MemoryKind::Device, 13);
        let oom = Oom {
            time_ns: 20,
            size: 500,
            stack: 4,
            thread: 9,
            device: 0,
        };
        let (out, r) = ops(vec![
            Step::Made(a),
            Step::Made(pinned),
            Step::Made(cached),
            Step::Made(other),
            Step::Oom(oom),
            Step::Ended(Block {
                end_ns: Some(30),
                ..a
            }),
            Step::Ended(pinned),
        ]);
        let asked = |id, size, time_ns, stack| Asked {
            request: Request {
                id,
                size,
                stream: 0x50,
                thread: 9,
            },
            time_ns,
            stack,
        };
        assert_eq!(
            out,
            vec![
                Op::Alloc(asked(1, 100, 10, 3)),
                Op::Refused(asked(2, 500, 20, 4)),
                Op::Free { id: 1, size: 100 },
            ]
        );
        assert_eq!((r.device(), r.count(), r.refusals), (Some(0), 2, 1));
        assert_eq!(r.others.iter().copied().collect::<Vec<_>>(), vec![1]);
        assert_eq!(r.peak_live, 100);
    }

    #[test]
    fn a_block_made_again_at_its_address_frees_the_one_before() {
        let a = block(0x1000, 100, 0, MemoryKind::Device, 10);
        let b = block(0x1000, 300, 0, MemoryKind::Device, 20);
        let (out, r) = ops(vec![Step::Restated(a), Step::Made(b)]);
        assert_eq!(out[1], Op::Free { id: 1, size: 100 });
        assert!(matches!(out[2], Op::Alloc(x) if x.request.id == 2));
        assert_eq!((r.restated, r.peak_live), (1, 300));
    }
}
