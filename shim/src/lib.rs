//! `libcuguard.so`: loaded with `LD_PRELOAD` into an unmodified program, it sees every CUDA
//! device allocation and free, whichever way the program reached the driver, tracks each live
//! allocation with its context, device, thread and call stack, can serve cuMemAlloc/cuMemFree
//! from its own pool, and writes a JSON leak report when the process ends.
//!
//! # The walk of one `cuMemAlloc_v2`
//!
//! Top to bottom; no module imports one above it (`docs/architecture.md` draws it per door):
//!
//! 1. [`doors`]: the program reached the shim through one of three doors: the exported symbol
//!    (`-lcuda` programs), or a function that `dlsym` or `cuGetProcAddress` handed out in place of
//!    the driver's. Both are generated from the driver-entry table and call the handler.
//! 2. [`driver`]: the table of every driver entry the shim knows (names, forms, signatures,
//!    roles) and the real driver's entries, resolved once.
//! 3. [`hooks`]: the handler, named after the entry (`hooks::cuMemAlloc_v2`), thin: it asks
//!    whether to track ([`phase`], [`guard`]), makes the record, and has the allocation served.
//! 4. [`lifecycle`]: the first allocation arms the process (exit handlers, the cuguard thread,
//!    signal handlers); the final report is written however the process ends.
//! 5. [`writer`]: what is written: the tracker, the pool, the stacks and the timeline, as
//!    `cuguard_format` types, to a file.
//! 6. [`serving`]: `cuguard_pool`'s pool of the current context serves it, over the real driver
//!    ([`serving::serve`], [`serving::driver_context`]); with the pool off, the real driver does.
//! 7. [`tracker`]: live allocations, contexts, events, counters, door counts; each allocation and
//!    free also goes to the calling thread's ring of the history ([`recorder`]), which the
//!    cuguard thread drains into the history's file ([`lifecycle::drain`]).
//! 8. [`stack`]: the call stack, captured and deduplicated.
//! 9. [`nvtx`]: the process's NVTX tool (compute-sanitizer's), attached at the first pool when
//!    `NVTX_INJECTION64_PATH` names one; the pool tells it its chunks and blocks.
//! 10. [`config`] (settings read at load, the only load-time work), [`guard`] (re-entry guard and
//!     panic shield), [`phase`] (the lifecycle's state machine), [`process`] (identity, clocks,
//!     stderr, process-wide values) and [`ffi`] (the C types) are below everything.
//!
//! Beside the walk, [`api`] is the program's own door: a small versioned C ABI through which
//! the program (the Python package, through ctypes) asks for its live bytes, a snapshot of the
//! report, time windows over every thread, and labels.
//!
//! It is a guest in someone else's process: no panic crosses the C ABI ([`guard::shield`]), it
//! never re-enters itself ([`guard::Guard`]), never touches CUDA while loading, and every exported
//! function returns what the driver returned.

mod api;
mod config;
mod doors;
mod driver;
mod ffi;
mod guard;
mod hooks;
mod lifecycle;
mod nvtx;
mod phase;
mod process;
mod recorder;
mod serving;
mod stack;
mod tracker;
mod writer;

/// The shim's own heap, counted for the report's `cost` ([`process::cost::Counting`]).
#[global_allocator]
static ALLOCATOR: process::cost::Counting = process::cost::Counting;

/// The load-time hook: reads the configuration, nothing else.
#[ctor::ctor(unsafe)]
fn on_load() {
    config::init();
}
