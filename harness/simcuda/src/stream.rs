//! Streams and the simulated device work that runs on them.
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
//! Operations are issued with the state lock held (which orders all issues); workers run holding
//! no lock.

use std::collections::VecDeque;
use std::ffi::{c_int, c_uint};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::context::{self, STREAM_PRIORITY_GREATEST, STREAM_PRIORITY_LEAST};
use crate::errors::Fault;
use crate::event;
use crate::ffi::consts::{
    CU_EVENT_WAIT_DEFAULT, CU_EVENT_WAIT_EXTERNAL, CU_STREAM_DEFAULT, CU_STREAM_LEGACY,
    CU_STREAM_NON_BLOCKING, CU_STREAM_PER_THREAD,
};
use crate::ffi::{CUevent, CUresult, CUstream, guard, need, put};
use crate::pool;
use crate::state::{self, Driver, State};

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

    /// The queue's lock, for holding it across a fork (see `fork.rs`).
    pub(crate) fn lock_queue(&self) -> MutexGuard<'_, Queue> {
        self.queue()
    }

    /// Blocking streams synchronise with the legacy stream.
    fn blocking(&self) -> bool {
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

/// Issues an operation on `s`: `work` (or nothing) after the implicit dependencies of the
/// stream's kind and `extra`. Returns the operation's number.
pub fn submit(
    st: &State,
    s: &Arc<Stream>,
    extra: Option<Point>,
    work: Option<Work>,
) -> Result<u64, Fault> {
    let ctx = st
        .contexts
        .get(&s.ctx_handle)
        .filter(|c| c.alive && c.id == s.ctx_id)
        .ok_or(Fault::BadStream)?;
    let mut deps: Vec<Point> = Vec::new();
    match s.kind {
        StreamKind::Legacy => {
            for t in ctx.streams.iter().filter(|t| t.blocking()) {
                let tail = t.tail();
                if !t.reached(tail) {
                    deps.push((t.clone(), tail));
                }
            }
        }
        StreamKind::PerThread | StreamKind::Blocking => {
            if let Some(l) = &ctx.legacy {
                let tail = l.tail();
                if !l.reached(tail) {
                    deps.push((l.clone(), tail));
                }
            }
        }
        StreamKind::NonBlocking => {}
    }
    if let Some((t, seq)) = extra
        && !t.reached(seq)
    {
        deps.push((t, seq));
    }
    s.push(Op { deps, work })
}

thread_local! {
    /// This thread's per-thread default streams, by context id.
    static PER_THREAD: std::cell::RefCell<Vec<(u64, Arc<Stream>)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The calling thread's per-thread default stream in the current context.
fn per_thread(st: &mut State) -> Result<Arc<Stream>, Fault> {
    let c = context::current(st)?;
    let found = PER_THREAD.try_with(|m| {
        m.borrow()
            .iter()
            .find(|(id, _)| *id == c.id)
            .map(|(_, s)| s.clone())
    });
    if let Ok(Some(s)) = found {
        return Ok(s);
    }
    let s = Stream::new(
        c.handle,
        c.id,
        c.device,
        StreamKind::PerThread,
        CU_STREAM_DEFAULT,
        0,
    );
    if let Some(ctx) = st.contexts.get_mut(&c.handle) {
        ctx.streams.push(s.clone());
    }
    let _ = PER_THREAD.try_with(|m| {
        let mut m = m.borrow_mut();
        m.retain(|(_, s)| !s.queue().closed);
        m.push((c.id, s.clone()));
    });
    Ok(s)
}

/// The stream a `CUstream` argument names. Handle 0 is the legacy stream, or the per-thread
/// stream for the `_ptsz`/`_ptds` entries (`per_thread`).
pub fn resolve(
    st: &mut State,
    h: CUstream,
    per_thread_default: bool,
) -> Result<Arc<Stream>, Fault> {
    match h as usize {
        0 if per_thread_default => per_thread(st),
        0 | CU_STREAM_LEGACY => {
            let c = context::current(st)?;
            st.contexts[&c.handle]
                .legacy
                .clone()
                .ok_or(Fault::CurrentContextDestroyed)
        }
        CU_STREAM_PER_THREAD => per_thread(st),
        handle => st.streams.get(&handle).cloned().ok_or(Fault::BadStream),
    }
}

/// Blocks until every stream in `streams` has finished what was issued to it so far.
pub fn wait_all(streams: &[Arc<Stream>]) {
    let targets: Vec<u64> = streams.iter().map(|s| s.tail()).collect();
    for (s, t) in streams.iter().zip(targets) {
        s.wait_for(t);
    }
}

/// Blocks until all work issued so far on device `dev` has finished (what `cuMemFree_v2` does).
pub fn wait_device(drv: &Driver, dev: i32) {
    let streams = context::streams_of_device(&drv.lock(), dev);
    wait_all(&streams);
}

/// Synchronises with stream `h`: for the legacy stream this includes the blocking streams'
/// earlier work. Then the device releases what stream-ordered frees on that stream gave back
/// (`pool::stream_synchronized`).
fn synchronize(h: CUstream, per_thread_default: bool) -> Result<(), Fault> {
    let drv = state::driver()?;
    let (s, target) = {
        let mut st = drv.lock();
        let s = resolve(&mut st, h, per_thread_default)?;
        let target = if s.kind == StreamKind::Legacy {
            submit(&st, &s, None, None)?
        } else {
            s.tail()
        };
        (s, target)
    };
    s.wait_for(target);
    pool::stream_synchronized(&mut drv.lock(), &s);
    Ok(())
}

fn query(h: CUstream, per_thread_default: bool) -> Result<(), Fault> {
    let drv = state::driver()?;
    let s = resolve(&mut drv.lock(), h, per_thread_default)?;
    if s.idle() {
        Ok(())
    } else {
        Err(Fault::NotReady)
    }
}

fn wait_event(
    h: CUstream,
    ev: CUevent,
    flags: c_uint,
    per_thread_default: bool,
) -> Result<(), Fault> {
    let drv = state::driver()?;
    let mut st = drv.lock();
    let s = resolve(&mut st, h, per_thread_default)?;
    let e = event::lookup(&st, ev)?;
    if flags != CU_EVENT_WAIT_DEFAULT && flags != CU_EVENT_WAIT_EXTERNAL {
        return Err(Fault::BadFlags);
    }
    if let Some(point) = e.target() {
        submit(&st, &s, Some(point), None)?;
    }
    Ok(())
}

fn create(ph: *mut CUstream, flags: c_uint, priority: c_int) -> Result<(), Fault> {
    let drv = state::driver()?;
    need(ph)?;
    if flags != CU_STREAM_DEFAULT && flags != CU_STREAM_NON_BLOCKING {
        return Err(Fault::BadFlags);
    }
    let mut st = drv.lock();
    let c = context::current(&st)?;
    let handle = st.new_handle();
    let kind = if flags == CU_STREAM_NON_BLOCKING {
        StreamKind::NonBlocking
    } else {
        StreamKind::Blocking
    };
    let priority = priority.clamp(STREAM_PRIORITY_GREATEST, STREAM_PRIORITY_LEAST);
    let s = Stream::new(c.handle, c.id, c.device, kind, flags, priority);
    st.streams.insert(handle, s.clone());
    if let Some(ctx) = st.contexts.get_mut(&c.handle) {
        ctx.streams.push(s);
    }
    // SAFETY: checked non-null; writable by the caller's contract.
    unsafe { put(ph, handle as CUstream) }
}

/// `cuStreamCreate`: `Flags` is `CU_STREAM_DEFAULT` or `CU_STREAM_NON_BLOCKING`.
///
/// # Safety
/// `phStream` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreate(phStream: *mut CUstream, Flags: c_uint) -> CUresult {
    guard("cuStreamCreate", || create(phStream, Flags, 0))
}

/// `cuStreamCreateWithPriority`: the priority is clamped to the context's range.
///
/// # Safety
/// `phStream` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreateWithPriority(
    phStream: *mut CUstream,
    flags: c_uint,
    priority: c_int,
) -> CUresult {
    guard("cuStreamCreateWithPriority", || {
        create(phStream, flags, priority)
    })
}

/// Destroys a created stream; work already issued still runs.
fn destroy(hStream: CUstream) -> Result<(), Fault> {
    let drv = state::driver()?;
    let mut st = drv.lock();
    let h = hStream as usize;
    let s = st.streams.remove(&h).ok_or(Fault::BadStream)?;
    crate::capture::stream_gone(&mut st, Arc::as_ptr(&s) as usize);
    s.close();
    if let Some(ctx) = st.contexts.get_mut(&s.ctx_handle) {
        // Forget streams that are closed and drained.
        ctx.streams.retain(|t| !(t.queue().closed && t.idle()));
    }
    Ok(())
}

/// `cuStreamDestroy_v2`: returns at once; work already issued still runs.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamDestroy_v2(hStream: CUstream) -> CUresult {
    guard("cuStreamDestroy_v2", || destroy(hStream))
}

/// `cuStreamDestroy` (the CUDA 2.0 entry): as `cuStreamDestroy_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamDestroy(hStream: CUstream) -> CUresult {
    guard("cuStreamDestroy", || destroy(hStream))
}

/// `cuStreamSynchronize`.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamSynchronize(hStream: CUstream) -> CUresult {
    guard("cuStreamSynchronize", || synchronize(hStream, false))
}

/// `cuStreamSynchronize_ptsz`: handle 0 is the per-thread default stream.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamSynchronize_ptsz(hStream: CUstream) -> CUresult {
    guard("cuStreamSynchronize_ptsz", || synchronize(hStream, true))
}

/// `cuStreamQuery`: `CUDA_SUCCESS` when idle, `CUDA_ERROR_NOT_READY` otherwise.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamQuery(hStream: CUstream) -> CUresult {
    guard("cuStreamQuery", || query(hStream, false))
}

/// `cuStreamQuery_ptsz`.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamQuery_ptsz(hStream: CUstream) -> CUresult {
    guard("cuStreamQuery_ptsz", || query(hStream, true))
}

/// `cuStreamWaitEvent`: later work on the stream waits for the event's recorded point (an event
/// never recorded is already complete).
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamWaitEvent(hStream: CUstream, hEvent: CUevent, Flags: c_uint) -> CUresult {
    guard("cuStreamWaitEvent", || {
        wait_event(hStream, hEvent, Flags, false)
    })
}

/// `cuStreamWaitEvent_ptsz`.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamWaitEvent_ptsz(
    hStream: CUstream,
    hEvent: CUevent,
    Flags: c_uint,
) -> CUresult {
    guard("cuStreamWaitEvent_ptsz", || {
        wait_event(hStream, hEvent, Flags, true)
    })
}

fn get_flags(h: CUstream, out: *mut c_uint, per_thread_default: bool) -> Result<(), Fault> {
    let drv = state::driver()?;
    need(out)?;
    let s = resolve(&mut drv.lock(), h, per_thread_default)?;
    // SAFETY: checked non-null; writable by the caller's contract.
    unsafe { put(out, s.flags) }
}

fn get_priority(h: CUstream, out: *mut c_int, per_thread_default: bool) -> Result<(), Fault> {
    let drv = state::driver()?;
    need(out)?;
    let s = resolve(&mut drv.lock(), h, per_thread_default)?;
    // SAFETY: checked non-null; writable by the caller's contract.
    unsafe { put(out, s.priority) }
}

/// `cuStreamGetFlags`.
///
/// # Safety
/// `flags` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamGetFlags(hStream: CUstream, flags: *mut c_uint) -> CUresult {
    guard("cuStreamGetFlags", || get_flags(hStream, flags, false))
}

/// `cuStreamGetFlags_ptsz`.
///
/// # Safety
/// `flags` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamGetFlags_ptsz(hStream: CUstream, flags: *mut c_uint) -> CUresult {
    guard("cuStreamGetFlags_ptsz", || get_flags(hStream, flags, true))
}

/// `cuStreamGetPriority`.
///
/// # Safety
/// `priority` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamGetPriority(hStream: CUstream, priority: *mut c_int) -> CUresult {
    guard("cuStreamGetPriority", || {
        get_priority(hStream, priority, false)
    })
}

/// `cuStreamGetPriority_ptsz`.
///
/// # Safety
/// `priority` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamGetPriority_ptsz(
    hStream: CUstream,
    priority: *mut c_int,
) -> CUresult {
    guard("cuStreamGetPriority_ptsz", || {
        get_priority(hStream, priority, true)
    })
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
