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
//! `cusimEnqueueFill` and `cusimGetUsage` (see `extensions.rs`).
//!
//! Modules, one concern each:
//! - `ffi`: C types, constants, the [`ffi::guard`] every export runs in;
//! - `errors`: situations, their codes, `cuGetErrorName`/`String`;
//! - `config`: settings, failure injection, latency;
//! - `state`: the global state and its lock;
//! - `fork`: the locks held across a `fork`, so a child can go on;
//! - `hostmem`: mmap/memfd wrappers;
//! - `device`: `cuInit`, versions, device queries;
//! - `context`: primary and created contexts, the per-thread context stack;
//! - `stream`, `event`: ordered simulated work;
//! - `memory`: allocations, accounting, synchronous alloc/free entries;
//! - `pool`: memory pools and stream-ordered allocation;
//! - `vmm`: virtual memory management;
//! - `copy`: memcpy/memset (peer copies included) and the simulated fill;
//! - `peer`: peer access between contexts of different devices;
//! - `pointer`: address classification and pointer attributes;
//! - `ipc`: inter-process memory handles;
//! - `entries`, `procaddr`: the table of exports and `cuGetProcAddress`;
//! - `extensions`: `cusim*`;
//! - `nvml`: a simulated NVML over the same state, visible only through a `libnvidia-ml.so.1`
//!   link to this library (see there).
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

mod capture;
mod config;
mod context;
mod copy;
mod device;
mod entries;
mod errors;
mod event;
mod extensions;
mod ffi;
mod fork;
mod hostmem;
mod ipc;
mod memory;
mod nvml;
mod peer;
mod pointer;
mod pool;
mod procaddr;
mod state;
mod stream;
mod vmm;
