/* pool_stream: stream-aware reuse (CUGUARD_POOL_STREAM_REUSE). A block whose pending work was all
 * issued on one stream S may be handed out again at once; work on any other stream must then
 * wait for S's work. Run on the simulator; late work is a stall on S (cusimEnqueueFill with a
 * delay, which the shim does not see) followed by a memset of the block on S (which it counts,
 * as it would a kernel launch).
 *
 *   pool_stream MODE [TRIALS]
 *
 * Each trial: allocate A (1 MiB in mode same, which the thread cache serves; else 4 MiB, a
 * dedicated chunk of the pool, so that a block freed while other streams' work is pending makes
 * the next trial's allocation synchronize, and each trial starts with nothing pending); stall S (DELAY_US); queue a memset of A to 0xAA on S; free A;
 * allocate B (as large) and write 0x55 into it, then read B back once everything is done and count
 * the bytes that are not 0x55 (a late 0xAA that landed after B's write). Modes, by how B is
 * written:
 *   same        cuMemsetD8Async on S (ordered after A's work by S itself); read back on S too,
 *               so that every submission of the run is on S;
 *   other       by trial, in turn: cuMemsetD8Async on T (a second non-blocking stream), on the
 *               legacy stream, a synchronous cuMemsetD8, a synchronous cuMemcpyHtoD;
 *   peer        as other, with a second context (device 1) that enabled peer access to this one;
 *   destroy     as other, with S a new stream each trial, destroyed once B is allocated (the
 *               driver may give its handle to a new stream: a block reused early must not
 *               depend on it any more);
 *   capture     as other, with a relaxed-mode capture on a third stream X: in even trials it
 *               begins before the work on S (so A is freed during the capture), in odd trials
 *               after B was allocated (so B may have been reused early, and the capture's
 *               beginning must leave no wait to insert); it ends before B is read back.
 * Prints {"mode":..., "trials":N, "same_address":N, "corrupted_bytes":N}: same_address counts
 * the trials where B came back at A's address. */
#include "workload.h"

#define MAX_SIZE (4 << 20)
#define DELAY_US 20000

static unsigned char host[MAX_SIZE], fives[MAX_SIZE];
static size_t SIZE = MAX_SIZE;
static CUstream S, T, X;
static CUdeviceptr scratch;

static size_t count_not_55(void) {
    size_t bad = 0;
    for (size_t i = 0; i < SIZE; i++) bad += host[i] != 0x55;
    return bad;
}

/* Writes 0x55 into b the way trial i of "other" does. */
static void write_other(CUdeviceptr b, int i) {
    switch (i % 4) {
    case 0: CHECK(cuMemsetD8Async(b, 0x55, SIZE, T)); break;
    case 1: CHECK(cuMemsetD8Async(b, 0x55, SIZE, CU_STREAM_LEGACY)); break;
    case 2: CHECK(cuMemsetD8(b, 0x55, SIZE)); break;
    default: CHECK(cuMemcpyHtoD(b, fives, SIZE)); break;
    }
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "same";
    int trials = argc > 2 ? atoi(argv[2]) : 20;
    CHECK(cuInit(0));
    wl_primary(0);
    CUcontext a;
    CHECK(cuCtxGetCurrent(&a));
    memset(fives, 0x55, MAX_SIZE);
    if (strcmp(mode, "destroy")) CHECK(cuStreamCreate(&S, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&T, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&X, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc(&scratch, 256));
    int same_mode = !strcmp(mode, "same");
    if (same_mode) SIZE = 1 << 20;
    if (!strcmp(mode, "peer")) {
        CUdevice d1;
        CUcontext b;
        CHECK(cuDeviceGet(&d1, 1));
        CHECK(cuCtxCreate(&b, NULL, 0, d1));
        CHECK(cuCtxEnablePeerAccess(a, 0));
        CHECK(cuCtxSetCurrent(a));
    }
    int capture = !strcmp(mode, "capture");
    int destroy = !strcmp(mode, "destroy");
    int same = 0;
    size_t bad = 0;
    for (int i = 0; i < trials; i++) {
        CUdeviceptr p, q;
        if (destroy) CHECK(cuStreamCreate(&S, CU_STREAM_NON_BLOCKING));
        CHECK(cuMemAlloc(&p, SIZE));
        if (capture && i % 2 == 0) CHECK(cuStreamBeginCapture(X, CU_STREAM_CAPTURE_MODE_RELAXED));
        CHECK(cusimEnqueueFill(S, scratch, 1, 0, DELAY_US));
        CHECK(cuMemsetD8Async(p, 0xAA, SIZE, S));
        CHECK(cuMemFree(p));
        CHECK(cuMemAlloc(&q, SIZE));
        same += p == q;
        if (same_mode) {
            CHECK(cuMemsetD8Async(q, 0x55, SIZE, S));
            CHECK(cuMemcpyDtoHAsync(host, q, SIZE, S));
            CHECK(cuStreamSynchronize(S));
        } else {
            if (capture && i % 2 == 1) CHECK(cuStreamBeginCapture(X, CU_STREAM_CAPTURE_MODE_RELAXED));
            if (destroy) CHECK(cuStreamDestroy(S));
            write_other(q, i);
            if (capture) {
                CUgraph g;
                CHECK(cuStreamEndCapture(X, &g));
                CHECK(cuGraphDestroy(g));
            }
            if (!destroy) CHECK(cuStreamSynchronize(S));
            CHECK(cuStreamSynchronize(T));
            CHECK(cuCtxSynchronize());
            CHECK(cuMemcpyDtoHAsync(host, q, SIZE, T));
            CHECK(cuStreamSynchronize(T));
        }
        bad += count_not_55();
        CHECK(cuMemFree(q));
    }
    printf("{\"mode\":\"%s\",\"trials\":%d,\"same_address\":%d,\"corrupted_bytes\":%zu}\n", mode, trials,
           same, bad);
    return 0;
}
