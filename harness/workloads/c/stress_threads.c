/* stress_threads THREADS SECONDS: THREADS threads, for SECONDS seconds, each alternate between the
 * primary context and a context of their own (pushing and popping them), allocating and freeing
 * every kind of memory the shim tracks (device, pitched, managed, pinned host, stream-ordered)
 * in whichever context is current. At the end each thread frees two of every three blocks it
 * still holds and keeps the rest. Prints, in workload.h's form, exactly what was kept and how
 * many allocations were made: the report must match it exactly (no lost or invented record). */
#include <time.h>

#include "workload.h"

#define SLOTS 48

struct block {
    CUdeviceptr p;
    void *host;
    int kind;
    size_t size, requested;
    CUcontext ctx;
};

static CUcontext primary;
static int seconds;
static int total_allocations;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static const char *api_of(int kind) {
    static const char *a[] = {"cuMemAlloc_v2", "cuMemAllocPitch_v2", "cuMemAllocManaged", "cuMemAllocHost_v2",
                              "cuMemAllocAsync"};
    return a[kind];
}

static const char *memory_of(int kind) {
    static const char *m[] = {"device", "pitched", "managed", "host_pinned", "async"};
    return m[kind];
}

static void release(struct block *b) {
    switch (b->kind) {
    case 3: CHECK(cuMemFreeHost(b->host)); break;
    case 4: CHECK(cuMemFreeAsync(b->p, CU_STREAM_LEGACY)); break;
    default: CHECK(cuMemFree(b->p)); break;
    }
    b->p = 0;
    b->host = NULL;
}

static void *worker(void *arg) {
    unsigned seed = (unsigned)(uintptr_t)arg * 2654435761u;
    CUdevice dev;
    CHECK(cuDeviceGet(&dev, 0));
    CUcontext own;
    CHECK(cuCtxCreate(&own, NULL, 0, dev));
    wl_context(own, 0, 0);
    CUcontext popped;
    CHECK(cuCtxPopCurrent(&popped));
    CHECK(cuCtxSetCurrent(primary));
    struct block b[SLOTS];
    memset(b, 0, sizeof b);
    int allocations = 0, pushed = 0;
    CUcontext cur = primary;
    double end = now() + seconds;
    unsigned tid = wl_tid();
    while (now() < end) {
        for (int step = 0; step < 64; step++) {
            int r = rand_r(&seed) % 100;
            if (r < 5) {
                if (pushed) {
                    CHECK(cuCtxPopCurrent(&popped));
                    pushed = 0;
                    cur = primary;
                } else {
                    CHECK(cuCtxPushCurrent(own));
                    pushed = 1;
                    cur = own;
                }
                continue;
            }
            struct block *s = &b[rand_r(&seed) % SLOTS];
            if (s->p || s->host) {
                /* Free in the context it was made in (a free in another context is an event). */
                if (s->ctx != cur) continue;
                release(s);
                continue;
            }
            int kind = rand_r(&seed) % 5;
            size_t size = 256 + (size_t)(rand_r(&seed) % 200000);
            s->kind = kind;
            s->ctx = cur;
            s->size = s->requested = size;
            switch (kind) {
            case 0: CHECK(cuMemAlloc(&s->p, size)); break;
            case 1: {
                size_t pitch = 0, w = 64 + size % 4000, h = 1 + size % 7;
                CHECK(cuMemAllocPitch(&s->p, &pitch, w, h, 4));
                s->size = pitch * h;
                s->requested = w * h;
                break;
            }
            case 2: CHECK(cuMemAllocManaged(&s->p, size, CU_MEM_ATTACH_GLOBAL)); break;
            case 3: CHECK(cuMemAllocHost(&s->host, size)); break;
            case 4: CHECK(cuMemAllocAsync(&s->p, size, CU_STREAM_LEGACY)); break;
            }
            allocations++;
        }
    }
    /* Keep one block in three; free the others in their own context. */
    for (int i = 0; i < SLOTS; i++) {
        struct block *s = &b[i];
        if (!s->p && !s->host) continue;
        if (i % 3 == 0) {
            unsigned long long addr = s->kind == 3 ? (unsigned long long)(uintptr_t)s->host : s->p;
            wl_keep(addr, s->size, s->requested, api_of(s->kind), memory_of(s->kind), s->ctx, tid, "live_at_exit");
            continue;
        }
        if (s->ctx != cur) {
            if (pushed) {
                CHECK(cuCtxPopCurrent(&popped));
                pushed = 0;
                cur = primary;
            } else {
                CHECK(cuCtxPushCurrent(own));
                pushed = 1;
                cur = own;
            }
        }
        release(s);
    }
    CHECK(cuStreamSynchronize(CU_STREAM_LEGACY));
    pthread_mutex_lock(&wl_lock);
    total_allocations += allocations;
    pthread_mutex_unlock(&wl_lock);
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 8;
    seconds = argc > 2 ? atoi(argv[2]) : 5;
    if (threads > 64) threads = 64;
    CHECK(cuInit(0));
    primary = wl_primary(0);
    pthread_t t[64];
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    wl_allocations = total_allocations;
    wl_print();
    return 0;
}
