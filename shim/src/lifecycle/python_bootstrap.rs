//! cuguard's Python bootstrap, handed to the interpreter by the shim itself, for a Python process
//! that got the shim with `LD_PRELOAD` alone (or `python -I`, `-E`, `-S` under `cuguard run`,
//! where no `sitecustomize` is imported): the end of the program's code is then marked before the
//! interpreter's teardown, as under `cuguard run` (`crate::tracker::end`).
//!
//! # How
//!
//! Nothing happens at load (the interpreter is not running yet, and a constructor only reads
//! settings). At the shim's first use in the process ([`super::first_use`]) and again at the
//! first allocation ([`super::arm`]), [`offer`] looks for an interpreter (its symbols through
//! the real `dlsym` with `RTLD_DEFAULT`, as `crate::stack::python` does) and, where one is
//! initialized and not finalizing, hands it one pending call (`Py_AddPendingCall`: callable from
//! any thread, without the GIL; it takes the interpreter's pending-call lock for a moment and
//! runs no Python). The interpreter's main thread runs the call between two bytecodes, with the
//! GIL, as it runs signal handlers. [`run_bootstrap`] then compiles the bootstrap's source (the
//! same file `cuguard run` puts on `PYTHONPATH`, `src/python/cuguard/_bootstrap/sitecustomize.py`)
//! into a fresh namespace holding `_CUGUARD_BY_SHIM` (the shim's path), which makes it run
//! `_cuguard_by_shim()` instead of its start-up: one `atexit` handler, the import hook, the
//! `os._exit` wrapper, cuguard's package found beside the shim. On success the shim records the
//! promise itself ([`crate::tracker::end::expect`]); nothing is added to `sys.path` and the
//! program's `__main__` is not touched.
//!
//! Where the bootstrap already ran (`cuguard run`: the promise is there when the call comes),
//! the call does nothing. `CUGUARD_PYTHON_END=0` turns it off.
//!
//! # What differs from `cuguard run`
//!
//! The handler is registered when the call runs, not before the program's code: `atexit`
//! handlers the program registered before then run after the end is marked (under `cuguard run`
//! all of them run before). Frameworks already imported then are looked into at once, except one
//! whose import is under way at that moment.
//!
//! # Where it cannot
//!
//! [`why_not`] gives the report's one line (`python.end.why`): turned off; the main thread ran
//! no Python code from the shim's first use to the exit (an embedded interpreter whose main
//! thread stays in native code, a native `exit` from another thread); the bootstrap failed (its
//! error); the interpreter was not running whenever the shim was used; it lacks an entry the
//! bootstrap needs.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use crate::tracker::end;

/// The bootstrap's source, NUL-terminated for `Py_CompileString`.
const SOURCE: &str = concat!(
    include_str!("../../../src/python/cuguard/_bootstrap/sitecustomize.py"),
    "\0"
);

/// `Py_file_input` and `Py_eval_input` (`Include/compile.h`, every CPython 3).
const FILE_INPUT: c_int = 257;
const EVAL_INPUT: c_int = 258;

/// Where the bootstrap stands in this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum State {
    /// Not handed to the interpreter (yet).
    Idle = 0,
    /// Handed over; the main thread has not run it.
    Scheduled = 1,
    /// Ran: the end is armed (by this call, or by `cuguard run`'s bootstrap before it).
    Armed = 2,
    /// Ran and failed ([`FAILED`] says why).
    Failed = 3,
    /// The interpreter lacks an entry ([`FAILED`] names it), or there is no interpreter.
    Unusable = 4,
    /// `CUGUARD_PYTHON_END=0`.
    Off = 5,
}

static STATE: AtomicU8 = AtomicU8::new(State::Idle as u8);
/// An offer found the interpreter not running (not initialized yet, or finalizing).
static NOT_RUNNING: AtomicBool = AtomicBool::new(false);
/// Why the bootstrap failed, or the entry the interpreter lacks.
static FAILED: OnceLock<String> = OnceLock::new();

fn state() -> State {
    match STATE.load(Ordering::Acquire) {
        1 => State::Scheduled,
        2 => State::Armed,
        3 => State::Failed,
        4 => State::Unusable,
        5 => State::Off,
        _ => State::Idle,
    }
}

fn set(s: State) {
    STATE.store(s as u8, Ordering::Release);
}

type Object = *mut c_void;
type IntFn = unsafe extern "C" fn() -> c_int;
type Pending = extern "C" fn(*mut c_void) -> c_int;
type AddPendingFn = unsafe extern "C" fn(Pending, *mut c_void) -> c_int;
type CompileFn = unsafe extern "C" fn(*const c_char, *const c_char, c_int) -> Object;
type EvalFn = unsafe extern "C" fn(Object, Object, Object) -> Object;
type NewFn = unsafe extern "C" fn() -> Object;
type SetItemFn = unsafe extern "C" fn(Object, *const c_char, Object) -> c_int;
type FromTextFn = unsafe extern "C" fn(*const c_char) -> Object;
type Utf8Fn = unsafe extern "C" fn(Object) -> *const c_char;
type ObjFn = unsafe extern "C" fn(Object);
type MatchesFn = unsafe extern "C" fn(Object) -> c_int;
type VoidFn = unsafe extern "C" fn();

/// The interpreter's entries the bootstrap needs, resolved once.
struct Api {
    is_initialized: IntFn,
    is_finalizing: IntFn,
    add_pending: AddPendingFn,
    compile: CompileFn,
    eval: EvalFn,
    dict_new: NewFn,
    builtins: NewFn,
    set_item: SetItemFn,
    decode_fs: FromTextFn,
    as_utf8: Utf8Fn,
    dec_ref: ObjFn,
    occurred: NewFn,
    matches: MatchesFn,
    clear: VoidFn,
    /// `PyExc_Exception`: the address of the variable holding the class.
    exception: usize,
}

static API: OnceLock<Option<Api>> = OnceLock::new();

fn sym(name: &CStr) -> usize {
    let Some(dlsym) = crate::driver::real_dlsym() else {
        return 0;
    };
    // SAFETY: RTLD_DEFAULT with a NUL-terminated name; the real dlsym does not re-enter the
    // shim. It may take the loader's lock, which no caller of `offer` holds.
    unsafe { dlsym(libc::RTLD_DEFAULT, name.as_ptr()) as usize }
}

fn resolve() -> Option<Api> {
    let is_initialized = sym(c"Py_IsInitialized");
    if is_initialized == 0 {
        return None; // no Python here
    }
    let mut is_finalizing = sym(c"Py_IsFinalizing");
    if is_finalizing == 0 {
        is_finalizing = sym(c"_Py_IsFinalizing");
    }
    let names: [(&str, usize); 14] = [
        ("Py_IsFinalizing", is_finalizing),
        ("Py_AddPendingCall", sym(c"Py_AddPendingCall")),
        ("Py_CompileString", sym(c"Py_CompileString")),
        ("PyEval_EvalCode", sym(c"PyEval_EvalCode")),
        ("PyDict_New", sym(c"PyDict_New")),
        ("PyEval_GetBuiltins", sym(c"PyEval_GetBuiltins")),
        ("PyDict_SetItemString", sym(c"PyDict_SetItemString")),
        (
            "PyUnicode_DecodeFSDefault",
            sym(c"PyUnicode_DecodeFSDefault"),
        ),
        ("PyUnicode_AsUTF8", sym(c"PyUnicode_AsUTF8")),
        ("Py_DecRef", sym(c"Py_DecRef")),
        ("PyErr_Occurred", sym(c"PyErr_Occurred")),
        ("PyErr_ExceptionMatches", sym(c"PyErr_ExceptionMatches")),
        ("PyErr_Clear", sym(c"PyErr_Clear")),
        ("PyExc_Exception", sym(c"PyExc_Exception")),
    ];
    if let Some((name, _)) = names.iter().find(|(_, a)| *a == 0) {
        let _ = FAILED.set(format!("this interpreter has no {name}"));
        set(State::Unusable);
        return None;
    }
    let a = |i: usize| names[i].1;
    // SAFETY: each address is the interpreter's exported function of that name, whose C
    // signature in every CPython 3 is the one transmuted to (`PyObject *` as `Object`).
    unsafe {
        use std::mem::transmute;
        Some(Api {
            is_initialized: transmute::<usize, IntFn>(is_initialized),
            is_finalizing: transmute::<usize, IntFn>(a(0)),
            add_pending: transmute::<usize, AddPendingFn>(a(1)),
            compile: transmute::<usize, CompileFn>(a(2)),
            eval: transmute::<usize, EvalFn>(a(3)),
            dict_new: transmute::<usize, NewFn>(a(4)),
            builtins: transmute::<usize, NewFn>(a(5)),
            set_item: transmute::<usize, SetItemFn>(a(6)),
            decode_fs: transmute::<usize, FromTextFn>(a(7)),
            as_utf8: transmute::<usize, Utf8Fn>(a(8)),
            dec_ref: transmute::<usize, ObjFn>(a(9)),
            occurred: transmute::<usize, NewFn>(a(10)),
            matches: transmute::<usize, MatchesFn>(a(11)),
            clear: transmute::<usize, VoidFn>(a(12)),
            exception: a(13),
        })
    }
}

fn api() -> Option<&'static Api> {
    API.get_or_init(|| crate::process::cost::one_time(resolve))
        .as_ref()
}

/// Hands the bootstrap to the interpreter, if there is one that runs and nothing has been
/// handed yet. Cheap after the first call that decides (an atomic load).
pub fn offer() {
    if state() != State::Idle {
        return;
    }
    let Some(api) = api() else { return };
    if !crate::config::get().python_end {
        set(State::Off);
        return;
    }
    // SAFETY: both read runtime state only; they need no GIL and allocate nothing.
    let running = unsafe { (api.is_initialized)() != 0 && (api.is_finalizing)() == 0 };
    if !running {
        NOT_RUNNING.store(true, Ordering::Relaxed);
        return;
    }
    if STATE
        .compare_exchange(
            State::Idle as u8,
            State::Scheduled as u8,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_err()
    {
        return;
    }
    // SAFETY: Py_AddPendingCall may be called from any thread, with or without the GIL, while
    // the interpreter is initialized (checked just above); `pending` is a plain extern "C" fn
    // that lives as long as the process (the shim is never unloaded).
    let queued = unsafe { (api.add_pending)(pending, std::ptr::null_mut()) };
    if queued != 0 {
        set(State::Idle); // the queue is full: the first allocation offers again
    } else {
        crate::process::diag::log(|| "the Python bootstrap is handed to the interpreter".into());
    }
}

/// The pending call: runs on the interpreter's main thread, with the GIL.
extern "C" fn pending(_: *mut c_void) -> c_int {
    crate::guard::shield(0, || {
        if end::expected() {
            set(State::Armed); // cuguard run's bootstrap armed it first
            return 0;
        }
        let Some(api) = api() else { return 0 };
        crate::process::cost::one_time(|| {
            // SAFETY: the interpreter runs this call on its main thread with the GIL held, and
            // no exception set; `api` holds its entries.
            match unsafe { run_bootstrap(api) } {
                Ran::Armed => {
                    end::expect();
                    set(State::Armed);
                    crate::process::diag::log(|| "the Python bootstrap is armed".into());
                    0
                }
                Ran::Failed(why) => {
                    let _ = FAILED.set(why);
                    set(State::Failed);
                    0
                }
                Ran::Interrupted => {
                    // Not the bootstrap's to swallow (KeyboardInterrupt, SystemExit): the
                    // program gets it, as from a signal handler.
                    let _ = FAILED.set("interrupted while it was being armed".into());
                    set(State::Failed);
                    -1
                }
            }
        })
    })
}

/// How a run of the bootstrap went.
enum Ran {
    Armed,
    Failed(String),
    /// A `BaseException` that is not an `Exception` is set: it goes to the program.
    Interrupted,
}

/// Compiles the bootstrap into a fresh namespace and runs `_cuguard_by_shim()` there.
///
/// # Safety
///
/// The calling thread holds the GIL, with no exception set.
unsafe fn run_bootstrap(api: &Api) -> Ran {
    // SAFETY: (the whole body) the GIL is held (the caller's contract); every object made is
    // released exactly once; the borrowed builtins dict is not released.
    unsafe {
        let failed = |what: &str| -> Ran {
            if !(api.occurred)().is_null() {
                let class = *(api.exception as *const Object);
                if (api.matches)(class) == 0 {
                    return Ran::Interrupted;
                }
                (api.clear)();
            }
            Ran::Failed(what.to_string())
        };
        let globals = (api.dict_new)();
        if globals.is_null() {
            return failed("no memory for its namespace");
        }
        let result = (|| {
            let builtins = (api.builtins)();
            if builtins.is_null()
                || (api.set_item)(globals, c"__builtins__".as_ptr(), builtins) != 0
            {
                return failed("the interpreter's builtins could not be given to it");
            }
            let shim = CString::new(shim_path()).unwrap_or_default();
            if !set_text(api, globals, c"_CUGUARD_BY_SHIM", &shim)
                || !set_text(api, globals, c"__name__", c"_cuguard_bootstrap")
            {
                return failed("its namespace could not be filled");
            }
            let code = (api.compile)(
                SOURCE.as_ptr().cast(),
                c"cuguard/_bootstrap/sitecustomize.py".as_ptr(),
                FILE_INPUT,
            );
            if code.is_null() {
                return failed("its source did not compile in this interpreter");
            }
            let done = (api.eval)(code, globals, globals);
            (api.dec_ref)(code);
            if done.is_null() {
                return failed("its source raised while defining its functions");
            }
            (api.dec_ref)(done);
            let call = (api.compile)(
                c"_cuguard_by_shim()".as_ptr(),
                c"<cuguard>".as_ptr(),
                EVAL_INPUT,
            );
            if call.is_null() {
                return failed("its call did not compile");
            }
            let why = (api.eval)(call, globals, globals);
            (api.dec_ref)(call);
            if why.is_null() {
                return failed("it raised");
            }
            let text = (api.as_utf8)(why);
            let out = if text.is_null() {
                failed("it gave no answer")
            } else {
                let text = CStr::from_ptr(text).to_string_lossy();
                if text.is_empty() {
                    Ran::Armed
                } else {
                    Ran::Failed(one_line(&text))
                }
            };
            (api.dec_ref)(why);
            out
        })();
        (api.dec_ref)(globals);
        result
    }
}

/// Sets `key` in `dict` to the text `value` (decoded as the file system's encoding).
///
/// # Safety
///
/// The GIL is held; `dict` is a dict.
unsafe fn set_text(api: &Api, dict: Object, key: &CStr, value: &CStr) -> bool {
    // SAFETY: the caller's contract; both strings are NUL-terminated. The dict takes its own
    // reference to the value, so ours is released.
    unsafe {
        let text = (api.decode_fs)(value.as_ptr());
        if text.is_null() {
            return false;
        }
        let set = (api.set_item)(dict, key.as_ptr(), text);
        (api.dec_ref)(text);
        set == 0
    }
}

/// `text` on one line, at most 300 characters.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(300)
        .collect()
}

/// The path of the shim's own file, as the loader has it.
fn shim_path() -> String {
    crate::driver::loader::module_path(offer as *const c_void)
}

/// Why the bootstrap could not mark the end in this process, in one line, when it could not
/// (`None` when it was armed, or never needed because there is no interpreter).
pub fn why_not() -> Option<String> {
    const ONLY: &str =
        "this report only has what was live at exit, after the interpreter's teardown";
    let failed = || FAILED.get().cloned().unwrap_or_default();
    Some(match state() {
        State::Armed => return None,
        State::Off => format!("CUGUARD_PYTHON_END=0 turned cuguard's Python bootstrap off: {ONLY}"),
        State::Scheduled => "the interpreter's main thread ran no Python code from the \
             program's first CUDA call to its exit (an embedded interpreter whose main thread \
             stays in native code, or an exit from native code), so cuguard's Python bootstrap \
             never ran: this report only has what was live at exit"
            .to_string(),
        State::Failed => format!("cuguard's Python bootstrap failed: {}: {ONLY}", failed()),
        State::Unusable => format!(
            "cuguard's Python bootstrap cannot run here ({}): {ONLY}",
            failed()
        ),
        State::Idle if NOT_RUNNING.load(Ordering::Relaxed) => format!(
            "the interpreter was not running (not yet initialized, or finalizing) when the \
             program used CUDA, so cuguard's Python bootstrap could not be handed to it: {ONLY}"
        ),
        State::Idle => return None,
    })
}
