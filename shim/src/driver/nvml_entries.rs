//! The real NVML entries behind the shim's NVML stand-ins: `nvmlDeviceGetMemoryInfo`,
//! `nvmlDeviceGetMemoryInfo_v2`, and `nvmlDeviceGetUUID` (to tell which device a handle is).
//!
//! Two ways to them, both through the real `dlsym` (never the shim's own export):
//!
//! - the `dlsym` door records what the program's own lookup found on its NVML handle
//!   ([`record`]): pynvml opens `libnvidia-ml.so.1` with `RTLD_LOCAL`, so nothing after the shim
//!   in the global scope would find it;
//! - otherwise the first definition after the shim (`RTLD_NEXT`), which is NVML's when the
//!   program links it (`-lnvidia-ml`). Found once, then kept.
//!
//! Nothing here loads NVML or calls it; [`super::nvml`] is the shim's own NVML, for the report.

use std::ffi::{CStr, c_char, c_uint, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::nvml::{Device, Memory, MemoryV2, NVML_SUCCESS, NvmlReturn};

/// The signature of `nvmlDeviceGetMemoryInfo`.
pub type MemoryInfoFn = unsafe extern "C" fn(Device, *mut Memory) -> NvmlReturn;
/// The signature of `nvmlDeviceGetMemoryInfo_v2`.
pub type MemoryInfoV2Fn = unsafe extern "C" fn(Device, *mut MemoryV2) -> NvmlReturn;
type UuidFn = unsafe extern "C" fn(Device, *mut c_char, c_uint) -> NvmlReturn;

/// An NVML entry the shim stands in for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NvmlEntry {
    MemoryInfo,
    MemoryInfoV2,
}

impl NvmlEntry {
    /// The entry of this exported name, if the shim stands in for it.
    pub fn named(name: &[u8]) -> Option<NvmlEntry> {
        match name {
            b"nvmlDeviceGetMemoryInfo" => Some(NvmlEntry::MemoryInfo),
            b"nvmlDeviceGetMemoryInfo_v2" => Some(NvmlEntry::MemoryInfoV2),
            _ => None,
        }
    }

    fn c_name(self) -> &'static CStr {
        match self {
            NvmlEntry::MemoryInfo => c"nvmlDeviceGetMemoryInfo",
            NvmlEntry::MemoryInfoV2 => c"nvmlDeviceGetMemoryInfo_v2",
        }
    }

    fn slot(self) -> &'static AtomicUsize {
        match self {
            NvmlEntry::MemoryInfo => &MEMORY_INFO,
            NvmlEntry::MemoryInfoV2 => &MEMORY_INFO_V2,
        }
    }
}

/// Real addresses, 0 until known.
static MEMORY_INFO: AtomicUsize = AtomicUsize::new(0);
static MEMORY_INFO_V2: AtomicUsize = AtomicUsize::new(0);
static UUID: AtomicUsize = AtomicUsize::new(0);

/// The program's lookup of `entry` on `handle` found `found` (NVML's own): keeps it, and
/// `nvmlDeviceGetUUID` of the same handle if none is known yet.
pub fn record(handle: *mut c_void, entry: NvmlEntry, found: *mut c_void) {
    if found.is_null() {
        return;
    }
    entry.slot().store(found as usize, Ordering::Release);
    if UUID.load(Ordering::Acquire) == 0
        && let Some(dlsym) = super::loader::real_dlsym()
    {
        // SAFETY: the program's own handle, which its lookup just used; a NUL-terminated name.
        let uuid = unsafe { dlsym(handle, c"nvmlDeviceGetUUID".as_ptr()) };
        if !uuid.is_null() {
            UUID.store(uuid as usize, Ordering::Release);
        }
    }
}

/// The address in `slot`, else the definition of `name` after the shim, kept in `slot`; 0 when
/// there is none.
fn address(slot: &AtomicUsize, name: &CStr) -> usize {
    let known = slot.load(Ordering::Acquire);
    if known != 0 {
        return known;
    }
    let Some(dlsym) = super::loader::real_dlsym() else {
        return 0;
    };
    // SAFETY: RTLD_NEXT from the shim's own code finds the next definition after the shim; the
    // name is NUL-terminated.
    let p = unsafe { dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    if p != 0 {
        let _ = slot.compare_exchange(0, p, Ordering::AcqRel, Ordering::Acquire);
    }
    slot.load(Ordering::Acquire)
}

/// Whether the real `entry` can be found.
pub fn is_known(entry: NvmlEntry) -> bool {
    address(entry.slot(), entry.c_name()) != 0
}

/// The real `nvmlDeviceGetMemoryInfo`, if NVML can be found.
pub fn memory_info() -> Option<MemoryInfoFn> {
    let p = address(&MEMORY_INFO, NvmlEntry::MemoryInfo.c_name());
    // SAFETY: a non-zero address is NVML's export of that name, with this C signature.
    (p != 0).then(|| unsafe { std::mem::transmute::<usize, MemoryInfoFn>(p) })
}

/// The real `nvmlDeviceGetMemoryInfo_v2`, if NVML can be found.
pub fn memory_info_v2() -> Option<MemoryInfoV2Fn> {
    let p = address(&MEMORY_INFO_V2, NvmlEntry::MemoryInfoV2.c_name());
    // SAFETY: a non-zero address is NVML's export of that name, with this C signature.
    (p != 0).then(|| unsafe { std::mem::transmute::<usize, MemoryInfoV2Fn>(p) })
}

/// The UUID of NVML device `device` (`GPU-…`), as NVML says it; `None` when NVML's
/// `nvmlDeviceGetUUID` cannot be found or refuses.
pub fn uuid(device: Device) -> Option<String> {
    let p = address(&UUID, c"nvmlDeviceGetUUID");
    if p == 0 {
        return None;
    }
    // SAFETY: a non-zero address is NVML's export of that name, with this C signature.
    let f = unsafe { std::mem::transmute::<usize, UuidFn>(p) };
    // NVML_DEVICE_UUID_V2_BUFFER_SIZE.
    let mut text = [0 as c_char; 96];
    // SAFETY: the program's device handle, and a buffer of the length given.
    if unsafe { f(device, text.as_mut_ptr(), text.len() as c_uint) } != NVML_SUCCESS {
        return None;
    }
    text[text.len() - 1] = 0;
    // SAFETY: NUL-terminated (the last byte at the latest).
    let s = unsafe { CStr::from_ptr(text.as_ptr()) };
    Some(s.to_string_lossy().into_owned())
}
