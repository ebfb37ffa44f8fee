//! The exported `dlsym`.
//!
//! `dlsym(RTLD_NEXT, …)` finds the definition after the *caller's* object, which glibc learns
//! from the return address. A hook that called the real `dlsym` would make every RTLD_NEXT
//! lookup start after the shim instead (breaking, say, another interposer loaded after it). So
//! the export is a naked function: RTLD_NEXT lookups, and lookups of names that are neither driver
//! names (`cu` + an upper-case letter) nor NVML names (`nvml…`), jump straight to the real `dlsym`
//! with the caller's return address untouched; driver and NVML names for other handles go to
//! [`lookup`] (NVML's to [`super::nvml::on_lookup`]).
//!
//! No Rust code runs for a name the shim does not hook: Rust's standard library (the shim's own
//! too) looks up weak symbols through `dlsym`, and a sanitizer runtime resolves its interceptors
//! through it before it is initialized.

use std::ffi::{CStr, c_char, c_void};

use crate::driver::{self, REAL_DLSYM};
use crate::tracker::doors::Door;

/// The exported `dlsym`.
///
/// # Safety
/// The caller's contract is `dlsym(3)`'s.
#[cfg(target_arch = "x86_64")]
#[unsafe(no_mangle)]
#[unsafe(naked)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    // rdi = handle, rsi = symbol. RTLD_NEXT is (void *)-1. Only driver names (`cu` + an
    // upper-case letter) and NVML names (`nvml`) for other handles go to `lookup`; everything
    // else jumps straight to the real dlsym, so no Rust code runs for it (a sanitizer runtime
    // resolves its interceptors through here before it is initialized). The name is read one
    // byte at a time, each only after the one before matched (so never past its NUL).
    core::arch::naked_asm!(
        "cmp rdi, -1",
        "je 2f",
        "test rsi, rsi",
        "jz 2f",
        "movzx eax, byte ptr [rsi]",
        "cmp eax, 0x6e",
        "je 5f",
        "cmp eax, 0x63",
        "jne 2f",
        "cmp byte ptr [rsi + 1], 0x75",
        "jne 2f",
        "movzx eax, byte ptr [rsi + 2]",
        "sub eax, 0x41",
        "cmp eax, 25",
        "ja 2f",
        "jmp {lookup}",
        // `n`: then `vml`.
        "5:",
        "cmp byte ptr [rsi + 1], 0x76",
        "jne 2f",
        "cmp byte ptr [rsi + 2], 0x6d",
        "jne 2f",
        "cmp byte ptr [rsi + 3], 0x6c",
        "jne 2f",
        "jmp {lookup}",
        "2:",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 3f",
        "jmp rax",
        "3:",
        // Resolve the real dlsym first, keeping the arguments and 16-byte stack alignment.
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {resolve}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 4f",
        "jmp rax",
        "4:",
        "xor eax, eax",
        "ret",
        lookup = sym lookup,
        real = sym REAL_DLSYM,
        resolve = sym driver::resolve_real_dlsym,
    )
}

/// The exported `dlsym` where no naked trampoline is written: RTLD_NEXT lookups then start after
/// the shim rather than after the caller.
///
/// # Safety
/// The caller's contract is `dlsym(3)`'s.
#[cfg(not(target_arch = "x86_64"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    // SAFETY: forwarded with the caller's own arguments.
    unsafe { lookup(handle, symbol) }
}

/// Looks `symbol` up for a handle other than RTLD_NEXT, substituting hooks for driver entries
/// and stand-ins for NVML's memory-info entries.
///
/// # Safety
/// The caller's contract is `dlsym(3)`'s.
pub unsafe extern "C" fn lookup(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    let Some(real) = driver::real_dlsym() else {
        return std::ptr::null_mut();
    };
    // SAFETY: forwarded with the caller's own arguments.
    let found = unsafe { real(handle, symbol) };
    if found.is_null() || symbol.is_null() {
        return found;
    }
    // SAFETY: symbol is the caller's NUL-terminated name (dlsym just read it).
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    if name.starts_with(b"nvml") {
        return crate::guard::shield(found, || super::nvml::on_lookup(handle, name, found));
    }
    if !driver::is_driver_name(name) {
        return found;
    }
    crate::guard::shield(found, || on_driver_name(found))
}

fn on_driver_name(found: *mut c_void) -> *mut c_void {
    if let Some(hook) = super::exports::substitute(found, Door::Dlsym) {
        return hook;
    }
    // A driver name that resolved to one of the shim's own exports (RTLD_DEFAULT finds them
    // first). Without the shim the program would have found the driver's entry, or nothing if
    // no driver is loaded: keep that answer.
    if super::exports::is_own(found) && driver::driver().is_none() {
        return std::ptr::null_mut();
    }
    found
}
