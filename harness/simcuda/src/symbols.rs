//! The names of every export: the driver's entries (one row each, as a macro the table of
//! addresses in `entries/procaddr.rs` expands), the simulator's extensions and the simulated
//! NVML's entries. Failure injection (`config.rs`) checks names against these; this file names
//! functions but depends on none, so the names are known without the entries.
//!
//! A row is `(kind, base name, since, family::export)`:
//! - `base` is what a program passes to `cuGetProcAddress` ("cuMemAlloc");
//! - the export is the symbol, the function of that name in `entries/<family>.rs`
//!   (`memory::cuMemAlloc_v2`); the symbol's name is taken from the function itself, so the two
//!   cannot disagree;
//! - `since` is the CUDA version (`1000 * major + 10 * minor`) that introduced that ABI;
//! - `kind` says whether it is the default-stream entry or its per-thread (`_ptds`/`_ptsz`)
//!   variant. A per-thread row's symbol is its default row's symbol plus the suffix.
//!
//! To add a driver entry: write it in `entries/<family>.rs` and add its row here.

/// Every exported driver entry, each row given to the macro `$row` (one row a line: the table
/// test in `tests/it/sim_driver.rs` reads them).
#[rustfmt::skip]
macro_rules! driver_entries {
    ($row:ident) => {
        [
            // errors, driver, devices
            $row!(Default, "cuGetErrorName", 6000, errors::cuGetErrorName),
            $row!(Default, "cuGetErrorString", 6000, errors::cuGetErrorString),
            $row!(Default, "cuInit", 2000, device::cuInit),
            $row!(Default, "cuDriverGetVersion", 2020, device::cuDriverGetVersion),
            $row!(Default, "cuDeviceGet", 2000, device::cuDeviceGet),
            $row!(Default, "cuDeviceGetCount", 2000, device::cuDeviceGetCount),
            $row!(Default, "cuDeviceGetName", 2000, device::cuDeviceGetName),
            $row!(Default, "cuDeviceTotalMem", 3020, device::cuDeviceTotalMem_v2),
            $row!(Default, "cuDeviceGetAttribute", 2000, device::cuDeviceGetAttribute),
            $row!(Default, "cuDeviceGetUuid", 9020, device::cuDeviceGetUuid),
            $row!(Default, "cuDeviceGetUuid", 11040, device::cuDeviceGetUuid_v2),
            // primary contexts
            $row!(Default, "cuDevicePrimaryCtxRetain", 7000, context::cuDevicePrimaryCtxRetain),
            $row!(Default, "cuDevicePrimaryCtxRelease", 7000, context::cuDevicePrimaryCtxRelease),
            $row!(Default, "cuDevicePrimaryCtxRelease", 11000, context::cuDevicePrimaryCtxRelease_v2),
            $row!(Default, "cuDevicePrimaryCtxReset", 7000, context::cuDevicePrimaryCtxReset),
            $row!(Default, "cuDevicePrimaryCtxReset", 11000, context::cuDevicePrimaryCtxReset_v2),
            $row!(Default, "cuDevicePrimaryCtxGetState", 7000, context::cuDevicePrimaryCtxGetState),
            $row!(Default, "cuDevicePrimaryCtxSetFlags", 7000, context::cuDevicePrimaryCtxSetFlags),
            $row!(Default, "cuDevicePrimaryCtxSetFlags", 11000, context::cuDevicePrimaryCtxSetFlags_v2),
            // contexts
            $row!(Default, "cuCtxCreate", 2000, context::cuCtxCreate),
            $row!(Default, "cuCtxCreate", 3020, context::cuCtxCreate_v2),
            $row!(Default, "cuCtxCreate", 11040, context::cuCtxCreate_v3),
            $row!(Default, "cuCtxCreate", 12050, context::cuCtxCreate_v4),
            $row!(Default, "cuCtxDestroy", 2000, context::cuCtxDestroy),
            $row!(Default, "cuCtxDestroy", 4000, context::cuCtxDestroy_v2),
            $row!(Default, "cuCtxGetCurrent", 4000, context::cuCtxGetCurrent),
            $row!(Default, "cuCtxSetCurrent", 4000, context::cuCtxSetCurrent),
            $row!(Default, "cuCtxPushCurrent", 2000, context::cuCtxPushCurrent),
            $row!(Default, "cuCtxPushCurrent", 4000, context::cuCtxPushCurrent_v2),
            $row!(Default, "cuCtxPopCurrent", 2000, context::cuCtxPopCurrent),
            $row!(Default, "cuCtxPopCurrent", 4000, context::cuCtxPopCurrent_v2),
            $row!(Default, "cuCtxGetDevice", 2000, context::cuCtxGetDevice),
            $row!(Default, "cuCtxSynchronize", 2000, context::cuCtxSynchronize),
            $row!(Default, "cuCtxGetApiVersion", 3020, context::cuCtxGetApiVersion),
            $row!(Default, "cuCtxGetFlags", 7000, context::cuCtxGetFlags),
            $row!(Default, "cuCtxSetFlags", 12010, context::cuCtxSetFlags),
            $row!(Default, "cuCtxGetId", 12000, context::cuCtxGetId),
            $row!(Default, "cuCtxGetStreamPriorityRange", 5050, context::cuCtxGetStreamPriorityRange),
            // peer access
            $row!(Default, "cuDeviceCanAccessPeer", 4000, peer::cuDeviceCanAccessPeer),
            $row!(Default, "cuCtxEnablePeerAccess", 4000, peer::cuCtxEnablePeerAccess),
            $row!(Default, "cuCtxDisablePeerAccess", 4000, peer::cuCtxDisablePeerAccess),
            // streams
            $row!(Default, "cuStreamCreate", 2000, stream::cuStreamCreate),
            $row!(Default, "cuStreamCreateWithPriority", 5050, stream::cuStreamCreateWithPriority),
            $row!(Default, "cuStreamDestroy", 2000, stream::cuStreamDestroy),
            $row!(Default, "cuStreamDestroy", 4000, stream::cuStreamDestroy_v2),
            $row!(Default, "cuStreamSynchronize", 2000, stream::cuStreamSynchronize),
            $row!(Default, "cuStreamBeginCapture", 10010, capture::cuStreamBeginCapture_v2),
            $row!(Ptsz, "cuStreamBeginCapture", 10010, capture::cuStreamBeginCapture_v2_ptsz),
            $row!(Default, "cuStreamEndCapture", 10000, capture::cuStreamEndCapture),
            $row!(Ptsz, "cuStreamEndCapture", 10000, capture::cuStreamEndCapture_ptsz),
            $row!(Default, "cuGraphDestroy", 10000, capture::cuGraphDestroy),
            $row!(Default, "cuStreamIsCapturing", 10000, capture::cuStreamIsCapturing),
            $row!(Ptsz, "cuStreamIsCapturing", 10000, capture::cuStreamIsCapturing_ptsz),
            $row!(Default, "cuThreadExchangeStreamCaptureMode", 10010, capture::cuThreadExchangeStreamCaptureMode),
            $row!(Ptsz, "cuStreamSynchronize", 7000, stream::cuStreamSynchronize_ptsz),
            $row!(Default, "cuStreamQuery", 2000, stream::cuStreamQuery),
            $row!(Ptsz, "cuStreamQuery", 7000, stream::cuStreamQuery_ptsz),
            $row!(Default, "cuStreamWaitEvent", 3020, stream::cuStreamWaitEvent),
            $row!(Ptsz, "cuStreamWaitEvent", 7000, stream::cuStreamWaitEvent_ptsz),
            $row!(Default, "cuStreamGetFlags", 5050, stream::cuStreamGetFlags),
            $row!(Ptsz, "cuStreamGetFlags", 7000, stream::cuStreamGetFlags_ptsz),
            $row!(Default, "cuStreamGetPriority", 5050, stream::cuStreamGetPriority),
            $row!(Ptsz, "cuStreamGetPriority", 7000, stream::cuStreamGetPriority_ptsz),
            // events
            $row!(Default, "cuEventCreate", 2000, event::cuEventCreate),
            $row!(Default, "cuEventRecord", 2000, event::cuEventRecord),
            $row!(Ptsz, "cuEventRecord", 7000, event::cuEventRecord_ptsz),
            $row!(Default, "cuEventQuery", 2000, event::cuEventQuery),
            $row!(Default, "cuEventSynchronize", 2000, event::cuEventSynchronize),
            $row!(Default, "cuEventDestroy", 4000, event::cuEventDestroy_v2),
            $row!(Default, "cuEventElapsedTime", 2000, event::cuEventElapsedTime),
            $row!(Default, "cuEventElapsedTime", 12080, event::cuEventElapsedTime_v2),
            // device memory
            $row!(Default, "cuMemAlloc", 2000, memory::cuMemAlloc),
            $row!(Default, "cuMemAlloc", 3020, memory::cuMemAlloc_v2),
            $row!(Default, "cuMemAllocPitch", 2000, memory::cuMemAllocPitch),
            $row!(Default, "cuMemAllocPitch", 3020, memory::cuMemAllocPitch_v2),
            $row!(Default, "cuMemFree", 2000, memory::cuMemFree),
            $row!(Default, "cuMemFree", 3020, memory::cuMemFree_v2),
            $row!(Default, "cuMemAllocManaged", 6000, memory::cuMemAllocManaged),
            $row!(Default, "cuMemAllocHost", 2000, memory::cuMemAllocHost),
            $row!(Default, "cuMemAllocHost", 3020, memory::cuMemAllocHost_v2),
            $row!(Default, "cuMemHostAlloc", 2020, memory::cuMemHostAlloc),
            $row!(Default, "cuMemFreeHost", 2000, memory::cuMemFreeHost),
            $row!(Default, "cuMemHostRegister", 4000, memory::cuMemHostRegister),
            $row!(Default, "cuMemHostRegister", 6050, memory::cuMemHostRegister_v2),
            $row!(Default, "cuMemHostUnregister", 4000, memory::cuMemHostUnregister),
            $row!(Default, "cuMemHostGetDevicePointer", 3020, memory::cuMemHostGetDevicePointer_v2),
            $row!(Default, "cuMemGetInfo", 2000, memory::cuMemGetInfo),
            $row!(Default, "cuMemGetInfo", 3020, memory::cuMemGetInfo_v2),
            $row!(Default, "cuMemGetAddressRange", 2000, memory::cuMemGetAddressRange),
            $row!(Default, "cuMemGetAddressRange", 3020, memory::cuMemGetAddressRange_v2),
            // stream-ordered allocation and pools
            $row!(Default, "cuMemAllocAsync", 11020, pool::cuMemAllocAsync),
            $row!(Ptsz, "cuMemAllocAsync", 11020, pool::cuMemAllocAsync_ptsz),
            $row!(Default, "cuMemAllocFromPoolAsync", 11020, pool::cuMemAllocFromPoolAsync),
            $row!(Ptsz, "cuMemAllocFromPoolAsync", 11020, pool::cuMemAllocFromPoolAsync_ptsz),
            $row!(Default, "cuMemFreeAsync", 11020, pool::cuMemFreeAsync),
            $row!(Ptsz, "cuMemFreeAsync", 11020, pool::cuMemFreeAsync_ptsz),
            $row!(Default, "cuDeviceGetDefaultMemPool", 11020, pool::cuDeviceGetDefaultMemPool),
            $row!(Default, "cuDeviceGetMemPool", 11020, pool::cuDeviceGetMemPool),
            $row!(Default, "cuDeviceSetMemPool", 11020, pool::cuDeviceSetMemPool),
            $row!(Default, "cuMemPoolCreate", 11020, pool::cuMemPoolCreate),
            $row!(Default, "cuMemPoolDestroy", 11020, pool::cuMemPoolDestroy),
            $row!(Default, "cuMemPoolTrimTo", 11020, pool::cuMemPoolTrimTo),
            $row!(Default, "cuMemPoolSetAttribute", 11020, pool::cuMemPoolSetAttribute),
            $row!(Default, "cuMemPoolGetAttribute", 11020, pool::cuMemPoolGetAttribute),
            // virtual memory management
            $row!(Default, "cuMemGetAllocationGranularity", 10020, vmm::cuMemGetAllocationGranularity),
            $row!(Default, "cuMemCreate", 10020, vmm::cuMemCreate),
            $row!(Default, "cuMemRelease", 10020, vmm::cuMemRelease),
            $row!(Default, "cuMemAddressReserve", 10020, vmm::cuMemAddressReserve),
            $row!(Default, "cuMemAddressFree", 10020, vmm::cuMemAddressFree),
            $row!(Default, "cuMemMap", 10020, vmm::cuMemMap),
            $row!(Default, "cuMemUnmap", 10020, vmm::cuMemUnmap),
            $row!(Default, "cuMemSetAccess", 10020, vmm::cuMemSetAccess),
            // copies and sets
            $row!(Default, "cuMemcpy", 4000, copy::cuMemcpy),
            $row!(Ptds, "cuMemcpy", 7000, copy::cuMemcpy_ptds),
            $row!(Default, "cuMemcpyAsync", 4000, copy::cuMemcpyAsync),
            $row!(Ptsz, "cuMemcpyAsync", 7000, copy::cuMemcpyAsync_ptsz),
            $row!(Default, "cuMemcpyPeer", 4000, copy::cuMemcpyPeer),
            $row!(Ptds, "cuMemcpyPeer", 7000, copy::cuMemcpyPeer_ptds),
            $row!(Default, "cuMemcpyPeerAsync", 4000, copy::cuMemcpyPeerAsync),
            $row!(Ptsz, "cuMemcpyPeerAsync", 7000, copy::cuMemcpyPeerAsync_ptsz),
            $row!(Default, "cuMemcpyHtoD", 2000, copy::cuMemcpyHtoD),
            $row!(Default, "cuMemcpyHtoD", 3020, copy::cuMemcpyHtoD_v2),
            $row!(Ptds, "cuMemcpyHtoD", 7000, copy::cuMemcpyHtoD_v2_ptds),
            $row!(Default, "cuMemcpyDtoH", 3020, copy::cuMemcpyDtoH_v2),
            $row!(Ptds, "cuMemcpyDtoH", 7000, copy::cuMemcpyDtoH_v2_ptds),
            $row!(Default, "cuMemcpyDtoD", 3020, copy::cuMemcpyDtoD_v2),
            $row!(Ptds, "cuMemcpyDtoD", 7000, copy::cuMemcpyDtoD_v2_ptds),
            $row!(Default, "cuMemcpyHtoDAsync", 2000, copy::cuMemcpyHtoDAsync),
            $row!(Default, "cuMemcpyHtoDAsync", 3020, copy::cuMemcpyHtoDAsync_v2),
            $row!(Ptsz, "cuMemcpyHtoDAsync", 7000, copy::cuMemcpyHtoDAsync_v2_ptsz),
            $row!(Default, "cuMemcpyDtoHAsync", 3020, copy::cuMemcpyDtoHAsync_v2),
            $row!(Ptsz, "cuMemcpyDtoHAsync", 7000, copy::cuMemcpyDtoHAsync_v2_ptsz),
            $row!(Default, "cuMemcpyDtoDAsync", 3020, copy::cuMemcpyDtoDAsync_v2),
            $row!(Ptsz, "cuMemcpyDtoDAsync", 7000, copy::cuMemcpyDtoDAsync_v2_ptsz),
            $row!(Default, "cuMemsetD8", 2000, copy::cuMemsetD8),
            $row!(Default, "cuMemsetD8", 3020, copy::cuMemsetD8_v2),
            $row!(Ptds, "cuMemsetD8", 7000, copy::cuMemsetD8_v2_ptds),
            $row!(Default, "cuMemsetD16", 3020, copy::cuMemsetD16_v2),
            $row!(Ptds, "cuMemsetD16", 7000, copy::cuMemsetD16_v2_ptds),
            $row!(Default, "cuMemsetD32", 3020, copy::cuMemsetD32_v2),
            $row!(Ptds, "cuMemsetD32", 7000, copy::cuMemsetD32_v2_ptds),
            $row!(Default, "cuMemsetD8Async", 3020, copy::cuMemsetD8Async),
            $row!(Ptsz, "cuMemsetD8Async", 7000, copy::cuMemsetD8Async_ptsz),
            $row!(Default, "cuMemsetD16Async", 3020, copy::cuMemsetD16Async),
            $row!(Ptsz, "cuMemsetD16Async", 7000, copy::cuMemsetD16Async_ptsz),
            $row!(Default, "cuMemsetD32Async", 3020, copy::cuMemsetD32Async),
            $row!(Ptsz, "cuMemsetD32Async", 7000, copy::cuMemsetD32Async_ptsz),
            // pointers
            $row!(Default, "cuPointerGetAttribute", 4000, pointer::cuPointerGetAttribute),
            $row!(Default, "cuPointerGetAttributes", 7000, pointer::cuPointerGetAttributes),
            // IPC
            $row!(Default, "cuIpcGetMemHandle", 4010, ipc::cuIpcGetMemHandle),
            $row!(Default, "cuIpcOpenMemHandle", 4010, ipc::cuIpcOpenMemHandle),
            $row!(Default, "cuIpcOpenMemHandle", 11000, ipc::cuIpcOpenMemHandle_v2),
            $row!(Default, "cuIpcCloseMemHandle", 4010, ipc::cuIpcCloseMemHandle),
            // the entry point itself
            $row!(Default, "cuGetProcAddress", 11030, procaddr::cuGetProcAddress),
            $row!(Default, "cuGetProcAddress", 12000, procaddr::cuGetProcAddress_v2),
        ]
    };
}
pub(crate) use driver_entries;

/// A row's symbol name.
macro_rules! symbol_of {
    ($kind:ident, $base:literal, $since:literal, $module:ident :: $f:ident) => {
        stringify!($f)
    };
}

/// The symbols of every exported driver entry.
#[rustfmt::skip]
const DRIVER: &[&str] = &driver_entries!(symbol_of);

/// The simulator's own exports (`entries/extensions.rs`); the real driver has no such names, so
/// `cuGetProcAddress` does not offer them.
pub const EXTENSIONS: &[&str] = &["cusimEnqueueFill", "cusimGetUsage"];

/// The simulated NVML's exports (`entries/nvml.rs`).
pub const NVML: &[&str] = &[
    "nvmlInit_v2",
    "nvmlInit",
    "nvmlShutdown",
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetComputeRunningProcesses_v3",
];

/// Whether `name` is one of the library's exports (the simulated NVML's included).
pub fn is_export(name: &str) -> bool {
    DRIVER.contains(&name) || EXTENSIONS.contains(&name) || NVML.contains(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_are_known() {
        assert!(is_export("cuMemAlloc_v2"));
        assert!(is_export("cuMemAllocAsync_ptsz"));
        assert!(is_export("cusimEnqueueFill"));
        assert!(!is_export("cuMemAlloc_v3"));
    }
}
