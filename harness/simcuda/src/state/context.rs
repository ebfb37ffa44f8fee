//! The context family's operations on the state: finding the current context or one named by a
//! handle, activating a primary context, and tearing a context down, which frees what every other
//! family holds for it (allocations, pools, events, peer access, streams, captures).
//!
//! A destroyed context passed as an argument is [`Fault::DestroyedContextHandle`], a handle never
//! made [`Fault::UnknownContextHandle`], and a destroyed context still current on some thread is
//! [`Fault::CurrentContextDestroyed`]. Destroying a context (`cuCtxDestroy_v2`, the last
//! `cuDevicePrimaryCtxRelease`, `cuDevicePrimaryCtxReset`) waits for its streams to drain and
//! then frees all it owns: allocations of every kind, pinned host memory, pools it created,
//! streams and events.

use std::sync::Arc;

use super::{Driver, State};
use crate::errors::Fault;
use crate::model::context::{Ctx, CtxRef, current_handle};
use crate::model::stream::{self, Stream, StreamKind};

/// A context being torn down: what must drain and be freed once the state lock is released.
pub struct Teardown {
    id: u64,
    device: i32,
    streams: Vec<Arc<Stream>>,
}

impl State {
    /// The context current on the calling thread.
    pub fn current(&self) -> Result<CtxRef, Fault> {
        let handle = current_handle().ok_or(Fault::NoContext)?;
        match self.contexts.get(&handle) {
            Some(c) if c.alive => Ok(c.as_ref()),
            Some(_) => Err(Fault::CurrentContextDestroyed),
            None => Err(Fault::NoContext),
        }
    }

    /// The context with handle `h` (an argument of the call), alive or not.
    pub fn known_context(&self, h: usize) -> Result<&Ctx, Fault> {
        self.contexts.get(&h).ok_or(Fault::UnknownContextHandle)
    }

    /// The live context with handle `h` (an argument of the call).
    pub fn context_by_handle(&self, h: usize) -> Result<CtxRef, Fault> {
        let c = self.known_context(h)?;
        if c.alive {
            Ok(c.as_ref())
        } else {
            Err(Fault::DestroyedContextHandle)
        }
    }

    /// The current context if one is current; `Ok(None)` if none is. A dead current context is
    /// still [`Fault::CurrentContextDestroyed`].
    pub fn current_if_any(&self) -> Result<Option<CtxRef>, Fault> {
        match self.current() {
            Ok(c) => Ok(Some(c)),
            Err(Fault::NoContext) => Ok(None),
            Err(f) => Err(f),
        }
    }

    /// Checks a handle about to become current: alive, or a primary context (an inactive
    /// primary may be made current; using it fails later).
    pub fn check_bindable(&self, h: usize) -> Result<(), Fault> {
        let c = self.known_context(h)?;
        if c.alive || c.primary {
            Ok(())
        } else {
            Err(Fault::DestroyedContextHandle)
        }
    }

    /// Context `h` if given (non-zero), else the current context.
    pub fn given_or_current(&self, h: usize) -> Result<CtxRef, Fault> {
        if h == 0 {
            self.current()
        } else {
            self.context_by_handle(h)
        }
    }

    /// Adds the (inactive) primary context of device `dev`; returns its handle.
    pub fn new_primary(&mut self, dev: i32) -> usize {
        let handle = self.new_handle();
        self.contexts.insert(handle, Ctx::new(handle, dev, true, 0));
        handle
    }

    /// Makes the context `handle` alive with a fresh id and legacy stream.
    pub fn activate(&mut self, handle: usize) {
        let id = self.new_id();
        let Some(ctx) = self.contexts.get_mut(&handle) else {
            return;
        };
        let legacy = Stream::new(handle, id, ctx.device, StreamKind::Legacy, 0, 0);
        ctx.id = id;
        ctx.alive = true;
        ctx.legacy = Some(legacy.clone());
        ctx.streams = vec![legacy];
    }

    /// Marks the context `handle` dead and takes its streams; the caller finishes with
    /// [`Driver::finish_teardown`] once the state lock is released.
    pub fn begin_teardown(&mut self, handle: usize) -> Option<Teardown> {
        let ctx = self.contexts.get_mut(&handle)?;
        if !ctx.alive {
            return None;
        }
        ctx.alive = false;
        ctx.legacy = None;
        Some(Teardown {
            id: ctx.id,
            device: ctx.device,
            streams: std::mem::take(&mut ctx.streams),
        })
    }

    /// The streams of context `handle` in its activation `id`.
    pub fn streams_of(&self, handle: usize, id: u64) -> Vec<Arc<Stream>> {
        match self.contexts.get(&handle) {
            Some(c) if c.alive && c.id == id => c.streams.clone(),
            _ => Vec::new(),
        }
    }

    /// The streams of every live context on device `dev`.
    pub fn streams_of_device(&self, dev: i32) -> Vec<Arc<Stream>> {
        self.contexts
            .values()
            .filter(|c| c.alive && c.device == dev)
            .flat_map(|c| c.streams.iter().cloned())
            .collect()
    }
}

impl Driver {
    /// Waits for the dead context's work to finish, then frees everything it owned.
    pub fn finish_teardown(&self, t: Teardown) {
        stream::wait_all(&t.streams);
        let mut st = self.lock();
        st.release_context_allocs(t.id);
        st.release_context_pools(t.id, t.device);
        st.events.retain(|_, e| e.ctx_id != t.id);
        st.peer_access.release_context(t.id);
        st.streams.retain(|_, s| s.ctx_id != t.id);
        for s in &t.streams {
            st.stream_gone(Arc::as_ptr(s) as usize);
            s.close();
        }
    }

    /// Waits for every stream of context `c`, then lets the device release what stream-ordered
    /// frees gave back (as any synchronisation does on the real driver: `state/pool.rs`,
    /// `synchronized`).
    pub fn synchronize_context(&self, c: CtxRef) {
        let streams = self.lock().streams_of(c.handle, c.id);
        stream::wait_all(&streams);
        self.lock().synchronized(c.device);
    }

    /// Blocks until all work issued so far on device `dev` has finished (what `cuMemFree_v2`
    /// does).
    pub fn wait_device(&self, dev: i32) {
        let streams = self.lock().streams_of_device(dev);
        stream::wait_all(&streams);
    }
}
