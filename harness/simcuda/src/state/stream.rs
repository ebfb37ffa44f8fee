//! The stream family's operations on the state: issuing an operation with the implicit
//! dependencies of the legacy default stream (which needs the stream's context), and naming the
//! stream a `CUstream` argument means (the legacy stream, the calling thread's per-thread stream,
//! or a created stream).

use std::cell::RefCell;
use std::sync::Arc;

use super::State;
use crate::errors::Fault;
use crate::ffi::consts::{CU_STREAM_DEFAULT, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD};
use crate::model::stream::{Point, Stream, StreamKind, Work};

thread_local! {
    /// This thread's per-thread default streams, by context id.
    static PER_THREAD: RefCell<Vec<(u64, Arc<Stream>)>> = const { RefCell::new(Vec::new()) };
}

impl State {
    /// Issues an operation on `s`: `work` (or nothing) after the implicit dependencies of the
    /// stream's kind and `extra`. Returns the operation's number.
    pub fn submit(
        &self,
        s: &Arc<Stream>,
        extra: Option<Point>,
        work: Option<Work>,
    ) -> Result<u64, Fault> {
        let ctx = self
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
        s.issue(deps, work)
    }

    /// The calling thread's per-thread default stream in the current context.
    fn per_thread_stream(&mut self) -> Result<Arc<Stream>, Fault> {
        let c = self.current()?;
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
        if let Some(ctx) = self.contexts.get_mut(&c.handle) {
            ctx.streams.push(s.clone());
        }
        let _ = PER_THREAD.try_with(|m| {
            let mut m = m.borrow_mut();
            m.retain(|(_, s)| !s.closed());
            m.push((c.id, s.clone()));
        });
        Ok(s)
    }

    /// The stream a `CUstream` argument `h` names. Handle 0 is the legacy stream, or the
    /// per-thread stream for the `_ptsz`/`_ptds` entries (`per_thread_default`).
    pub fn resolve_stream(
        &mut self,
        h: usize,
        per_thread_default: bool,
    ) -> Result<Arc<Stream>, Fault> {
        match h {
            0 if per_thread_default => self.per_thread_stream(),
            0 | CU_STREAM_LEGACY => {
                let c = self.current()?;
                self.contexts[&c.handle]
                    .legacy
                    .clone()
                    .ok_or(Fault::CurrentContextDestroyed)
            }
            CU_STREAM_PER_THREAD => self.per_thread_stream(),
            handle => self.streams.get(&handle).cloned().ok_or(Fault::BadStream),
        }
    }
}
