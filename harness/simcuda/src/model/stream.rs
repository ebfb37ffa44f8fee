//! The stream family's model: a stream, its queue of operations and the worker thread that runs
//! them.
//!
//! Each stream is a FIFO of operations run in order by the stream's own worker thread (started
//! at the first operation). An operation waits for its dependencies, each "operation `seq` of
//! stream `s` has completed", then runs its work (a fill, a copy, a stream-ordered free, an event
//! marker, or nothing).
//!
//! Dependencies carry the CUDA ordering rules:
//! - stream order: a stream's worker runs its operations one after the other;
//! - legacy default stream (handle 0 or `CU_STREAM_LEGACY`): an operation on it waits for all
//!   work already issued to the context's blocking streams (created without
//!   `CU_STREAM_NON_BLOCKING`, and per-thread default streams); an operation on a blocking stream
//!   waits for all work already issued to the legacy stream. Non-blocking streams do neither;
//! - `cuStreamWaitEvent`: an operation that waits for the event's recorded point.
//!
//! Every dependency points to an operation issued earlier, so waits can never form a cycle.
//! Operations are issued with the state lock held (which orders all issues: `state/stream.rs`
//! computes the implicit dependencies); workers run holding no lock.

use std::collections::VecDeque;
use std::ffi::{c_int, c_uint};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::errors::Fault;

/// What kind of stream, for the implicit-synchronisation rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    /// The context's legacy default stream.
    Legacy,
    /// A thread's per-thread default stream (blocking with respect to the legacy stream).
    PerThread,
    /// Created without `CU_STREAM_NON_BLOCKING`.
    Blocking,
    /// Created with `CU_STREAM_NON_BLOCKING`.
    NonBlocking,
}

/// Work an operation does when its turn comes.
pub type Work = Box<dyn FnOnce() + Send>;

/// A dependency: operation number `.1` (1-based) of stream `.0`.
pub type Point = (Arc<Stream>, u64);

struct Op {
    deps: Vec<Point>,
    work: Option<Work>,
}

/// A stream's queue of operations (behind the stream's lock).
pub(crate) struct Queue {
    ops: VecDeque<Op>,
    /// Operations issued so far; the last one has this number.
    issued: u64,
    /// Operations completed so far (they complete in order).
    completed: u64,
    /// No more operations will come; the worker exits when the queue is empty.
    closed: bool,
    worker: bool,
}

/// A stream.
pub struct Stream {
    pub ctx_handle: usize,
    pub ctx_id: u64,
    pub device: i32,
    pub kind: StreamKind,
    pub flags: c_uint,
    pub priority: c_int,
    q: Mutex<Queue>,
    cv: Condvar,
}

impl Stream {
    pub fn new(
        ctx_handle: usize,
        ctx_id: u64,
        device: i32,
        kind: StreamKind,
        flags: c_uint,
        priority: c_int,
    ) -> Arc<Stream> {
        Arc::new(Stream {
            ctx_handle,
            ctx_id,
            device,
            kind,
            flags,
            priority,
            q: Mutex::new(Queue {
                ops: VecDeque::new(),
                issued: 0,
                completed: 0,
                closed: false,
                worker: false,
            }),
            cv: Condvar::new(),
        })
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.q.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The queue's lock, for holding it across a fork (see `state/fork.rs`).
    pub(crate) fn lock_queue(&self) -> MutexGuard<'_, Queue> {
        self.queue()
    }

    /// Blocking streams synchronise with the legacy stream.
    pub fn blocking(&self) -> bool {
        matches!(self.kind, StreamKind::PerThread | StreamKind::Blocking)
    }

    /// The number of the last operation issued (0 if none).
    pub fn tail(&self) -> u64 {
        self.queue().issued
    }

    /// Whether operation `seq` has completed.
    pub fn reached(&self, seq: u64) -> bool {
        self.queue().completed >= seq
    }

    /// Whether everything issued has completed.
    pub fn idle(&self) -> bool {
        let q = self.queue();
        q.completed >= q.issued
    }

    /// Blocks until operation `seq` has completed.
    pub fn wait_for(self: &Arc<Self>, seq: u64) {
        let mut q = self.queue();
        if q.completed < seq && !q.worker && !q.ops.is_empty() {
            // Work queued in a forked child, whose worker thread stayed in the parent.
            if self.start_worker(&mut q).is_err() {
                return;
            }
        }
        while q.completed < seq {
            q = self.cv.wait(q).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// No more work will be issued; the worker ends once the queue drains.
    pub fn close(&self) {
        self.queue().closed = true;
        self.cv.notify_all();
    }

    /// Starts the stream's worker thread.
    fn start_worker(self: &Arc<Self>, q: &mut Queue) -> Result<(), Fault> {
        let me = self.clone();
        std::thread::Builder::new()
            .name("cusim-stream".into())
            .spawn(move || run(me))
            .map_err(|_| Fault::HostResources)?;
        q.worker = true;
        Ok(())
    }

    /// Whether the stream was closed (destroyed): no more work will come.
    pub fn closed(&self) -> bool {
        self.queue().closed
    }

    /// Appends an operation that runs `work` (or nothing) once each of `deps` has completed;
    /// returns its number.
    pub fn issue(self: &Arc<Self>, deps: Vec<Point>, work: Option<Work>) -> Result<u64, Fault> {
        self.push(Op { deps, work })
    }

    /// Appends an operation; returns its number.
    fn push(self: &Arc<Self>, op: Op) -> Result<u64, Fault> {
        let mut q = self.queue();
        if !q.worker {
            self.start_worker(&mut q)?;
        }
        q.ops.push_back(op);
        q.issued += 1;
        let seq = q.issued;
        drop(q);
        self.cv.notify_all();
        Ok(seq)
    }
}

/// In a forked child, where the stream's worker thread does not exist: the stream has no worker
/// (the next wait or issue starts one), and an operation the parent's worker had taken but not
/// finished counts as done.
pub(crate) fn forget_worker(q: &mut Queue) {
    q.worker = false;
    q.completed = q.issued - q.ops.len() as u64;
}

/// How long a worker waits for work before its thread ends.
const IDLE_EXIT: Duration = Duration::from_secs(2);

/// The worker of stream `s`.
fn run(s: Arc<Stream>) {
    loop {
        let op = {
            let mut q = s.queue();
            loop {
                if let Some(op) = q.ops.pop_front() {
                    break op;
                }
                if q.closed {
                    q.worker = false;
                    return;
                }
                let (guard, wait) =
                    s.cv.wait_timeout(q, IDLE_EXIT)
                        .unwrap_or_else(|p| p.into_inner());
                q = guard;
                if wait.timed_out() && q.ops.is_empty() {
                    // Idle: end the thread; the next operation starts a new one.
                    q.worker = false;
                    return;
                }
            }
        };
        for (dep, seq) in &op.deps {
            dep.wait_for(*seq);
        }
        if let Some(work) = op.work {
            // A panic in simulated work must not kill the worker and leave waiters hanging.
            let _ = catch_unwind(AssertUnwindSafe(work));
        }
        s.queue().completed += 1;
        s.cv.notify_all();
    }
}

/// Blocks until every stream in `streams` has finished what was issued to it so far.
pub fn wait_all(streams: &[Arc<Stream>]) {
    let targets: Vec<u64> = streams.iter().map(|s| s.tail()).collect();
    for (s, t) in streams.iter().zip(targets) {
        s.wait_for(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn operations_run_in_order_after_their_dependencies() {
        let a = Stream::new(0, 1, 0, StreamKind::NonBlocking, 1, 0);
        let b = Stream::new(0, 1, 0, StreamKind::NonBlocking, 1, 0);
        let log = Arc::new(Mutex::new(Vec::new()));
        let l = log.clone();
        let slow = a
            .push(Op {
                deps: vec![],
                work: Some(Box::new(move || {
                    std::thread::sleep(Duration::from_millis(30));
                    l.lock().unwrap().push("a");
                })),
            })
            .unwrap();
        let l = log.clone();
        let after = b
            .push(Op {
                deps: vec![(a.clone(), slow)],
                work: Some(Box::new(move || l.lock().unwrap().push("b"))),
            })
            .unwrap();
        b.wait_for(after);
        assert_eq!(*log.lock().unwrap(), vec!["a", "b"]);
        assert!(a.idle());
        a.close();
        b.close();
    }

    #[test]
    fn a_panicking_operation_still_completes() {
        let s = Stream::new(0, 1, 0, StreamKind::NonBlocking, 1, 0);
        let n = Arc::new(AtomicU32::new(0));
        s.push(Op {
            deps: vec![],
            work: Some(Box::new(|| panic!("simulated fault"))),
        })
        .unwrap();
        let m = n.clone();
        let seq = s
            .push(Op {
                deps: vec![],
                work: Some(Box::new(move || {
                    m.fetch_add(1, Ordering::SeqCst);
                })),
            })
            .unwrap();
        s.wait_for(seq);
        assert_eq!(n.load(Ordering::SeqCst), 1);
        s.close();
    }
}
