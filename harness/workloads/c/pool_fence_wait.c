/* pool_fence_wait: when the pool must wait for pending frees, it waits for the oldest fence in
 * flight, not for the whole context: work submitted after that fence keeps running. Run on the
 * simulator.
 *
 * BLOCKS blocks of SIZE (4 MiB: each a dedicated chunk of the pool) are written on stream S1
 * behind a stall (late work), with a small write on S2 too (so that their pending work is on two
 * streams and no block is reused early by the stream rule), and freed: 64 MiB waiting, so the
 * pool records a fence at the last free. Then S2 is stalled for LONG_US (work submitted after
 * the fence) and one more block of SIZE is allocated: every chunk is pending, so the pool waits.
 * A wait for the fence returns once S1's late work is done, with S2 still busy; a
 * synchronization would have waited for S2 as well. Prints
 *   {"same_address":bool, "s2_busy_after":bool, "corrupted_bytes":N}
 * where same_address says the block came back at a freed block's address, and corrupted_bytes
 * counts the bytes of the new block (set to 0x55 on S1 after it was allocated) that are not
 * 0x55. */
#include "workload.h"

#define SIZE (4 << 20)
#define BLOCKS 16
#define DELAY_US 30000
#define LONG_US 1500000

static unsigned char host[SIZE];

int main(void) {
    CHECK(cuInit(0));
    wl_primary(0);
    CUstream s1, s2;
    CHECK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CUdeviceptr scratch, a[BLOCKS], b;
    CHECK(cuMemAlloc(&scratch, 2));
    for (int i = 0; i < BLOCKS; i++) CHECK(cuMemAlloc(&a[i], SIZE));
    CHECK(cusimEnqueueFill(s1, scratch, 1, 0, DELAY_US));
    for (int i = 0; i < BLOCKS; i++) CHECK(cuMemsetD8Async(a[i], 0xAA, SIZE, s1));
    CHECK(cuMemsetD8Async(scratch + 1, 0, 1, s2));
    for (int i = 0; i < BLOCKS; i++) CHECK(cuMemFree(a[i]));
    CHECK(cusimEnqueueFill(s2, scratch + 1, 1, 0, LONG_US));
    CHECK(cuMemsetD8Async(scratch + 1, 1, 1, s2));
    CHECK(cuMemAlloc(&b, SIZE));
    CUresult busy = cuStreamQuery(s2);
    CHECK(cuMemsetD8Async(b, 0x55, SIZE, s1));
    CHECK(cuStreamSynchronize(s1));
    CHECK(cuMemcpyDtoH(host, b, SIZE));
    size_t bad = 0;
    for (size_t i = 0; i < SIZE; i++) bad += host[i] != 0x55;
    int same = 0;
    for (int i = 0; i < BLOCKS; i++) same |= a[i] == b;
    printf("{\"same_address\":%s,\"s2_busy_after\":%s,\"corrupted_bytes\":%zu}\n", same ? "true" : "false",
           busy == CUDA_ERROR_NOT_READY ? "true" : "false", bad);
    CHECK(cuCtxSynchronize());
    CHECK(cuMemFree(b));
    CHECK(cuMemFree(scratch));
    return 0;
}
