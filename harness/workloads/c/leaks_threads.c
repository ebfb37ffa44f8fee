/* leaks_threads: several threads in several contexts on two devices (run with
 * CUGUARD_SIM_DEVICES=2). Each worker creates its own context, allocates 8 blocks of distinct
 * sizes, frees the even ones, and keeps the odd ones. Then:
 *   - worker 0's context is destroyed with its blocks still live (released_by_context_destroy);
 *   - device 1's primary context is reset with a block live in it;
 *   - device 0's primary context keeps one block (live_at_exit), allocated from the main thread;
 *   - a block allocated in one context is freed while another is current (free_in_wrong_context).
 */
#include "workload.h"

#define WORKERS 4
#define PER_WORKER 8

struct job {
    int index;
    int device;
    CUcontext ctx;
};

static void *worker(void *arg) {
    struct job *j = arg;
    CUdevice d;
    CHECK(cuDeviceGet(&d, j->device));
    CHECK(cuCtxCreate(&j->ctx, NULL, 0, d));
    wl_context(j->ctx, j->device, 0);
    unsigned tid = wl_tid();
    CUdeviceptr p[PER_WORKER];
    for (int i = 0; i < PER_WORKER; i++) {
        size_t size = (size_t)(j->index * 100 + i + 1) * 512;
        CHECK(cuMemAlloc(&p[i], size));
        wl_allocated();
        if (i % 2) wl_keep(p[i], size, size, "cuMemAlloc_v2", "device", j->ctx, tid, "live_at_exit");
    }
    for (int i = 0; i < PER_WORKER; i += 2) CHECK(cuMemFree(p[i]));
    CHECK(cuCtxPopCurrent(NULL));
    return NULL;
}

int main(void) {
    CHECK(cuInit(0));
    int n = 0;
    CHECK(cuDeviceGetCount(&n));
    if (n < 2) {
        fprintf(stderr, "needs two devices (CUGUARD_SIM_DEVICES=2)\n");
        return 2;
    }
    CUcontext p0 = wl_primary(0);
    unsigned tid = wl_tid();
    pthread_t t[WORKERS];
    struct job jobs[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        jobs[i].index = i;
        jobs[i].device = i % 2;
        pthread_create(&t[i], NULL, worker, &jobs[i]);
    }
    for (int i = 0; i < WORKERS; i++) pthread_join(t[i], NULL);

    /* Worker 0's context goes, with its four kept blocks. */
    CHECK(cuCtxDestroy(jobs[0].ctx));
    wl_context_lost(jobs[0].ctx);

    /* Device 0's primary context: one block kept. */
    CHECK(cuCtxSetCurrent(p0));
    CUdeviceptr keep;
    CHECK(cuMemAlloc(&keep, 77777));
    wl_allocated();
    wl_keep(keep, 77777, 77777, "cuMemAlloc_v2", "device", p0, tid, "live_at_exit");

    /* Allocated in device 0's primary context, freed while worker 1's context is current. */
    CUdeviceptr moved;
    CHECK(cuMemAlloc(&moved, 4242));
    wl_allocated();
    CHECK(cuCtxPushCurrent(jobs[1].ctx));
    CHECK(cuMemFree(moved));
    wl_event("free_in_wrong_context", moved, "cuMemFree_v2", CUDA_SUCCESS);
    CHECK(cuCtxPopCurrent(NULL));

    /* Device 1's primary context: one block, then a reset. */
    CUcontext p1 = wl_primary(1);
    CUdeviceptr gone;
    CHECK(cuMemAlloc(&gone, 55555));
    wl_allocated();
    wl_keep(gone, 55555, 55555, "cuMemAlloc_v2", "device", p1, tid, "released_by_context_destroy");
    CHECK(cuDevicePrimaryCtxReset(1));
    wl_event("context_destroyed_with_live_allocations", (uintptr_t)p1, "cuDevicePrimaryCtxReset_v2", CUDA_SUCCESS);
    wl_event("context_destroyed_with_live_allocations", (uintptr_t)jobs[0].ctx, "cuCtxDestroy_v2", CUDA_SUCCESS);
    CHECK(cuCtxSetCurrent(p0));
    wl_print();
    return 0;
}
