/* nvtx_cost: what an NVTX range pair costs the program, for scripts/nvtx-cost.sh (issue 55:
 * "a range pair at most 200 ns, measured"). Built with NVIDIA's nvtx3 headers (header-only; the
 * `nvidia-nvtx` wheel's nvidia/<cu>/include); it reaches the driver (the simulated one under
 * the script) by dlopen, for one allocation before the ranges, as a program's first CUDA work
 * comes before its loop's ranges (the shim starts its history's thread at the first).
 *
 *   nvtx_cost [PAIRS]      (PAIRS: 1000000 unless given)
 *
 * Two kinds of pair:
 *
 *   pushA        nvtxRangePushA("step") + nvtxRangePop()
 *   registered   nvtxDomainRangePushEx (a string registered in the domain "cost") +
 *                nvtxDomainRangePop()
 *
 * each timed two ways (after as many pairs again to warm up: the first NVTX call loads the tool
 * NVTX_INJECTION64_PATH names, if any), printed as one line each, ns per pair:
 *
 *   KIND NS           PAIRS pairs back to back: under the shim, the history's writer's pace
 *                     (a thread's ring holds 16,384 records; a full one waits for the drain)
 *   KIND-bursts NS    BURSTS bursts of BURST pairs, 10 ms apart (the writer drains between),
 *                     the median burst's: what the program's thread itself pays for a pair
 *
 * With no tool, each is the headers' no-op; under `cuguard run` the shim is the tool and each
 * pair is two records of the program's history (a phase). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define BURST 2000
#define BURSTS 100

#include <nvtx3/nvToolsExt.h>

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void push_a(long pairs) {
    for (long i = 0; i < pairs; i++) {
        nvtxRangePushA("step");
        nvtxRangePop();
    }
}

static void registered(nvtxDomainHandle_t domain, nvtxStringHandle_t name, long pairs) {
    nvtxEventAttributes_t a = {0};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = name;
    for (long i = 0; i < pairs; i++) {
        nvtxDomainRangePushEx(domain, &a);
        nvtxDomainRangePop(domain);
    }
}

/* One 1 MiB allocation through the driver, freed; 0 when done. */
static int first_allocation(void) {
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) {
        fprintf(stderr, "nvtx_cost: %s\n", dlerror());
        return 1;
    }
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(cuda, "cuInit");
    int (*device_get)(int *, int) = (int (*)(int *, int))dlsym(cuda, "cuDeviceGet");
    int (*retain)(void **, int) = (int (*)(void **, int))dlsym(cuda, "cuDevicePrimaryCtxRetain");
    int (*set_current)(void *) = (int (*)(void *))dlsym(cuda, "cuCtxSetCurrent");
    int (*mem_alloc)(unsigned long long *, size_t) =
        (int (*)(unsigned long long *, size_t))dlsym(cuda, "cuMemAlloc_v2");
    int (*mem_free)(unsigned long long) = (int (*)(unsigned long long))dlsym(cuda, "cuMemFree_v2");
    if (!init || !device_get || !retain || !set_current || !mem_alloc || !mem_free) return 1;
    int device;
    void *context;
    unsigned long long p;
    if (init(0) || device_get(&device, 0) || retain(&context, device) || set_current(context))
        return 1;
    return mem_alloc(&p, 1 << 20) || mem_free(p);
}

static int by_value(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Both kinds timed in bursts: ns per pair of each, in the median burst. */
static void bursts(nvtxDomainHandle_t domain, nvtxStringHandle_t name, double *a, double *r) {
    static uint64_t in_a[BURSTS], in_r[BURSTS];
    for (int b = 0; b < BURSTS; b++) {
        uint64_t t0 = now_ns();
        push_a(BURST);
        uint64_t t1 = now_ns();
        usleep(10 * 1000);
        uint64_t t2 = now_ns();
        registered(domain, name, BURST);
        uint64_t t3 = now_ns();
        usleep(10 * 1000);
        in_a[b] = t1 - t0;
        in_r[b] = t3 - t2;
    }
    qsort(in_a, BURSTS, sizeof in_a[0], by_value);
    qsort(in_r, BURSTS, sizeof in_r[0], by_value);
    *a = (double)in_a[BURSTS / 2] / BURST;
    *r = (double)in_r[BURSTS / 2] / BURST;
}

int main(int argc, char **argv) {
    long pairs = argc > 1 ? atol(argv[1]) : 1000000;
    if (pairs <= 0) {
        fprintf(stderr, "nvtx_cost: PAIRS must be positive\n");
        return 2;
    }
    if (first_allocation()) {
        fprintf(stderr, "nvtx_cost: the driver's first allocation failed\n");
        return 1;
    }
    nvtxDomainHandle_t domain = nvtxDomainCreateA("cost");
    nvtxStringHandle_t name = nvtxDomainRegisterStringA(domain, "step");

    push_a(pairs);
    uint64_t t0 = now_ns();
    push_a(pairs);
    uint64_t t1 = now_ns();
    printf("pushA %.1f\n", (double)(t1 - t0) / (double)pairs);

    registered(domain, name, pairs);
    t0 = now_ns();
    registered(domain, name, pairs);
    t1 = now_ns();
    printf("registered %.1f\n", (double)(t1 - t0) / (double)pairs);

    double a, r;
    bursts(domain, name, &a, &r);
    printf("pushA-bursts %.1f\nregistered-bursts %.1f\n", a, r);
    nvtxDomainDestroy(domain);
    return 0;
}
