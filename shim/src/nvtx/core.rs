//! NVTX's core injection, as NVIDIA's `nvtx3` headers do it (`nvtxDetail/nvtxInit.h`,
//! `nvtxImpl.h`): the tool's `InitializeInjectionNvtx2` is given `get_export_table`, through
//! which it finds the tables of function slots it fills ([`GetModuleFunctionTable`]). The shim
//! uses two of those slots: `nvtxInitialize` (called once the tool is attached, as the headers'
//! memory extension does) and `nvtxDomainCreateA` (its domain, `cuguard`).
//!
//! Every module's table is laid out as the headers lay it out (its callback ids, a null first and
//! last entry), so a tool that fills any slot of any module writes only memory that is here.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

/// `NVTX_VERSION`.
pub const NVTX_VERSION: u32 = 3;

// `NvtxExportTableID`.
const ETID_CALLBACKS: u32 = 1;
const ETID_VERSIONINFO: u32 = 3;

// `NvtxCallbackModule`.
const MODULE_CORE: u32 = 1;
const MODULE_CUDA: u32 = 2;
const MODULE_OPENCL: u32 = 3;
const MODULE_CUDART: u32 = 4;
const MODULE_CORE2: u32 = 5;
const MODULE_SYNC: u32 = 6;

// Each module's `NVTX_CBID_*_SIZE`: its callback ids are 1..SIZE.
const CORE_SIZE: usize = 16;
const CUDA_SIZE: usize = 9;
const OPENCL_SIZE: usize = 15;
const CUDART_SIZE: usize = 7;
const CORE2_SIZE: usize = 16;
const SYNC_SIZE: usize = 7;

/// `NVTX_CBID_CORE2_DomainCreateA`.
const CORE2_DOMAIN_CREATE_A: usize = 12;
/// `NVTX_CBID_CORE2_Initialize`.
const CORE2_INITIALIZE: usize = 15;

/// One module's function slots (index = callback id; 0 unused), written by the tool.
type Slots<const N: usize> = [AtomicUsize; N];

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: AtomicUsize = AtomicUsize::new(0);

static CORE: Slots<CORE_SIZE> = [EMPTY; CORE_SIZE];
static CUDA: Slots<CUDA_SIZE> = [EMPTY; CUDA_SIZE];
static OPENCL: Slots<OPENCL_SIZE> = [EMPTY; OPENCL_SIZE];
static CUDART: Slots<CUDART_SIZE> = [EMPTY; CUDART_SIZE];
static CORE2: Slots<CORE2_SIZE> = [EMPTY; CORE2_SIZE];
static SYNC: Slots<SYNC_SIZE> = [EMPTY; SYNC_SIZE];

/// A module's table as the tool reads it: pointers to the slots, null at 0 and after the last
/// (`NvtxFunctionTable`, `functionTable_*[SIZE + 1]` in `nvtxImpl.h`).
#[repr(transparent)]
struct Table<const M: usize>([*const AtomicUsize; M]);

// SAFETY: the pointers name statics that live for the process; the table itself is never
// written after it is made.
unsafe impl<const M: usize> Sync for Table<M> {}

/// The table of `slots`: `M` = `N + 1` entries.
const fn table<const N: usize, const M: usize>(slots: &'static Slots<N>) -> Table<M> {
    let mut t = [std::ptr::null::<AtomicUsize>(); M];
    let mut i = 1;
    while i < N {
        t[i] = &slots[i];
        i += 1;
    }
    Table(t)
}

static CORE_TABLE: Table<{ CORE_SIZE + 1 }> = table(&CORE);
static CUDA_TABLE: Table<{ CUDA_SIZE + 1 }> = table(&CUDA);
static OPENCL_TABLE: Table<{ OPENCL_SIZE + 1 }> = table(&OPENCL);
static CUDART_TABLE: Table<{ CUDART_SIZE + 1 }> = table(&CUDART);
static CORE2_TABLE: Table<{ CORE2_SIZE + 1 }> = table(&CORE2);
static SYNC_TABLE: Table<{ SYNC_SIZE + 1 }> = table(&SYNC);

/// `NvtxExportTableCallbacks`.
#[repr(C)]
struct ExportTableCallbacks {
    struct_size: usize,
    get_module_function_table: unsafe extern "C" fn(
        module: u32,
        out_table: *mut *const c_void,
        out_size: *mut u32,
    ) -> c_int,
}

/// `NvtxExportTableVersionInfo`.
#[repr(C)]
struct ExportTableVersionInfo {
    struct_size: usize,
    version: u32,
    reserved0: u32,
    set_injection_nvtx_version: unsafe extern "C" fn(version: u32),
}

static CALLBACKS: ExportTableCallbacks = ExportTableCallbacks {
    struct_size: std::mem::size_of::<ExportTableCallbacks>(),
    get_module_function_table,
};

static VERSION_INFO: ExportTableVersionInfo = ExportTableVersionInfo {
    struct_size: std::mem::size_of::<ExportTableVersionInfo>(),
    version: NVTX_VERSION,
    reserved0: 0,
    set_injection_nvtx_version,
};

/// The modules whose tables the tool asked for (bit `module`), for the trace.
static ASKED: AtomicU32 = AtomicU32::new(0);

/// The modules whose tables the tool asked for, by `NvtxCallbackModule` id.
pub fn modules_asked() -> Vec<u32> {
    let bits = ASKED.load(Ordering::Relaxed);
    (0..32).filter(|m| bits & (1 << m) != 0).collect()
}

/// `nvtxEtiGetModuleFunctionTable`: a module's table and its number of entries less one.
unsafe extern "C" fn get_module_function_table(
    module: u32,
    out_table: *mut *const c_void,
    out_size: *mut u32,
) -> c_int {
    if module < 32 {
        ASKED.fetch_or(1 << module, Ordering::Relaxed);
    }
    let (table, entries): (*const c_void, usize) = match module {
        MODULE_CORE => (CORE_TABLE.0.as_ptr().cast(), CORE_SIZE + 1),
        MODULE_CUDA => (CUDA_TABLE.0.as_ptr().cast(), CUDA_SIZE + 1),
        MODULE_OPENCL => (OPENCL_TABLE.0.as_ptr().cast(), OPENCL_SIZE + 1),
        MODULE_CUDART => (CUDART_TABLE.0.as_ptr().cast(), CUDART_SIZE + 1),
        MODULE_CORE2 => (CORE2_TABLE.0.as_ptr().cast(), CORE2_SIZE + 1),
        MODULE_SYNC => (SYNC_TABLE.0.as_ptr().cast(), SYNC_SIZE + 1),
        _ => return 0,
    };
    if !out_size.is_null() {
        // SAFETY: the tool's out-parameter, checked non-null.
        unsafe { *out_size = (entries - 1) as u32 };
    }
    if !out_table.is_null() {
        // SAFETY: the tool's out-parameter, checked non-null.
        unsafe { *out_table = table };
    }
    1
}

/// `nvtxEtiSetInjectionNvtxVersion`: reserved; ignored, as in the headers.
unsafe extern "C" fn set_injection_nvtx_version(_version: u32) {}

/// `nvtxGetExportTable`, handed to the tool's `InitializeInjectionNvtx2`.
pub unsafe extern "C" fn get_export_table(id: u32) -> *const c_void {
    match id {
        ETID_CALLBACKS => std::ptr::from_ref(&CALLBACKS).cast(),
        ETID_VERSIONINFO => std::ptr::from_ref(&VERSION_INFO).cast(),
        _ => std::ptr::null(),
    }
}

/// `InitializeInjectionNvtx2`'s type.
pub type InitFn = unsafe extern "C" fn(get: unsafe extern "C" fn(u32) -> *const c_void) -> c_int;

/// What the tool put in a slot: a function address, or 0.
fn slot(s: &AtomicUsize) -> usize {
    s.load(Ordering::Acquire)
}

/// Whether the tool filled `nvtxDomainCreateA` and `nvtxInitialize`, for the trace.
pub fn filled() -> (bool, bool) {
    (
        slot(&CORE2[CORE2_DOMAIN_CREATE_A]) != 0,
        slot(&CORE2[CORE2_INITIALIZE]) != 0,
    )
}

/// Calls the tool's `nvtxInitialize(NULL)` if it set one: what `nvtxInitialize(0)` does once the
/// headers have attached the tool.
pub fn initialize() {
    let f = slot(&CORE2[CORE2_INITIALIZE]);
    if f != 0 {
        // SAFETY: the tool wrote its nvtxInitialize implementation (`void (const void*)`) here.
        let f: unsafe extern "C" fn(*const c_void) = unsafe { std::mem::transmute(f) };
        // SAFETY: NULL is the documented argument ("reserved").
        unsafe { f(std::ptr::null()) };
    }
}

/// The tool's `nvtxDomainCreateA(name)`, or NULL (the default domain) when it set none.
pub fn domain_create(name: &std::ffi::CStr) -> *mut c_void {
    let f = slot(&CORE2[CORE2_DOMAIN_CREATE_A]);
    if f == 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: the tool wrote its nvtxDomainCreateA implementation (`nvtxDomainHandle_t (const
    // char*)`) here.
    let f: unsafe extern "C" fn(*const c_char) -> *mut c_void = unsafe { std::mem::transmute(f) };
    // SAFETY: a NUL-terminated string that outlives the call.
    unsafe { f(name.as_ptr()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_have_the_headers_shape() {
        for (module, size) in [
            (MODULE_CORE, CORE_SIZE),
            (MODULE_CUDA, CUDA_SIZE),
            (MODULE_OPENCL, OPENCL_SIZE),
            (MODULE_CUDART, CUDART_SIZE),
            (MODULE_CORE2, CORE2_SIZE),
            (MODULE_SYNC, SYNC_SIZE),
        ] {
            let mut t: *const c_void = std::ptr::null();
            let mut n = 0u32;
            // SAFETY: valid out-parameters.
            let found = unsafe { get_module_function_table(module, &mut t, &mut n) };
            assert_eq!(found, 1);
            assert_eq!(n as usize, size);
            let t = t.cast::<*const AtomicUsize>();
            // SAFETY: the table has size + 1 entries.
            unsafe {
                assert!((*t).is_null());
                assert!((*t.add(size)).is_null());
                for i in 1..size {
                    assert!(!(*t.add(i)).is_null());
                }
            }
        }
        let mut t: *const c_void = std::ptr::null();
        // SAFETY: valid out-parameter; the size may be NULL.
        let found = unsafe { get_module_function_table(7, &mut t, std::ptr::null_mut()) };
        assert_eq!(found, 0);
        // SAFETY: plain lookups.
        unsafe {
            assert!(!get_export_table(ETID_CALLBACKS).is_null());
            assert!(!get_export_table(ETID_VERSIONINFO).is_null());
            assert!(get_export_table(2).is_null());
        }
    }
}
