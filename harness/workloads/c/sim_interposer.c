/* sim_interposer: a library to LD_PRELOAD in front of the simulated driver that exports a few of
 * its entry names, as the shim does. Built as a shared library by tests/it/sim_driver.rs
 * (cc -shared -fPIC). The driver's cuGetProcAddress must still return the driver's own entries. */
#include "cusim.h"

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    (void)dptr;
    (void)bytesize;
    return CUDA_ERROR_UNKNOWN;
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
    (void)dptr;
    return CUDA_ERROR_UNKNOWN;
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    (void)dptr;
    (void)bytesize;
    (void)hStream;
    return CUDA_ERROR_UNKNOWN;
}
