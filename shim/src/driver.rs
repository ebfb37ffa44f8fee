//! The real driver: the real `dlsym`, the driver library's handle, and one table of every driver
//! entry the shim hooks or calls, resolved once.
//!
//! The shim never calls its own exports. Every call it makes to the driver goes through
//! [`real`], whose pointers come from the real `dlsym` on the driver's own handle.
//!
//! The table is filled lazily, on the first hook call that needs it, never at load time. If the
//! driver is not loaded yet, resolution fails and is tried again on a later call.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::atomic::AtomicUsize;

use once_cell::sync::OnceCell;

use crate::ffi::*;

unsafe extern "C" {
    fn dlvsym(handle: *mut c_void, symbol: *const c_char, version: *const c_char) -> *mut c_void;
}

/// The signature of `dlsym`.
pub type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// The real `dlsym`, as a `usize` so that the naked `dlsym` export can read it from assembly.
/// 0 until [`resolve_real_dlsym`] has run.
pub static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

/// Finds libc's `dlsym` without calling `dlsym` (which the shim itself exports): `dlvsym` with
/// RTLD_NEXT from this object finds the next definition after the shim, i.e. libc's, by its
/// version (`GLIBC_2.34`, else `GLIBC_2.2.5`).
///
/// Returns its address, or 0 when there is none (the shim then cannot forward `dlsym` at all).
///
/// Naked on x86_64: a sanitizer runtime (ThreadSanitizer) calls `dlsym` before it is initialized,
/// and instrumented code there would call into it; this path is the one that must run then.
// SAFETY: the body follows the C ABI: it takes no arguments, keeps the stack 16-byte aligned at
// each call, returns in rax, and touches only caller-saved registers and REAL_DLSYM.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
pub extern "C" fn resolve_real_dlsym() -> usize {
    core::arch::naked_asm!(
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jnz 2f",
        // Entry rsp is 8 mod 16: one push-sized adjustment aligns the calls.
        "sub rsp, 8",
        "mov rdi, -1",
        "lea rsi, [rip + {name}]",
        "lea rdx, [rip + {v234}]",
        "call {dlvsym}",
        "test rax, rax",
        "jnz 1f",
        "mov rdi, -1",
        "lea rsi, [rip + {name}]",
        "lea rdx, [rip + {v225}]",
        "call {dlvsym}",
        "test rax, rax",
        "jz 3f",
        "1:",
        // An aligned 8-byte store is atomic, and on x86 a release.
        "mov qword ptr [rip + {real}], rax",
        "3:",
        "add rsp, 8",
        "2:",
        "ret",
        real = sym REAL_DLSYM,
        name = sym DLSYM_NAME,
        v234 = sym GLIBC_2_34,
        v225 = sym GLIBC_2_2_5,
        dlvsym = sym dlvsym,
    )
}

#[cfg(target_arch = "x86_64")]
static DLSYM_NAME: [u8; 6] = *b"dlsym\0";
#[cfg(target_arch = "x86_64")]
static GLIBC_2_34: [u8; 11] = *b"GLIBC_2.34\0";
#[cfg(target_arch = "x86_64")]
static GLIBC_2_2_5: [u8; 12] = *b"GLIBC_2.2.5\0";

/// Finds libc's `dlsym` without calling `dlsym` (which the shim itself exports).
///
/// Returns its address, or 0 when there is none (the shim then cannot forward `dlsym` at all).
#[cfg(not(target_arch = "x86_64"))]
pub extern "C" fn resolve_real_dlsym() -> usize {
    use std::sync::atomic::Ordering;
    let cached = REAL_DLSYM.load(Ordering::Acquire);
    if cached != 0 {
        return cached;
    }
    let mut found = 0usize;
    for version in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
        // SAFETY: dlvsym is libc's; both strings are NUL-terminated literals. RTLD_NEXT from
        // this object finds the next definition after the shim, i.e. libc's.
        let p = unsafe { dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
        if !p.is_null() {
            found = p as usize;
            break;
        }
    }
    if found != 0 {
        REAL_DLSYM.store(found, Ordering::Release);
    }
    found
}

/// The real `dlsym`, if it could be found.
pub fn real_dlsym() -> Option<DlsymFn> {
    let p = resolve_real_dlsym();
    // SAFETY: a non-zero value is the address of libc's dlsym, which has this signature.
    (p != 0).then(|| unsafe { std::mem::transmute::<usize, DlsymFn>(p) })
}

macro_rules! driver_entries {
    ($( $name:ident : fn($($arg:ty),* $(,)?); )*) => {
        /// Every driver entry the shim hooks or calls, by its exact exported name.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, PartialEq, Eq, Debug)]
        #[repr(usize)]
        pub enum Entry { $($name),* }

        impl Entry {
            /// All entries, in declaration order (`Entry as usize` indexes this).
            pub const ALL: &'static [Entry] = &[$(Entry::$name),*];

            /// The exported symbol name.
            pub fn name(self) -> &'static str {
                match self { $(Entry::$name => stringify!($name)),* }
            }

            fn c_name(self) -> &'static CStr {
                match self {
                    $(Entry::$name => {
                        const BYTES: &[u8] = concat!(stringify!($name), "\0").as_bytes();
                        match CStr::from_bytes_with_nul(BYTES) { Ok(c) => c, Err(_) => c"" }
                    }),*
                }
            }
        }

        /// Typed access to the real driver's entries. `None` when the driver is not loaded or
        /// lacks the entry.
        #[allow(non_snake_case, dead_code)]
        pub mod real {
            use super::*;
            $(
                #[inline]
                pub fn $name() -> Option<unsafe extern "C" fn($($arg),*) -> CUresult> {
                    let p = super::pointer(super::Entry::$name);
                    // SAFETY: p is the driver's export of exactly this name, whose C signature
                    // is the one declared in the table.
                    (p != 0).then(|| unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($arg),*) -> CUresult>(p) })
                }
            )*
        }
    };
}

driver_entries! {
    // Allocation entries (hooked).
    cuMemAlloc_v2: fn(*mut CUdeviceptr, usize);
    cuMemAllocPitch_v2: fn(*mut CUdeviceptr, *mut usize, usize, usize, u32);
    cuMemFree_v2: fn(CUdeviceptr);
    cuMemAllocManaged: fn(*mut CUdeviceptr, usize, u32);
    cuMemAllocHost_v2: fn(*mut *mut c_void, usize);
    cuMemHostAlloc: fn(*mut *mut c_void, usize, u32);
    cuMemFreeHost: fn(*mut c_void);
    cuMemAllocAsync: fn(*mut CUdeviceptr, usize, CUstream);
    cuMemAllocAsync_ptsz: fn(*mut CUdeviceptr, usize, CUstream);
    cuMemAllocFromPoolAsync: fn(*mut CUdeviceptr, usize, CUmemoryPool, CUstream);
    cuMemAllocFromPoolAsync_ptsz: fn(*mut CUdeviceptr, usize, CUmemoryPool, CUstream);
    cuMemFreeAsync: fn(CUdeviceptr, CUstream);
    cuMemFreeAsync_ptsz: fn(CUdeviceptr, CUstream);
    cuMemCreate: fn(*mut CUmemGenericAllocationHandle, usize, *const MemAllocationPropHead, u64);
    cuMemRelease: fn(CUmemGenericAllocationHandle);
    cuMemMap: fn(CUdeviceptr, usize, usize, CUmemGenericAllocationHandle, u64);
    cuMemUnmap: fn(CUdeviceptr, usize);
    cuMemAddressReserve: fn(*mut CUdeviceptr, usize, usize, CUdeviceptr, u64);
    cuMemAddressFree: fn(CUdeviceptr, usize);
    // Context entries (hooked).
    cuCtxCreate: fn(*mut CUcontext, u32, CUdevice);
    cuCtxCreate_v2: fn(*mut CUcontext, u32, CUdevice);
    cuCtxCreate_v3: fn(*mut CUcontext, Opaque, c_int, u32, CUdevice);
    cuCtxCreate_v4: fn(*mut CUcontext, Opaque, u32, CUdevice);
    cuCtxDestroy: fn(CUcontext);
    cuCtxDestroy_v2: fn(CUcontext);
    cuDevicePrimaryCtxRetain: fn(*mut CUcontext, CUdevice);
    cuDevicePrimaryCtxRelease: fn(CUdevice);
    cuDevicePrimaryCtxRelease_v2: fn(CUdevice);
    cuDevicePrimaryCtxReset: fn(CUdevice);
    cuDevicePrimaryCtxReset_v2: fn(CUdevice);
    // Streams and captures (hooked, for the pool's fences).
    cuStreamCreate: fn(*mut CUstream, u32);
    cuStreamCreateWithPriority: fn(*mut CUstream, u32, c_int);
    cuGreenCtxStreamCreate: fn(*mut CUstream, Opaque, u32, c_int);
    cuStreamDestroy: fn(CUstream);
    cuStreamDestroy_v2: fn(CUstream);
    cuStreamBeginCapture: fn(CUstream);
    cuStreamBeginCapture_v2: fn(CUstream, u32);
    cuStreamBeginCapture_v2_ptsz: fn(CUstream, u32);
    cuStreamBeginCaptureToGraph: fn(CUstream, Opaque, Opaque, Opaque, usize, u32);
    cuStreamBeginCaptureToGraph_ptsz: fn(CUstream, Opaque, Opaque, Opaque, usize, u32);
    cuStreamEndCapture: fn(CUstream, *mut Opaque);
    cuStreamEndCapture_ptsz: fn(CUstream, *mut Opaque);
    // Queries answered for pooled pointers (hooked).
    cuMemGetAddressRange_v2: fn(*mut CUdeviceptr, *mut usize, CUdeviceptr);
    cuPointerGetAttribute: fn(*mut c_void, u32, CUdeviceptr);
    cuPointerGetAttributes: fn(u32, *mut u32, *mut *mut c_void, CUdeviceptr);
    cuMemGetInfo_v2: fn(*mut usize, *mut usize);
    cuIpcGetMemHandle: fn(*mut c_void, CUdeviceptr);
    // The lookup doors (hooked).
    cuGetProcAddress: fn(*const c_char, *mut *mut c_void, c_int, u64);
    cuGetProcAddress_v2: fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int);
    // Used by the shim itself.
    cuDriverGetVersion: fn(*mut c_int);
    cuCtxGetCurrent: fn(*mut CUcontext);
    cuCtxGetDevice: fn(*mut CUdevice);
    cuCtxPushCurrent_v2: fn(CUcontext);
    cuCtxPopCurrent_v2: fn(*mut CUcontext);
    cuCtxSynchronize: fn();
    cuDeviceGetName: fn(*mut c_char, c_int, CUdevice);
    cuDeviceTotalMem_v2: fn(*mut usize, CUdevice);
    cuDevicePrimaryCtxGetState: fn(CUdevice, *mut u32, *mut c_int);
    cuEventCreate: fn(*mut *mut c_void, u32);
    cuEventRecord: fn(*mut c_void, *mut c_void);
    cuEventQuery: fn(*mut c_void);
    cuEventDestroy_v2: fn(*mut c_void);
}

/// Number of entries in the table.
pub const ENTRY_COUNT: usize = Entry::ALL.len();

/// The resolved driver.
pub struct Driver {
    /// Address of each entry, indexed by `Entry as usize`; 0 where the driver lacks it.
    ptrs: [usize; ENTRY_COUNT],
    /// The driver library's path, as the loader has it.
    pub path: String,
    /// The driver library's handle (from `dlopen` with RTLD_NOLOAD), as an address.
    handle: usize,
}

static DRIVER: OnceCell<Driver> = OnceCell::new();

/// The resolved driver, resolving it now if the driver library is loaded.
pub fn driver() -> Option<&'static Driver> {
    DRIVER.get_or_try_init(load).ok()
}

/// The driver if it has already been resolved; never resolves.
pub fn driver_if_loaded() -> Option<&'static Driver> {
    DRIVER.get()
}

#[inline]
fn pointer(entry: Entry) -> usize {
    match driver() {
        Some(d) => d.ptrs[entry as usize],
        None => 0,
    }
}

fn load() -> Result<Driver, ()> {
    let dlsym = real_dlsym().ok_or(())?;
    let mut handle = std::ptr::null_mut();
    for name in [c"libcuda.so.1", c"libcuda.so"] {
        // SAFETY: RTLD_NOLOAD only returns a handle to an object that is already loaded; it
        // loads nothing and runs no constructors.
        handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if !handle.is_null() {
            break;
        }
    }
    if handle.is_null() {
        return Err(());
    }
    let mut ptrs = [0usize; ENTRY_COUNT];
    for (i, entry) in Entry::ALL.iter().enumerate() {
        // SAFETY: handle is a live handle from dlopen and the name is NUL-terminated.
        ptrs[i] = unsafe { dlsym(handle, entry.c_name().as_ptr()) } as usize;
    }
    let init = ptrs[Entry::cuDriverGetVersion as usize];
    let path = if init != 0 {
        module_path(init as *const c_void)
    } else {
        String::new()
    };
    crate::diag::log(|| format!("driver resolved: {path}"));
    Ok(Driver {
        ptrs,
        path,
        handle: handle as usize,
    })
}

/// The real address of the driver's export `name`, or 0 (driver not loaded, or no such entry).
pub fn resolve(name: &CStr) -> usize {
    let (Some(d), Some(dlsym)) = (driver(), real_dlsym()) else {
        return 0;
    };
    // SAFETY: d.handle is a live handle from dlopen and the name is NUL-terminated.
    unsafe { dlsym(d.handle as *mut c_void, name.as_ptr()) as usize }
}

/// The calling thread's current context, as the real driver has it.
#[inline]
pub fn current_context() -> Option<u64> {
    let get = real::cuCtxGetCurrent()?;
    let mut ctx: CUcontext = std::ptr::null_mut();
    // SAFETY: valid out-parameter.
    (unsafe { get(&mut ctx) } == CUDA_SUCCESS && !ctx.is_null()).then_some(ctx as u64)
}

/// The path of the loaded object that contains `addr`, or an empty string.
pub fn module_path(addr: *const c_void) -> String {
    // SAFETY: dladdr only reads the loader's tables; info is a plain out-parameter.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(addr, &mut info) != 0 && !info.dli_fname.is_null() {
            return CStr::from_ptr(info.dli_fname)
                .to_string_lossy()
                .into_owned();
        }
    }
    String::new()
}

/// Which entry of the real driver `addr` is, if any.
pub fn entry_at(addr: usize) -> Option<Entry> {
    if addr == 0 {
        return None;
    }
    let d = driver()?;
    d.ptrs
        .iter()
        .position(|&p| p == addr)
        .map(|i| Entry::ALL[i])
}

/// Whether `name` is a driver-style name (`cu` followed by an upper-case letter): the only names
/// the doors ever touch.
pub fn is_driver_name(name: &[u8]) -> bool {
    name.len() > 2 && name[0] == b'c' && name[1] == b'u' && name[2].is_ascii_uppercase()
}
