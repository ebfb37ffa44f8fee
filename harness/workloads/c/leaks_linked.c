/* leaks_linked: every tracked allocation kind through the exported entries (a -lcuda program),
 * with some kept, some freed, and the bad frees the driver refuses. */
#include "workload.h"

int main(void) {
    CHECK(cuInit(0));
    CUcontext ctx = wl_primary(0);
    unsigned tid = wl_tid();

    /* cuMemAlloc: three, the middle one freed. */
    CUdeviceptr d[3];
    for (int i = 0; i < 3; i++) {
        CHECK(cuMemAlloc(&d[i], (size_t)(i + 1) * 1000));
        wl_allocated();
    }
    CHECK(cuMemFree(d[1]));
    wl_keep(d[0], 1000, 1000, "cuMemAlloc_v2", "device", ctx, tid, "live_at_exit");
    wl_keep(d[2], 3000, 3000, "cuMemAlloc_v2", "device", ctx, tid, "live_at_exit");

    /* Bad frees: double, never allocated, interior; NULL is fine. */
    CUresult r = cuMemFree(d[1]);
    wl_event("double_free", d[1], "cuMemFree_v2", r);
    r = cuMemFree(0x10000ull);
    wl_event("invalid_free", 0x10000ull, "cuMemFree_v2", r);
    r = cuMemFree(d[2] + 256);
    wl_event("invalid_free", d[2] + 256, "cuMemFree_v2", r);
    CHECK(cuMemFree(0));

    /* Pitched: kept. */
    CUdeviceptr p;
    size_t pitch;
    CHECK(cuMemAllocPitch(&p, &pitch, 1000, 7, 4));
    wl_allocated();
    wl_keep(p, pitch * 7, 7000, "cuMemAllocPitch_v2", "pitched", ctx, tid, "live_at_exit");

    /* Managed: one kept, one freed. */
    CUdeviceptr m[2];
    for (int i = 0; i < 2; i++) {
        CHECK(cuMemAllocManaged(&m[i], 4096 * (i + 1), CU_MEM_ATTACH_GLOBAL));
        wl_allocated();
    }
    CHECK(cuMemFree(m[0]));
    wl_keep(m[1], 8192, 8192, "cuMemAllocManaged", "managed", ctx, tid, "live_at_exit");

    /* Pinned host: one of each kept, one freed. */
    void *h1, *h2, *h3;
    CHECK(cuMemAllocHost(&h1, 5000));
    CHECK(cuMemHostAlloc(&h2, 6000, 0));
    CHECK(cuMemHostAlloc(&h3, 7000, 0));
    wl_allocated();
    wl_allocated();
    wl_allocated();
    CHECK(cuMemFreeHost(h3));
    r = cuMemFreeHost(h3);
    wl_event("double_free", (unsigned long long)(uintptr_t)h3, "cuMemFreeHost", r);
    wl_keep((uintptr_t)h1, 5000, 5000, "cuMemAllocHost_v2", "host_pinned", ctx, tid, "live_at_exit");
    wl_keep((uintptr_t)h2, 6000, 6000, "cuMemHostAlloc", "host_pinned", ctx, tid, "live_at_exit");

    /* Stream-ordered: two on the legacy stream, one freed; one from a created pool, kept. */
    CUdeviceptr a[2];
    for (int i = 0; i < 2; i++) {
        CHECK(cuMemAllocAsync(&a[i], 10000 + i, CU_STREAM_LEGACY));
        wl_allocated();
    }
    CHECK(cuMemFreeAsync(a[0], CU_STREAM_LEGACY));
    wl_keep(a[1], 10001, 10001, "cuMemAllocAsync", "async", ctx, tid, "live_at_exit");
    CUmemoryPool mp;
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    CHECK(cuMemPoolCreate(&mp, &props));
    CUdeviceptr ap;
    CHECK(cuMemAllocFromPoolAsync(&ap, 12345, mp, CU_STREAM_LEGACY));
    wl_allocated();
    wl_keep(ap, 12345, 12345, "cuMemAllocFromPoolAsync", "async", ctx, tid, "live_at_exit");
    CHECK(cuStreamSynchronize(CU_STREAM_LEGACY));

    /* VMM: one physical allocation kept mapped, one released and unmapped. */
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t gran;
    CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUmemGenericAllocationHandle vh[2];
    CUdeviceptr va;
    CHECK(cuMemAddressReserve(&va, 2 * gran, 0, 0, 0));
    for (int i = 0; i < 2; i++) {
        CHECK(cuMemCreate(&vh[i], gran, &prop, 0));
        wl_allocated();
        CHECK(cuMemMap(va + i * gran, gran, 0, vh[i], 0));
    }
    CHECK(cuMemRelease(vh[1]));
    CHECK(cuMemUnmap(va + gran, gran));
    wl_keep(va, gran, gran, "cuMemCreate", "vmm", ctx, tid, "live_at_exit");

    wl_print();
    return 0;
}
