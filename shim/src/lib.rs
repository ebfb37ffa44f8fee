//! `libcuguard.so`: loaded with `LD_PRELOAD` into an unmodified program, it sees every CUDA
//! device allocation and free, whichever way the program reached the driver, tracks each live
//! allocation with its context, device, thread and call stack, can serve cuMemAlloc/cuMemFree
//! from its own pool, and writes a JSON leak report when the process ends.
//!
//! How the pieces fit:
//!
//! - [`doors`]: the three ways a program reaches the driver (exported symbols, `dlsym`,
//!   `cuGetProcAddress`), each answered with the shim's hooks for the entries it tracks.
//! - [`hooks`]: the hooks themselves, one module per API family; each forwards to the real driver
//!   (through [`driver`]) or to [`serve`], then tells the [`tracker`].
//! - [`tracker`]: live allocations, contexts, events and counters.
//! - [`report`]: the JSON report and the summary line; [`lifecycle`] decides when it is written.
//! - [`config`]: settings from `CUGUARD_*` variables, read at load (the only load-time work).
//!
//! It is a guest in someone else's process: no panic crosses the C ABI ([`guard::shield`]), it
//! never re-enters itself ([`guard::Guard`]), never touches CUDA while loading, and every exported
//! function returns what the driver returned.

mod callsite;
mod clock;
mod config;
mod diag;
mod doors;
mod driver;
mod faults;
mod ffi;
mod guard;
mod hooks;
mod leaked;
mod lifecycle;
mod phase;
mod pool;
mod process;
mod report;
mod serve;
mod stack;
mod thread;
mod timeline;
mod tracker;

/// The load-time hook: reads the configuration, nothing else.
#[ctor::ctor(unsafe)]
fn on_load() {
    config::init();
}
