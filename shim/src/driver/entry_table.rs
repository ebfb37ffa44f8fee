//! The table of every driver entry the shim knows: one row each, and everything the rest of the
//! shim needs to know about an entry derives from it.
//!
//! A row is
//!
//! ```text
//! ROLE [FORM, FORM, …] fn(PARAM: TYPE, …);
//! ```
//!
//! - `FORM`s are the exact exported names of one entry that share a C signature: the versioned
//!   and `_ptsz`/`_ptds` forms (`[cuMemAllocAsync, cuMemAllocAsync_ptsz]`). Each form is its own
//!   [`Entry`] with its own real address; the driver's lookups decide which form a program gets,
//!   and the shim routes by the address it returned, never by guessing from a name.
//! - The signature is the entry's C signature (every driver entry returns `CUresult`). Types are
//!   the C ABI as [`crate::ffi`] declares it; no Rust enum ever receives a foreign value.
//! - `ROLE` says what the shim does with the entry:
//!
//! | role     | the program gets                          | the shim                                        |
//! |----------|-------------------------------------------|-------------------------------------------------|
//! | `track`  | the shim's export / hook                  | forwards, then tracks (allocations, frees, contexts, streams) |
//! | `query`  | the shim's export / hook                  | answers for pooled pointers, else forwards      |
//! | `submit` | the shim's export / hook                  | forwards, then counts one submission of device work on its stream (for the pool's fences); first makes that stream wait for an early-reused block's stream when it must (`pool::stream_reuse`) |
//! | `copy`   | the shim's export / hook                  | as `submit`, and notes first which other contexts' memory the copy touches (`hooks::peers`, for the pool's fences) |
//! | `door`   | the shim's export / hook                  | forwards, then substitutes hooks in what the driver returned (`cuGetProcAddress`) |
//! | `pass`   | the driver's own entry                    | only calls it itself                            |
//!
//! The `submit` and `copy` rows are generated from cudarc's bindings (`shim/tools/gen_entry_rows.py` writes
//! [`super::submit_rows`]; a test checks that file is current). The others are written here.
//!
//! # What derives from the table
//!
//! - here: [`Entry`] (names, roles) and [`sig`], their signatures;
//! - [`super::loader`]: the real addresses, resolved once;
//! - [`super::real`]: the typed real entries, from those addresses;
//! - `doors::exports`: the shim's exported symbols and the hooks the lookups hand out, each a
//!   few generated lines that call the handler in `hooks` named after the row's first form
//!   (`hooks::cuMemAlloc_v2`), and the lookups from a real address to a hook.
//!
//! # Adding an entry
//!
//! One row here, and (for `track`, `query` and `copy` rows) its handler in `hooks`: a function named
//! after the row's first form, taking the form that was called, the typed real entry and the
//! arguments. Nothing else: a mismatched handler does not compile.

use std::ffi::{CStr, c_char, c_int, c_void};

use crate::ffi::*;

/// What the shim does with an entry (see the module documentation).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Role {
    Track,
    Query,
    Submit,
    Copy,
    Door,
    Pass,
}

/// Feeds every row of the table to the macro `$callback`, after the tokens in `($($arg)*)`:
/// `for_each_entry!(cb, x)` expands to `cb! { (x) ROWS }`. The callback must be in scope where
/// this is invoked, with the types the rows name (`crate::ffi::*`, `std::ffi::{c_char, c_int,
/// c_void}`).
macro_rules! for_each_entry {
    ($callback:ident $(, $arg:tt)*) => {
        $crate::driver::submit_rows! { $callback ($($arg)*)
            // Allocations and frees.
            track [cuMemAlloc_v2] fn(dptr: *mut CUdeviceptr, bytesize: usize);
            track [cuMemAllocPitch_v2] fn(dptr: *mut CUdeviceptr, pitch: *mut usize, width: usize, height: usize, element_size: u32);
            track [cuMemFree_v2] fn(dptr: CUdeviceptr);
            track [cuMemAllocManaged] fn(dptr: *mut CUdeviceptr, bytesize: usize, flags: u32);
            track [cuMemAllocHost_v2] fn(pp: *mut *mut c_void, bytesize: usize);
            track [cuMemHostAlloc] fn(pp: *mut *mut c_void, bytesize: usize, flags: u32);
            track [cuMemFreeHost] fn(p: *mut c_void);
            track [cuMemAllocAsync, cuMemAllocAsync_ptsz] fn(dptr: *mut CUdeviceptr, bytesize: usize, stream: CUstream);
            track [cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz] fn(dptr: *mut CUdeviceptr, bytesize: usize, pool: CUmemoryPool, stream: CUstream);
            track [cuMemFreeAsync, cuMemFreeAsync_ptsz] fn(dptr: CUdeviceptr, stream: CUstream);
            track [cuMemPoolDestroy] fn(pool: CUmemoryPool);
            // Virtual memory management.
            track [cuMemCreate] fn(handle: *mut CUmemGenericAllocationHandle, size: usize, prop: *const MemAllocationPropHead, flags: u64);
            track [cuMemRelease] fn(handle: CUmemGenericAllocationHandle);
            track [cuMemMap] fn(ptr: CUdeviceptr, size: usize, offset: usize, handle: CUmemGenericAllocationHandle, flags: u64);
            track [cuMemUnmap] fn(ptr: CUdeviceptr, size: usize);
            track [cuMemAddressReserve] fn(ptr: *mut CUdeviceptr, size: usize, alignment: usize, addr: CUdeviceptr, flags: u64);
            track [cuMemAddressFree] fn(ptr: CUdeviceptr, size: usize);
            // Contexts.
            track [cuCtxCreate, cuCtxCreate_v2] fn(pctx: *mut CUcontext, flags: u32, dev: CUdevice);
            track [cuCtxCreate_v3] fn(pctx: *mut CUcontext, params: Opaque, num_params: c_int, flags: u32, dev: CUdevice);
            track [cuCtxCreate_v4] fn(pctx: *mut CUcontext, params: Opaque, flags: u32, dev: CUdevice);
            track [cuCtxDestroy, cuCtxDestroy_v2] fn(ctx: CUcontext);
            track [cuDevicePrimaryCtxRetain] fn(pctx: *mut CUcontext, dev: CUdevice);
            track [cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2] fn(dev: CUdevice);
            track [cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset_v2] fn(dev: CUdevice);
            // Streams and captures, for the pool's fences.
            track [cuStreamCreate] fn(ph: *mut CUstream, flags: u32);
            track [cuStreamCreateWithPriority] fn(ph: *mut CUstream, flags: u32, priority: c_int);
            track [cuGreenCtxStreamCreate] fn(ph: *mut CUstream, green: Opaque, flags: u32, priority: c_int);
            track [cuStreamDestroy, cuStreamDestroy_v2] fn(stream: CUstream);
            track [cuStreamBeginCapture] fn(stream: CUstream);
            track [cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz] fn(stream: CUstream, mode: u32);
            track [cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph_ptsz] fn(stream: CUstream, graph: Opaque, deps: Opaque, data: Opaque, n: usize, mode: u32);
            track [cuStreamEndCapture, cuStreamEndCapture_ptsz] fn(stream: CUstream, graph: *mut Opaque);
            // Peer access: another context's work may touch the peer's memory (the pool's fences).
            track [cuCtxEnablePeerAccess] fn(peer: CUcontext, flags: u32);
            track [cuCtxDisablePeerAccess] fn(peer: CUcontext);
            // Queries answered for pooled pointers.
            query [cuMemGetAddressRange_v2] fn(pbase: *mut CUdeviceptr, psize: *mut usize, dptr: CUdeviceptr);
            query [cuPointerGetAttribute] fn(data: *mut c_void, attribute: u32, ptr: CUdeviceptr);
            query [cuPointerGetAttributes] fn(count: u32, attributes: *mut u32, data: *mut *mut c_void, ptr: CUdeviceptr);
            query [cuMemGetInfo_v2] fn(free: *mut usize, total: *mut usize);
            query [cuIpcGetMemHandle] fn(handle: *mut c_void, dptr: CUdeviceptr);
            // The lookup door.
            door [cuGetProcAddress] fn(symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: u64);
            door [cuGetProcAddress_v2] fn(symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: u64, symbol_status: *mut c_int);
            // Called by the shim itself.
            pass [cuDriverGetVersion] fn(version: *mut c_int);
            pass [cuCtxGetCurrent] fn(pctx: *mut CUcontext);
            pass [cuCtxGetDevice] fn(device: *mut CUdevice);
            pass [cuCtxPushCurrent_v2] fn(ctx: CUcontext);
            pass [cuCtxPopCurrent_v2] fn(pctx: *mut CUcontext);
            pass [cuCtxSynchronize] fn();
            pass [cuDeviceGetName] fn(name: *mut c_char, len: c_int, dev: CUdevice);
            pass [cuDeviceTotalMem_v2] fn(bytes: *mut usize, dev: CUdevice);
            pass [cuDevicePrimaryCtxGetState] fn(dev: CUdevice, flags: *mut u32, active: *mut c_int);
            pass [cuDeviceGetUuid] fn(uuid: *mut c_void, dev: CUdevice);
            pass [cuDeviceGetUuid_v2] fn(uuid: *mut c_void, dev: CUdevice);
            pass [cuEventCreate] fn(event: *mut *mut c_void, flags: u32);
            pass [cuEventRecord] fn(event: *mut c_void, stream: *mut c_void);
            pass [cuEventQuery] fn(event: *mut c_void);
            pass [cuEventDestroy_v2] fn(event: *mut c_void);
            pass [cuEventSynchronize] fn(event: *mut c_void);
            pass [cuStreamWaitEvent] fn(stream: *mut c_void, event: *mut c_void, flags: u32);
            pass [cuThreadExchangeStreamCaptureMode] fn(mode: *mut c_void);
            pass [cuDeviceGetDefaultMemPool] fn(pool: *mut CUmemoryPool, dev: CUdevice);
            pass [cuDeviceGetMemPool] fn(pool: *mut CUmemoryPool, dev: CUdevice);
            pass [cuMemPoolGetAttribute] fn(pool: CUmemoryPool, attr: c_int, value: *mut c_void);
        }
    };
}
pub(crate) use for_each_entry;

/// The [`Role`] of a row's role word.
macro_rules! role {
    (track) => {
        Role::Track
    };
    (query) => {
        Role::Query
    };
    (submit) => {
        Role::Submit
    };
    (copy) => {
        Role::Copy
    };
    (door) => {
        Role::Door
    };
    (pass) => {
        Role::Pass
    };
}

/// The table's own expansion: [`Entry`] and [`sig`].
macro_rules! define_table {
    (() $( $role:ident [$($form:ident),+ $(,)?] fn $sig:tt; )*) => {
        /// Every driver entry the shim knows, by its exact exported name, in table order.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, PartialEq, Eq, Debug)]
        #[repr(u16)]
        pub enum Entry { $($($form,)+)* }

        impl Entry {
            /// All entries, in table order (`Entry as usize` indexes this).
            pub const ALL: &'static [Entry] = &[$($(Entry::$form,)+)*];

            /// The exported symbol name.
            pub fn name(self) -> &'static str {
                match self { $($(Entry::$form => stringify!($form),)+)* }
            }

            /// The exported symbol name, NUL-terminated.
            pub fn c_name(self) -> &'static CStr {
                match self {
                    $($(Entry::$form => {
                        const BYTES: &[u8] = concat!(stringify!($form), "\0").as_bytes();
                        match CStr::from_bytes_with_nul(BYTES) { Ok(c) => c, Err(_) => c"" }
                    })+)*
                }
            }

            /// What the shim does with it.
            pub fn role(self) -> Role {
                match self { $($(Entry::$form => role!($role),)+)* }
            }
        }

        /// The C signature of each entry, as a function-pointer type.
        #[allow(non_camel_case_types, non_snake_case)]
        pub mod sig {
            use super::*;
            $($(
                pub type $form = unsafe extern "C" fn $sig -> CUresult;
            )+)*
        }
    };
}

for_each_entry!(define_table);

/// Number of entries in the table.
pub const ENTRY_COUNT: usize = Entry::ALL.len();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_driver_names() {
        let mut names: Vec<&str> = Entry::ALL.iter().map(|e| e.name()).collect();
        assert!(
            names
                .iter()
                .all(|n| super::super::is_driver_name(n.as_bytes()))
        );
        assert!(
            Entry::ALL
                .iter()
                .all(|e| e.c_name().to_bytes() == e.name().as_bytes())
        );
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before, "an entry appears in two rows");
        assert!(
            !names.contains(&"cuMemAlloc"),
            "the legacy 32-bit cuMemAlloc must never be handed out"
        );
    }

    #[test]
    fn roles() {
        assert_eq!(Entry::cuMemAlloc_v2.role(), Role::Track);
        assert_eq!(Entry::cuMemGetInfo_v2.role(), Role::Query);
        assert_eq!(Entry::cuGetProcAddress_v2.role(), Role::Door);
        assert_eq!(Entry::cuLaunchKernel_ptsz.role(), Role::Submit);
        assert_eq!(Entry::cuMemcpyPeerAsync_ptsz.role(), Role::Copy);
        assert_eq!(Entry::cuCtxEnablePeerAccess.role(), Role::Track);
        assert_eq!(Entry::cuCtxSynchronize.role(), Role::Pass);
        for (i, e) in Entry::ALL.iter().enumerate() {
            assert_eq!(*e as usize, i);
        }
    }

    /// The generated rows match what the generator makes from cudarc's bindings now.
    #[test]
    fn generated_rows_are_current() {
        let dir = env!("CARGO_MANIFEST_DIR");
        let out = std::process::Command::new("python3")
            .arg(format!("{dir}/tools/gen_entry_rows.py"))
            .arg("--check")
            .output()
            .expect("python3 runs shim/tools/gen_entry_rows.py");
        assert!(
            out.status.success(),
            "shim/src/driver/submit_rows.rs is not what the generator makes: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
