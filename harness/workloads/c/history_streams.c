/* history_streams: allocations and frees on several streams, for the stream the history records
 * with each (and the memory-viz export writes).
 *
 *   history_streams
 *
 * On device 0's primary context, with two created streams A (non-blocking) and B (blocking), it
 * allocates, in this order:
 *   - cuMemAllocAsync: 1 MiB and 2 MiB on A, 3 MiB on B;
 *   - cuMemAllocFromPoolAsync: 5 MiB from the device's default pool on B;
 *   - cuMemAllocAsync: 6 MiB on CU_STREAM_LEGACY, and cuMemAllocAsync_ptsz: 7 MiB on handle 0
 *     (the calling thread's per-thread default stream);
 *   - cuMemAlloc (which takes no stream): 4 MiB and 8 MiB (blocks of cuguard's pool when it is
 *     on);
 * then frees the 1 MiB one with cuMemFreeAsync on A and the 8 MiB one with cuMemFreeAsync on B,
 * keeps (leaks) the rest, and synchronizes both streams and the context. No address is used
 * twice: every free comes after the last allocation. It prints
 *
 *   {"streams": ["0x<A>", "0x<B>"],
 *    "allocations": [{"address": "0x...", "size": N, "api": "...", "stream": "0x...",
 *                     "freed_on": "0x..." or null}...]}
 *
 * each stream as the handle the call was given ("0x0" for cuMemAlloc, which takes none). */
#include "workload.h"

#define MIB (1ull << 20)
#define N 8

struct allocation {
    CUdeviceptr address;
    size_t size;
    const char *api;
    CUstream stream;
    int freed;
    CUstream freed_on;
};

static struct allocation made[N];
static int count;

static struct allocation *note(CUdeviceptr address, size_t size, const char *api, CUstream stream) {
    struct allocation *a = &made[count++];
    a->address = address;
    a->size = size;
    a->api = api;
    a->stream = stream;
    return a;
}

static void free_on(struct allocation *a, CUstream s) {
    CHECK(cuMemFreeAsync(a->address, s));
    a->freed = 1;
    a->freed_on = s;
}

static unsigned long long handle(CUstream s) { return (unsigned long long)(uintptr_t)s; }

int main(void) {
    CHECK(cuInit(0));
    wl_primary(0);
    CUstream A, B;
    CHECK(cuStreamCreate(&A, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&B, CU_STREAM_DEFAULT));
    CUdevice dev;
    CHECK(cuDeviceGet(&dev, 0));
    CUmemoryPool pool;
    CHECK(cuDeviceGetDefaultMemPool(&pool, dev));

    CUdeviceptr p;
    CHECK(cuMemAllocAsync(&p, 1 * MIB, A));
    struct allocation *first = note(p, 1 * MIB, "cuMemAllocAsync", A);
    CHECK(cuMemAllocAsync(&p, 2 * MIB, A));
    note(p, 2 * MIB, "cuMemAllocAsync", A);
    CHECK(cuMemAllocAsync(&p, 3 * MIB, B));
    note(p, 3 * MIB, "cuMemAllocAsync", B);
    CHECK(cuMemAllocFromPoolAsync(&p, 5 * MIB, pool, B));
    note(p, 5 * MIB, "cuMemAllocFromPoolAsync", B);
    CHECK(cuMemAllocAsync(&p, 6 * MIB, CU_STREAM_LEGACY));
    note(p, 6 * MIB, "cuMemAllocAsync", CU_STREAM_LEGACY);
    CHECK(cuMemAllocAsync_ptsz(&p, 7 * MIB, 0));
    note(p, 7 * MIB, "cuMemAllocAsync_ptsz", 0);
    CHECK(cuMemAlloc(&p, 4 * MIB));
    note(p, 4 * MIB, "cuMemAlloc", 0);
    CHECK(cuMemAlloc(&p, 8 * MIB));
    struct allocation *last = note(p, 8 * MIB, "cuMemAlloc", 0);

    free_on(first, A);
    free_on(last, B);
    CHECK(cuStreamSynchronize(A));
    CHECK(cuStreamSynchronize(B));
    CHECK(cuCtxSynchronize());

    printf("{\"streams\": [\"0x%llx\", \"0x%llx\"], \"allocations\": [", handle(A), handle(B));
    for (int i = 0; i < count; i++) {
        struct allocation *a = &made[i];
        printf("%s{\"address\": \"0x%llx\", \"size\": %zu, \"api\": \"%s\", \"stream\": \"0x%llx\", "
               "\"freed_on\": ",
               i ? ", " : "", (unsigned long long)a->address, a->size, a->api, handle(a->stream));
        if (a->freed)
            printf("\"0x%llx\"}", handle(a->freed_on));
        else
            printf("null}");
    }
    printf("]}\n");
    return 0;
}
