//! Finding the real driver: libc's `dlsym` (without calling `dlsym`, which the shim exports), the
//! driver library's handle, and the address of every entry of [`super::entry_table`] in it.
//!
//! Resolution is lazy: it happens on the first call that needs a real entry, never at load time.
//! If the driver library is not loaded yet, it fails and is tried again on a later call.

use std::ffi::{CStr, c_char, c_void};
use std::sync::atomic::AtomicUsize;

use once_cell::sync::OnceCell;

use super::entry_table::{ENTRY_COUNT, Entry, Role};

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

/// `symbol` as the already loaded library `lib` (a name the loader knows it by, `libc10.so`)
/// and its dependencies define it, the shim's own definition aside: `None` when `lib` is not
/// loaded, `Some(None)` when it has no other definition. Nothing is loaded or run
/// (`RTLD_NOLOAD`).
pub fn symbol_in_loaded(lib: &CStr, symbol: &CStr) -> Option<Option<usize>> {
    let dlsym = real_dlsym()?;
    // SAFETY: dlopen of a library only if it is loaded already (RTLD_NOLOAD): nothing is run.
    let handle = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return None;
    }
    // SAFETY: libc's dlsym with the handle dlopen returned and a NUL-terminated name.
    let p = unsafe { dlsym(handle, symbol.as_ptr()) } as usize;
    // SAFETY: the handle dlopen returned; the library stays loaded (its loader holds it).
    unsafe { libc::dlclose(handle) };
    Some((p != 0 && !is_own(p)).then_some(p))
}

/// Whether `addr` is in the shim's own library.
fn is_own(addr: usize) -> bool {
    let base = |a: *const c_void| {
        // SAFETY: dladdr only reads the loader's tables; `info` is written by it.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        (unsafe { libc::dladdr(a, &mut info) } != 0).then_some(info.dli_fbase as usize)
    };
    let own = base(is_own as *const c_void);
    own.is_some() && base(addr as *const c_void) == own
}

/// The resolved driver.
pub struct Driver {
    /// Address of each entry, indexed by `Entry as usize`; 0 where the driver lacks it.
    ptrs: [usize; ENTRY_COUNT],
    /// The driver library's path, as the loader has it.
    pub path: String,
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

/// The real address of `entry`, or 0 (driver not loaded, or it lacks the entry).
#[inline]
pub fn pointer(entry: Entry) -> usize {
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
    crate::process::diag::log(|| format!("driver resolved: {path}"));
    Ok(Driver { ptrs, path })
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

/// Which entry the shim stands in for (any role but [`Role::Pass`]) the real driver's `addr` is,
/// if any.
pub fn entry_at(addr: usize) -> Option<Entry> {
    if addr == 0 {
        return None;
    }
    let d = driver()?;
    Entry::ALL
        .iter()
        .zip(d.ptrs.iter())
        .find(|(e, p)| **p == addr && e.role() != Role::Pass)
        .map(|(e, _)| *e)
}

/// Whether `name` is a driver-style name (`cu` followed by an upper-case letter): the only names
/// the doors ever touch.
pub fn is_driver_name(name: &[u8]) -> bool {
    name.len() > 2 && name[0] == b'c' && name[1] == b'u' && name[2].is_ascii_uppercase()
}
