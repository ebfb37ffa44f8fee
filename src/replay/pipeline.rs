//! Models fed on worker threads while the caller reads the history ([`pipelined`]): the caller
//! gives its requests to a [`Pipeline`], which hands them on in batches to every worker; each
//! worker runs its share of the instances ([`Run`]) over every batch. Reading the history and
//! the models then share the machine's cores, and memory stays bounded (a few batches in
//! flight).

use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use super::allocators::Allocator;
use super::requests::Op;
use super::run::{Instance, Run};

/// Requests handed on at once.
const BATCH: usize = 4096;
/// Batches in flight per worker.
const IN_FLIGHT: usize = 4;

/// What a worker is told.
enum Msg {
    /// Its instances, each with its place in the caller's list.
    Start(Vec<(usize, Instance)>),
    Ops(Arc<Vec<Op>>),
}

/// Where the caller puts its requests.
pub struct Pipeline {
    senders: Vec<SyncSender<Msg>>,
    batch: Vec<Op>,
    started: bool,
}

/// How much a model costs to feed, relatively (cuguard's pool is the real one, the others are
/// lighter): instances are shared among the workers by it.
fn weight(a: Allocator) -> u32 {
    match a {
        Allocator::Cuguard => 4,
        Allocator::Driver => 1,
        _ => 2,
    }
}

impl Pipeline {
    /// Gives the workers their instances (once; before the first request).
    pub fn start(&mut self, instances: Vec<Instance>) {
        if self.started {
            return;
        }
        self.started = true;
        let mut shares: Vec<(u32, Vec<(usize, Instance)>)> =
            self.senders.iter().map(|_| (0, Vec::new())).collect();
        for (i, instance) in instances.into_iter().enumerate() {
            let least = shares
                .iter_mut()
                .min_by_key(|s| s.0)
                .expect("at least one worker");
            least.0 += weight(instance.allocator);
            least.1.push((i, instance));
        }
        for (tx, (_, share)) in self.senders.iter().zip(shares) {
            // A worker that is gone has panicked; its join says so.
            let _ = tx.send(Msg::Start(share));
        }
    }

    /// Whether [`Pipeline::start`] was called.
    pub fn started(&self) -> bool {
        self.started
    }

    /// Hands one request on.
    pub fn feed(&mut self, op: Op) {
        self.batch.push(op);
        if self.batch.len() >= BATCH {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let batch = Arc::new(std::mem::replace(
            &mut self.batch,
            Vec::with_capacity(BATCH),
        ));
        for tx in &self.senders {
            let _ = tx.send(Msg::Ops(batch.clone()));
        }
    }
}

/// One worker: its instances fed every batch, given back with their places.
fn worker(rx: Receiver<Msg>) -> Vec<(usize, Instance)> {
    let mut places = Vec::new();
    let mut run = Run::new(Vec::new());
    for msg in rx {
        match msg {
            Msg::Start(share) => {
                let (p, instances): (Vec<usize>, Vec<Instance>) = share.into_iter().unzip();
                places = p;
                run = Run::new(instances);
            }
            Msg::Ops(batch) => {
                for op in batch.iter() {
                    if run.done() {
                        break;
                    }
                    run.feed(op);
                }
            }
        }
    }
    places.into_iter().zip(run.instances).collect()
}

/// Runs `body` with a [`Pipeline`] over `workers` threads (at least one); what it returned and
/// the instances it started, in their order, fed everything it fed.
pub fn pipelined<T>(workers: usize, body: impl FnOnce(&mut Pipeline) -> T) -> (T, Vec<Instance>) {
    std::thread::scope(|s| {
        let mut senders = Vec::new();
        let mut handles = Vec::new();
        for _ in 0..workers.max(1) {
            let (tx, rx) = sync_channel(IN_FLIGHT);
            senders.push(tx);
            handles.push(s.spawn(move || worker(rx)));
        }
        let mut pipeline = Pipeline {
            senders,
            batch: Vec::with_capacity(BATCH),
            started: false,
        };
        let out = body(&mut pipeline);
        pipeline.flush();
        drop(pipeline);
        let mut all: Vec<(usize, Instance)> = handles
            .into_iter()
            .flat_map(|h| h.join().expect("a replay worker panicked"))
            .collect();
        all.sort_by_key(|(i, _)| *i);
        (out, all.into_iter().map(|(_, i)| i).collect())
    })
}

/// Workers for `instances` instances: one per core, at most one per instance.
pub fn workers(instances: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores.min(instances).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::allocators::Settings;
    use crate::replay::model::{MIB, Request};
    use crate::replay::requests::Asked;

    #[test]
    fn every_worker_sees_every_request_and_instances_come_back_in_order() {
        let s = Settings::default();
        let instances: Vec<Instance> = (1..=5)
            .map(|k| Instance::new(Allocator::Driver, k * 10_000 * MIB, &s))
            .collect();
        let ((), back) = pipelined(3, |p| {
            p.start(instances);
            for id in 1..=20_000u64 {
                p.feed(Op::Alloc(Asked {
                    request: Request {
                        id,
                        size: 2 * MIB,
                        stream: 0,
                        thread: 1,
                    },
                    time_ns: id,
                    stack: 0,
                }));
            }
        });
        let got: Vec<(u64, Option<u64>)> = back
            .iter()
            .map(|i| (i.capacity, i.failure.map(|f| f.asked.request.id)))
            .collect();
        // 2 MiB each: an instance of k × 10,000 MiB fails at request k × 5,000 + 1.
        let want: Vec<(u64, Option<u64>)> = (1..=5)
            .map(|k| (k * 10_000 * MIB, (k < 4).then_some(k * 5_000 + 1)))
            .collect();
        assert_eq!(got, want);
    }
}
