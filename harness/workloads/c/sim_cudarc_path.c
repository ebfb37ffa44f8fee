/* sim_cudarc_path: the driver calls a Rust program on cudarc 0.19 (features cuda-13000,
 * dynamic-loading) makes, replayed from C. cudarc dlopens "libcuda.so" and looks each entry up by
 * name with dlsym, so every name here must resolve; then the sequence of
 *   CudaContext::new(0); ctx.default_stream(); stream.alloc_zeros::<f32>(N);
 *   stream.memcpy_stod(&host); stream.memcpy_dtov(&dev); ctx.new_stream(); (slices dropped)
 * runs with the calls cudarc makes, and the data must come back right.
 * Prints "missing NAME" for any name that does not resolve, then "step.* CODE" lines,
 * "data.* 0|1" and the usage after the context is released. */
#define _GNU_SOURCE
#include "cusim.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *lib;

/* Every name cudarc's safe API resolves on the paths above (and its error formatting). */
static const char *names[] = {
    "cuInit", "cuDeviceGet", "cuDeviceGetCount", "cuDeviceGetName", "cuDeviceGetUuid_v2",
    "cuDeviceTotalMem_v2", "cuDeviceGetAttribute", "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2", "cuCtxGetCurrent", "cuCtxSetCurrent", "cuCtxSynchronize",
    "cuCtxSetFlags", "cuCtxCreate_v4", "cuCtxDestroy_v2", "cuCtxGetStreamPriorityRange",
    "cuStreamCreate", "cuStreamCreateWithPriority", "cuStreamDestroy_v2", "cuStreamSynchronize",
    "cuStreamWaitEvent", "cuEventCreate", "cuEventRecord", "cuEventQuery", "cuEventSynchronize",
    "cuEventDestroy_v2", "cuEventElapsedTime_v2", "cuMemAllocAsync", "cuMemFreeAsync",
    "cuMemAlloc_v2", "cuMemFree_v2", "cuMemAllocManaged", "cuMemHostAlloc", "cuMemFreeHost",
    "cuMemsetD8Async", "cuMemsetD8_v2", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemcpyDtoD_v2",
    "cuMemGetInfo_v2", "cuDeviceGetDefaultMemPool", "cuDeviceGetMemPool", "cuDeviceSetMemPool",
    "cuMemPoolCreate", "cuMemPoolDestroy", "cuMemPoolTrimTo", "cuMemPoolGetAttribute",
    "cuMemPoolSetAttribute", "cuMemAllocFromPoolAsync", "cuGetErrorName", "cuGetErrorString",
    NULL};

#define F(type, name) ((type)dlsym(lib, name))
#define STEP(label, expr) printf("step.%s\t%d\n", label, (int)(expr))

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    lib = dlopen("libcuda.so", RTLD_LAZY | RTLD_LOCAL);
    if (!lib) {
        printf("dlopen\t%s\n", dlerror());
        return 1;
    }
    for (int i = 0; names[i]; i++)
        if (!dlsym(lib, names[i])) printf("missing\t%s\n", names[i]);

    CUresult (*init)(unsigned) = F(CUresult(*)(unsigned), "cuInit");
    CUresult (*dev_get)(CUdevice *, int) = F(CUresult(*)(CUdevice *, int), "cuDeviceGet");
    CUresult (*retain)(CUcontext *, CUdevice) = F(CUresult(*)(CUcontext *, CUdevice), "cuDevicePrimaryCtxRetain");
    CUresult (*release)(CUdevice) = F(CUresult(*)(CUdevice), "cuDevicePrimaryCtxRelease_v2");
    CUresult (*attr)(int *, int, CUdevice) = F(CUresult(*)(int *, int, CUdevice), "cuDeviceGetAttribute");
    CUresult (*get_cur)(CUcontext *) = F(CUresult(*)(CUcontext *), "cuCtxGetCurrent");
    CUresult (*set_cur)(CUcontext) = F(CUresult(*)(CUcontext), "cuCtxSetCurrent");
    CUresult (*ctx_sync)(void) = F(CUresult(*)(void), "cuCtxSynchronize");
    CUresult (*stream_create)(CUstream *, unsigned) = F(CUresult(*)(CUstream *, unsigned), "cuStreamCreate");
    CUresult (*stream_destroy)(CUstream) = F(CUresult(*)(CUstream), "cuStreamDestroy_v2");
    CUresult (*stream_wait)(CUstream, CUevent, unsigned) = F(CUresult(*)(CUstream, CUevent, unsigned), "cuStreamWaitEvent");
    CUresult (*event_create)(CUevent *, unsigned) = F(CUresult(*)(CUevent *, unsigned), "cuEventCreate");
    CUresult (*event_record)(CUevent, CUstream) = F(CUresult(*)(CUevent, CUstream), "cuEventRecord");
    CUresult (*event_destroy)(CUevent) = F(CUresult(*)(CUevent), "cuEventDestroy_v2");
    CUresult (*alloc_async)(CUdeviceptr *, size_t, CUstream) = F(CUresult(*)(CUdeviceptr *, size_t, CUstream), "cuMemAllocAsync");
    CUresult (*free_async)(CUdeviceptr, CUstream) = F(CUresult(*)(CUdeviceptr, CUstream), "cuMemFreeAsync");
    CUresult (*memset_async)(CUdeviceptr, unsigned char, size_t, CUstream) =
        F(CUresult(*)(CUdeviceptr, unsigned char, size_t, CUstream), "cuMemsetD8Async");
    CUresult (*htod_async)(CUdeviceptr, const void *, size_t, CUstream) =
        F(CUresult(*)(CUdeviceptr, const void *, size_t, CUstream), "cuMemcpyHtoDAsync_v2");
    CUresult (*dtoh_async)(void *, CUdeviceptr, size_t, CUstream) =
        F(CUresult(*)(void *, CUdeviceptr, size_t, CUstream), "cuMemcpyDtoHAsync_v2");
    CUresult (*error_string)(CUresult, const char **) = F(CUresult(*)(CUresult, const char **), "cuGetErrorString");
    CUresult (*usage)(int, size_t *, size_t *) = F(CUresult(*)(int, size_t *, size_t *), "cusimGetUsage");

    enum { N = 4096 };
    CUstream dflt = NULL;

    /* CudaContext::new(0) */
    CUdevice dev;
    CUcontext ctx, cur;
    int pools = 0;
    STEP("init", init(0));
    STEP("device_get", dev_get(&dev, 0));
    STEP("retain", retain(&ctx, dev));
    STEP("memory_pools_supported", attr(&pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, dev));
    printf("has_async_alloc\t%d\n", pools > 0);
    STEP("get_current", get_cur(&cur));
    if (cur != ctx) STEP("set_current", set_cur(ctx));

    /* stream.alloc_zeros::<f32>(N): cuMemAllocAsync, two events (read, write), cuMemsetD8Async */
    CUdeviceptr zeros;
    CUevent zr, zw;
    STEP("alloc_zeros.alloc", alloc_async(&zeros, N * sizeof(float), dflt));
    STEP("alloc_zeros.event_read", event_create(&zr, CU_EVENT_DISABLE_TIMING));
    STEP("alloc_zeros.event_write", event_create(&zw, CU_EVENT_DISABLE_TIMING));
    STEP("alloc_zeros.memset", memset_async(zeros, 0, N * sizeof(float), dflt));

    /* stream.memcpy_stod(&host) */
    float *host = malloc(N * sizeof(float)), *back = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) host[i] = (float)i * 0.5f;
    CUdeviceptr dev_copy;
    CUevent cr, cw;
    STEP("stod.alloc", alloc_async(&dev_copy, N * sizeof(float), dflt));
    STEP("stod.event_read", event_create(&cr, CU_EVENT_DISABLE_TIMING));
    STEP("stod.event_write", event_create(&cw, CU_EVENT_DISABLE_TIMING));
    STEP("stod.copy", htod_async(dev_copy, host, N * sizeof(float), dflt));
    memset(host, 0, N * sizeof(float)); /* the pageable source was staged */

    /* stream.memcpy_dtov(&dev): a copy to pageable memory returns when done, no sync needed */
    STEP("dtov.copy", dtoh_async(back, dev_copy, N * sizeof(float), dflt));
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= back[i] == (float)i * 0.5f;
    printf("data.roundtrip\t%d\n", ok);
    STEP("dtov.zeros", dtoh_async(back, zeros, N * sizeof(float), dflt));
    ok = 1;
    for (int i = 0; i < N; i++) ok &= back[i] == 0.0f;
    printf("data.zeros\t%d\n", ok);

    /* ctx.new_stream(): first extra stream synchronizes the context */
    CUstream s;
    STEP("new_stream.sync", ctx_sync());
    STEP("new_stream.create", stream_create(&s, CU_STREAM_NON_BLOCKING));
    /* multi-stream mode: uses record events, later users wait on them */
    STEP("record_write", event_record(cw, s));
    STEP("wait_write", stream_wait(dflt, cw, CU_EVENT_WAIT_DEFAULT));

    /* drop(CudaSlice): wait on read/write events, cuMemFreeAsync, then the events go */
    STEP("drop.wait_read", stream_wait(dflt, cr, 0));
    STEP("drop.wait_write", stream_wait(dflt, cw, 0));
    STEP("drop.free", free_async(dev_copy, dflt));
    STEP("drop.event_read", event_destroy(cr));
    STEP("drop.event_write", event_destroy(cw));
    STEP("drop.zeros_free", free_async(zeros, dflt));
    STEP("drop.zeros_event_read", event_destroy(zr));
    STEP("drop.zeros_event_write", event_destroy(zw));
    STEP("drop.stream", stream_destroy(s));
    /* drop(CudaContext) */
    STEP("drop.context", release(dev));

    size_t bytes = 1, count = 1;
    usage(0, &bytes, &count);
    printf("usage\t%zu %zu\n", bytes, count);
    const char *msg = NULL;
    error_string(CUDA_ERROR_OUT_OF_MEMORY, &msg);
    printf("error_string\t%s\n", msg);
    return 0;
}
