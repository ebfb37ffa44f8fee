/* pool_reuse: does a freed block come back while GPU work issued before its free still writes
 * it? Run on the simulator with CUGUARD_SIM_WORK_DELAY_US set, so queued work runs late.
 *
 * For each way of issuing the work -- a non-blocking stream, the legacy stream, the per-thread
 * default stream, and a stream-ordered free -- it:
 *   1. allocates A (1 MiB) and queues a memset of A to 0xAA (which runs late);
 *   2. frees A (cuMemFree, or cuMemFreeAsync on the stream);
 *   3. allocates B (1 MiB) and sets it to 0x55 at once, on a second non-blocking stream (so
 *      nothing orders it after A's late memset);
 *   4. waits for everything and reads B back.
 * The driver's own cuMemFree waits for the late work, so B is all 0x55. A pool that handed A
 * out again at once as B would let the late 0xAA land in B. Prints one JSON object:
 *   {"cases":[{"case":..., "same_address":bool, "corrupted_bytes":N}, ...]} */
#include "workload.h"

#define SIZE (1 << 20)

typedef CUresult (*memset_async_t)(CUdeviceptr, unsigned char, size_t, CUstream);

static unsigned char host[SIZE];
static CUstream other;

static void one(const char *name, CUstream s, memset_async_t set_async, int stream_ordered_free, int first) {
    CUdeviceptr a, b;
    CHECK(cuMemAlloc(&a, SIZE));
    CHECK(set_async(a, 0xAA, SIZE, s));
    if (stream_ordered_free)
        CHECK(cuMemFreeAsync(a, s));
    else
        CHECK(cuMemFree(a));
    CHECK(cuMemAlloc(&b, SIZE));
    CHECK(cusimEnqueueFill(other, b, SIZE, 0x55, 0));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemcpyDtoH(host, b, SIZE));
    size_t bad = 0;
    for (size_t i = 0; i < SIZE; i++) bad += host[i] != 0x55;
    printf("%s{\"case\":\"%s\",\"same_address\":%s,\"corrupted_bytes\":%zu}", first ? "" : ",", name,
           a == b ? "true" : "false", bad);
    CHECK(cuMemFree(b));
}

int main(void) {
    CHECK(cuInit(0));
    wl_primary(0);
    CUstream nb;
    CHECK(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    printf("{\"cases\":[");
    one("non_blocking_stream", nb, cuMemsetD8Async, 0, 1);
    one("legacy_stream", CU_STREAM_LEGACY, cuMemsetD8Async, 0, 0);
    one("per_thread_stream", 0, cuMemsetD8Async_ptsz, 0, 0);
    one("stream_ordered_free", nb, cuMemsetD8Async, 1, 0);
    CUstream doomed;
    CHECK(cuStreamCreate(&doomed, CU_STREAM_NON_BLOCKING));
    {
        /* The stream is destroyed with its work still queued. */
        CUdeviceptr a, b;
        CHECK(cuMemAlloc(&a, SIZE));
        CHECK(cuMemsetD8Async(a, 0xAA, SIZE, doomed));
        CHECK(cuStreamDestroy(doomed));
        CHECK(cuMemFree(a));
        CHECK(cuMemAlloc(&b, SIZE));
        CHECK(cusimEnqueueFill(other, b, SIZE, 0x55, 0));
        CHECK(cuCtxSynchronize());
        CHECK(cuMemcpyDtoH(host, b, SIZE));
        size_t bad = 0;
        for (size_t i = 0; i < SIZE; i++) bad += host[i] != 0x55;
        printf(",{\"case\":\"destroyed_stream\",\"same_address\":%s,\"corrupted_bytes\":%zu}", a == b ? "true" : "false",
               bad);
        CHECK(cuMemFree(b));
    }
    printf("]}\n");
    return 0;
}
