//! `--find-capacity`: each allocator's smallest capacity that fits, to 2 MiB
//! ([`GRANULARITY`]), found by replaying the requests ([`tape`](super::tape)) at capacities
//! searched: up from the peak of live memory (below it nothing fits) by steps that double until
//! one fits (most allocators fit a little above the peak: few steps), then by bisection between
//! the last that failed and the first that fit. Every allocator
//! still searching is replayed in the same pass, so a search costs a pass per step of the
//! slowest.
//!
//! A bisection assumes that an allocator that fits at some capacity fits at every larger one.
//! Most of them do; one whose rules change with the capacity (RMM's pool starts at half of it;
//! cuguard's pool keeps a tenth of it idle) may not, and the answer is then a capacity that
//! fits where 2 MiB less does not.

use std::io;

use super::allocators::{Allocator, Settings};
use super::model::GRANULARITY;
use super::pipeline::{pipelined, workers};
use super::run::Instance;
use super::tape::play;
use crate::spill::Log;

/// The largest capacity tried: 1 PiB.
pub const MOST: u64 = 1 << 50;

/// An allocator's smallest capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    pub allocator: Allocator,
    /// The capacity, in bytes; `None` when it does not fit even at [`MOST`].
    pub capacity: Option<u64>,
    /// The most it reserved there (at [`MOST`] when it does not fit).
    pub peak_reserved: u64,
}

/// One allocator's search, in units of [`GRANULARITY`].
struct Search {
    allocator: Allocator,
    /// The largest capacity known not to fit.
    fails: u64,
    /// The smallest known to fit, and its peak reserved.
    fits: Option<(u64, u64)>,
    /// The next step up while none fits.
    step: u64,
    /// Where the search gave up (nothing fits up to [`MOST`]), with the peak there.
    gave_up: Option<u64>,
}

impl Search {
    fn done(&self) -> bool {
        self.gave_up.is_some() || self.fits.is_some_and(|(k, _)| k == self.fails + 1)
    }

    /// The next capacity to try.
    fn probe(&self) -> u64 {
        match self.fits {
            None => self.fails.saturating_add(self.step).min(MOST / GRANULARITY),
            Some((k, _)) => self.fails + (k - self.fails) / 2,
        }
    }
}

/// The smallest capacity of each of `allocators` at which the requests on `log` (`requests`
/// of them, live at most `peak_live` bytes) fit.
pub fn smallest(
    log: &Log,
    allocators: &[Allocator],
    settings: &Settings,
    requests: u64,
    peak_live: u64,
) -> io::Result<Vec<Found>> {
    if requests == 0 {
        return Ok(allocators
            .iter()
            .map(|&allocator| Found {
                allocator,
                capacity: Some(0),
                peak_reserved: 0,
            })
            .collect());
    }
    // Below the peak of live memory nothing fits; the first try is the peak itself.
    let first = peak_live.div_ceil(GRANULARITY).clamp(1, MOST / GRANULARITY);
    let mut searches: Vec<Search> = allocators
        .iter()
        .map(|&allocator| Search {
            allocator,
            fails: first - 1,
            fits: None,
            step: 1,
            gave_up: None,
        })
        .collect();
    let mut probes: Vec<u64> = vec![first; searches.len()];
    while searches.iter().any(|s| !s.done()) {
        let going: Vec<usize> = (0..searches.len())
            .filter(|&i| !searches[i].done())
            .collect();
        let instances: Vec<Instance> = going
            .iter()
            .map(|&i| Instance::new(searches[i].allocator, probes[i] * GRANULARITY, settings))
            .collect();
        let (played, instances) = pipelined(workers(instances.len()), |pipeline| {
            pipeline.start(instances);
            play(log, &mut |op| pipeline.feed(*op))
        });
        played?;
        for (&i, instance) in going.iter().zip(&instances) {
            let s = &mut searches[i];
            let k = probes[i];
            if instance.failure.is_none() {
                s.fits = Some((k, instance.peak_reserved()));
            } else if k * GRANULARITY >= MOST {
                s.gave_up = Some(instance.peak_reserved());
            } else {
                s.fails = k;
                s.step = s.step.saturating_mul(2);
            }
            probes[i] = s.probe();
        }
    }
    Ok(searches
        .iter()
        .map(|s| Found {
            allocator: s.allocator,
            capacity: s.fits.map(|(k, _)| k * GRANULARITY),
            peak_reserved: s.fits.map_or(s.gave_up.unwrap_or(0), |(_, p)| p),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::model::{MIB, Request};
    use crate::replay::requests::{Asked, Op};
    use crate::replay::tape::Tape;

    fn alloc(id: u64, size: u64) -> Op {
        Op::Alloc(Asked {
            request: Request {
                id,
                size,
                stream: 0,
                thread: 1,
            },
            time_ns: id,
            stack: 0,
        })
    }

    #[test]
    fn the_driver_needs_its_peak_rounded_to_two_mib() {
        let mut tape = Tape::new();
        for op in [
            alloc(1, 100 * MIB),
            alloc(2, 301 * MIB),
            Op::Free {
                id: 1,
                size: 100 * MIB,
            },
            alloc(3, 3 * MIB),
        ] {
            tape.write(&op).unwrap();
        }
        let log = tape.finish().unwrap();
        let found = smallest(
            &log,
            &[Allocator::Driver, Allocator::Async],
            &Settings::default(),
            3,
            401 * MIB,
        )
        .unwrap();
        assert_eq!(found[0].capacity, Some(402 * MIB));
        assert_eq!(found[0].peak_reserved, 402 * MIB);
        assert_eq!(found[1].capacity, Some(402 * MIB));
    }

    #[test]
    fn a_request_larger_than_any_capacity_never_fits() {
        let mut tape = Tape::new();
        tape.write(&alloc(1, MOST + 1)).unwrap();
        let log = tape.finish().unwrap();
        let found = smallest(&log, &[Allocator::Torch], &Settings::default(), 1, MOST + 1).unwrap();
        assert_eq!(found[0].capacity, None);
    }
}
