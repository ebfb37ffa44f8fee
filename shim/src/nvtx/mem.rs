//! NVTX's memory extension (`nvToolsExtMem.h`, `nvtxDetail/nvtxExtImplMem_v1.h`), the calls the
//! pool makes: a heap per chunk, a region per block. The tool's
//! `InitializeInjectionNvtxExtension` is given the module's description ([`ModuleInfo`]: module
//! id 1, compatibility id `0x0102`, one segment of 63 function slots) and fills the slots of the
//! functions it implements, by callback id.
//!
//! Two numberings of the callback ids are in use, with the same compatibility id: NVIDIA/NVTX's
//! headers from 3.2 on number them from 1 ("CBID 0 is invalid": `nvtxMemHeapRegister` 1,
//! `nvtxMemHeapUnregister` 2, `nvtxMemRegionsRegister` 4, `nvtxMemRegionsUnregister` 6), while
//! the headers CUDA 13.0 ships (`/usr/local/cuda/include/nvtx3/nvToolsExtMem.h`), and so
//! compute-sanitizer 13.0, number them from 0 (`nvtxMemHeapRegister` 0, `nvtxMemHeapUnregister`
//! 1, ...: the same order, one less). A tool of the older numbering fills slot 0, which the newer
//! leaves empty; [`attach`] reads which one the tool used from that and calls its functions at
//! their places. (Calling slot 1 of a 0-numbered tool as its heap registration was the H200's
//! "Call to nvtxMemHeapUnregister failed: One or more of the parameters is invalid", and its
//! crash: run 11.)

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::core::NVTX_VERSION;

/// `NVTX_EXT_MODULEID_MEM`.
pub const MODULE_ID: u16 = 1;
/// `NVTX_EXT_COMPATID_MEM`.
pub const COMPAT_ID: u16 = 0x0102;
/// `NVTX_EXT_MEM_SLOT_COUNT`.
const SLOT_COUNT: usize = 63;

// `NvtxExtMemCallbackId`.
const CBID_HEAP_REGISTER: usize = 1;
const CBID_HEAP_UNREGISTER: usize = 2;
const CBID_REGIONS_REGISTER: usize = 4;
const CBID_REGIONS_UNREGISTER: usize = 6;

// `NVTX_EXTENSION_FRESH` and `NVTX_EXTENSION_DISABLED`: what a slot holds when the tool left it.
const FRESH: usize = 0;
const DISABLED: usize = 1;

/// `NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR`: nothing in the heap may be touched but its regions.
const USAGE_SUB_ALLOCATOR: u32 = 1;
/// `NVTX_MEM_TYPE_VIRTUAL_ADDRESS`.
const TYPE_VIRTUAL_ADDRESS: u32 = 1;
/// `NVTX_MEM_REGION_REF_TYPE_POINTER`.
const REF_POINTER: u32 = 1;
/// `NVTX_MESSAGE_TYPE_ASCII`.
const MESSAGE_ASCII: u32 = 1;

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: AtomicUsize = AtomicUsize::new(0);

/// 1 when the tool numbers the callbacks from 1 (the ids below, NVTX 3.2's headers), 0 when from
/// 0 (CUDA 13.0's headers): a callback of id `k` here is in the tool's slot `k - 1 + BASE`.
static BASE: AtomicUsize = AtomicUsize::new(1);

/// The module's state word, then its function slots (`nvtxExtMemSlots`): the slot of callback
/// id `k` is `SLOTS[k + 1]`.
static SLOTS: [AtomicUsize; SLOT_COUNT + 1] = [EMPTY; SLOT_COUNT + 1];

/// `nvtxExtModuleSegment_t`.
#[repr(C)]
pub struct ModuleSegment {
    segment_id: usize,
    slot_count: usize,
    function_slots: *mut usize,
}

/// `nvtxExtModuleInfo_t`.
#[repr(C)]
pub struct ModuleInfo {
    nvtx_ver: u16,
    struct_size: u16,
    module_id: u16,
    compat_id: u16,
    segments_count: usize,
    segments: *mut ModuleSegment,
    get_export_function: *const c_void,
    ext_info: *const c_void,
}

/// `InitializeInjectionNvtxExtension`'s type.
pub type InitFn = unsafe extern "C" fn(info: *mut ModuleInfo) -> c_int;

/// Why the tool's memory extension could not be used.
pub enum Unusable {
    /// It failed: its `InitializeInjectionNvtxExtension` returned 0.
    Refused(String),
    /// It does not implement the calls the pool makes (a tool without NVTX's memory API, such as
    /// a profiler's): nothing failed.
    NoMemoryApi(String),
}

/// Hands the module to the tool's `InitializeInjectionNvtxExtension`, as `nvtxExtInitOnce`
/// does; `Err` with why when it refused (returned 0) or set none of the slots the pool needs.
/// Slots it left are disabled, as the headers do.
pub fn attach(init: InitFn) -> Result<(), Unusable> {
    let mut segment = ModuleSegment {
        segment_id: 1,
        slot_count: SLOT_COUNT,
        function_slots: SLOTS[1..].as_ptr() as *mut usize,
    };
    let mut info = ModuleInfo {
        nvtx_ver: NVTX_VERSION as u16,
        struct_size: std::mem::size_of::<ModuleInfo>() as u16,
        module_id: MODULE_ID,
        compat_id: COMPAT_ID,
        segments_count: 1,
        segments: &mut segment,
        get_export_function: std::ptr::null(),
        ext_info: std::ptr::null(),
    };
    // SAFETY: `info` and its segment outlive the call; the slots are statics the tool may write
    // (AtomicUsize has usize's layout).
    let status = unsafe { init(&mut info) };
    // Slot 0 is no callback's in the newer numbering: a tool that filled it numbers from 0.
    let first = SLOTS[1].load(Ordering::Acquire);
    let base = if first != FRESH && first != DISABLED {
        0
    } else {
        1
    };
    BASE.store(base, Ordering::Relaxed);
    for s in &SLOTS[1..] {
        if status == 0 || s.load(Ordering::Acquire) == FRESH {
            s.store(DISABLED, Ordering::Release);
        }
    }
    if status == 0 {
        return Err(Unusable::Refused(
            "its InitializeInjectionNvtxExtension returned 0".into(),
        ));
    }
    let missing: Vec<&str> = [
        (CBID_HEAP_REGISTER, "nvtxMemHeapRegister"),
        (CBID_HEAP_UNREGISTER, "nvtxMemHeapUnregister"),
        (CBID_REGIONS_REGISTER, "nvtxMemRegionsRegister"),
        (CBID_REGIONS_UNREGISTER, "nvtxMemRegionsUnregister"),
    ]
    .into_iter()
    .filter(|&(id, _)| slot(id).is_none())
    .map(|(_, name)| name)
    .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Unusable::NoMemoryApi(format!(
            "it does not implement {}",
            missing.join(", ")
        )))
    }
}

/// How the tool numbers its callbacks: 1 (NVTX 3.2's headers) or 0 (CUDA 13.0's), for the
/// trace.
pub fn numbered_from() -> usize {
    BASE.load(Ordering::Relaxed)
}

/// The tool's function for callback id `id` (numbered from 1), if it set one.
fn slot(id: usize) -> Option<usize> {
    // `SLOTS[0]` is the module's state word: the tool's slot `n` is `SLOTS[n + 1]`.
    let v = SLOTS[id - 1 + BASE.load(Ordering::Relaxed) + 1].load(Ordering::Acquire);
    (v != FRESH && v != DISABLED).then_some(v)
}

/// `nvtxMemVirtualRangeDesc_t`.
#[repr(C)]
struct VirtualRange {
    size: usize,
    ptr: *const c_void,
}

/// `nvtxMemHeapDesc_t`.
#[repr(C)]
struct HeapDesc {
    ext_compat_id: u16,
    struct_size: u16,
    reserved0: u32,
    usage: u32,
    kind: u32,
    type_specific_desc_size: usize,
    type_specific_desc: *const c_void,
    category: u32,
    message_type: u32,
    message: *const c_void,
}

/// `nvtxMemRegionsRegisterBatch_t`.
#[repr(C)]
struct RegisterBatch {
    ext_compat_id: u16,
    struct_size: u16,
    region_type: u32,
    heap: *mut c_void,
    region_count: usize,
    region_desc_element_size: usize,
    region_desc_elements: *const c_void,
    region_handle_elements_out: *mut *mut c_void,
}

/// `nvtxMemRegionsUnregisterBatch_t`.
#[repr(C)]
struct UnregisterBatch {
    ext_compat_id: u16,
    struct_size: u16,
    ref_type: u32,
    ref_count: usize,
    ref_element_size: usize,
    ref_elements: *const *const c_void,
}

/// The tool's handle of a heap.
pub type Heap = usize;

/// `nvtxMemHeapRegister` of `[base, base + size)` as a sub-allocator's heap named `name`: the
/// tool's handle, or `None` when it gave none (NULL, or the "no tool" handle, -1).
pub fn heap_register(domain: usize, base: u64, size: u64, name: &std::ffi::CStr) -> Option<Heap> {
    let f = slot(CBID_HEAP_REGISTER)?;
    let range = VirtualRange {
        size: size as usize,
        ptr: base as *const c_void,
    };
    let desc = HeapDesc {
        ext_compat_id: COMPAT_ID,
        struct_size: std::mem::size_of::<HeapDesc>() as u16,
        reserved0: 0,
        usage: USAGE_SUB_ALLOCATOR,
        kind: TYPE_VIRTUAL_ADDRESS,
        type_specific_desc_size: std::mem::size_of::<VirtualRange>(),
        type_specific_desc: std::ptr::from_ref(&range).cast(),
        category: 0,
        message_type: MESSAGE_ASCII,
        message: name.as_ptr().cast(),
    };
    // SAFETY: the tool's nvtxMemHeapRegister (`nvtxMemHeapHandle_t (nvtxDomainHandle_t,
    // nvtxMemHeapDesc_t const*)`); the descriptor and what it points to outlive the call.
    let f: unsafe extern "C" fn(*mut c_void, *const HeapDesc) -> *mut c_void =
        unsafe { std::mem::transmute(f) };
    // SAFETY: as above.
    let h = unsafe { f(domain as *mut c_void, &desc) } as usize;
    (h != 0 && h != usize::MAX).then_some(h)
}

/// `nvtxMemHeapUnregister`: the heap and every region in it are gone.
pub fn heap_unregister(domain: usize, heap: Heap) {
    heap_call(CBID_HEAP_UNREGISTER, domain, heap);
}

fn heap_call(id: usize, domain: usize, heap: Heap) {
    if let Some(f) = slot(id) {
        // SAFETY: the tool's nvtxMemHeapUnregister (`void (nvtxDomainHandle_t,
        // nvtxMemHeapHandle_t)`).
        let f: unsafe extern "C" fn(*mut c_void, *mut c_void) = unsafe { std::mem::transmute(f) };
        // SAFETY: a heap handle the tool gave.
        unsafe { f(domain as *mut c_void, heap as *mut c_void) };
    }
}

/// `nvtxMemRegionsRegister` of one region `[addr, addr + size)` in `heap`.
pub fn region_register(domain: usize, heap: Heap, addr: u64, size: u64) {
    let Some(f) = slot(CBID_REGIONS_REGISTER) else {
        return;
    };
    let range = VirtualRange {
        size: size as usize,
        ptr: addr as *const c_void,
    };
    let batch = RegisterBatch {
        ext_compat_id: COMPAT_ID,
        struct_size: std::mem::size_of::<RegisterBatch>() as u16,
        region_type: TYPE_VIRTUAL_ADDRESS,
        heap: heap as *mut c_void,
        region_count: 1,
        region_desc_element_size: std::mem::size_of::<VirtualRange>(),
        region_desc_elements: std::ptr::from_ref(&range).cast(),
        // Virtual-address regions are referred to by their pointer: no handles asked.
        region_handle_elements_out: std::ptr::null_mut(),
    };
    // SAFETY: the tool's nvtxMemRegionsRegister (`void (nvtxDomainHandle_t,
    // nvtxMemRegionsRegisterBatch_t const*)`); the batch outlives the call.
    let f: unsafe extern "C" fn(*mut c_void, *const RegisterBatch) =
        unsafe { std::mem::transmute(f) };
    // SAFETY: as above.
    unsafe { f(domain as *mut c_void, &batch) };
}

/// `nvtxMemRegionsUnregister` of the regions that start at `addrs` (one batch; nothing when
/// empty).
pub fn regions_unregister(domain: usize, addrs: &[u64]) {
    if addrs.is_empty() {
        return;
    }
    let Some(f) = slot(CBID_REGIONS_UNREGISTER) else {
        return;
    };
    // `nvtxMemRegionRef_t` is a union of two pointers: one pointer each.
    let pointers: Vec<*const c_void> = addrs.iter().map(|&a| a as *const c_void).collect();
    let batch = UnregisterBatch {
        ext_compat_id: COMPAT_ID,
        struct_size: std::mem::size_of::<UnregisterBatch>() as u16,
        ref_type: REF_POINTER,
        ref_count: pointers.len(),
        ref_element_size: std::mem::size_of::<*const c_void>(),
        ref_elements: pointers.as_ptr(),
    };
    // SAFETY: the tool's nvtxMemRegionsUnregister (`void (nvtxDomainHandle_t,
    // nvtxMemRegionsUnregisterBatch_t const*)`); the batch outlives the call.
    let f: unsafe extern "C" fn(*mut c_void, *const UnregisterBatch) =
        unsafe { std::mem::transmute(f) };
    // SAFETY: as above.
    unsafe { f(domain as *mut c_void, &batch) };
}

/// The callback ids of the slots the tool filled, for the trace.
pub fn filled() -> Vec<usize> {
    let base = BASE.load(Ordering::Relaxed);
    (1..=SLOT_COUNT - base)
        .filter(|&id| slot(id).is_some())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structs_have_the_headers_sizes() {
        assert_eq!(std::mem::size_of::<ModuleInfo>(), 40);
        assert_eq!(std::mem::size_of::<ModuleSegment>(), 24);
        assert_eq!(std::mem::size_of::<HeapDesc>(), 48);
        assert_eq!(std::mem::size_of::<RegisterBatch>(), 48);
        assert_eq!(std::mem::size_of::<UnregisterBatch>(), 32);
        assert_eq!(std::mem::size_of::<VirtualRange>(), 16);
    }
}
