//! The stack capture's Python frames: those of the allocating thread (CPython 3.9–3.13), read in place with no call that
//! could allocate, take a lock or run Python code.
//!
//! # What is read, and why that is safe
//!
//! The interpreter is looked up at run time: its symbols are resolved once, through the real
//! `dlsym` with `RTLD_DEFAULT` (the `python3.x` executable exports them, as does a
//! `libpython3.x.so` loaded globally). The shim never links libpython. When they are not
//! there, [`capture`] costs one atomic load.
//!
//! On each capture the thread's *own* thread state is taken from `PyGILState_GetThisThreadState`
//! (a thread-local read), and its frame chain is walked by reading the interpreter's structures
//! directly (offsets per minor version below). Only these functions are called, each a read
//! of immutable or thread-local data that neither allocates nor raises:
//! `Py_IsInitialized`, `_Py_IsFinalizing`/`Py_IsFinalizing`, `PyGILState_GetThisThreadState`,
//! `PyGILState_Check` and `PyCode_Addr2Line`.
//! The stable-API route (`PyEval_GetFrame`, `PyFrame_GetBack`) is not used: from 3.11 on it
//! creates frame objects, an allocation that can start a garbage collection and so run
//! finalizers (Python code) inside a `cuMemAlloc`.
//!
//! Walks happen only when the interpreter is initialized and not finalizing, and the thread
//! has a thread state. Two modes ([`Mode`], `CUGUARD_PYTHON`):
//!
//! - [`Mode::Gil`]: only when the thread holds the GIL (`PyGILState_Check() == 1`). Nothing
//!   else can touch its frames then.
//! - [`Mode::Own`] (the default): also when the thread released the GIL around the native call
//!   that allocates. PyTorch's operator bindings, CuPy's `runtime.malloc`, RMM and ctypes all
//!   release it before they reach `cudaMalloc`/`cuMemAlloc`, so without this mode the Python
//!   line of almost every real allocation is lost. The frames walked are the calling thread's
//!   own and it is inside this call, so none of them can be pushed, popped or freed meanwhile
//!   (only their thread changes them); code objects and their strings are kept alive by the
//!   frames. The one known exception: a *daemon* thread allocating while another thread runs
//!   `Py_FinalizeEx` past its check for finalization, which frees other threads' states; a
//!   walk in that microsecond window may read freed memory.
//!
//! Every object read is checked to have the expected type (`PyCode_Type`, `PyUnicode_Type`,
//! `PyFrame_Type` on 3.9–3.10) and every pointer to be plausible before it is followed, so a
//! layout mismatch stops the walk instead of wandering. On 3.13 the layout is taken from the
//! interpreter's own `_Py_DebugOffsets` (the table it publishes for debuggers), and a build it
//! does not describe (free-threaded, debug offsets missing) gets no Python frames.
//!
//! # Layouts (x86-64, release builds)
//!
//! | version | thread state → frame | frame: back, code, position | code: file, name, first line |
//! |---|---|---|---|
//! | 3.9 | `frame` @24 | `PyFrameObject`: `f_back` @24, `f_code` @32, `f_lasti` @104 (bytes) | 104, `co_name` 112, 40 |
//! | 3.10 | `frame` @24 | `f_back` @24, `f_code` @32, `f_lasti` @96 (code units) | 104, 112, 40 |
//! | 3.11 | `cframe` @56 → `current_frame` @8 | `_PyInterpreterFrame`: `previous` @48, `f_code` @32, `prev_instr` @56, `owner` @69 | 112, `co_qualname` 128, 72 |
//! | 3.12 | `cframe` @56 → `current_frame` @0 | `previous` @8, `f_code` @0, `prev_instr` @56, `owner` @70 (3 = C stack: skipped) | 112, 128, 68 |
//! | 3.13 | `current_frame` (debug offsets: 72) | `previous` @8, `f_executable` @0 (skipped unless a code object), `instr_ptr` @56, `owner` @70 | 112, 128, 68 |
//!
//! The byte offset of a frame's instruction is `f_lasti` (3.9: bytes, 3.10: code units) or
//! the distance from the code object's bytecode (`co_code_adaptive`: 184, 192, 200) to the
//! frame's instruction pointer, as `_PyInterpreterFrame_LASTI` computes it; `PyCode_Addr2Line`
//! turns it into a line.
//!
//! Strings: compact `str` objects, data after the 48-byte (≤3.11) or 40-byte (3.12+) ASCII
//! header, or the 72/56-byte compact header for non-ASCII text (UCS-1/2/4).
//!
//! # Cost and caches
//!
//! Each code object seen gets an entry in a global table (lock-free lookups; a bounded
//! spin-lock on insert) holding its file and function as UTF-8 and a few `(offset, line)`
//! pairs, so a warm frame is a type check, a probe and a line-slot scan; `PyCode_Addr2Line`
//! (linear in the function's size) runs once per call site. In front of that table, each
//! thread keeps a memo of frame words (512 entries, 20 KiB) keyed by everything the table
//! matches on plus the offset, so a frame met before costs one probe of the thread's own memo
//! and no line-slot scan; measured with `capture_bench`, about half the time of reading 32
//! Python frames on the simulated driver (`docs/benchmarks.md`). An entry is matched by the code
//! object's address *and* its file, name and first line, so a code object freed and another
//! made at the same address is not mistaken for it.
//!
//! Measured with `bench_python_capture` (in `python/tests.rs`: libpython loaded into the test
//! process, a ctypes callback with the GIL released, warm, minimum over rounds, 2-core
//! development machine, 31 Python frames): 3.11 308 ns, 3.13 449, 3.12 479, 3.10 483, 3.9 502,
//! i.e. 10–16 ns per frame. The whole capture with those 31 frames costs 0.3–0.65 µs more than
//! without (hashing and comparing the longer stack included). Without Python: one atomic load.
//!
//! A frame is recorded as one tagged word (see [`super::TAIL_TAG`]): code entry id, line, and
//! whether it is an *entry* frame, the first one a call of the evaluation loop ran (3.9/3.10:
//! every frame; 3.11: the frame's `is_entry` byte @68; 3.12+: the frame just before a C-stack
//! frame, which each call of the loop pushes below the frames it runs). The report uses the
//! entry frames to put the Python frames in place of the native evaluation frames that ran them.
//! [`codes`] and [`decode`] turn them back into file, function and line when the report is
//! written.

use std::cell::Cell;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::mem::MaybeUninit;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, Ordering};

use super::dedup::SpinLock;
use layout::{Entry, Lasti, Layout, layout};

/// Whether and when Python frames are read (`CUGUARD_PYTHON`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Never (`0`, `off`).
    Off,
    /// Only while the allocating thread holds the GIL (`gil`).
    Gil,
    /// Also while it released the GIL around the native call (`1`, `on`; the default).
    Own,
}

impl Mode {
    /// Parses a `CUGUARD_PYTHON` value; `None` for an unknown one.
    pub fn parse(v: &str) -> Option<Mode> {
        match v.trim().to_ascii_lowercase().as_str() {
            "" | "1" | "on" | "true" | "yes" | "own" => Some(Mode::Own),
            "gil" => Some(Mode::Gil),
            "0" | "off" | "false" | "no" => Some(Mode::Off),
            _ => None,
        }
    }
}

static MODE: AtomicU8 = AtomicU8::new(Mode::Own as u8);

/// Sets when Python frames are read. Takes effect for later captures.
pub fn configure(mode: Mode) {
    MODE.store(mode as u8, Ordering::Relaxed);
}

fn mode() -> Mode {
    match MODE.load(Ordering::Relaxed) {
        x if x == Mode::Off as u8 => Mode::Off,
        x if x == Mode::Gil as u8 => Mode::Gil,
        _ => Mode::Own,
    }
}

type IntFn = unsafe extern "C" fn() -> c_int;
type PtrFn = unsafe extern "C" fn() -> *mut c_void;
type Addr2LineFn = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
type VersionFn = unsafe extern "C" fn() -> *const c_char;

/// The interpreter's entry points and types, resolved once.
struct Api {
    layout: Layout,
    is_initialized: IntFn,
    is_finalizing: IntFn,
    this_thread_state: PtrFn,
    gil_check: IntFn,
    addr2line: Addr2LineFn,
    code_type: usize,
    unicode_type: usize,
    frame_type: usize,
    /// The address of `Py_IsInitialized`: its module is the interpreter's.
    anchor: usize,
}

/// Why Python frames are not read, when Python is there but this module declines.
static DECLINED: OnceLock<String> = OnceLock::new();
static API: OnceLock<Option<Api>> = OnceLock::new();

fn sym(name: &CStr) -> usize {
    let Some(dlsym) = crate::driver::real_dlsym() else {
        return 0;
    };
    // SAFETY: RTLD_DEFAULT with a NUL-terminated name; the real dlsym does not re-enter the
    // shim. It may take the loader's lock, which no caller of `capture` holds.
    unsafe { dlsym(libc::RTLD_DEFAULT, name.as_ptr()) as usize }
}

/// `3.11.7 (main, …)` → 11.
fn minor_of(version: &[u8]) -> Option<u32> {
    let rest = version.strip_prefix(b"3.")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

fn decline(why: String) -> Option<Api> {
    let _ = DECLINED.set(why);
    None
}

fn resolve() -> Option<Api> {
    let is_initialized = sym(c"Py_IsInitialized");
    if is_initialized == 0 {
        return None; // no Python here
    }
    let version = sym(c"Py_GetVersion");
    if version == 0 {
        return decline("Python found but not Py_GetVersion".into());
    }
    // SAFETY: Py_GetVersion has this signature in every CPython 3 and returns a static
    // NUL-terminated string; it allocates nothing and needs no GIL.
    let text = unsafe {
        let f: VersionFn = std::mem::transmute::<usize, VersionFn>(version);
        let p = f();
        if p.is_null() {
            return decline("Py_GetVersion returned nothing".into());
        }
        CStr::from_ptr(p).to_bytes()
    };
    let Some(minor) = minor_of(text) else {
        return decline(format!(
            "unrecognised Python version {:?}",
            String::from_utf8_lossy(text)
        ));
    };
    let Some(mut layout) = layout(minor) else {
        return decline(format!(
            "Python 3.{minor}: Python frames are read on 3.9 to 3.13 only"
        ));
    };
    if minor == 13 {
        match layout_313(sym(c"_PyRuntime")) {
            Ok(l) => layout = l,
            Err(why) => return decline(format!("Python 3.13: {why}")),
        }
    }
    let mut finalizing = sym(c"Py_IsFinalizing");
    if finalizing == 0 {
        finalizing = sym(c"_Py_IsFinalizing");
    }
    let names = [
        (
            "PyGILState_GetThisThreadState",
            sym(c"PyGILState_GetThisThreadState"),
        ),
        ("PyGILState_Check", sym(c"PyGILState_Check")),
        ("PyCode_Addr2Line", sym(c"PyCode_Addr2Line")),
        ("PyCode_Type", sym(c"PyCode_Type")),
        ("PyUnicode_Type", sym(c"PyUnicode_Type")),
        ("Py_IsFinalizing", finalizing),
    ];
    if let Some((name, _)) = names.iter().find(|(_, a)| *a == 0) {
        return decline(format!("Python 3.{minor} without {name}"));
    }
    let frame_type = sym(c"PyFrame_Type");
    if layout.objects && frame_type == 0 {
        return decline(format!("Python 3.{minor} without PyFrame_Type"));
    }
    // SAFETY: each address is the interpreter's exported function of that name, whose C
    // signature in 3.9–3.13 is the one transmuted to.
    unsafe {
        crate::process::diag::log(|| format!("Python 3.{minor} found: recording Python frames"));
        Some(Api {
            layout,
            is_initialized: std::mem::transmute::<usize, IntFn>(is_initialized),
            is_finalizing: std::mem::transmute::<usize, IntFn>(finalizing),
            this_thread_state: std::mem::transmute::<usize, PtrFn>(names[0].1),
            gil_check: std::mem::transmute::<usize, IntFn>(names[1].1),
            addr2line: std::mem::transmute::<usize, Addr2LineFn>(names[2].1),
            code_type: names[3].1,
            unicode_type: names[4].1,
            frame_type,
            anchor: is_initialized,
        })
    }
}

/// 3.13's layout from `_PyRuntime.debug_offsets` (`_Py_DebugOffsets`, at the start of the
/// runtime state), checked against what this module expects of a GIL build.
fn layout_313(runtime: usize) -> Result<Layout, String> {
    if runtime == 0 {
        return Err("no _PyRuntime".into());
    }
    // SAFETY: _PyRuntime is the interpreter's static runtime state; its first 584 bytes are
    // the debug-offsets table in 3.13, written at build time and never changed.
    let u = |at: usize| -> u64 { unsafe { rd::<u64>(runtime + at) } };
    // SAFETY: as above; the cookie is the table's first 8 bytes.
    let cookie = unsafe { rd::<[u8; 8]>(runtime) };
    if &cookie != b"xdebugpy" {
        return Err("no debug offsets in _PyRuntime".into());
    }
    if u(8) >> 16 != 0x030d {
        return Err(format!("debug offsets of version {:#x}", u(8)));
    }
    if u(16) != 0 {
        return Err("a free-threaded build (not supported)".into());
    }
    let small = |at: usize| -> Result<usize, String> {
        let v = u(at);
        (v < 1024)
            .then_some(v as usize)
            .ok_or_else(|| format!("implausible debug offset {v} at {at}"))
    };
    let base = layout(13).expect("3.13 has a layout");
    let l = Layout {
        tstate_frame: small(184)?,
        frame_back: small(232)?,
        frame_code: small(240)?,
        frame_owner: Some(small(264)?),
        lasti: Lasti::Instr {
            field: small(248)?,
            code_start: small(344)?,
        },
        code_filename: small(280)?,
        code_name: small(296)?,
        code_firstlineno: small(312)?,
        str_ascii: small(560)?,
        str_compact: small(560)? + 16,
        ..base
    };
    if small(544)? != 32 || small(552)? != 16 || small(360)? != 8 {
        return Err("unexpected str/object header in debug offsets".into());
    }
    Ok(l)
}

#[inline]
fn api() -> Option<&'static Api> {
    // The interpreter's lookup, done once (billed apart).
    API.get_or_init(|| crate::process::cost::one_time(resolve))
        .as_ref()
}

/// Whether an interpreter whose frames can be read is in the process (resolved at the first
/// call; then one atomic load).
#[inline]
pub fn present() -> bool {
    api().is_some()
}

/// Why Python is present but its frames are not read (unsupported version, missing symbol),
/// once resolution has happened; for the report's faults.
pub fn declined() -> Option<&'static str> {
    DECLINED.get().map(String::as_str)
}

/// An address inside the interpreter's module (executable or libpython), when Python frames
/// are read: native frames in that module are the interpreter's, and the Python frames
/// belong where the first of them is.
pub fn interpreter_anchor() -> Option<u64> {
    API.get()?.as_ref().map(|a| a.anchor as u64)
}

/// Reads a `T` at `addr`.
///
/// SAFETY (for callers): `addr` must be readable for `size_of::<T>()` bytes and aligned.
#[inline(always)]
unsafe fn rd<T: Copy>(addr: usize) -> T {
    // SAFETY: the caller's contract.
    unsafe { std::ptr::read_volatile(addr as *const T) }
}

/// Whether `p` can be an object or frame pointer: in the user half of the address space,
/// above the first pages, 8-aligned.
#[inline(always)]
fn plausible(p: usize) -> bool {
    (0x10000..0x0000_8000_0000_0000).contains(&p) && p.is_multiple_of(8)
}

// ---------------------------------------------------------------------------------------------
// Code objects: file, function and lines, cached.

const SLOTS: usize = 1 << 16;
/// The most code objects kept (the table stays at most 3/4 full).
const MAX_CODES: u32 = (SLOTS / 4 * 3) as u32;
const LINE_SLOTS: usize = 8;
/// The longest file or function name kept, in characters.
const MAX_NAME: usize = 1024;

/// One code object seen in a captured stack.
pub struct Code {
    code: usize,
    filename: usize,
    name: usize,
    firstlineno: i32,
    id: u32,
    /// Source file (`co_filename`), UTF-8.
    pub file: Box<str>,
    /// Function (`co_qualname` from 3.11 on, `co_name` before).
    pub function: Box<str>,
    /// `(byte offset + 1) << 32 | line` pairs; 0 = empty.
    lines: [AtomicU64; LINE_SLOTS],
}

impl Code {
    #[inline]
    fn line(&self, addr: i32, api: &Api, code: usize) -> i32 {
        if addr < 0 {
            // Not started: the first line, as PyCode_Addr2Line answers.
            return self.firstlineno;
        }
        let key = (addr as u64 + 1) << 32;
        for s in &self.lines {
            let v = s.load(Ordering::Relaxed);
            if v & !0xffff_ffff == key {
                return v as u32 as i32;
            }
        }
        // SAFETY: `code` is a live code object (checked by type, kept alive by the frame being
        // walked); PyCode_Addr2Line reads its immutable line table, allocates nothing and
        // does not raise.
        let line = unsafe { (api.addr2line)(code as *mut c_void, addr) };
        let slot = (addr as usize / 2) % LINE_SLOTS;
        self.lines[slot].store(key | u64::from(line as u32), Ordering::Relaxed);
        line
    }
}

struct Codes {
    slots: Box<[AtomicPtr<Code>]>,
}

static CODES: OnceLock<Codes> = OnceLock::new();
static CODE_COUNT: AtomicU32 = AtomicU32::new(0);
static CODE_LOCK: SpinLock = SpinLock::new();

#[inline]
fn slot_of(code: usize) -> usize {
    ((code as u64 >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 48) as usize & (SLOTS - 1)
}

impl Codes {
    fn get() -> &'static Codes {
        CODES.get_or_init(|| Codes {
            slots: (0..SLOTS)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
        })
    }

    #[inline]
    fn find(&self, code: usize, filename: usize, name: usize, first: i32) -> Option<&'static Code> {
        let mut i = slot_of(code);
        loop {
            let p = self.slots[i].load(Ordering::Acquire);
            if p.is_null() {
                return None;
            }
            // SAFETY: entries are published with Release once built and never freed.
            let c = unsafe { &*p };
            if c.code == code && c.filename == filename && c.name == name && c.firstlineno == first
            {
                return Some(c);
            }
            i = (i + 1) & (SLOTS - 1);
        }
    }

    /// Adds an entry (or finds the one another thread added). `None` when full or the lock
    /// could not be had.
    #[cold]
    fn insert(&self, c: Box<Code>) -> Option<&'static Code> {
        if !CODE_LOCK.lock_bounded() {
            return None;
        }
        let r = (|| {
            if let Some(found) = self.find(c.code, c.filename, c.name, c.firstlineno) {
                return Some(found);
            }
            let id = CODE_COUNT.load(Ordering::Relaxed);
            if id >= MAX_CODES {
                return None;
            }
            let mut c = c;
            c.id = id;
            let mut i = slot_of(c.code);
            while !self.slots[i].load(Ordering::Relaxed).is_null() {
                i = (i + 1) & (SLOTS - 1);
            }
            let p = Box::into_raw(c);
            self.slots[i].store(p, Ordering::Release);
            CODE_COUNT.store(id + 1, Ordering::Release);
            // SAFETY: just published; never freed.
            Some(unsafe { &*p })
        })();
        CODE_LOCK.unlock();
        r
    }
}

/// Reads a `str` object into UTF-8 (at most [`MAX_NAME`] characters); `None` if it is not an
/// exact, compact `str`.
///
/// SAFETY (for callers): `obj` must be a plausible pointer read from a live object's field.
unsafe fn read_str(api: &Api, obj: usize) -> Option<String> {
    let l = &api.layout;
    // SAFETY: plausibility checked before each dereference; the header fields (type @8,
    // length @16, state @32) lie inside any str object's fixed header.
    unsafe {
        if !plausible(obj) || rd::<usize>(obj + 8) != api.unicode_type {
            return None;
        }
        let len = rd::<isize>(obj + 16);
        let state = rd::<u32>(obj + 32);
        let kind = (state >> 2) & 7;
        let compact = state >> 5 & 1 == 1;
        let ascii = state >> 6 & 1 == 1;
        if !compact || len < 0 {
            return None;
        }
        let n = (len as usize).min(MAX_NAME);
        let data = obj + if ascii { l.str_ascii } else { l.str_compact };
        let mut s = String::with_capacity(n);
        for i in 0..n {
            let cp = match kind {
                1 => u32::from(rd::<u8>(data + i)),
                2 => u32::from(rd::<u16>(data + 2 * i)),
                4 => rd::<u32>(data + 4 * i),
                _ => return None,
            };
            s.push(char::from_u32(cp).unwrap_or(char::REPLACEMENT_CHARACTER));
        }
        Some(s)
    }
}

/// What identifies a code object: its address and, against reuse of that address by another
/// code object, its file and name objects and first line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct CodeKey {
    code: usize,
    filename: usize,
    name: usize,
    first: i32,
}

impl CodeKey {
    /// SAFETY (for callers): `code` is a live code object (its type checked).
    #[inline(always)]
    unsafe fn read(api: &Api, code: usize) -> CodeKey {
        let l = &api.layout;
        // SAFETY: `code` is a live code object; these fields lie in its fixed part.
        unsafe {
            CodeKey {
                code,
                filename: rd::<usize>(code + l.code_filename),
                name: rd::<usize>(code + l.code_name),
                first: rd::<i32>(code + l.code_firstlineno),
            }
        }
    }
}

/// The entry for the code object `key` names, made on first sight.
///
/// SAFETY (for callers): `key.code` is a live code object (its type checked), `key` read from it.
#[inline]
unsafe fn code_entry_for(api: &Api, key: &CodeKey) -> Option<&'static Code> {
    let CodeKey {
        code,
        filename,
        name,
        first,
    } = *key;
    let codes = Codes::get();
    if let Some(c) = codes.find(code, filename, name, first) {
        return Some(c);
    }
    if CODE_COUNT.load(Ordering::Relaxed) >= MAX_CODES {
        return None;
    }
    // SAFETY: the strings are the live code object's own fields.
    let (file, function) = unsafe { (read_str(api, filename), read_str(api, name)) };
    codes.insert(Box::new(Code {
        code,
        filename,
        name,
        firstlineno: first,
        id: 0,
        file: file.unwrap_or_else(|| "<unknown>".into()).into_boxed_str(),
        function: function
            .unwrap_or_else(|| "<unknown>".into())
            .into_boxed_str(),
        lines: [const { AtomicU64::new(0) }; LINE_SLOTS],
    }))
}

// ---------------------------------------------------------------------------------------------
// Capture.

// ---------------------------------------------------------------------------------------------
// The per-thread memo of frame words.

/// Entries of a thread's memo (direct-mapped; 40 bytes each: 20 KiB a thread).
const MEMO_SLOTS: usize = 512;

/// Whether walks use the memo (`CUGUARD_TEST_CAPTURE_CACHE=0` turns it off, for the capture
/// benchmark's "before" column).
static MEMO_ON: AtomicBool = AtomicBool::new(true);

/// Turns the per-thread memo of frame words on or off (for benchmarks).
pub fn set_memo(on: bool) {
    MEMO_ON.store(on, Ordering::Relaxed);
}

/// One remembered frame: the code object (as [`CodeKey`]), the byte offset, and the word
/// they gave (entry bit clear). `code` 0: empty.
#[derive(Clone, Copy, Default)]
struct MemoEntry {
    key: CodeKey,
    addr: i32,
    word: u64,
}

/// A thread's memo of frame words by code object and offset: a frame a thread's walks have
/// met before (the outer frames of a loop that allocates: all of them but the innermost, at
/// each allocation) is one probe and a comparison, where the code table costs a probe of a
/// shared 512 KiB table, a comparison and a scan of the entry's line slots. The key holds
/// everything [`code_entry_for`] matches on, plus the offset the line comes from, so a hit
/// gives the word the table would give.
struct Memo {
    entries: [MemoEntry; MEMO_SLOTS],
}

impl Memo {
    #[inline(always)]
    fn slot(key: &CodeKey, addr: i32) -> usize {
        let h =
            (key.code as u64 >> 4 ^ (addr as u32 as u64) << 20).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> 55) as usize % MEMO_SLOTS
    }

    /// SAFETY (for callers): as [`frame_word`]'s.
    #[inline]
    unsafe fn word(&mut self, api: &Api, key: &CodeKey, addr: i32) -> u64 {
        let e = &mut self.entries[Self::slot(key, addr)];
        if e.key == *key && e.addr == addr {
            return e.word;
        }
        // SAFETY: the caller's contract.
        let w = unsafe { frame_word(api, key, addr) };
        if w >> 24 & 0x7f_ffff != UNKNOWN_CODE {
            *e = MemoEntry {
                key: *key,
                addr,
                word: w,
            };
        }
        w
    }
}

/// The thread's memo, made at its first walk, with a busy flag against re-entry (a signal
/// handler that allocates during a walk gets none).
struct MemoCell {
    busy: Cell<bool>,
    memo: Cell<*mut Memo>,
}

impl Drop for MemoCell {
    fn drop(&mut self) {
        let m = self.memo.replace(std::ptr::null_mut());
        if !m.is_null() {
            // SAFETY: made by Box::into_raw in `with_memo`, owned by this thread only.
            drop(unsafe { Box::from_raw(m) });
        }
    }
}

thread_local! {
    static MEMO: MemoCell = const {
        MemoCell {
            busy: Cell::new(false),
            memo: Cell::new(std::ptr::null_mut()),
        }
    };
}

/// Runs `f` with this thread's memo, or with `None` (re-entered, or the thread's locals are
/// gone).
fn with_memo<R>(f: impl FnOnce(Option<&mut Memo>) -> R) -> R {
    let memo = MEMO
        .try_with(|cell| {
            if cell.busy.replace(true) {
                return None;
            }
            let mut m = cell.memo.get();
            if m.is_null() {
                m = Box::into_raw(Box::new(Memo {
                    entries: [MemoEntry::default(); MEMO_SLOTS],
                }));
                cell.memo.set(m);
            }
            Some(m)
        })
        .ok()
        .flatten();
    match memo {
        Some(m) => {
            // SAFETY: owned by this thread; `busy` (set above) guarantees no other borrow.
            let r = f(Some(unsafe { &mut *m }));
            let _ = MEMO.try_with(|cell| cell.busy.set(false));
            r
        }
        None => f(None),
    }
}

/// Code id meaning "a frame whose code could not be recorded".
const UNKNOWN_CODE: u64 = 0x7f_ffff;
const NO_LINE: u64 = 0xff_ffff;
/// Set in the word of an entry frame (see [`Entry`]).
const ENTRY_BIT: u64 = 1 << 47;

/// A frame's word: the tag, its entry bit (47), its code id (24..47) and its line (0..24).
#[inline]
fn word(id: u64, line: i32, entry: bool) -> u64 {
    let line = if (0..NO_LINE as i32).contains(&line) {
        line as u64
    } else {
        NO_LINE
    };
    super::words::TAIL_TAG | if entry { ENTRY_BIT } else { 0 } | (id & 0x7f_ffff) << 24 | line
}

/// Writes the calling thread's Python frames, innermost first, into `out` (as tagged words)
/// and returns how many. 0 when Python is absent, off, not running on this thread, or the
/// rules above forbid a walk. Never panics, never blocks (inserts spin a bounded time).
#[inline]
pub fn capture(out: &mut [MaybeUninit<u64>]) -> usize {
    if out.is_empty() {
        return 0;
    }
    let Some(api) = api() else { return 0 };
    let mode = mode();
    if mode == Mode::Off {
        return 0;
    }
    // SAFETY: the interpreter's functions, resolved with their C signatures; each reads
    // runtime or thread-local state only, allocates nothing and needs no GIL.
    let ts = unsafe {
        if (api.is_initialized)() == 0 || (api.is_finalizing)() != 0 {
            return 0;
        }
        let ts = (api.this_thread_state)() as usize;
        if ts == 0 || (mode == Mode::Gil && (api.gil_check)() != 1) {
            return 0;
        }
        ts
    };
    // SAFETY: `ts` is this thread's own live thread state (see the module doc for why its
    // frame chain cannot change or be freed during this call).
    unsafe { walk(api, ts, out) }
}

/// SAFETY (for callers): `ts` is the calling thread's live thread state.
unsafe fn walk(api: &Api, ts: usize, out: &mut [MaybeUninit<u64>]) -> usize {
    if !MEMO_ON.load(Ordering::Relaxed) {
        // SAFETY: the caller's contract.
        return unsafe { walk_with(api, ts, out, None) };
    }
    with_memo(|memo| {
        // SAFETY: the caller's contract.
        unsafe { walk_with(api, ts, out, memo) }
    })
}

/// The word of a frame running `key` at byte offset `addr` (its entry bit clear), from the
/// code table.
///
/// SAFETY (for callers): `key.code` is a live code object (its type checked), `key` read from it.
#[inline]
unsafe fn frame_word(api: &Api, key: &CodeKey, addr: i32) -> u64 {
    // SAFETY: the caller's contract.
    match unsafe { code_entry_for(api, key) } {
        Some(c) => word(u64::from(c.id), c.line(addr, api, key.code), false),
        None => word(UNKNOWN_CODE, -1, false),
    }
}

/// SAFETY (for callers): `ts` is the calling thread's live thread state.
unsafe fn walk_with(
    api: &Api,
    ts: usize,
    out: &mut [MaybeUninit<u64>],
    mut memo: Option<&mut Memo>,
) -> usize {
    let l = &api.layout;
    // SAFETY: `ts` is live; the frame fields read are at this version's offsets, and every
    // pointer is checked for plausibility (and objects for their type) before it is followed.
    unsafe {
        let mut frame = rd::<usize>(ts + l.tstate_frame);
        if let Some(cur) = l.cframe_current {
            if !plausible(frame) {
                return 0;
            }
            frame = rd::<usize>(frame + cur);
        }
        let mut n = 0;
        // Bounds the walk even over a cycle or a long run of skipped frames.
        let mut budget = out.len() * 2 + 16;
        while n < out.len() && budget > 0 && frame != 0 {
            budget -= 1;
            if !plausible(frame) {
                break;
            }
            if l.objects && rd::<usize>(frame + 8) != api.frame_type {
                break;
            }
            let next = rd::<usize>(frame + l.frame_back);
            if let (Some(at), Some(skip)) = (l.frame_owner, l.skip_owner)
                && rd::<u8>(frame + at) == skip
            {
                // A call of the evaluation loop starts below this frame: the frame before it
                // was the first that call ran.
                if l.entry == Entry::BeforeCStack && n > 0 {
                    let w = out[n - 1].assume_init();
                    out[n - 1].write(w | ENTRY_BIT);
                }
                frame = next;
                continue;
            }
            let code = rd::<usize>(frame + l.frame_code);
            if !plausible(code) || rd::<usize>(code + 8) != api.code_type {
                // 3.13 frames may run other executables (None for C-stack shims).
                frame = next;
                continue;
            }
            let addr = match l.lasti {
                Lasti::Bytes(at) => rd::<i32>(frame + at),
                Lasti::Units(at) => rd::<i32>(frame + at).saturating_mul(2),
                Lasti::Instr { field, code_start } => {
                    let ip = rd::<usize>(frame + field) as isize;
                    let start = (code + code_start) as isize;
                    i32::try_from(ip.wrapping_sub(start)).unwrap_or(-1)
                }
            };
            let entry = match l.entry {
                Entry::Every => true,
                Entry::Flag(at) => rd::<u8>(frame + at) != 0,
                Entry::BeforeCStack => false,
            };
            let key = CodeKey::read(api, code);
            let w = match memo.as_deref_mut() {
                Some(m) => m.word(api, &key, addr),
                None => frame_word(api, &key, addr),
            };
            out[n].write(if entry { w | ENTRY_BIT } else { w });
            n += 1;
            frame = next;
        }
        n
    }
}

// ---------------------------------------------------------------------------------------------
// Report time.

/// The code entries by id (index = id), for [`decode`].
pub fn codes() -> Vec<&'static Code> {
    let Some(table) = CODES.get() else {
        return Vec::new();
    };
    let n = CODE_COUNT.load(Ordering::Acquire) as usize;
    let mut by_id: Vec<Option<&'static Code>> = vec![None; n];
    for s in table.slots.iter() {
        let p = s.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: published entries are never freed.
            let c = unsafe { &*p };
            if let Some(slot) = by_id.get_mut(c.id as usize) {
                *slot = Some(c);
            }
        }
    }
    by_id.into_iter().map_while(|c| c).collect()
}

impl Code {
    /// The id its frames' words carry.
    pub fn id(&self) -> u32 {
        self.id
    }
}

/// How many code entries exist (ids `0..`): the history writes the new ones when this grows.
pub fn code_count() -> u32 {
    CODE_COUNT.load(Ordering::Acquire)
}

/// One Python frame as the report gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PyFrame<'a> {
    pub file: &'a str,
    pub function: &'a str,
    pub line: Option<u32>,
    /// The first frame a call of the evaluation loop ran (see [`Entry`]).
    pub entry: bool,
}

/// Turns a tagged word from a stack's tail back into a frame.
pub fn decode<'a>(word: u64, codes: &'a [&'static Code]) -> PyFrame<'a> {
    let id = (word >> 24 & 0x7f_ffff) as usize;
    let line = word & 0xff_ffff;
    let line = (line != NO_LINE).then_some(line as u32);
    let entry = word & ENTRY_BIT != 0;
    match codes.get(id) {
        Some(c) => PyFrame {
            file: &c.file,
            function: &c.function,
            line,
            entry,
        },
        None => PyFrame {
            file: "<unknown>",
            function: "<unknown>",
            line,
            entry,
        },
    }
}

/// A frame's word (code id, line; not an entry), for the stack module's tests.
#[cfg(test)]
pub(crate) fn tests_word(id: u64, line: i32) -> u64 {
    word(id, line, false)
}

/// Clears the code table's insert lock in a forked child.
pub(crate) fn reset_after_fork() {
    CODE_LOCK.unlock();
}

mod layout;
#[cfg(test)]
mod tests;
