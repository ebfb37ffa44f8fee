//! The state layer: the driver's global state, which owns every family's model, behind one lock;
//! and (one file per family, `impl State` blocks) the operations that need more than one family's
//! model, such as a free that returns a block to its pool or a context's teardown that frees
//! what every family holds for it.
//!
//! The layers: `model/` (each family's types and rules, knowing nothing of this state), this
//! state (importing the models, imported by none of them), and `entries/` (the C entry points,
//! which lock the state and call it). `tests/layers.rs` keeps the imports so.
//!
//! One `Mutex<State>` guards the bookkeeping of every family (devices, contexts, allocations,
//! streams, events, pools, VMM, IPC). It is only ever held for bookkeeping, never while waiting
//! for simulated device work. Each stream has its own queue lock (see `model/stream.rs`).
//!
//! Lock order: the state lock may be taken first and a stream's queue lock inside it; never the
//! other way round. Stream workers run their work holding no lock, so work that needs the state
//! (a stream-ordered free) takes it then.
//!
//! Handles (`CUcontext`, `CUstream`, `CUevent`, `CUmemoryPool`) are opaque numbers in a range no
//! program dereferences; they are never reused, so a stale handle is always recognised as stale.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::errors::Fault;
use crate::model::capture::Capture;
use crate::model::context::Ctx;
use crate::model::device::Device;
use crate::model::event::Event;
use crate::model::memory::Alloc;
use crate::model::peer::PeerAccess;
use crate::model::pool::{Held, Pool};
use crate::model::stream::Stream;
use crate::model::vmm::Vmm;

mod capture;
mod context;
mod device;
mod event;
pub mod fork;
mod ipc;
mod memory;
mod pointer;
mod pool;
mod stream;
mod vmm;

/// The initialised driver.
pub struct Driver {
    state: Mutex<State>,
}

/// All bookkeeping.
pub struct State {
    pub devices: Vec<Device>,
    /// Contexts by handle, destroyed ones included (so their handles are known to be dead).
    pub contexts: HashMap<usize, Ctx>,
    /// Live allocations (device, pitched, managed, async, pinned host, IPC imports) by address.
    /// An allocation leaves the map when it is freed (its address is dead to the program), even
    /// when its memory stays taken for a while (`held`).
    pub allocs: BTreeMap<u64, Alloc>,
    /// Created streams by handle.
    pub streams: HashMap<usize, Arc<Stream>>,
    pub events: HashMap<usize, Arc<Event>>,
    pub pools: HashMap<usize, Pool>,
    pub vmm: Vmm,
    /// Peer access enabled between contexts.
    pub peer_access: PeerAccess,
    /// Stream captures in progress (`model/capture.rs`).
    pub captures: Vec<Capture>,
    /// Synchronous allocations freed with `cuMemFreeAsync` whose stream reached the free: their
    /// memory is still taken until a synchronization releases it (`state/pool.rs`).
    pub held: Vec<Held>,
    next_handle: usize,
    next_id: u64,
}

/// First opaque handle value; handles step by 16 from here.
const HANDLE_BASE: usize = 0x5e00_0000_0000;

static DRIVER: OnceLock<Driver> = OnceLock::new();

/// The driver, or [`Fault::NotInitialized`] before a successful `cuInit`.
pub fn driver() -> Result<&'static Driver, Fault> {
    DRIVER.get().ok_or(Fault::NotInitialized)
}

/// Sets up the driver once, with `build` making the initial state. Later calls return the
/// existing driver.
pub fn init(build: impl FnOnce(&mut State)) -> &'static Driver {
    DRIVER.get_or_init(|| {
        let mut state = State {
            devices: Vec::new(),
            contexts: HashMap::new(),
            allocs: BTreeMap::new(),
            streams: HashMap::new(),
            events: HashMap::new(),
            pools: HashMap::new(),
            vmm: Vmm::default(),
            peer_access: PeerAccess::default(),
            captures: Vec::new(),
            held: Vec::new(),
            next_handle: HANDLE_BASE,
            next_id: 1,
        };
        build(&mut state);
        Driver {
            state: Mutex::new(state),
        }
    })
}

impl Driver {
    /// Locks the state. A panic that happened while it was held does not make it unusable: the
    /// panicking entry already returned `CUDA_ERROR_UNKNOWN`.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl State {
    /// A fresh opaque handle.
    pub fn new_handle(&mut self) -> usize {
        self.next_handle += 16;
        self.next_handle
    }

    /// A fresh identifier (context ids, buffer ids, VMM handles). Never 0.
    pub fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// The device with ordinal `dev`.
    pub fn device(&self, dev: i32) -> Result<&Device, Fault> {
        usize::try_from(dev)
            .ok()
            .and_then(|i| self.devices.get(i))
            .ok_or(Fault::BadDevice)
    }

    /// The device with ordinal `dev`, mutably.
    pub fn device_mut(&mut self, dev: i32) -> Result<&mut Device, Fault> {
        usize::try_from(dev)
            .ok()
            .and_then(|i| self.devices.get_mut(i))
            .ok_or(Fault::BadDevice)
    }
}
