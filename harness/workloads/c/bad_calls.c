/* bad_calls: the bad calls a program can make to the tracked entries, each printed with the
 * driver's answer. Run with and without the shim (pool on and off): the answers must be the
 * same. Covers calls before cuInit, with no current context, size 0, NULL, double and invalid
 * frees of every kind, destroyed contexts, and bad VMM calls. */
#include "workload.h"

#define SHOW(label, expr) printf("%-36s %d\n", label, (int)(expr))

static void *no_context_thread(void *arg) {
    (void)arg;
    CUdeviceptr p = 0;
    SHOW("thread_no_context_alloc", cuMemAlloc(&p, 256));
    SHOW("thread_no_context_free_unknown", cuMemFree(0x7f0000001000ull));
    SHOW("thread_no_context_free0", cuMemFree(0));
    SHOW("thread_no_context_alloc_async", cuMemAllocAsync(&p, 256, CU_STREAM_LEGACY));
    void *h = NULL;
    SHOW("thread_no_context_alloc_host", cuMemAllocHost(&h, 256));
    return NULL;
}

int main(void) {
    CUdeviceptr p = 0, q = 0;
    size_t pitch = 0;
    void *h = NULL;
    SHOW("before_init_alloc", cuMemAlloc(&p, 256));
    SHOW("before_init_free", cuMemFree(0x1000));
    SHOW("before_init_alloc_host", cuMemAllocHost(&h, 256));
    CHECK(cuInit(0));
    SHOW("no_context_alloc", cuMemAlloc(&p, 256));
    SHOW("no_context_pitch", cuMemAllocPitch(&p, &pitch, 100, 10, 4));
    SHOW("no_context_free0", cuMemFree(0));
    SHOW("no_context_free_unknown", cuMemFree(0x7f0000001000ull));
    CUcontext ctx = wl_primary(0);
    pthread_t t;
    pthread_create(&t, NULL, no_context_thread, NULL);
    pthread_join(t, NULL);

    SHOW("alloc_size0", cuMemAlloc(&p, 0));
    SHOW("alloc_null", cuMemAlloc(NULL, 256));
    SHOW("alloc_huge", cuMemAlloc(&p, (size_t)1 << 50));
    SHOW("pitch_elem3", cuMemAllocPitch(&p, &pitch, 100, 10, 3));
    SHOW("pitch_width0", cuMemAllocPitch(&p, &pitch, 0, 10, 4));
    SHOW("pitch_height0", cuMemAllocPitch(&p, &pitch, 100, 0, 4));
    SHOW("pitch_ok", cuMemAllocPitch(&p, &pitch, 1000, 10, 4));
    printf("%-36s %zu\n", "pitch_value", pitch);
    CUdeviceptr base = 0;
    size_t size = 0;
    SHOW("range_interior", cuMemGetAddressRange(&base, &size, p + 100));
    printf("%-36s %lld %zu\n", "range_interior_value", (long long)(base - p), size);
    SHOW("free_pitch", cuMemFree(p));
    SHOW("range_after_free", cuMemGetAddressRange(&base, &size, p));

    SHOW("alloc", cuMemAlloc(&p, 4096));
    SHOW("free_interior", cuMemFree(p + 256));
    SHOW("free", cuMemFree(p));
    SHOW("free_double", cuMemFree(p));
    SHOW("free_unknown", cuMemFree(0x7f0000001000ull));
    SHOW("free_zero", cuMemFree(0));

    SHOW("managed_size0", cuMemAllocManaged(&q, 0, CU_MEM_ATTACH_GLOBAL));
    SHOW("host_size0", cuMemAllocHost(&h, 0));
    SHOW("host_alloc", cuMemAllocHost(&h, 4096));
    SHOW("free_of_host_pointer", cuMemFree((CUdeviceptr)(uintptr_t)h));
    SHOW("freehost", cuMemFreeHost(h));
    SHOW("freehost_double", cuMemFreeHost(h));
    SHOW("freehost_null", cuMemFreeHost(NULL));
    SHOW("alloc_for_freehost", cuMemAlloc(&p, 4096));
    SHOW("freehost_of_device_pointer", cuMemFreeHost((void *)(uintptr_t)p));
    SHOW("free_it", cuMemFree(p));

    SHOW("async_size0", cuMemAllocAsync(&q, 0, CU_STREAM_LEGACY));
    SHOW("async_alloc", cuMemAllocAsync(&q, 4096, CU_STREAM_LEGACY));
    SHOW("async_free", cuMemFreeAsync(q, CU_STREAM_LEGACY));
    SHOW("async_free_double", cuMemFreeAsync(q, CU_STREAM_LEGACY));
    SHOW("async_free_unknown", cuMemFreeAsync(0x7f0000001000ull, CU_STREAM_LEGACY));
    SHOW("alloc_for_async_free", cuMemAlloc(&p, 4096));
    SHOW("async_free_of_plain_alloc", cuMemFreeAsync(p, CU_STREAM_LEGACY));
    SHOW("sync", cuStreamSynchronize(CU_STREAM_LEGACY));
    SHOW("free_after_async_free", cuMemFree(p));

    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t gran = 0;
    CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUmemGenericAllocationHandle vh;
    CUdeviceptr va;
    SHOW("vmm_create_unaligned", cuMemCreate(&vh, 1000, &prop, 0));
    SHOW("vmm_create", cuMemCreate(&vh, gran, &prop, 0));
    SHOW("vmm_reserve", cuMemAddressReserve(&va, 2 * gran, 0, 0, 0));
    SHOW("vmm_map", cuMemMap(va, gran, 0, vh, 0));
    SHOW("vmm_release_mapped", cuMemRelease(vh));
    SHOW("vmm_unmap", cuMemUnmap(va, gran));
    SHOW("vmm_unmap_again", cuMemUnmap(va, gran));
    SHOW("vmm_release_again", cuMemRelease(vh));
    SHOW("vmm_address_free", cuMemAddressFree(va, 2 * gran));
    SHOW("vmm_address_free_again", cuMemAddressFree(va, 2 * gran));

    CUdevice dev;
    CHECK(cuDeviceGet(&dev, 0));
    CUcontext c2;
    SHOW("ctx_create", cuCtxCreate(&c2, NULL, 0, dev));
    SHOW("alloc_in_created", cuMemAlloc(&p, 8192));
    SHOW("ctx_destroy", cuCtxDestroy(c2));
    SHOW("free_after_ctx_destroy", cuMemFree(p));
    SHOW("ctx_destroy_again", cuCtxDestroy(c2));
    SHOW("set_primary", cuCtxSetCurrent(ctx));
    SHOW("alloc_before_reset", cuMemAlloc(&p, 8192));
    SHOW("primary_reset", cuDevicePrimaryCtxReset(dev));
    SHOW("alloc_after_reset", cuMemAlloc(&q, 256));
    SHOW("free_after_reset", cuMemFree(p));
    return 0;
}
