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
//! Measured with `bench_python_capture` (below: libpython loaded into the test process, a
//! ctypes callback with the GIL released, warm, minimum over rounds, 2-core development
//! machine, 31 Python frames): 3.11 308 ns, 3.13 449, 3.12 479, 3.10 483, 3.9 502, i.e.
//! 10–16 ns per frame. The whole capture with those 31 frames costs 0.3–0.65 µs more than
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

/// How a frame's position (the byte offset of its current instruction) is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lasti {
    /// `f_lasti` (an `int` at this offset of a `PyFrameObject`) is a byte offset (3.9).
    Bytes(usize),
    /// `f_lasti` counts 2-byte code units (3.10).
    Units(usize),
    /// `prev_instr` (3.11, 3.12) or `instr_ptr` (3.13), at offset `field` of the interpreter
    /// frame, points into the code object's bytecode, which starts at `co_code_adaptive`
    /// (offset `code_start` of the code object): the byte offset is the difference, as in
    /// CPython's `_PyInterpreterFrame_LASTI` (and `PyUnstable_InterpreterFrame_GetLasti`).
    Instr { field: usize, code_start: usize },
}

/// Where things are in one CPython version's structures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    /// Frames are `PyFrameObject`s (3.9–3.10), else `_PyInterpreterFrame`s.
    objects: bool,
    /// Offset in the thread state of the frame pointer (3.9/3.10 `frame`, 3.13
    /// `current_frame`) or of `cframe` (3.11/3.12).
    tstate_frame: usize,
    /// Offset of `current_frame` in the `_PyCFrame` (3.11/3.12).
    cframe_current: Option<usize>,
    frame_back: usize,
    frame_code: usize,
    /// Offset of the owner byte (interpreter frames); owner 3 (C stack) frames are skipped
    /// on 3.12+.
    frame_owner: Option<usize>,
    skip_owner: Option<u8>,
    /// How the first frame a call of the evaluation loop ran is told (see [`Entry`]).
    entry: Entry,
    lasti: Lasti,
    code_filename: usize,
    /// `co_qualname` from 3.11 on, `co_name` before.
    code_name: usize,
    code_firstlineno: usize,
    /// Where the characters of a compact ASCII / compact non-ASCII `str` start.
    str_ascii: usize,
    str_compact: usize,
}

const fn layout(minor: u32) -> Option<Layout> {
    Some(match minor {
        9 | 10 => Layout {
            objects: true,
            tstate_frame: 24,
            cframe_current: None,
            frame_back: 24,
            frame_code: 32,
            frame_owner: None,
            skip_owner: None,
            entry: Entry::Every,
            lasti: if minor == 9 {
                Lasti::Bytes(104)
            } else {
                Lasti::Units(96)
            },
            code_filename: 104,
            code_name: 112,
            code_firstlineno: 40,
            str_ascii: 48,
            str_compact: 72,
        },
        11 => Layout {
            objects: false,
            tstate_frame: 56,
            cframe_current: Some(8),
            frame_back: 48,
            frame_code: 32,
            frame_owner: Some(69),
            skip_owner: None,
            entry: Entry::Flag(68),
            lasti: Lasti::Instr {
                field: 56,
                code_start: 184,
            },
            code_filename: 112,
            code_name: 128,
            code_firstlineno: 72,
            str_ascii: 48,
            str_compact: 72,
        },
        12 => Layout {
            objects: false,
            tstate_frame: 56,
            cframe_current: Some(0),
            frame_back: 8,
            frame_code: 0,
            frame_owner: Some(70),
            skip_owner: Some(3),
            entry: Entry::BeforeCStack,
            lasti: Lasti::Instr {
                field: 56,
                code_start: 192,
            },
            code_filename: 112,
            code_name: 128,
            code_firstlineno: 68,
            str_ascii: 40,
            str_compact: 56,
        },
        // What 3.13's debug offsets are expected to say; see `layout_313`.
        13 => Layout {
            objects: false,
            tstate_frame: 72,
            cframe_current: None,
            frame_back: 8,
            frame_code: 0,
            frame_owner: Some(70),
            skip_owner: Some(3),
            entry: Entry::BeforeCStack,
            lasti: Lasti::Instr {
                field: 56,
                code_start: 200,
            },
            code_filename: 112,
            code_name: 128,
            code_firstlineno: 68,
            str_ascii: 40,
            str_compact: 56,
        },
        _ => return None,
    })
}

/// How a frame that a call of the evaluation loop ran first (an *entry* frame: the outermost
/// Python frame of the chain that one native `_PyEval_EvalFrameDefault` frame runs) is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    /// Every frame is its own call (3.9, 3.10).
    Every,
    /// A flag byte in the frame (3.11: `is_entry`).
    Flag(usize),
    /// The frame before a C-stack frame (owner 3) in the walk (3.12+: each call of the loop
    /// pushes one below the frames it runs).
    BeforeCStack,
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
    super::TAIL_TAG | if entry { ENTRY_BIT } else { 0 } | (id & 0x7f_ffff) << 24 | line
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_modes() {
        assert_eq!(minor_of(b"3.11.7 (main, Dec  8 2023)"), Some(11));
        assert_eq!(minor_of(b"3.9.18"), Some(9));
        assert_eq!(minor_of(b"2.7.18"), None);
        assert!(layout(8).is_none() && layout(14).is_none());
        assert!(layout(9).unwrap().objects && !layout(11).unwrap().objects);
        assert_eq!(Mode::parse(""), Some(Mode::Own));
        assert_eq!(Mode::parse("GIL"), Some(Mode::Gil));
        assert_eq!(Mode::parse("off"), Some(Mode::Off));
        assert_eq!(Mode::parse("sometimes"), None);
    }

    #[test]
    fn the_history_reads_frame_words_as_they_are_made() {
        use cuguard_history::replay::Word;
        assert_eq!(
            Word::of(word(5, 42, true)),
            Word::Python {
                code: 5,
                line: Some(42),
                entry: true
            }
        );
        assert_eq!(
            Word::of(word(0x7f_fffe, -1, false)),
            Word::Python {
                code: 0x7f_fffe,
                line: None,
                entry: false
            }
        );
        assert_eq!(Word::of(super::super::ORIGIN_TAG | 17), Word::Origin(17));
        assert_eq!(Word::of(0x7fff_1234_5678), Word::Native(0x7fff_1234_5678));
    }

    #[test]
    fn words_round_trip() {
        let w = word(5, 42, false);
        assert!(super::super::is_tail(w));
        let none: [&'static Code; 0] = [];
        assert_eq!(decode(w, &none).line, Some(42));
        assert_eq!(decode(word(5, -1, false), &none).line, None);
        assert_eq!(decode(word(5, 1 << 30, false), &none).line, None);
        assert_eq!(decode(w, &none).file, "<unknown>");
        // The entry bit survives, and is set apart from the code id and the line.
        let e = word(0x7f_fffe, 0xff_fffe, true);
        assert!(super::super::is_tail(e));
        assert!(decode(e, &none).entry && !decode(w, &none).entry);
        assert_eq!(decode(e, &none).line, Some(0xff_fffe));
        assert_eq!(e >> 24 & 0x7f_ffff, 0x7f_fffe);
    }

    #[test]
    fn nothing_without_a_python_thread_state() {
        // No interpreter in this test binary (or, when the bench below runs in the same
        // process, none on this thread).
        let mut out = [MaybeUninit::uninit(); 8];
        assert_eq!(capture(&mut out), 0);
    }

    /// What the bench's callback measured, ns per call: (Python frames only, whole capture
    /// with Python frames, whole capture without), minimum and median over rounds.
    static RESULT: std::sync::Mutex<Vec<(usize, usize, [f64; 6])>> =
        std::sync::Mutex::new(Vec::new());
    static DEPTH: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    extern "C" fn bench_cb() {
        const ROUNDS: usize = 60;
        const ITERS: u32 = 2000;
        let python_depth = DEPTH.load(Ordering::Relaxed);
        let mut buf = [MaybeUninit::<u64>::uninit(); 32];
        let frames = capture(&mut buf);
        let (mut py, mut with, mut without) = (Vec::new(), Vec::new(), Vec::new());
        let time = |f: &mut dyn FnMut()| {
            let t = std::time::Instant::now();
            for _ in 0..ITERS {
                f();
            }
            t.elapsed().as_nanos() as f64 / f64::from(ITERS)
        };
        for _ in 0..ROUNDS {
            py.push(time(&mut || {
                std::hint::black_box(capture(&mut buf));
            }));
            configure(Mode::Own);
            with.push(time(&mut || {
                std::hint::black_box(super::super::capture_with(
                    super::super::Skip::Frames(0),
                    32,
                    true,
                ));
            }));
            configure(Mode::Off);
            without.push(time(&mut || {
                std::hint::black_box(super::super::capture_with(
                    super::super::Skip::Frames(0),
                    32,
                    true,
                ));
            }));
            configure(Mode::Own);
        }
        let mm = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            (v[0], v[v.len() / 2])
        };
        let (a, b, c) = (mm(&mut py), mm(&mut with), mm(&mut without));
        RESULT
            .lock()
            .unwrap()
            .push((python_depth, frames, [a.0, a.1, b.0, b.1, c.0, c.1]));
    }

    /// Micro benchmark: the cost of reading Python frames, from inside a real interpreter
    /// (libpython loaded into this test process, calling back through ctypes with the GIL
    /// released), at three Python stack depths; warm caches.
    ///
    /// `cargo test -p cuguard-shim --release --lib -- --ignored bench_python_capture --nocapture`
    /// (`CUGUARD_BENCH_LIBPYTHON=/path/libpython3.x.so` picks the interpreter; default: the
    /// one `python3` on PATH was built with).
    #[test]
    #[ignore]
    fn bench_python_capture() {
        let lib = std::env::var("CUGUARD_BENCH_LIBPYTHON").unwrap_or_else(|_| {
            let out = std::process::Command::new("python3")
                .args([
                    "-c",
                    "import sysconfig as s; print(s.get_config_var('LIBDIR') + '/' + s.get_config_var('INSTSONAME'))",
                ])
                .output()
                .expect("python3");
            String::from_utf8(out.stdout).unwrap().trim().to_string()
        });
        let c_lib = std::ffi::CString::new(lib.clone()).unwrap();
        // SAFETY: loading a shared library by path; its constructors are CPython's.
        let h = unsafe { libc::dlopen(c_lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        assert!(!h.is_null(), "dlopen {lib}");
        type InitEx = unsafe extern "C" fn(c_int);
        type RunString = unsafe extern "C" fn(*const c_char) -> c_int;
        // SAFETY: CPython's Py_InitializeEx and PyRun_SimpleString, by their C signatures.
        unsafe {
            let init: InitEx = std::mem::transmute(libc::dlsym(h, c"Py_InitializeEx".as_ptr()));
            let run: RunString =
                std::mem::transmute(libc::dlsym(h, c"PyRun_SimpleString".as_ptr()));
            init(0);
            for depth in [1usize, 10, 30] {
                DEPTH.store(depth, Ordering::Relaxed);
                let code = format!(
                    "import ctypes\n\
                     cb = ctypes.CFUNCTYPE(None)({addr})\n\
                     def nest(k):\n    return cb() if k <= 1 else nest(k - 1)\n\
                     nest({depth})\n",
                    addr = bench_cb as *const () as usize
                );
                let code = std::ffi::CString::new(code).unwrap();
                assert_eq!(run(code.as_ptr()), 0);
            }
        }
        if API.get().is_some_and(Option::is_none) {
            println!("skipped: Python was looked up before libpython was loaded");
            return;
        }
        for (depth, frames, r) in RESULT.lock().unwrap().iter() {
            println!(
                "{lib}: Python depth {depth} ({frames} frames read): Python frames min {:.0} ns (median {:.0}); \
                 capture with them min {:.0} (median {:.0}), without min {:.0} (median {:.0})",
                r[0], r[1], r[2], r[3], r[4], r[5]
            );
        }
    }
}
