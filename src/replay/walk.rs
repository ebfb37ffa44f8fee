//! A replay from end to end ([`replay`]): the history opened (a report's, or a history file,
//! read up to where it ends even when cut short), walked with
//! [`cuguard_history::bounded::History::walk`] in memory that grows with what is live, not with
//! its length: once for the segments of a framework's cache whose blocks it holds
//! ([`carved_segments`]), then for its requests ([`Requests`]), fed to every allocator at every
//! capacity asked as they are read, or written down ([`Tape`]) and searched for the smallest
//! capacity ([`find::smallest`]); the answer named and worded ([`answer::answer`]).

use std::path::Path;

use super::answer::{self, Outcome, Replayed, Walked};
use super::ask::{Ask, Plan, ReplayError};
use super::find;
use super::pipeline::{pipelined, workers};
use super::requests::{Carved, Requests};
use super::run::Instance;
use super::tape::Tape;
use crate::history::{Cut, Opened};
use cuguard_history::bounded::Step;

/// Replays the history at `path` as `ask` says.
pub fn replay(path: &Path, ask: &Ask) -> Result<Replayed, ReplayError> {
    let opened = crate::history::open(path, Cut::Read)?;
    if ask.needs_total() && opened.devices.is_empty() {
        return Err(ReplayError::Usage(format!(
            "{}: a history file alone does not say the device's memory: give a capacity in \
             bytes (80GiB), or the report beside the history for a share of the device (95%)",
            crate::wording::one_line(&path.display().to_string())
        )));
    }
    let mut requests = Requests::new(ask.device, carved_segments(&opened)?);
    let outcomes = match &ask.plan {
        Plan::At(_) => at_capacities(&opened, ask, &mut requests)?,
        Plan::Find => find_capacities(&opened, ask, &mut requests)?,
    };
    let walked = Walked {
        source: path.display().to_string(),
        opened: &opened,
        requests: &requests,
        find: ask.plan == Plan::Find,
    };
    Ok(answer::answer(&walked, outcomes))
}

/// The segments of a framework's cache that the history saw blocks made in: the replay asks
/// for the blocks, as the program did, in their place. Memory: one entry per such segment.
fn carved_segments(opened: &Opened) -> Result<Carved, ReplayError> {
    let mut carved = Carved::default();
    opened
        .history
        .walk(&mut |step| {
            if let Step::Carved(b) = step {
                carved.insert((b.addr, b.start_ns));
            }
        })
        .map_err(|e| opened.invalid(e))?;
    Ok(carved)
}

/// The capacities asked, in bytes, on the device replayed.
fn capacities(opened: &Opened, ask: &Ask, device: u32) -> Result<Vec<u64>, ReplayError> {
    let Plan::At(asked) = &ask.plan else {
        return Ok(Vec::new());
    };
    let total = || {
        opened
            .devices
            .iter()
            .find(|d| d.ordinal == device)
            .map(|d| d.total_bytes)
            .ok_or_else(|| {
                ReplayError::Usage(format!(
                    "the report records no device {device}: give a capacity in bytes"
                ))
            })
    };
    asked
        .iter()
        .map(|c| match c {
            super::ask::Capacity::Bytes(b) => Ok(*b),
            super::ask::Capacity::Percent(_) => Ok(c.of(total()?)),
        })
        .collect()
}

/// `--capacity`: every allocator at every capacity, fed on worker threads as the history is
/// walked (made at the first request, once the device is known).
fn at_capacities(
    opened: &Opened,
    ask: &Ask,
    requests: &mut Requests,
) -> Result<Vec<Outcome>, ReplayError> {
    let made = |device: u32| -> Result<Vec<Instance>, ReplayError> {
        let mut instances = Vec::new();
        for capacity in capacities(opened, ask, device)? {
            for &a in &ask.allocators {
                instances.push(Instance::new(a, capacity, &ask.settings));
            }
        }
        Ok(instances)
    };
    let count = match &ask.plan {
        Plan::At(c) => c.len() * ask.allocators.len(),
        Plan::Find => 0,
    };
    let mut ops = Vec::with_capacity(2);
    let (walked, instances) = pipelined(workers(count), |pipeline| {
        let mut error = None;
        let walked = opened.history.walk(&mut |step| {
            requests.step(step, &mut |op| ops.push(op));
            for op in ops.drain(..) {
                if !pipeline.started() && error.is_none() {
                    // The first request names the device.
                    match made(requests.device().unwrap_or(0)) {
                        Ok(i) => pipeline.start(i),
                        Err(e) => error = Some(e),
                    }
                }
                pipeline.feed(op);
            }
        });
        match error {
            Some(e) => Err(e),
            None => Ok(walked),
        }
    });
    walked?.map_err(|e| opened.invalid(e))?;
    let instances = if instances.is_empty() {
        // No request: every allocator fits, holding nothing.
        made(ask.device.unwrap_or(0))?
    } else {
        instances
    };
    Ok(instances.iter().map(Outcome::of).collect())
}

/// `--find-capacity`: the requests written down as the history is walked, then searched.
fn find_capacities(
    opened: &Opened,
    ask: &Ask,
    requests: &mut Requests,
) -> Result<Vec<Outcome>, ReplayError> {
    let mut tape = Tape::new();
    let mut failed = None;
    opened
        .history
        .walk(&mut |step| {
            requests.step(step, &mut |op| {
                if failed.is_none()
                    && let Err(e) = tape.write(&op)
                {
                    failed = Some(e);
                }
            })
        })
        .map_err(|e| opened.invalid(e))?;
    let spilled =
        |e: std::io::Error| ReplayError::Usage(format!("a temporary file of the replay: {e}"));
    if let Some(e) = failed {
        return Err(spilled(e));
    }
    let log = tape.finish().map_err(spilled)?;
    let found = find::smallest(
        &log,
        &ask.allocators,
        &ask.settings,
        requests.count(),
        requests.peak_live,
    )
    .map_err(spilled)?;
    Ok(found.iter().map(Outcome::found).collect())
}
