/* history_spike: a run whose middle matters, for `cuguard summary --at` and `--between`.
 *
 *   calm     1 MiB allocated and freed every 10 ms, for 300 ms
 *   spike    one 512 MiB buffer (spike_site), held for 300 ms, freed
 *   calm     300 ms again
 *   loop     5 iterations, 40 ms each: a 2 MiB temporary (scratch_site) allocated and freed,
 *            and one 4 MiB buffer kept (keep_site)
 *
 * It prints one JSON object with the wall-clock moments (Unix ms, CLOCK_REALTIME) of each part
 * and the source lines of the three sites:
 *
 *   {"spike": [from, to], "iterations": [[from, to], ...], "lines": {"spike": L, ...}}
 *
 * With the argument `hang`, it then prints `ready <unix ms>` and sleeps for a minute (to be
 * killed). Built by the tests with -g -O0. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cusim.h"

#define CHECK(x)                                                              \
    do {                                                                      \
        CUresult r_ = (x);                                                    \
        if (r_ != CUDA_SUCCESS) {                                             \
            fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, (int)r_); \
            return 1;                                                         \
        }                                                                     \
    } while (0)

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms) { usleep(ms * 1000); }

static int spike_line, scratch_line, keep_line, calm_line;

static __attribute__((noinline)) int calm(int ms) {
    long long end = now_ms() + ms;
    while (now_ms() < end) {
        CUdeviceptr p;
        if (cuMemAlloc(&p, 1 << 20) != CUDA_SUCCESS) return 1;
        calm_line = __LINE__ - 1;
        if (cuMemFree(p) != CUDA_SUCCESS) return 1;
        sleep_ms(10);
    }
    return 0;
}

static __attribute__((noinline)) CUdeviceptr spike_site(void) {
    CUdeviceptr p = 0;
    if (cuMemAlloc(&p, (size_t)512 << 20) == CUDA_SUCCESS) spike_line = __LINE__;
    return p;
}

static __attribute__((noinline)) CUdeviceptr scratch_site(void) {
    CUdeviceptr p = 0;
    if (cuMemAlloc(&p, 2 << 20) == CUDA_SUCCESS) scratch_line = __LINE__;
    return p;
}

static __attribute__((noinline)) CUdeviceptr keep_site(void) {
    CUdeviceptr p = 0;
    if (cuMemAlloc(&p, 4 << 20) == CUDA_SUCCESS) keep_line = __LINE__;
    return p;
}

int main(int argc, char **argv) {
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    if (calm(300)) return 1;
    CUdeviceptr big = spike_site();
    if (!big) return 1;
    long long spike_from = now_ms();
    sleep_ms(300);
    long long spike_to = now_ms();
    CHECK(cuMemFree(big));
    if (calm(300)) return 1;
    long long iters[5][2];
    CUdeviceptr kept[5];
    for (int i = 0; i < 5; i++) {
        iters[i][0] = now_ms();
        CUdeviceptr tmp = scratch_site();
        kept[i] = keep_site();
        if (!tmp || !kept[i]) return 1;
        sleep_ms(20);
        CHECK(cuMemFree(tmp));
        sleep_ms(20);
        iters[i][1] = now_ms();
    }
    printf("{\"spike\": [%lld, %lld], \"iterations\": [", spike_from, spike_to);
    for (int i = 0; i < 5; i++) printf("%s[%lld, %lld]", i ? ", " : "", iters[i][0], iters[i][1]);
    printf("], \"lines\": {\"spike\": %d, \"scratch\": %d, \"keep\": %d, \"calm\": %d}}\n",
           spike_line, scratch_line, keep_line, calm_line);
    if (argc > 1 && strcmp(argv[1], "hang") == 0) {
        printf("ready %lld\n", now_ms());
        fflush(stdout);
        sleep(60);
    }
    for (int i = 0; i < 5; i++) CHECK(cuMemFree(kept[i]));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
