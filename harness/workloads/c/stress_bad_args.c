/* stress_bad_args: bad arguments to the tracked entries that bad_calls.c does not reach, each
 * printed with the driver's answer: cuMemAllocPitch, cuMemHostAlloc, cuMemAllocFromPoolAsync,
 * the VMM calls (cuMemAddressReserve/Free, cuMemMap/Unmap), every cuCtxCreate version,
 * cuCtxDestroy (both), cuDevicePrimaryCtxRetain/Release/Reset (both versions), and
 * cuGetProcAddress (both). Run with and without the shim (pool on and off): the answers must be
 * the same. Returned pointers are printed only as null or not (the shim hands out its own). */
#include "workload.h"

#define SHOW(label, expr) printf("%-40s %d\n", label, (int)(expr))
#define SHOWP(label, p) printf("%-40s %s\n", label, (p) ? "non-null" : "null")

/* The older ABIs, under their exported names (cusim.h maps the plain names to the newest). */
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int n, unsigned int flags, CUdevice dev);
CUresult cuCtxDestroy_legacy(CUcontext ctx) __asm__("cuCtxDestroy");
CUresult cuDevicePrimaryCtxRelease_legacy(CUdevice dev) __asm__("cuDevicePrimaryCtxRelease");
CUresult cuDevicePrimaryCtxReset_legacy(CUdevice dev) __asm__("cuDevicePrimaryCtxReset");
CUresult cuGetProcAddress_legacy(const char *symbol, void **pfn, int version, cuuint64_t flags)
    __asm__("cuGetProcAddress");

int main(void) {
    CUdeviceptr p = 0;
    size_t pitch = 0;
    void *h = NULL;
    CUcontext c = NULL;
    CUdevice dev;
    SHOW("before_init_host_alloc", cuMemHostAlloc(&h, 256, 0));
    SHOW("before_init_ctx_create", cuCtxCreate_v2(&c, 0, 0));
    SHOW("before_init_primary_retain", cuDevicePrimaryCtxRetain(&c, 0));
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));

    /* Context creation, every version. */
    SHOW("ctx_create_v2_null", cuCtxCreate_v2(NULL, 0, dev));
    SHOW("ctx_create_v2_bad_device", cuCtxCreate_v2(&c, 0, 99));
    SHOW("ctx_create_v2_bad_flags", cuCtxCreate_v2(&c, 0xffff, dev));
    SHOW("ctx_create_v3_null", cuCtxCreate_v3(NULL, NULL, 0, 0, dev));
    SHOW("ctx_create_v3_negative", cuCtxCreate_v3(&c, NULL, -1, 0, dev));
    SHOW("ctx_create_v3_null_params", cuCtxCreate_v3(&c, NULL, 1, 0, dev));
    SHOW("ctx_create_v3_bad_device", cuCtxCreate_v3(&c, NULL, 0, 0, 99));
    SHOW("ctx_create_v4_null", cuCtxCreate(NULL, NULL, 0, dev));
    SHOW("ctx_create_v4_bad_device", cuCtxCreate(&c, NULL, 0, -1));
    SHOW("ctx_create_v4_bad_flags", cuCtxCreate(&c, NULL, 0xffff, dev));
    CUctxCreateParams params;
    memset(&params, 0, sizeof params);
    params.numExecAffinityParams = 1;
    SHOW("ctx_create_v4_params_null_affinity", cuCtxCreate(&c, &params, 0, dev));
    CUcontext made = NULL;
    SHOW("ctx_create_v2_ok", cuCtxCreate_v2(&made, 0, dev));
    SHOW("ctx_destroy_legacy", cuCtxDestroy_legacy(made));
    SHOW("ctx_destroy_legacy_again", cuCtxDestroy_legacy(made));
    SHOW("ctx_destroy_v2_again", cuCtxDestroy(made));
    SHOW("ctx_destroy_null", cuCtxDestroy(NULL));
    SHOW("ctx_destroy_legacy_null", cuCtxDestroy_legacy(NULL));
    SHOW("ctx_create_v3_ok", cuCtxCreate_v3(&made, NULL, 0, 0, dev));
    SHOW("ctx_destroy_v3_made", cuCtxDestroy(made));

    /* Primary contexts. */
    SHOW("primary_retain_null", cuDevicePrimaryCtxRetain(NULL, dev));
    SHOW("primary_retain_bad_device", cuDevicePrimaryCtxRetain(&c, 99));
    SHOW("primary_release_unretained", cuDevicePrimaryCtxRelease(dev));
    SHOW("primary_release_legacy_unretained", cuDevicePrimaryCtxRelease_legacy(dev));
    SHOW("primary_release_bad_device", cuDevicePrimaryCtxRelease(99));
    SHOW("primary_reset_bad_device", cuDevicePrimaryCtxReset(-3));
    SHOW("primary_reset_legacy_bad_device", cuDevicePrimaryCtxReset_legacy(99));
    SHOW("primary_reset_inactive", cuDevicePrimaryCtxReset(dev));
    CUcontext primary;
    CHECK(cuDevicePrimaryCtxRetain(&primary, dev));
    CHECK(cuCtxSetCurrent(primary));

    /* Pitched allocations. */
    SHOW("pitch_null_dptr", cuMemAllocPitch(NULL, &pitch, 100, 10, 4));
    SHOW("pitch_null_pitch", cuMemAllocPitch(&p, NULL, 100, 10, 4));
    SHOW("pitch_elem0", cuMemAllocPitch(&p, &pitch, 100, 10, 0));
    SHOW("pitch_elem32", cuMemAllocPitch(&p, &pitch, 100, 10, 32));
    SHOW("pitch_huge", cuMemAllocPitch(&p, &pitch, (size_t)1 << 40, 1 << 20, 16));

    /* Pinned host memory. */
    SHOW("host_alloc_null", cuMemHostAlloc(NULL, 256, 0));
    SHOW("host_alloc_size0", cuMemHostAlloc(&h, 0, 0));
    SHOW("host_alloc_bad_flags", cuMemHostAlloc(&h, 256, 0xff00));
    SHOW("host_alloc_huge", cuMemHostAlloc(&h, (size_t)1 << 60, 0));
    SHOW("host_alloc_ok", cuMemHostAlloc(&h, 4096, 0));
    SHOW("host_free", cuMemFreeHost(h));

    /* Stream-ordered allocation from a pool. */
    CUmemoryPool pool = NULL;
    CHECK(cuDeviceGetDefaultMemPool(&pool, dev));
    SHOW("from_pool_null_pool", cuMemAllocFromPoolAsync(&p, 256, NULL, CU_STREAM_LEGACY));
    SHOW("from_pool_null_dptr", cuMemAllocFromPoolAsync(NULL, 256, pool, CU_STREAM_LEGACY));
    SHOW("from_pool_size0", cuMemAllocFromPoolAsync(&p, 0, pool, CU_STREAM_LEGACY));
    SHOW("from_pool_huge", cuMemAllocFromPoolAsync(&p, (size_t)1 << 50, pool, CU_STREAM_LEGACY));
    SHOW("from_pool_ok", cuMemAllocFromPoolAsync(&p, 4096, pool, CU_STREAM_LEGACY));
    SHOW("from_pool_free", cuMemFreeAsync(p, CU_STREAM_LEGACY));
    SHOW("from_pool_free_again", cuMemFreeAsync(p, CU_STREAM_LEGACY));
    SHOW("from_pool_sync", cuStreamSynchronize(CU_STREAM_LEGACY));

    /* Virtual memory management. */
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t gran = 0;
    CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUdeviceptr va = 0;
    SHOW("reserve_null", cuMemAddressReserve(NULL, gran, 0, 0, 0));
    SHOW("reserve_size0", cuMemAddressReserve(&va, 0, 0, 0, 0));
    SHOW("reserve_unaligned", cuMemAddressReserve(&va, gran + 1, 0, 0, 0));
    SHOW("reserve_bad_alignment", cuMemAddressReserve(&va, gran, 3, 0, 0));
    SHOW("address_free_zero", cuMemAddressFree(0, gran));
    SHOW("address_free_unknown", cuMemAddressFree(0x7f0000000000ull, gran));
    SHOW("reserve_ok", cuMemAddressReserve(&va, 2 * gran, 0, 0, 0));
    SHOW("address_free_wrong_size", cuMemAddressFree(va, gran));
    CUmemGenericAllocationHandle vh = 0;
    SHOW("create_ok", cuMemCreate(&vh, gran, &prop, 0));
    SHOW("map_zero_handle", cuMemMap(va, gran, 0, 0, 0));
    SHOW("map_size_mismatch", cuMemMap(va, 2 * gran, 0, vh, 0));
    SHOW("map_offset", cuMemMap(va, gran, gran, vh, 0));
    SHOW("map_unreserved", cuMemMap(0x7f0000000000ull, gran, 0, vh, 0));
    SHOW("map_unaligned", cuMemMap(va + 1, gran, 0, vh, 0));
    SHOW("map_ok", cuMemMap(va, gran, 0, vh, 0));
    SHOW("map_again", cuMemMap(va, gran, 0, vh, 0));
    SHOW("unmap_unmapped", cuMemUnmap(va + gran, gran));
    SHOW("unmap_zero", cuMemUnmap(0, gran));
    SHOW("unmap_ok", cuMemUnmap(va, gran));
    SHOW("release", cuMemRelease(vh));
    SHOW("address_free", cuMemAddressFree(va, 2 * gran));

    /* cuGetProcAddress, both versions. */
    void *fn = NULL;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
    SHOW("gpa_null_symbol", cuGetProcAddress(NULL, &fn, 12000, 0, &st));
    SHOW("gpa_null_pfn", cuGetProcAddress("cuMemAlloc", NULL, 12000, 0, &st));
    fn = (void *)1;
    SHOW("gpa_unknown", cuGetProcAddress("cuNoSuchThing", &fn, 12000, 0, &st));
    SHOWP("gpa_unknown_pfn", fn);
    printf("%-40s %d\n", "gpa_unknown_status", (int)st);
    fn = (void *)1;
    SHOW("gpa_version0", cuGetProcAddress("cuMemAlloc", &fn, 0, 0, &st));
    SHOWP("gpa_version0_pfn", fn);
    printf("%-40s %d\n", "gpa_version0_status", (int)st);
    SHOW("gpa_future_version", cuGetProcAddress("cuMemAlloc", &fn, 99000, 0, &st));
    SHOWP("gpa_future_version_pfn", fn);
    SHOW("gpa_bad_flags", cuGetProcAddress("cuMemAlloc", &fn, 12000, 0xff, &st));
    SHOW("gpa_null_status", cuGetProcAddress("cuMemAlloc", &fn, 12000, 0, NULL));
    SHOWP("gpa_null_status_pfn", fn);
    fn = (void *)1;
    SHOW("gpa_legacy_unknown", cuGetProcAddress_legacy("cuNoSuchThing", &fn, 12000, 0));
    SHOWP("gpa_legacy_unknown_pfn", fn);
    SHOW("gpa_legacy_null_symbol", cuGetProcAddress_legacy(NULL, &fn, 12000, 0));
    SHOW("gpa_legacy_null_pfn", cuGetProcAddress_legacy("cuMemFree", NULL, 12000, 0));
    SHOW("gpa_legacy_old_version", cuGetProcAddress_legacy("cuMemAllocAsync", &fn, 3000, 0));
    SHOWP("gpa_legacy_old_version_pfn", fn);
    return 0;
}
