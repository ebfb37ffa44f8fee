/* pool_thread_cache: the pool's per-thread caches through a thread's life, a context's destroy
 * and a fork, on the simulated driver.
 *
 *   1. THREADS threads each run pairs (served by their cache, all before any work is submitted),
 *      then keep one block their cache
 *      handed out (a leak), leave another for the main thread to free, leave a cached block,
 *      and exit.
 *   2. The main thread frees the blocks the exited threads left (half before its next
 *      allocation adopts their caches, half after), then allocates and frees again.
 *   3. In a created context: a pair, then a block handed out by the cache is kept, and the
 *      context is destroyed (the block is lost with it); back in the primary context, pairs.
 *   4. With blocks in the main thread's cache, it forks; the child runs pairs, checks a pooled
 *      pointer's range, and _exits (0 when all was well); the parent waits for it.
 *
 * Each block handed out is filled and read back through copies, so a block handed to two owners
 * would show. Prints one JSON object: {"kept": [{"address","size","state"}...],
 * "thread_pairs_same": N, "mismatches": N, "child_status": N}. */
#include <sys/wait.h>

#include "workload.h"

#define THREADS 8

static CUcontext primary;
static CUdeviceptr kept[THREADS], for_main[THREADS];
static int same[THREADS];
static int mismatches;
/* The pairs of every thread run before any thread submits work: work submitted (by any thread)
 * since the pool's last completed fence holds every freed block back, cached ones too. */
static pthread_barrier_t pairs_done;

static void fill_check(CUdeviceptr p, size_t size, unsigned char v) {
    unsigned char buf[256];
    CHECK(cuMemsetD8(p, v, size));
    CHECK(cuMemcpyDtoH(buf, p + size - sizeof buf, sizeof buf));
    for (size_t i = 0; i < sizeof buf; i++)
        if (buf[i] != v) {
            __atomic_add_fetch(&mismatches, 1, __ATOMIC_RELAXED);
            return;
        }
}

static void *worker(void *arg) {
    int i = (int)(intptr_t)arg;
    CHECK(cuCtxSetCurrent(primary));
    CUdeviceptr a, b, first = 0;
    for (int k = 0; k < 200; k++) {
        CHECK(cuMemAlloc(&a, 4096));
        if (k == 1) first = a;
        if (k > 1 && a == first) same[i]++;
        CHECK(cuMemFree(a));
    }
    pthread_barrier_wait(&pairs_done);
    size_t size = 4096 + (size_t)i * 256;
    CHECK(cuMemAlloc(&a, size));
    CHECK(cuMemFree(a));
    CHECK(cuMemAlloc(&b, size)); /* from the cache: live in its slot */
    fill_check(b, size, (unsigned char)(i + 1));
    kept[i] = b;
    wl_keep(b, size, size, "cuMemAlloc_v2", "device", primary, wl_tid(), "live_at_exit");
    CHECK(cuMemAlloc(&a, 8192));
    CHECK(cuMemFree(a));
    CHECK(cuMemAlloc(&a, 8192));
    fill_check(a, 8192, 0x70);
    for_main[i] = a;
    CHECK(cuMemAlloc(&a, 65536));
    CHECK(cuMemFree(a)); /* left cached at exit */
    return NULL;
}

static void pairs(int n, size_t size, unsigned char v) {
    for (int k = 0; k < n; k++) {
        CUdeviceptr a;
        CHECK(cuMemAlloc(&a, size));
        fill_check(a, size, v);
        CHECK(cuMemFree(a));
    }
}

int main(void) {
    CHECK(cuInit(0));
    primary = wl_primary(0);
    pthread_t t[THREADS];
    pthread_barrier_init(&pairs_done, NULL, THREADS);
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);

    /* 2. Blocks left live in exited threads' caches, freed here. */
    for (int i = 0; i < THREADS / 2; i++) CHECK(cuMemFree(for_main[i]));
    pairs(50, 65536, 0x11);
    for (int i = THREADS / 2; i < THREADS; i++) CHECK(cuMemFree(for_main[i]));
    /* Each kept block still holds its own bytes. */
    for (int i = 0; i < THREADS; i++) {
        unsigned char v;
        CHECK(cuMemcpyDtoH(&v, kept[i], 1));
        if (v != (unsigned char)(i + 1)) mismatches++;
    }

    /* 3. A created context destroyed with a block its cache handed out. */
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
    wl_context(ctx, 0, 0);
    CUdeviceptr x, y;
    CHECK(cuMemAlloc(&x, 4096));
    CHECK(cuMemFree(x));
    CHECK(cuMemAlloc(&y, 4096));
    fill_check(y, 4096, 0x22);
    wl_keep(y, 4096, 4096, "cuMemAlloc_v2", "device", ctx, wl_tid(), "released_by_context_destroy");
    CHECK(cuCtxDestroy(ctx));
    CHECK(cuCtxSetCurrent(primary));
    pairs(50, 4096, 0x33);

    /* 4. Fork with blocks in this thread's cache. */
    pairs(5, 2048, 0x44);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int bad = 0;
        for (int k = 0; k < 100; k++) {
            CUdeviceptr a, base;
            size_t range;
            CHECK(cuMemAlloc(&a, 2048));
            CHECK(cuMemsetD8(a, 0x55, 2048));
            CHECK(cuMemGetAddressRange(&base, &range, a + 100));
            if (base != a || range != 2048) bad++;
            CHECK(cuMemFree(a));
        }
        _exit(bad ? 2 : 0);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    pairs(5, 2048, 0x66);

    int thread_same = 0;
    for (int i = 0; i < THREADS; i++) thread_same += same[i];
    printf("{\"kept\":[");
    for (int i = 0; i < wl_nkept; i++) printf("%s%s", i ? "," : "", wl_kept[i]);
    printf("],\"thread_pairs_same\":%d,\"mismatches\":%d,\"child_status\":%d}\n", thread_same, mismatches,
           WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 0;
}
