//! cuguard as the process's NVTX tool: the program's NVTX ranges become phases of the history.
//!
//! NVIDIA's `nvtx3` headers, compiled into every library that marks ranges (PyTorch, cuDF,
//! Python's `nvtx` package, a C program), load the library `NVTX_INJECTION64_PATH` names at
//! their first call and call its `InitializeInjectionNvtx2` with their export table, through
//! which a tool fills the function slots of the calls it implements (`nvtxInit.h`,
//! `nvtxImpl.h`). `cuguard run` names the shim there (unless another tool is named already);
//! each library's copy of the headers attaches it on its own, and each is served alike.
//!
//! The slots filled: the core's `nvtxRangePush{A,W,Ex}`, `nvtxRangePop`,
//! `nvtxRangeStart{A,W,Ex}`, `nvtxRangeEnd`, and the domains' `nvtxDomainRangePushEx`,
//! `nvtxDomainRangePop`, `nvtxDomainRangeStartEx`, `nvtxDomainRangeEnd`,
//! `nvtxDomainRegisterString{A,W}`, `nvtxDomainCreate{A,W}` and `nvtxDomainDestroy`. Marks,
//! categories and resource names are left to the headers' no-ops.
//!
//! A range's name is its message (ASCII, wide, or a string registered here); its payload, when
//! it is an integer (or a whole non-negative float), is its number. A push and its pop are keyed
//! by the domain ([`crate::recorder::PUSHED`] with the domain's id), as NVTX nests them; a
//! started range by the id handed out here. Each call is a name look-up ([`names::intern`], a
//! short lock; none for a registered string) and one record in the thread's ring.
//!
//! When the shim is inert or the history is off, `InitializeInjectionNvtx2` returns 0: the
//! headers then treat NVTX as having no tool, and its calls cost the program nothing more.

use std::ffi::{c_char, c_int, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use crate::guard::shield;
use crate::process::global::{get_or_create, lock};
use crate::recorder::{self, PUSHED, names};

// `NvtxExportTableID` and `NvtxCallbackModule`.
const ETID_CALLBACKS: u32 = 1;
const MODULE_CORE: u32 = 1;
const MODULE_CORE2: u32 = 5;

// `NvtxCallbackIdCore`.
const CORE_RANGE_START_EX: u32 = 4;
const CORE_RANGE_START_A: u32 = 5;
const CORE_RANGE_START_W: u32 = 6;
const CORE_RANGE_END: u32 = 7;
const CORE_RANGE_PUSH_EX: u32 = 8;
const CORE_RANGE_PUSH_A: u32 = 9;
const CORE_RANGE_PUSH_W: u32 = 10;
const CORE_RANGE_POP: u32 = 11;

// `NvtxCallbackIdCore2`.
const CORE2_RANGE_START_EX: u32 = 2;
const CORE2_RANGE_END: u32 = 3;
const CORE2_RANGE_PUSH_EX: u32 = 4;
const CORE2_RANGE_POP: u32 = 5;
const CORE2_REGISTER_STRING_A: u32 = 10;
const CORE2_REGISTER_STRING_W: u32 = 11;
const CORE2_DOMAIN_CREATE_A: u32 = 12;
const CORE2_DOMAIN_CREATE_W: u32 = 13;
const CORE2_DOMAIN_DESTROY: u32 = 14;

// `nvtxMessageType_t`.
const MESSAGE_ASCII: i32 = 1;
const MESSAGE_UNICODE: i32 = 2;
const MESSAGE_REGISTERED: i32 = 3;

// `nvtxPayloadType_t`.
const PAYLOAD_U64: i32 = 1;
const PAYLOAD_I64: i32 = 2;
const PAYLOAD_DOUBLE: i32 = 3;
const PAYLOAD_U32: i32 = 4;
const PAYLOAD_I32: i32 = 5;
const PAYLOAD_FLOAT: i32 = 6;

/// The name of a range that gives none.
const UNNAMED: &[u8] = b"(unnamed)";
/// The most wide characters of a name read.
const MAX_WIDE: usize = names::MAX_NAME_BYTES;

/// `nvtxEventAttributes_t` (version 2 and 3: 48 bytes).
#[repr(C)]
struct Attributes {
    version: u16,
    size: u16,
    category: u32,
    color_type: i32,
    color: u32,
    payload_type: i32,
    reserved0: i32,
    payload: u64,
    message_type: i32,
    message: *const c_void,
}

/// `NvtxExportTableCallbacks`.
#[repr(C)]
struct Callbacks {
    struct_size: usize,
    get_module_function_table:
        Option<unsafe extern "C" fn(u32, *mut *const *mut usize, *mut u32) -> c_int>,
}

type GetExportTable = unsafe extern "C" fn(u32) -> *const c_void;

/// The entry point NVTX's headers call, once per library that carries them.
///
/// # Safety
///
/// `get` is the headers' `nvtxGetExportTable` (or NULL).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn InitializeInjectionNvtx2(get: Option<GetExportTable>) -> c_int {
    shield(0, || {
        if !crate::phase::tracking() || !recorder::on() {
            return 0;
        }
        let Some(get) = get else { return 0 };
        // SAFETY: the headers' export table function; id 1 is its callbacks table.
        let callbacks = unsafe { get(ETID_CALLBACKS) }.cast::<Callbacks>();
        // SAFETY: NULL checked; the table is the headers' static, of at least its size field.
        let Some(table_of) = (unsafe { callbacks.as_ref() })
            .filter(|c| c.struct_size >= std::mem::size_of::<Callbacks>())
            .and_then(|c| c.get_module_function_table)
        else {
            return 0;
        };
        let core: [(u32, usize); 8] = [
            (CORE_RANGE_START_EX, range_start_ex as *const () as usize),
            (CORE_RANGE_START_A, range_start_a as *const () as usize),
            (CORE_RANGE_START_W, range_start_w as *const () as usize),
            (CORE_RANGE_END, range_end as *const () as usize),
            (CORE_RANGE_PUSH_EX, range_push_ex as *const () as usize),
            (CORE_RANGE_PUSH_A, range_push_a as *const () as usize),
            (CORE_RANGE_PUSH_W, range_push_w as *const () as usize),
            (CORE_RANGE_POP, range_pop as *const () as usize),
        ];
        let core2: [(u32, usize); 9] = [
            (
                CORE2_RANGE_START_EX,
                domain_range_start_ex as *const () as usize,
            ),
            (CORE2_RANGE_END, domain_range_end as *const () as usize),
            (
                CORE2_RANGE_PUSH_EX,
                domain_range_push_ex as *const () as usize,
            ),
            (CORE2_RANGE_POP, domain_range_pop as *const () as usize),
            (
                CORE2_REGISTER_STRING_A,
                register_string_a as *const () as usize,
            ),
            (
                CORE2_REGISTER_STRING_W,
                register_string_w as *const () as usize,
            ),
            (CORE2_DOMAIN_CREATE_A, domain_create_a as *const () as usize),
            (CORE2_DOMAIN_CREATE_W, domain_create_w as *const () as usize),
            (CORE2_DOMAIN_DESTROY, domain_destroy as *const () as usize),
        ];
        // SAFETY: the headers' own function, with valid out-parameters.
        let filled =
            unsafe { fill(table_of, MODULE_CORE, &core) && fill(table_of, MODULE_CORE2, &core2) };
        c_int::from(filled)
    })
}

/// Writes each `(callback id, function)` into module `module`'s slots: false when the headers
/// gave no table for it.
///
/// # Safety
///
/// `table_of` is the headers' `nvtxEtiGetModuleFunctionTable`.
unsafe fn fill(
    table_of: unsafe extern "C" fn(u32, *mut *const *mut usize, *mut u32) -> c_int,
    module: u32,
    slots: &[(u32, usize)],
) -> bool {
    let mut table: *const *mut usize = std::ptr::null();
    let mut size = 0u32;
    // SAFETY: valid out-parameters.
    if unsafe { table_of(module, &mut table, &mut size) } == 0 || table.is_null() {
        return false;
    }
    for &(id, f) in slots {
        if id >= size {
            continue;
        }
        // SAFETY: the table has `size` + 1 entries (ids below `size` are slots; the headers'
        // `functionTable_*`), each NULL or the address of the slot of that id.
        let slot = unsafe { *table.add(id as usize) };
        if !slot.is_null() {
            // SAFETY: a slot of the headers' table: a function pointer's storage, written by
            // the tool during `InitializeInjectionNvtx2` as the protocol says.
            unsafe { *slot = f };
        }
    }
    true
}

/// Whether the library at `path` is this shim (its `InitializeInjectionNvtx2` is this one):
/// `NVTX_INJECTION64_PATH` names cuguard itself, so there is no other tool to attach.
pub fn is_self(path: &std::ffi::CStr) -> bool {
    // SAFETY: a NUL-terminated path; RTLD_NOLOAD loads nothing.
    let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if h.is_null() {
        return false;
    }
    // SAFETY: a handle just returned, a NUL-terminated name.
    let sym = unsafe { libc::dlsym(h, c"InitializeInjectionNvtx2".as_ptr()) };
    // SAFETY: the handle dlopen gave (its count goes back down).
    unsafe { libc::dlclose(h) };
    std::ptr::eq(sym.cast_const(), InitializeInjectionNvtx2 as *const c_void)
}

// --- Names, payloads, keys ---

/// The bytes of a NUL-terminated string (NULL: none).
///
/// # Safety
///
/// `p` is NULL or a NUL-terminated string.
unsafe fn ascii<'a>(p: *const c_char) -> &'a [u8] {
    if p.is_null() {
        return UNNAMED;
    }
    // SAFETY: the caller's promise.
    let b = unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes();
    if b.is_empty() { UNNAMED } else { b }
}

/// The UTF-8 of a NUL-terminated `wchar_t` string (UTF-32 on Linux), at most [`MAX_WIDE`]
/// characters.
///
/// # Safety
///
/// `p` is NULL or a NUL-terminated `wchar_t` string.
unsafe fn wide(p: *const i32) -> Vec<u8> {
    let mut s = String::new();
    if !p.is_null() {
        for i in 0..MAX_WIDE {
            // SAFETY: within the string: its terminator has not been reached yet.
            let c = unsafe { *p.add(i) };
            if c == 0 {
                break;
            }
            s.push(char::from_u32(c as u32).unwrap_or(char::REPLACEMENT_CHARACTER));
        }
    }
    if s.is_empty() {
        UNNAMED.to_vec()
    } else {
        s.into_bytes()
    }
}

/// A registered string's handle: its name's id + 1 (never NULL).
fn handle_of(id: u32) -> *const c_void {
    (id as usize + 1) as *const c_void
}

/// The name and payload of a range's attributes.
///
/// # Safety
///
/// `a` is NULL or the program's `nvtxEventAttributes_t`.
unsafe fn described(a: *const Attributes) -> (u32, Option<u64>) {
    // SAFETY: the caller's promise; its size field says how much of it there is.
    let Some(a) = (unsafe { a.as_ref() })
        .filter(|a| usize::from(a.size) >= std::mem::size_of::<Attributes>())
    else {
        return (names::intern(UNNAMED), None);
    };
    let name = match a.message_type {
        // SAFETY: the message of the type the program said.
        MESSAGE_ASCII => names::intern(unsafe { ascii(a.message.cast()) }),
        // SAFETY: as above.
        MESSAGE_UNICODE => names::intern(&unsafe { wide(a.message.cast()) }),
        MESSAGE_REGISTERED if !a.message.is_null() => (a.message as usize - 1) as u32,
        _ => names::intern(UNNAMED),
    };
    (name, payload(a.payload_type, a.payload))
}

/// A payload as a range's number: integers that are not negative, and floats that are whole.
fn payload(kind: i32, bits: u64) -> Option<u64> {
    match kind {
        PAYLOAD_U64 => Some(bits),
        PAYLOAD_I64 => u64::try_from(bits as i64).ok(),
        PAYLOAD_U32 => Some(u64::from(bits as u32)),
        PAYLOAD_I32 => u64::try_from(bits as u32 as i32).ok(),
        PAYLOAD_DOUBLE => whole(f64::from_bits(bits)),
        PAYLOAD_FLOAT => whole(f64::from(f32::from_bits(bits as u32))),
        _ => None,
    }
}

fn whole(v: f64) -> Option<u64> {
    (v >= 0.0 && v.fract() == 0.0 && v < 1.8e19).then_some(v as u64)
}

/// The key of a pushed range of `domain` (NULL: the default domain).
fn pushed(domain: *const c_void) -> u64 {
    PUSHED | (domain as u64 & !PUSHED)
}

/// The next started range's id (never 0, below [`PUSHED`]).
fn next_range_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed) & !PUSHED
}

fn push(name: u32, key: u64, payload: Option<u64>) -> c_int {
    recorder::phase_began(name, key, payload);
    0
}

fn start(name: u32, payload: Option<u64>) -> u64 {
    let id = next_range_id();
    recorder::phase_began(name, id, payload);
    id
}

// --- The slots ---
// Each runs under the panic shield and takes its arguments as NVTX's contract gives them: NULL
// or NUL-terminated strings (wide ones for the `W` calls), NULL or the program's attributes.

unsafe extern "C" fn range_push_a(message: *const c_char) -> c_int {
    shield(0, || {
        // SAFETY: NVTX's contract (above).
        let name = names::intern(unsafe { ascii(message) });
        push(name, PUSHED, None)
    })
}

unsafe extern "C" fn range_push_w(message: *const i32) -> c_int {
    shield(0, || {
        // SAFETY: NVTX's contract (above).
        let name = names::intern(&unsafe { wide(message) });
        push(name, PUSHED, None)
    })
}

unsafe extern "C" fn range_push_ex(a: *const Attributes) -> c_int {
    shield(0, || {
        // SAFETY: NVTX's contract (above).
        let (name, payload) = unsafe { described(a) };
        push(name, PUSHED, payload)
    })
}

unsafe extern "C" fn range_pop() -> c_int {
    shield(0, || {
        recorder::phase_ended(PUSHED);
        0
    })
}

unsafe extern "C" fn range_start_a(message: *const c_char) -> u64 {
    shield(0, || {
        // SAFETY: NVTX's contract (above).
        let name = names::intern(unsafe { ascii(message) });
        start(name, None)
    })
}

unsafe extern "C" fn range_start_w(message: *const i32) -> u64 {
    shield(0, || {
        // SAFETY: NVTX's contract (above).
        let name = names::intern(&unsafe { wide(message) });
        start(name, None)
    })
}

unsafe extern "C" fn range_start_ex(a: *const Attributes) -> u64 {
    shield(0, || {
        // SAFETY: NVTX's contract (above).
        let (name, payload) = unsafe { described(a) };
        start(name, payload)
    })
}

unsafe extern "C" fn range_end(id: u64) {
    shield((), || recorder::phase_ended(id & !PUSHED))
}

unsafe extern "C" fn domain_range_push_ex(domain: *const c_void, a: *const Attributes) -> c_int {
    shield(0, || {
        // SAFETY: NVTX's contract (above).
        let (name, payload) = unsafe { described(a) };
        push(name, pushed(domain), payload)
    })
}

unsafe extern "C" fn domain_range_pop(domain: *const c_void) -> c_int {
    shield(0, || {
        recorder::phase_ended(pushed(domain));
        0
    })
}

unsafe extern "C" fn domain_range_start_ex(_domain: *const c_void, a: *const Attributes) -> u64 {
    shield(0, || {
        // SAFETY: NVTX's contract (above).
        let (name, payload) = unsafe { described(a) };
        start(name, payload)
    })
}

unsafe extern "C" fn domain_range_end(_domain: *const c_void, id: u64) {
    shield((), || recorder::phase_ended(id & !PUSHED))
}

unsafe extern "C" fn register_string_a(_domain: *const c_void, s: *const c_char) -> *const c_void {
    shield(std::ptr::null(), || {
        // SAFETY: NVTX's contract (above).
        handle_of(names::intern(unsafe { ascii(s) }))
    })
}

unsafe extern "C" fn register_string_w(_domain: *const c_void, s: *const i32) -> *const c_void {
    shield(std::ptr::null(), || {
        // SAFETY: NVTX's contract (above).
        handle_of(names::intern(&unsafe { wide(s) }))
    })
}

/// Domains by name; a domain's handle is its index + 1 (one handle per name).
static DOMAINS: AtomicPtr<Mutex<Vec<Vec<u8>>>> = AtomicPtr::new(std::ptr::null_mut());
/// The most domains told apart; past it every new one shares the last handle.
const MAX_DOMAINS: usize = 1024;

fn domain(name: Vec<u8>) -> *const c_void {
    let mut all = lock(get_or_create(&DOMAINS, || Mutex::new(Vec::new())));
    let i = match all.iter().position(|d| *d == name) {
        Some(i) => i,
        None if all.len() < MAX_DOMAINS => {
            all.push(name);
            all.len() - 1
        }
        None => MAX_DOMAINS - 1,
    };
    (i + 1) as *const c_void
}

unsafe extern "C" fn domain_create_a(name: *const c_char) -> *const c_void {
    shield(std::ptr::null(), || {
        // SAFETY: NVTX's contract (above).
        domain(unsafe { ascii(name) }.to_vec())
    })
}

unsafe extern "C" fn domain_create_w(name: *const i32) -> *const c_void {
    shield(std::ptr::null(), || {
        // SAFETY: NVTX's contract (above).
        domain(unsafe { wide(name) })
    })
}

unsafe extern "C" fn domain_destroy(_domain: *const c_void) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_numbers_only_when_whole_and_not_negative() {
        assert_eq!(payload(PAYLOAD_U64, 12), Some(12));
        assert_eq!(payload(PAYLOAD_I64, (-3i64) as u64), None);
        assert_eq!(payload(PAYLOAD_I32, 7), Some(7));
        assert_eq!(payload(PAYLOAD_I32, 0xffff_ffff), None);
        assert_eq!(payload(PAYLOAD_DOUBLE, 4.0f64.to_bits()), Some(4));
        assert_eq!(payload(PAYLOAD_DOUBLE, 4.5f64.to_bits()), None);
        assert_eq!(payload(PAYLOAD_FLOAT, u64::from(2.0f32.to_bits())), Some(2));
        assert_eq!(payload(0, 5), None);
    }

    #[test]
    fn pushed_keys_carry_the_domain_and_started_ids_stay_below_the_bit() {
        assert_eq!(pushed(std::ptr::null()), PUSHED);
        assert_eq!(pushed(3 as *const c_void), PUSHED | 3);
        assert_eq!(next_range_id() & PUSHED, 0);
        assert_eq!(std::mem::size_of::<Attributes>(), 48);
    }
}
