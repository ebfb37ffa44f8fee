/* pool_reuse: does a freed block come back while GPU work issued before its free still writes
 * it? Run on the simulator. Late work is modelled as pool_stream.c does: a stall on the stream
 * (cusimEnqueueFill of a scratch byte with a delay, like a slow kernel ahead), then a memset of
 * the block on that stream, which runs once the stall is over. Every write into the blocks goes
 * through a driver entry, as a kernel launch would on a real GPU, so the shim sees each one.
 *
 * For each way of issuing the work -- a non-blocking stream, the legacy stream, the per-thread
 * default stream, a stream-ordered free, and a stream destroyed with its work queued -- it:
 *   1. allocates A (1 MiB), stalls the stream and queues a memset of A to 0xAA behind the stall;
 *   2. frees A (cuMemFree, or cuMemFreeAsync on the stream);
 *   3. allocates B (1 MiB) and sets it to 0x55 at once, on a second non-blocking stream (so
 *      nothing in the program orders it after A's late memset);
 *   4. waits for everything and reads B back.
 * The driver's own cuMemFree waits for the late work, so B is all 0x55. A pool that handed A
 * out again at once as B, with nothing ordering B's write after A's work, would let the late
 * 0xAA land in B. Prints one JSON object:
 *   {"cases":[{"case":..., "same_address":bool, "corrupted_bytes":N}, ...]} */
#include "workload.h"

#define SIZE (1 << 20)
#define DELAY_US 30000

typedef CUresult (*memset_async_t)(CUdeviceptr, unsigned char, size_t, CUstream);

static unsigned char host[SIZE];
static CUstream other;
static CUdeviceptr scratch;

/* Writes 0x55 into b on the second stream, waits for all work, and prints the case. */
static void check_b(const char *name, CUdeviceptr a, CUdeviceptr b, int first) {
    CHECK(cuMemsetD8Async(b, 0x55, SIZE, other));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemcpyDtoH(host, b, SIZE));
    size_t bad = 0;
    for (size_t i = 0; i < SIZE; i++) bad += host[i] != 0x55;
    printf("%s{\"case\":\"%s\",\"same_address\":%s,\"corrupted_bytes\":%zu}", first ? "" : ",", name,
           a == b ? "true" : "false", bad);
    CHECK(cuMemFree(b));
}

/* s is the stream as the memset entry takes it; stall_on is the same stream as the simulator's
 * fill takes it (CU_STREAM_PER_THREAD for the per-thread default stream). */
static void one(const char *name, CUstream s, CUstream stall_on, memset_async_t set_async, int stream_ordered_free,
                int first) {
    CUdeviceptr a, b;
    CHECK(cuMemAlloc(&a, SIZE));
    CHECK(cusimEnqueueFill(stall_on, scratch, 1, 0, DELAY_US));
    CHECK(set_async(a, 0xAA, SIZE, s));
    if (stream_ordered_free)
        CHECK(cuMemFreeAsync(a, s));
    else
        CHECK(cuMemFree(a));
    CHECK(cuMemAlloc(&b, SIZE));
    check_b(name, a, b, first);
}

int main(void) {
    CHECK(cuInit(0));
    wl_primary(0);
    CHECK(cuMemAlloc(&scratch, 1));
    CUstream nb;
    CHECK(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    printf("{\"cases\":[");
    one("non_blocking_stream", nb, nb, cuMemsetD8Async, 0, 1);
    one("legacy_stream", CU_STREAM_LEGACY, CU_STREAM_LEGACY, cuMemsetD8Async, 0, 0);
    one("per_thread_stream", 0, CU_STREAM_PER_THREAD, cuMemsetD8Async_ptsz, 0, 0);
    one("stream_ordered_free", nb, nb, cuMemsetD8Async, 1, 0);
    {
        /* The stream is destroyed with its work still queued. */
        CUstream doomed;
        CHECK(cuStreamCreate(&doomed, CU_STREAM_NON_BLOCKING));
        CUdeviceptr a, b;
        CHECK(cuMemAlloc(&a, SIZE));
        CHECK(cusimEnqueueFill(doomed, scratch, 1, 0, DELAY_US));
        CHECK(cuMemsetD8Async(a, 0xAA, SIZE, doomed));
        CHECK(cuStreamDestroy(doomed));
        CHECK(cuMemFree(a));
        CHECK(cuMemAlloc(&b, SIZE));
        check_b("destroyed_stream", a, b, 0);
    }
    printf("]}\n");
    CHECK(cuMemFree(scratch));
    return 0;
}
