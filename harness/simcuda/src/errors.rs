//! Every `CUresult` the simulator can return, and the one table that decides which code each
//! faulty call gets.
//!
//! The simulator never writes a bare error number in its logic. A call that goes wrong names the
//! situation as a [`Fault`], and [`Fault::code`] maps situations to codes in a single `match`.
//! When the measurements on a real H200 disagree with a code here, change that one arm.
//!
//! Some situations are not errors on the real driver (freeing address 0, a zero-byte async
//! allocation): they are still listed here, mapped to `CUDA_SUCCESS`, and callers ask
//! [`Fault::tolerated`] whether to go on.
//!
//! Codes marked "measured" were read on an H200 (driver 580.159.04, CUDA 13.0); see
//! `docs/driver-facts.md` and `docs/gpu-runs/2026-11-29-driver-facts.tsv`. The others follow the
//! CUDA documentation and are the simulator's best guess.
//!
//! This module also holds the names and descriptions behind `cuGetErrorName` and
//! `cuGetErrorString` (their C entry points: `entries/errors.rs`).

use std::ffi::CStr;

use crate::ffi::CUresult;

/// The codes of `CUresult` that the simulator uses (values from CUDA 13.0's `cuda.h`).
pub mod code {
    use crate::ffi::CUresult;
    pub const CUDA_SUCCESS: CUresult = 0;
    pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
    pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
    pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
    pub const CUDA_ERROR_NO_DEVICE: CUresult = 100;
    pub const CUDA_ERROR_INVALID_DEVICE: CUresult = 101;
    pub const CUDA_ERROR_INVALID_CONTEXT: CUresult = 201;
    pub const CUDA_ERROR_MAP_FAILED: CUresult = 205;
    pub const CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY: CUresult = 224;
    pub const CUDA_ERROR_INVALID_HANDLE: CUresult = 400;
    pub const CUDA_ERROR_ILLEGAL_STATE: CUresult = 401;
    pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;
    pub const CUDA_ERROR_NOT_READY: CUresult = 600;
    pub const CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: CUresult = 704;
    pub const CUDA_ERROR_PEER_ACCESS_NOT_ENABLED: CUresult = 705;
    pub const CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE: CUresult = 708;
    pub const CUDA_ERROR_CONTEXT_IS_DESTROYED: CUresult = 709;
    pub const CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: CUresult = 712;
    pub const CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: CUresult = 713;
    pub const CUDA_ERROR_NOT_SUPPORTED: CUresult = 801;
    pub const CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: CUresult = 900;
    pub const CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: CUresult = 901;
    pub const CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD: CUresult = 908;
    pub const CUDA_ERROR_UNKNOWN: CUresult = 999;
}

use code::*;

/// A situation in which a driver call does not simply succeed.
///
/// The variants are situations, not codes: several map to the same code today, and the
/// measurements on real hardware may split them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    // --- driver and devices
    /// Any call except the version, error-name and proc-address queries before `cuInit`.
    NotInitialized,
    /// `cuInit` with `CUGUARD_SIM_DEVICES=0`.
    NoDevice,
    /// A device ordinal that does not exist.
    BadDevice,
    /// An attribute number the driver does not know.
    BadAttribute,

    // --- arguments
    /// A required out-pointer (or in-pointer) is NULL.
    NullPointer,
    /// Flags or an enumeration value outside what the entry accepts.
    BadFlags,
    /// A malformed argument not covered by a more specific situation.
    BadArgument,
    /// `cuMemAlloc_v2`, `cuMemAllocPitch_v2` (width or height 0), `cuMemAllocManaged` of 0
    /// bytes.
    ZeroSize,
    /// `cuMemAllocHost_v2`/`cuMemHostAlloc` of 0 bytes: succeeds, returns NULL.
    HostZeroSize,

    // --- contexts
    /// No context is current on the calling thread.
    NoContext,
    /// The context current on the calling thread was destroyed, or is a primary context that is
    /// not active (released to zero, or reset).
    CurrentContextDestroyed,
    /// A context handle passed as an argument that the driver never made.
    UnknownContextHandle,
    /// A context handle passed as an argument whose context was destroyed (or an inactive
    /// primary context).
    DestroyedContextHandle,
    /// `cuCtxDestroy_v2(NULL)`.
    DestroyNullContext,
    /// `cuCtxDestroy_v2` of a primary context.
    DestroyPrimaryContext,
    /// `cuCtxPushCurrent_v2(NULL)`.
    PushNullContext,
    /// `cuCtxPopCurrent_v2` with an empty context stack.
    PopEmptyStack,
    /// `cuDevicePrimaryCtxRelease` when the primary context is not retained.
    PrimaryNotRetained,
    /// `cuDevicePrimaryCtxSetFlags` (the first version) while the primary context is active.
    PrimaryActive,
    /// `cuCtxCreate_v3`/`_v4` with execution-affinity or CiG parameters.
    UnsupportedContextParams,
    /// `cuCtxEnablePeerAccess`/`cuCtxDisablePeerAccess` with a peer context on the current
    /// context's device (a device is not its own peer).
    PeerSameDevice,
    /// `cuCtxEnablePeerAccess` of a peer already enabled.
    PeerAlreadyEnabled,
    /// `cuCtxDisablePeerAccess` of a peer never enabled; device work (`cusimEnqueueFill`) on
    /// another device's memory without peer access.
    PeerNotEnabled,

    // --- device memory
    /// Not enough simulated device memory left.
    OutOfMemory,
    /// The host could not provide the memory that stands in (mmap or memfd failed).
    HostResources,
    /// `cuMemFree_v2(0)`: succeeds, does nothing.
    FreeNull,
    /// `cuMemAllocAsync`/`cuMemAllocFromPoolAsync` of 0 bytes: succeeds, returns address 0.
    AsyncZeroSize,
    /// `cuMemFreeAsync(0)`: succeeds, does nothing.
    FreeAsyncNull,
    /// A free of an address that is no live allocation (never allocated, or already freed).
    UnknownPointer,
    /// A free of an address inside an allocation but not at its start.
    InteriorPointer,
    /// A free through the wrong family (`cuMemFree_v2` of pinned host memory or an IPC mapping,
    /// `cuMemFreeHost` of device memory).
    WrongFreeFamily,
    /// `cuMemFreeHost` of an address that is no pinned host allocation.
    UnknownHostPointer,
    /// `cuMemFreeHost(NULL)`: succeeds, does nothing.
    FreeHostNull,
    /// `cuMemAllocPitch_v2` with `ElementSizeBytes` not 4, 8 or 16.
    BadPitchElementSize,
    /// `cuMemGetAddressRange_v2` of an address in no allocation.
    AddressRangeNotFound,
    /// `cuPointerGetAttribute` of an address the driver does not know.
    PointerNotFound,
    /// A copy, set or fill that runs outside its allocation or touches unknown device memory.
    BadRange,
    /// VMM memory touched without `cuMemSetAccess` read-write access.
    InaccessibleRange,
    /// `cuMemsetD16`/`D32` destination not aligned to the element.
    Misaligned,
    /// The legacy exports with 32-bit `CUdeviceptr` or sizes (`cuMemAlloc`, `cuMemFree`,
    /// `cuMemAllocPitch`, `cuMemAllocHost`, `cuMemGetInfo`, `cuMemGetAddressRange`,
    /// `cuMemcpyHtoD`, `cuMemcpyHtoDAsync`, `cuMemsetD8`).
    LegacyAbi,
    /// `cuMemHostGetDevicePointer_v2` of an address that is no pinned host allocation.
    NotPinned,
    /// `cuMemHostRegister_v2` of a range that overlaps driver memory already known.
    HostAlreadyRegistered,
    /// `cuMemHostUnregister` of an address that is not the start of a registered range.
    HostNotRegistered,

    // --- streams and events
    /// A stream handle that is unknown or was destroyed.
    BadStream,
    /// An event handle that is unknown or was destroyed.
    BadEvent,
    /// `cuEventElapsedTime` on an event never recorded.
    EventNotRecorded,
    /// `cuEventElapsedTime` on an event created with `CU_EVENT_DISABLE_TIMING`.
    EventTimingDisabled,
    /// Work has not finished (`cuStreamQuery`, `cuEventQuery`, `cuEventElapsedTime`).
    NotReady,
    /// `cuEventRecord` on a stream of another context than the event's.
    EventStreamMismatch,
    /// `cuStreamBeginCapture_v2` of a stream already capturing, or `cuStreamEndCapture` of one
    /// that is not.
    CaptureState,
    /// A potentially unsafe call (a synchronous allocation) that a capture in progress forbids
    /// (see `model/capture.rs`); the capture is invalidated.
    CaptureUnsupported,
    /// `cuStreamEndCapture` of a capture that a forbidden call invalidated.
    CaptureInvalidated,
    /// `cuStreamEndCapture` of a global or thread-local capture from another thread than the one
    /// that began it.
    CaptureWrongThread,

    // --- memory pools
    /// A pool handle that is unknown or was destroyed.
    BadPool,
    /// `cuMemPoolSetAttribute` of a read-only attribute, or a high-water mark set to non-zero.
    PoolAttributeNotSettable,
    /// `cuMemPoolDestroy` of a device's default pool.
    DestroyDefaultPool,

    // --- virtual memory management
    /// A generic allocation handle that is unknown or was released.
    BadVmmHandle,
    /// A size, offset or address not a multiple of the granularity.
    VmmNotAligned,
    /// `cuMemMap` over a range that is already mapped.
    VmmAlreadyMapped,
    /// A VA range that is not inside one reservation, or not mapped where it must be.
    VmmBadRange,
    /// `cuMemAddressFree` of a reservation that still has mappings.
    VmmStillMapped,

    // --- IPC
    /// `cuIpcOpenMemHandle` of a handle exported by the same process.
    IpcSameProcess,
    /// A handle that this driver did not make.
    IpcBadHandle,
    /// `cuIpcGetMemHandle` of memory that cannot be exported (async, managed, host).
    IpcNotExportable,
    /// The exporting process's memory could not be opened.
    IpcOpenFailed,
    /// `cuIpcCloseMemHandle` of an address that is no IPC mapping.
    IpcNotOpened,

    // --- cuGetProcAddress
    /// `cuGetProcAddress` (4 arguments): the symbol is not in the driver's table.
    SymbolNotFound,
    /// `cuGetProcAddress` (4 arguments): the symbol exists, but not at the requested version.
    VersionNotSufficient,
    /// `cuGetProcAddress_v2`: not in the table (`*pfn = NULL`, status `SYMBOL_NOT_FOUND`).
    SymbolNotFoundV2,
    /// `cuGetProcAddress_v2`: too new for the version (`*pfn = NULL`, status
    /// `VERSION_NOT_SUFFICIENT`).
    VersionNotSufficientV2,

    // --- the simulator itself
    /// A panic inside the simulator, or a state it should never reach.
    Internal,
}

impl Fault {
    /// The code the driver returns in this situation. This is the one table of error codes.
    #[rustfmt::skip]
    pub const fn code(self) -> CUresult {
        use Fault::*;
        match self {
            NotInitialized => CUDA_ERROR_NOT_INITIALIZED, // measured
            NoDevice => CUDA_ERROR_NO_DEVICE,
            BadDevice => CUDA_ERROR_INVALID_DEVICE,
            BadAttribute => CUDA_ERROR_INVALID_VALUE,

            NullPointer => CUDA_ERROR_INVALID_VALUE,
            BadFlags => CUDA_ERROR_INVALID_VALUE,
            BadArgument => CUDA_ERROR_INVALID_VALUE,
            ZeroSize => CUDA_ERROR_INVALID_VALUE,  // measured
            HostZeroSize => CUDA_SUCCESS,          // measured

            NoContext => CUDA_ERROR_INVALID_CONTEXT,                     // measured
            CurrentContextDestroyed => CUDA_ERROR_CONTEXT_IS_DESTROYED,  // measured
            UnknownContextHandle => CUDA_ERROR_INVALID_CONTEXT,
            DestroyedContextHandle => CUDA_ERROR_CONTEXT_IS_DESTROYED,   // measured
            DestroyNullContext => CUDA_ERROR_INVALID_VALUE,
            DestroyPrimaryContext => CUDA_ERROR_INVALID_CONTEXT,
            PushNullContext => CUDA_ERROR_INVALID_CONTEXT,
            PopEmptyStack => CUDA_ERROR_INVALID_CONTEXT,
            PrimaryNotRetained => CUDA_ERROR_INVALID_CONTEXT,
            PrimaryActive => CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE,
            UnsupportedContextParams => CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY,
            PeerSameDevice => CUDA_ERROR_INVALID_DEVICE,
            PeerAlreadyEnabled => CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,
            PeerNotEnabled => CUDA_ERROR_PEER_ACCESS_NOT_ENABLED,

            OutOfMemory => CUDA_ERROR_OUT_OF_MEMORY, // measured
            HostResources => CUDA_ERROR_OUT_OF_MEMORY,
            FreeNull => CUDA_SUCCESS,                 // measured
            AsyncZeroSize => CUDA_SUCCESS,            // measured
            FreeAsyncNull => CUDA_SUCCESS,
            UnknownPointer => CUDA_ERROR_INVALID_VALUE,      // measured
            InteriorPointer => CUDA_ERROR_INVALID_VALUE,     // measured
            WrongFreeFamily => CUDA_ERROR_INVALID_VALUE,     // measured
            UnknownHostPointer => CUDA_ERROR_INVALID_VALUE,  // measured
            FreeHostNull => CUDA_SUCCESS,                    // measured
            BadPitchElementSize => CUDA_ERROR_INVALID_VALUE, // measured
            AddressRangeNotFound => CUDA_ERROR_NOT_FOUND,    // measured
            PointerNotFound => CUDA_ERROR_INVALID_VALUE,
            BadRange => CUDA_ERROR_INVALID_VALUE,
            InaccessibleRange => CUDA_ERROR_INVALID_VALUE,
            Misaligned => CUDA_ERROR_INVALID_VALUE,
            LegacyAbi => CUDA_ERROR_NOT_SUPPORTED,
            NotPinned => CUDA_ERROR_INVALID_VALUE,
            HostAlreadyRegistered => CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
            HostNotRegistered => CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,

            BadStream => CUDA_ERROR_INVALID_HANDLE,
            BadEvent => CUDA_ERROR_INVALID_HANDLE,
            EventNotRecorded => CUDA_ERROR_INVALID_HANDLE,
            EventTimingDisabled => CUDA_ERROR_INVALID_HANDLE,
            NotReady => CUDA_ERROR_NOT_READY,
            EventStreamMismatch => CUDA_ERROR_INVALID_HANDLE,
            CaptureState => CUDA_ERROR_ILLEGAL_STATE,
            CaptureUnsupported => CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, // measured (cuMemAlloc)
            CaptureInvalidated => CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, // measured
            CaptureWrongThread => CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,

            BadPool => CUDA_ERROR_INVALID_VALUE,
            PoolAttributeNotSettable => CUDA_ERROR_INVALID_VALUE,
            DestroyDefaultPool => CUDA_ERROR_INVALID_VALUE,

            BadVmmHandle => CUDA_ERROR_INVALID_VALUE,  // measured (release twice)
            VmmNotAligned => CUDA_ERROR_INVALID_VALUE, // measured (cuMemCreate)
            VmmAlreadyMapped => CUDA_ERROR_INVALID_VALUE,
            VmmBadRange => CUDA_ERROR_INVALID_VALUE,   // measured (address free twice)
            VmmStillMapped => CUDA_ERROR_INVALID_VALUE,

            IpcSameProcess => CUDA_ERROR_INVALID_CONTEXT,
            IpcBadHandle => CUDA_ERROR_INVALID_VALUE,
            IpcNotExportable => CUDA_ERROR_INVALID_VALUE,
            IpcOpenFailed => CUDA_ERROR_MAP_FAILED,
            IpcNotOpened => CUDA_ERROR_INVALID_VALUE,

            SymbolNotFound => CUDA_ERROR_NOT_FOUND,       // measured
            VersionNotSufficient => CUDA_ERROR_NOT_FOUND, // measured
            SymbolNotFoundV2 => CUDA_SUCCESS,             // measured
            VersionNotSufficientV2 => CUDA_SUCCESS,       // measured

            Internal => CUDA_ERROR_UNKNOWN,
        }
    }

    /// `Ok(())` when the real driver treats this situation as success (so the caller goes on
    /// with the documented no-op), otherwise `Err(self)`.
    pub fn tolerated(self) -> Result<(), Fault> {
        if self.code() == CUDA_SUCCESS {
            Ok(())
        } else {
            Err(self)
        }
    }
}

/// Name and description of every `CUresult` of CUDA 13.0, as `cuGetErrorName` and
/// `cuGetErrorString` give them.
#[rustfmt::skip]
static ERRORS: &[(CUresult, &CStr, &CStr)] = &[
    (0, c"CUDA_SUCCESS", c"no error"),
    (1, c"CUDA_ERROR_INVALID_VALUE", c"invalid argument"),
    (2, c"CUDA_ERROR_OUT_OF_MEMORY", c"out of memory"),
    (3, c"CUDA_ERROR_NOT_INITIALIZED", c"initialization error"),
    (4, c"CUDA_ERROR_DEINITIALIZED", c"driver shutting down"),
    (5, c"CUDA_ERROR_PROFILER_DISABLED", c"profiler disabled while using external profiling tool"),
    (6, c"CUDA_ERROR_PROFILER_NOT_INITIALIZED", c"profiler not initialized: call cudaProfilerInitialize()"),
    (7, c"CUDA_ERROR_PROFILER_ALREADY_STARTED", c"profiler already started"),
    (8, c"CUDA_ERROR_PROFILER_ALREADY_STOPPED", c"profiler already stopped"),
    (34, c"CUDA_ERROR_STUB_LIBRARY", c"CUDA driver is a stub library"),
    (36, c"CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER", c"API call requires a newer CUDA driver"),
    (46, c"CUDA_ERROR_DEVICE_UNAVAILABLE", c"CUDA-capable device(s) is/are busy or unavailable"),
    (100, c"CUDA_ERROR_NO_DEVICE", c"no CUDA-capable device is detected"),
    (101, c"CUDA_ERROR_INVALID_DEVICE", c"invalid device ordinal"),
    (102, c"CUDA_ERROR_DEVICE_NOT_LICENSED", c"device doesn't have valid Grid license"),
    (200, c"CUDA_ERROR_INVALID_IMAGE", c"device kernel image is invalid"),
    (201, c"CUDA_ERROR_INVALID_CONTEXT", c"invalid device context"),
    (202, c"CUDA_ERROR_CONTEXT_ALREADY_CURRENT", c"context already current"),
    (205, c"CUDA_ERROR_MAP_FAILED", c"mapping of buffer object failed"),
    (206, c"CUDA_ERROR_UNMAP_FAILED", c"unmapping of buffer object failed"),
    (207, c"CUDA_ERROR_ARRAY_IS_MAPPED", c"array is mapped"),
    (208, c"CUDA_ERROR_ALREADY_MAPPED", c"resource already mapped"),
    (209, c"CUDA_ERROR_NO_BINARY_FOR_GPU", c"no kernel image is available for execution on the device"),
    (210, c"CUDA_ERROR_ALREADY_ACQUIRED", c"resource already acquired"),
    (211, c"CUDA_ERROR_NOT_MAPPED", c"resource not mapped"),
    (212, c"CUDA_ERROR_NOT_MAPPED_AS_ARRAY", c"resource not mapped as array"),
    (213, c"CUDA_ERROR_NOT_MAPPED_AS_POINTER", c"resource not mapped as pointer"),
    (214, c"CUDA_ERROR_ECC_UNCORRECTABLE", c"uncorrectable ECC error encountered"),
    (215, c"CUDA_ERROR_UNSUPPORTED_LIMIT", c"limit is not supported on this architecture"),
    (216, c"CUDA_ERROR_CONTEXT_ALREADY_IN_USE", c"exclusive-thread device already in use by a different thread"),
    (217, c"CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", c"peer access is not supported between these two devices"),
    (218, c"CUDA_ERROR_INVALID_PTX", c"a PTX JIT compilation failed"),
    (219, c"CUDA_ERROR_INVALID_GRAPHICS_CONTEXT", c"invalid OpenGL or DirectX context"),
    (220, c"CUDA_ERROR_NVLINK_UNCORRECTABLE", c"uncorrectable NVLink error detected during the execution"),
    (221, c"CUDA_ERROR_JIT_COMPILER_NOT_FOUND", c"PTX JIT compiler library not found"),
    (222, c"CUDA_ERROR_UNSUPPORTED_PTX_VERSION", c"the provided PTX was compiled with an unsupported toolchain."),
    (223, c"CUDA_ERROR_JIT_COMPILATION_DISABLED", c"PTX JIT compilation was disabled"),
    (224, c"CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY", c"the provided execution affinity is not supported"),
    (225, c"CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC", c"the provided PTX contains unsupported call to cudaDeviceSynchronize"),
    (226, c"CUDA_ERROR_CONTAINED", c"an exception occurred on the device that is now contained by the GPU's error containment capability"),
    (300, c"CUDA_ERROR_INVALID_SOURCE", c"device kernel image is invalid"),
    (301, c"CUDA_ERROR_FILE_NOT_FOUND", c"file not found"),
    (302, c"CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND", c"shared object symbol not found"),
    (303, c"CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", c"shared object initialization failed"),
    (304, c"CUDA_ERROR_OPERATING_SYSTEM", c"OS call failed or operation not supported on this OS"),
    (400, c"CUDA_ERROR_INVALID_HANDLE", c"invalid resource handle"),
    (401, c"CUDA_ERROR_ILLEGAL_STATE", c"the operation cannot be performed in the present state"),
    (402, c"CUDA_ERROR_LOSSY_QUERY", c"attempted introspection would be semantically lossy"),
    (500, c"CUDA_ERROR_NOT_FOUND", c"named symbol not found"),
    (600, c"CUDA_ERROR_NOT_READY", c"device not ready"),
    (700, c"CUDA_ERROR_ILLEGAL_ADDRESS", c"an illegal memory access was encountered"),
    (701, c"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", c"too many resources requested for launch"),
    (702, c"CUDA_ERROR_LAUNCH_TIMEOUT", c"the launch timed out and was terminated"),
    (703, c"CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING", c"launch uses incompatible texturing mode"),
    (704, c"CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", c"peer access is already enabled"),
    (705, c"CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", c"peer access has not been enabled"),
    (708, c"CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", c"cannot set while device is active in this process"),
    (709, c"CUDA_ERROR_CONTEXT_IS_DESTROYED", c"context is destroyed"),
    (710, c"CUDA_ERROR_ASSERT", c"device-side assert triggered"),
    (711, c"CUDA_ERROR_TOO_MANY_PEERS", c"peer mapping resources exhausted"),
    (712, c"CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", c"part or all of the requested memory range is already mapped"),
    (713, c"CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", c"pointer does not correspond to a registered memory region"),
    (714, c"CUDA_ERROR_HARDWARE_STACK_ERROR", c"hardware stack error"),
    (715, c"CUDA_ERROR_ILLEGAL_INSTRUCTION", c"an illegal instruction was encountered"),
    (716, c"CUDA_ERROR_MISALIGNED_ADDRESS", c"misaligned address"),
    (717, c"CUDA_ERROR_INVALID_ADDRESS_SPACE", c"operation not supported on global/shared address space"),
    (718, c"CUDA_ERROR_INVALID_PC", c"invalid program counter"),
    (719, c"CUDA_ERROR_LAUNCH_FAILED", c"unspecified launch failure"),
    (720, c"CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", c"too many blocks in cooperative launch"),
    (721, c"CUDA_ERROR_TENSOR_MEMORY_LEAK", c"tensor memory not completely freed"),
    (800, c"CUDA_ERROR_NOT_PERMITTED", c"operation not permitted"),
    (801, c"CUDA_ERROR_NOT_SUPPORTED", c"operation not supported"),
    (802, c"CUDA_ERROR_SYSTEM_NOT_READY", c"system not yet initialized"),
    (803, c"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", c"system has unsupported display driver / cuda driver combination"),
    (804, c"CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", c"forward compatibility was attempted on non supported HW"),
    (805, c"CUDA_ERROR_MPS_CONNECTION_FAILED", c"MPS client failed to connect to the MPS control daemon or the MPS server"),
    (806, c"CUDA_ERROR_MPS_RPC_FAILURE", c"the remote procedural call between the MPS server and the MPS client failed"),
    (807, c"CUDA_ERROR_MPS_SERVER_NOT_READY", c"MPS server is not ready to accept new MPS client requests"),
    (808, c"CUDA_ERROR_MPS_MAX_CLIENTS_REACHED", c"the hardware resources required to create MPS client have been exhausted"),
    (809, c"CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED", c"the hardware resources required to support device connections have been exhausted"),
    (810, c"CUDA_ERROR_MPS_CLIENT_TERMINATED", c"the MPS client has been terminated by the server"),
    (811, c"CUDA_ERROR_CDP_NOT_SUPPORTED", c"is using CUDA Dynamic Parallelism, but the current configuration, like MPS, does not support it"),
    (812, c"CUDA_ERROR_CDP_VERSION_MISMATCH", c"unsupported interaction between different versions of CUDA Dynamic Parallelism"),
    (900, c"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", c"operation not permitted when stream is capturing"),
    (901, c"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", c"operation failed due to a previous error during capture"),
    (902, c"CUDA_ERROR_STREAM_CAPTURE_MERGE", c"operation would result in a merge of separate capture sequences"),
    (903, c"CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", c"capture was not ended in the same stream as it began"),
    (904, c"CUDA_ERROR_STREAM_CAPTURE_UNJOINED", c"capturing stream has unjoined work"),
    (905, c"CUDA_ERROR_STREAM_CAPTURE_ISOLATION", c"dependency created on uncaptured work in another stream"),
    (906, c"CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", c"operation would make the legacy stream depend on a capturing blocking stream"),
    (907, c"CUDA_ERROR_CAPTURED_EVENT", c"operation not permitted on an event last recorded in a capturing stream"),
    (908, c"CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", c"attempt to terminate a thread-local capture sequence from another thread"),
    (909, c"CUDA_ERROR_TIMEOUT", c"wait operation timed out"),
    (910, c"CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", c"the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"),
    (911, c"CUDA_ERROR_EXTERNAL_DEVICE", c"an async error has occurred in a device outside of CUDA"),
    (912, c"CUDA_ERROR_INVALID_CLUSTER_SIZE", c"a kernel launch error has occurred due to cluster misconfiguration"),
    (913, c"CUDA_ERROR_FUNCTION_NOT_LOADED", c"the function handle is not loaded when calling an API that requires a loaded function"),
    (914, c"CUDA_ERROR_INVALID_RESOURCE_TYPE", c"one or more resources passed in are not valid resource types for the operation"),
    (915, c"CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION", c"one or more resources are insufficient or non-applicable for the operation"),
    (916, c"CUDA_ERROR_KEY_ROTATION", c"an error happened during the key rotation sequence"),
    (999, c"CUDA_ERROR_UNKNOWN", c"unknown error"),
];

/// The name and description of `error`, if it is a code of CUDA 13.0.
pub fn describe(error: CUresult) -> Option<(&'static CStr, &'static CStr)> {
    ERRORS
        .iter()
        .find(|(c, _, _)| *c == error)
        .map(|&(_, name, text)| (name, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_sorted() {
        for w in ERRORS.windows(2) {
            assert!(w[0].0 < w[1].0, "{} then {}", w[0].0, w[1].0);
        }
    }

    #[test]
    fn names_match_the_codes_used() {
        assert_eq!(
            describe(CUDA_ERROR_INVALID_VALUE).unwrap().0,
            c"CUDA_ERROR_INVALID_VALUE"
        );
        assert_eq!(
            describe(CUDA_ERROR_CONTEXT_IS_DESTROYED).unwrap().0,
            c"CUDA_ERROR_CONTEXT_IS_DESTROYED"
        );
        assert_eq!(
            describe(CUDA_ERROR_NOT_SUPPORTED).unwrap().0,
            c"CUDA_ERROR_NOT_SUPPORTED"
        );
        assert!(describe(12345).is_none());
    }

    #[test]
    fn every_fault_code_has_a_name() {
        use Fault::*;
        for f in [
            NotInitialized,
            NoDevice,
            UnknownContextHandle,
            CurrentContextDestroyed,
            OutOfMemory,
            AddressRangeNotFound,
            BadStream,
            NotReady,
            LegacyAbi,
            Internal,
            IpcOpenFailed,
            PrimaryActive,
            UnsupportedContextParams,
        ] {
            assert!(describe(f.code()).is_some(), "{f:?}");
        }
    }

    #[test]
    fn tolerated_situations_are_successes() {
        assert_eq!(Fault::FreeNull.tolerated(), Ok(()));
        assert_eq!(
            Fault::UnknownPointer.tolerated(),
            Err(Fault::UnknownPointer)
        );
    }
}
