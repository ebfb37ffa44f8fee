//! A simulated CUDA driver: `libcuguard_simcuda.so`, with the soname `libcuda.so.1`, exporting
//! the driver API by its real symbol names and C ABI, so programs and the cuguard shim run
//! without a GPU.
//!
//! Host memory stands in for device memory: a `CUdeviceptr` is a host address, so copies and
//! sets move real bytes, and work on streams runs on worker threads in stream order. The driver
//! keeps the real driver's rules where programs can see them: error codes (see `errors.rs`, the
//! one table of codes), context reference counting and destruction, legacy default stream
//! semantics, when each copy returns, `cuMemFree` waiting for work in flight.
//!
//! Settings come from the environment at `cuInit` (see `config.rs`). Two extensions serve tests:
//! `cusimEnqueueFill` and `cusimGetUsage` (see `entries/extensions.rs`).
//!
//! Three layers, each a folder with one file per family (capture, context, copy, device, event,
//! ipc, memory, peer, pointer, pool, stream, vmm; errors, extensions, nvml and procaddr have
//! entry points only):
//! - `model/`: each family's types and rules in plain Rust (a context, an allocation, a stream
//!   and its worker, a pool's blocks). A model knows nothing of the state or of C.
//! - `state/`: the global state that owns every family's model, behind one lock (`state/mod.rs`),
//!   and, per family, the operations on it that need more than that family's model (a free
//!   returning a block to its pool, a context's teardown freeing what every family holds for it).
//!   It imports the models; no model imports it. `state/fork.rs` holds its locks across a `fork`.
//! - `entries/`: the `extern "C"` functions, per family: convert the C arguments, lock the
//!   state, call it, turn the outcome into a `CUresult` (`entries/mod.rs`'s `guard`).
//!
//! Beside them: `ffi` (C types and constants), `errors` (situations, their codes, the names
//! behind `cuGetErrorName`), `config` (settings, failure injection, latency), `hostmem` (mmap and
//! memfd wrappers), `symbols` (the name of every export: the rows of the table
//! `cuGetProcAddress` answers from). The simulated NVML (`entries/nvml.rs`) shares the state and is
//! visible only through a `libnvidia-ml.so.1` link to this library (see there).
//! `tests/layers.rs` fails on an import cycle between files or an import against the layers.
//!
//! To add an entry: its C function in `entries/<family>.rs`, its row in `symbols.rs`; model
//! changes in `model/<family>.rs`; anything that touches two families in `state/<family>.rs`. To
//! add a family: a file in each layer that needs one, and a `mod` line in each folder's `mod.rs`.
//!
//! Example (C, linked with `-lcuda` against this library):
//!
//! ```c
//! CUdevice dev; CUcontext ctx; CUdeviceptr p;
//! cuInit(0);
//! cuDeviceGet(&dev, 0);
//! cuDevicePrimaryCtxRetain(&ctx, dev);
//! cuCtxSetCurrent(ctx);
//! cuMemAlloc(&p, 1 << 20);               /* cuMemAlloc_v2 */
//! cusimEnqueueFill(0, p, 1 << 20, 7, 1000);
//! cuMemFree(p);                           /* waits for the fill */
//! ```

#![allow(non_snake_case)]
#![deny(unsafe_op_in_unsafe_fn)]

mod config;
mod entries;
mod errors;
mod ffi;
mod hostmem;
mod model;
mod state;
mod symbols;
