//! RMM's out of memory, seen where it is thrown: the shim exports the C++ runtime's
//! `__cxa_throw`, which every C++ `throw` in a library linked to the shared `libstdc++` calls;
//! preloaded, its definition is the one those calls bind to. For each throw it compares the
//! thrown type's mangled name with `rmm::out_of_memory` (a few bytes; nothing else is read),
//! and for RMM's pool refusing a request (its message, [`cuguard_format::rmm_oom`]) records a
//! card, refused by `rmm`, with the asking thread's stack (its Python line, as at a driver
//! allocation). Then it hands the throw on, always, to the runtime's own `__cxa_throw`, which
//! unwinds through this frame (`extern "C-unwind"`) as through any C++ one: the one the library
//! that defines the thrown type links (in a process with two C++ runtimes, each throw goes to
//! its own), else the one found after the shim.
//!
//! This is where RMM can be seen: Python gets RMM's refusal as the built-in `MemoryError`, whose
//! making cannot be wrapped, and RMM's own hook (`FailureCallbackResourceAdaptor`) means
//! wrapping the program's resource. A library that links `libstdc++` statically throws without
//! calling this; `CUGUARD_RMM_OOM=0` turns the card off (the throw is still handed on).

use std::ffi::{CStr, c_char, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use cuguard_format::api::FrameworkOom;
use cuguard_format::rmm_oom;

use crate::guard::Guard;

type ThrowFn = unsafe extern "C-unwind" fn(*mut c_void, *mut c_void, Option<Dtor>) -> !;
type Dtor = unsafe extern "C" fn(*mut c_void);

/// The runtime's `__cxa_throw` found after the shim: 0 not looked for yet, 1 not found.
static REAL: AtomicUsize = AtomicUsize::new(0);

/// The `__cxa_throw` each library that defines a thrown type links, by the library's base
/// address (1: none of its own), the first [`KNOWN`] libraries met.
static BY_LIBRARY: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());
const KNOWN: usize = 32;

/// The runtime's own `__cxa_throw`, found once: the next definition after the shim's, else
/// `libstdc++`'s where it was loaded in a scope of its own (Python loads RMM's libraries so).
fn real() -> Option<ThrowFn> {
    let mut p = REAL.load(Ordering::Acquire);
    if p == 0 {
        p = find_real().unwrap_or(1);
        REAL.store(p, Ordering::Release);
    }
    // SAFETY: a value above 1 is the address of the runtime's `__cxa_throw`.
    (p > 1).then(|| unsafe { std::mem::transmute::<usize, ThrowFn>(p) })
}

/// The runtime's `__cxa_throw` for a throw of the type `info`: the one the library defining the
/// type links (a library loaded in a scope of its own, with a C++ runtime of its own, gets its
/// own runtime's, as it would have without the shim), else [`real`].
fn real_for(info: *mut c_void) -> Option<ThrowFn> {
    // SAFETY: dladdr only reads the loader's tables; `found` is written by it.
    let mut found: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `info` is only looked up, not read.
    if info.is_null() || unsafe { libc::dladdr(info, &mut found) } == 0 || found.dli_fname.is_null()
    {
        return real();
    }
    let base = found.dli_fbase as usize;
    // Never waited for (a fork while another thread held it would leave the child's lock held):
    // looked up again instead.
    let kept = BY_LIBRARY
        .try_lock()
        .ok()
        .and_then(|known| known.iter().find(|(b, _)| *b == base).map(|&(_, p)| p));
    let p = kept.unwrap_or_else(|| {
        // SAFETY: the loader's own, NUL-terminated name of a loaded library.
        let name = unsafe { CStr::from_ptr(found.dli_fname) };
        let p = crate::driver::loader::symbol_in_loaded(name, c"__cxa_throw")
            .flatten()
            .unwrap_or(1);
        if let Ok(mut known) = BY_LIBRARY.try_lock()
            && known.len() < KNOWN
        {
            known.push((base, p));
        }
        p
    });
    // SAFETY: a value above 1 is the address of a C++ runtime's `__cxa_throw`.
    (p > 1)
        .then(|| unsafe { std::mem::transmute::<usize, ThrowFn>(p) })
        .or_else(real)
}

fn find_real() -> Option<usize> {
    let dlsym = crate::driver::loader::real_dlsym()?;
    let ours = cxa_throw as *const () as usize;
    // SAFETY: libc's dlsym with RTLD_NEXT and a NUL-terminated name.
    let next = unsafe { dlsym(libc::RTLD_NEXT, c"__cxa_throw".as_ptr()) } as usize;
    (next != 0 && next != ours)
        .then_some(next)
        .or_else(|| crate::driver::loader::symbol_in_loaded(c"libstdc++.so.6", c"__cxa_throw")?)
}

/// The exported `__cxa_throw` (see the module doc).
///
/// # Safety
///
/// Called by a C++ `throw` with the runtime's arguments: the exception object, its
/// `std::type_info` and its destructor.
#[unsafe(export_name = "__cxa_throw")]
pub unsafe extern "C-unwind" fn cxa_throw(
    object: *mut c_void,
    info: *mut c_void,
    dtor: Option<Dtor>,
) -> ! {
    // SAFETY: the runtime's arguments, as given.
    if unsafe { is_rmm_oom(info) } {
        // SAFETY: `object` is an `rmm::out_of_memory` (its type's name says so).
        crate::guard::shield((), || unsafe { note(object) });
    }
    match real_for(info) {
        // SAFETY: the runtime's own function, with the arguments it was called with.
        Some(f) => unsafe { f(object, info, dtor) },
        // No runtime defines it: nothing can throw; as the runtime does with an exception it
        // cannot raise.
        None => std::process::abort(),
    }
}

/// Whether `info` (a `std::type_info`) names `rmm::out_of_memory`.
///
/// # Safety
///
/// `info` is NULL or a `std::type_info`.
unsafe fn is_rmm_oom(info: *mut c_void) -> bool {
    if info.is_null() {
        return false;
    }
    // SAFETY: the Itanium C++ ABI's `std::type_info` is its vtable pointer, then its name (a
    // NUL-terminated string that lives as long as the library).
    let name = unsafe { *(info as *const *const c_char).add(1) };
    // SAFETY: a NUL-terminated string, or NULL (checked). The settings only for RMM's.
    !name.is_null()
        && rmm_oom::is_out_of_memory(unsafe { CStr::from_ptr(name) }.to_bytes())
        && crate::config::get().rmm_oom
}

/// Records the card of the RMM refusal `object` says, when it is its pool's.
///
/// # Safety
///
/// `object` is an `rmm::out_of_memory`.
unsafe fn note(object: *mut c_void) {
    let Some(t) = crate::tracker::if_any() else {
        return;
    };
    if !crate::phase::tracking() {
        return;
    }
    let Some(_inside) = Guard::enter() else {
        return;
    };
    // SAFETY: an `rmm::out_of_memory` is a `std::exception`: its vtable's third entry is the
    // virtual `what()` (after the two destructors), which returns a NUL-terminated string that
    // lives with the object.
    let what = unsafe {
        let vtable = *(object as *const *const usize);
        let what: unsafe extern "C" fn(*mut c_void) -> *const c_char =
            std::mem::transmute(*vtable.add(2));
        let text = what(object);
        if text.is_null() {
            return;
        }
        CStr::from_ptr(text).to_string_lossy()
    };
    let Some(refusal) = rmm_oom::parse(&what) else {
        return;
    };
    let device = crate::hooks::oom::current_device().unwrap_or(-1);
    let oom = FrameworkOom {
        framework: refusal.resource.name.into(),
        device: u32::try_from(device).unwrap_or(cuguard_format::wire::UNKNOWN_DEVICE),
        requested: refusal.requested,
        device_free: None,
        limit: refusal.maximum_bytes,
        reserved: refusal.pool_bytes.unwrap_or(0),
        message: Some(what.chars().take(MAX_MESSAGE).collect()),
        cache: None,
        read_ns: None,
    };
    crate::hooks::oom::framework_refused(t, oom, crate::tracker::capture_stack());
}

/// The longest message kept, in characters.
const MAX_MESSAGE: usize = 1000;
