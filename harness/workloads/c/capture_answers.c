/* capture_answers: what cuMemAlloc and cuMemAllocPitch answer during a stream capture, in each
 * capture mode, from the capturing thread and from another one, and how the capture ends. The
 * answers must be the driver's whether or not cuguard's pool serves allocations: the pool is
 * warmed first (a block freed and cached, as on the H200 where the pool handed one out during a
 * global capture and the capture "succeeded"). Prints "key<TAB>value" lines. */
#include "workload.h"

#define MiB (1ull << 20)

typedef struct {
    CUcontext ctx;
    CUstreamCaptureMode mode; /* the other thread's interaction mode */
    CUresult alloc;
} Other;

static void *other_thread(void *arg) {
    Other *o = arg;
    CHECK(cuCtxSetCurrent(o->ctx));
    CUstreamCaptureMode m = o->mode;
    CHECK(cuThreadExchangeStreamCaptureMode(&m));
    CUdeviceptr p = 0;
    o->alloc = cuMemAlloc(&p, 1 * MiB);
    if (o->alloc == CUDA_SUCCESS) CHECK(cuMemFree(p));
    return NULL;
}

/* Begins a capture in `mode` on a fresh stream, asks for `bytes` (from this thread, or from
 * another thread in interaction mode `other_mode` when `other` is set), and ends it. */
static void one(const char *name, CUcontext ctx, CUstreamCaptureMode mode, size_t bytes, int other,
                CUstreamCaptureMode other_mode, int pitch) {
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamBeginCapture(s, mode));
    CUresult r;
    CUdeviceptr p = 0;
    if (other) {
        Other o = {ctx, other_mode, 0};
        pthread_t t;
        pthread_create(&t, NULL, other_thread, &o);
        pthread_join(t, NULL);
        r = o.alloc;
    } else if (pitch) {
        size_t pp = 0;
        r = cuMemAllocPitch(&p, &pp, 1000, 100, 4);
    } else {
        r = cuMemAlloc(&p, bytes);
    }
    CUstreamCaptureStatus status;
    CHECK(cuStreamIsCapturing(s, &status));
    CUgraph g = (CUgraph)0x1;
    CUresult end = cuStreamEndCapture(s, &g);
    printf("%s.alloc\t%d\n", name, (int)r);
    printf("%s.status\t%d\n", name, (int)status);
    printf("%s.end\t%d\n", name, (int)end);
    printf("%s.graph\t%s\n", name, g == NULL ? "null" : "made");
    if (g) CHECK(cuGraphDestroy(g));
    if (r == CUDA_SUCCESS && p) CHECK(cuMemFree(p));
    CHECK(cuStreamDestroy(s));
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    CHECK(cuInit(0));
    CUcontext ctx = wl_primary(0);
    /* Warm the pool: blocks of the sizes asked below, freed, kept. */
    CUdeviceptr warm[3];
    CHECK(cuMemAlloc(&warm[0], 1 * MiB));
    CHECK(cuMemAlloc(&warm[1], 64 * MiB));
    size_t pitch;
    CHECK(cuMemAllocPitch(&warm[2], &pitch, 1000, 100, 4));
    for (int i = 0; i < 3; i++) CHECK(cuMemFree(warm[i]));

    one("global", ctx, CU_STREAM_CAPTURE_MODE_GLOBAL, 1 * MiB, 0, 0, 0);
    one("global_64MiB", ctx, CU_STREAM_CAPTURE_MODE_GLOBAL, 64 * MiB, 0, 0, 0);
    one("global_pitch", ctx, CU_STREAM_CAPTURE_MODE_GLOBAL, 0, 0, 0, 1);
    one("thread_local", ctx, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, 1 * MiB, 0, 0, 0);
    one("relaxed", ctx, CU_STREAM_CAPTURE_MODE_RELAXED, 1 * MiB, 0, 0, 0);
    one("relaxed_64MiB", ctx, CU_STREAM_CAPTURE_MODE_RELAXED, 64 * MiB, 0, 0, 0);
    one("global_other_thread", ctx, CU_STREAM_CAPTURE_MODE_GLOBAL, 0, 1, CU_STREAM_CAPTURE_MODE_GLOBAL, 0);
    one("global_other_relaxed", ctx, CU_STREAM_CAPTURE_MODE_GLOBAL, 0, 1, CU_STREAM_CAPTURE_MODE_RELAXED, 0);
    one("thread_local_other_thread", ctx, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, 0, 1,
        CU_STREAM_CAPTURE_MODE_GLOBAL, 0);
    one("relaxed_other_thread", ctx, CU_STREAM_CAPTURE_MODE_RELAXED, 0, 1, CU_STREAM_CAPTURE_MODE_GLOBAL, 0);

    /* This thread in relaxed mode during its own global capture: allowed. */
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
    CHECK(cuThreadExchangeStreamCaptureMode(&m));
    printf("exchange.previous\t%d\n", (int)m);
    one("global_thread_relaxed", ctx, CU_STREAM_CAPTURE_MODE_GLOBAL, 1 * MiB, 0, 0, 0);
    CHECK(cuThreadExchangeStreamCaptureMode(&m));
    m = (CUstreamCaptureMode)7;
    printf("exchange.bad_mode\t%d\n", (int)cuThreadExchangeStreamCaptureMode(&m));

    /* After the captures, allocations work as before. */
    CUdeviceptr p;
    printf("after.alloc\t%d\n", (int)cuMemAlloc(&p, 1 * MiB));
    CHECK(cuMemFree(p));
    return 0;
}
