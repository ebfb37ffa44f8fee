//! Every context the program used: primary or created, its device, and whether (and how) it was
//! destroyed. A primary context keeps its handle across a reset, so each incarnation of a handle
//! gets its own id.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::driver::Entry;
use crate::process::global::lock;

/// One context incarnation.
#[derive(Clone, Debug)]
pub struct ContextInfo {
    /// Small id, unique in the report.
    pub id: u32,
    pub handle: u64,
    pub device: i32,
    pub primary: bool,
    pub destroyed: bool,
    /// The entry that destroyed it.
    pub destroyed_by: Option<Entry>,
    pub created_ms: u64,
    pub destroyed_ms: Option<u64>,
    /// Stack id of its creation, or [`NONE`].
    pub stack: u32,
    /// Device memory its creation took (device memory in use just after, less just before, as
    /// NVML says), when it could be measured.
    pub overhead_bytes: Option<u64>,
}

/// A device the program used.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    pub ordinal: i32,
    pub name: String,
    pub total_bytes: u64,
    /// Its UUID as `nvidia-smi` prints it, when the driver gives one.
    pub uuid: Option<String>,
}

#[derive(Default)]
struct Inner {
    list: Vec<ContextInfo>,
    /// Live incarnation of each handle: index into `list`.
    by_handle: HashMap<u64, usize>,
    devices: Vec<DeviceInfo>,
}

/// The context table.
pub struct Contexts {
    inner: Mutex<Inner>,
    /// Bumped whenever a handle stops naming its incarnation, so per-thread caches refresh.
    generation: AtomicU64,
}

impl Contexts {
    pub(super) fn new() -> Self {
        Contexts {
            inner: Mutex::new(Inner::default()),
            generation: AtomicU64::new(1),
        }
    }

    /// Records a context (or returns the live incarnation already recorded for `handle`).
    pub fn register(&self, handle: u64, device: i32, primary: bool, stack: u32) -> u32 {
        let new_device;
        let id = {
            let mut inner = lock(&self.inner);
            if let Some(&i) = inner.by_handle.get(&handle) {
                return inner.list[i].id;
            }
            let id = inner.list.len() as u32;
            inner.list.push(ContextInfo {
                id,
                handle,
                device,
                primary,
                destroyed: false,
                destroyed_by: None,
                created_ms: crate::process::clock::since_start_ms(),
                destroyed_ms: None,
                stack,
                overhead_bytes: None,
            });
            inner.by_handle.insert(handle, id as usize);
            new_device = !inner.devices.iter().any(|d| d.ordinal == device);
            id
        };
        if new_device && device >= 0 {
            self.note_device(device);
        }
        id
    }

    /// Records what creating the live incarnation of `handle` took.
    pub fn set_overhead(&self, handle: u64, bytes: u64) {
        let mut inner = lock(&self.inner);
        if let Some(&i) = inner.by_handle.get(&handle) {
            inner.list[i].overhead_bytes = Some(bytes);
        }
    }

    /// The id and device of the live incarnation of `handle`.
    #[inline(always)]
    pub fn lookup(&self, handle: u64) -> Option<(u32, i32)> {
        self.lookup_in(crate::process::local::get(), handle)
    }

    /// [`Self::lookup`] on the thread whose words `l` are (already looked up:
    /// `process::local`).
    #[inline(always)]
    pub fn lookup_in(
        &self,
        l: Option<&crate::process::local::Local>,
        handle: u64,
    ) -> Option<(u32, i32)> {
        let generation = self.generation.load(Ordering::Acquire);
        // (generation, handle, id, device) of the last lookup on this thread.
        if let Some((g, h, id, dev)) = l.map(|l| l.context.get())
            && g == generation
            && h == handle
        {
            return Some((id, dev));
        }
        self.lookup_table(handle, generation)
    }

    /// [`Self::lookup`] in the table, remembered for the thread's next look-up.
    #[inline(never)]
    fn lookup_table(&self, handle: u64, generation: u64) -> Option<(u32, i32)> {
        let found = {
            let inner = lock(&self.inner);
            inner
                .by_handle
                .get(&handle)
                .map(|&i| (inner.list[i].id, inner.list[i].device))
        };
        if let Some((id, dev)) = found
            && let Some(l) = crate::process::local::get()
        {
            l.context.set((generation, handle, id, dev));
        }
        found
    }

    /// Marks the live incarnation of `handle` destroyed by `by`; returns its id.
    pub fn destroy(&self, handle: u64, by: Entry) -> Option<u32> {
        let mut inner = lock(&self.inner);
        let i = inner.by_handle.remove(&handle)?;
        let c = &mut inner.list[i];
        c.destroyed = true;
        c.destroyed_by = Some(by);
        c.destroyed_ms = Some(crate::process::clock::since_start_ms());
        self.generation.fetch_add(1, Ordering::AcqRel);
        Some(c.id)
    }

    /// The live primary context of `device`: (id, handle).
    pub fn live_primary(&self, device: i32) -> Option<(u32, u64)> {
        let inner = lock(&self.inner);
        inner
            .by_handle
            .values()
            .map(|&i| &inner.list[i])
            .find(|c| c.primary && c.device == device)
            .map(|c| (c.id, c.handle))
    }

    /// Every context incarnation, in id order.
    pub fn snapshot(&self) -> Vec<ContextInfo> {
        lock(&self.inner).list.clone()
    }

    /// Every device seen.
    pub fn devices(&self) -> Vec<DeviceInfo> {
        let mut d = lock(&self.inner).devices.clone();
        d.sort_by_key(|d| d.ordinal);
        d
    }

    /// Records a device's name, size and UUID (asked of the driver once, when first seen).
    pub fn note_device(&self, ordinal: i32) {
        if lock(&self.inner)
            .devices
            .iter()
            .any(|d| d.ordinal == ordinal)
        {
            return;
        }
        let mut name = String::new();
        let mut total = 0usize;
        if let Some(f) = crate::driver::real::cuDeviceGetName() {
            let mut buf = [0 as std::ffi::c_char; 256];
            // SAFETY: buf has the length passed; the driver NUL-terminates within it.
            if unsafe { f(buf.as_mut_ptr(), buf.len() as i32, ordinal) } == 0 {
                // SAFETY: NUL-terminated by the driver (and the last byte is still 0).
                name = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
                    .to_string_lossy()
                    .into_owned();
            }
        }
        if let Some(f) = crate::driver::real::cuDeviceTotalMem_v2() {
            // SAFETY: total is a valid out-parameter.
            unsafe { f(&mut total, ordinal) };
        }
        let uuid = crate::driver::device_uuid::uuid(ordinal);
        let mut inner = lock(&self.inner);
        if !inner.devices.iter().any(|d| d.ordinal == ordinal) {
            inner.devices.push(DeviceInfo {
                ordinal,
                name,
                total_bytes: total as u64,
                uuid,
            });
        }
    }
}
