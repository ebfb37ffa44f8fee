/* sim_threads: a multi-threaded stress of the simulated driver. THREADS threads share the primary
 * context and, ROUNDS times each, allocate (cuMemAlloc, pitched, async on the per-thread stream,
 * async on their own stream), fill their memory with a value of their own, copy it back and
 * check every byte, and free. Another thread synchronises the context in a loop meanwhile, and
 * one creates and destroys contexts of its own.
 * Prints "mismatches N", "failures N" and the driver's usage at the end ("usage BYTES COUNT"),
 * which must be 0 0. */
#include "cusim.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 8
#define ROUNDS 200

static CUcontext primary;
static int failures, mismatches;
static volatile int done;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void fail(const char *what, CUresult r) {
    pthread_mutex_lock(&lock);
    if (failures++ < 10) fprintf(stderr, "%s returned %d\n", what, (int)r);
    pthread_mutex_unlock(&lock);
}

#define T(expr)                      \
    do {                             \
        CUresult r_ = (expr);        \
        if (r_ != CUDA_SUCCESS) {    \
            fail(#expr, r_);         \
            goto next;               \
        }                            \
    } while (0)

static void check(const unsigned char *buf, size_t n, unsigned char v) {
    for (size_t i = 0; i < n; i++)
        if (buf[i] != v) {
            pthread_mutex_lock(&lock);
            mismatches++;
            pthread_mutex_unlock(&lock);
            return;
        }
}

static void *worker(void *arg) {
    int id = (int)(long)arg;
    unsigned int seed = 1234u + id;
    CUstream own;
    unsigned char *host = malloc(1 << 18);
    if (cuCtxSetCurrent(primary) != CUDA_SUCCESS || cuStreamCreate(&own, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        fail("setup", CUDA_ERROR_UNKNOWN);
        return NULL;
    }
    for (int round = 0; round < ROUNDS; round++) {
        size_t n = 1 + rand_r(&seed) % (1 << 18);
        unsigned char v = (unsigned char)(id * 31 + round);
        CUdeviceptr d = 0;
        size_t pitch;
        switch (round % 4) {
        case 0:
            T(cuMemAlloc(&d, n));
            T(cuMemsetD8(d, v, n));
            T(cuMemcpyDtoH(host, d, n));
            check(host, n, v);
            T(cuMemFree(d));
            break;
        case 1:
            T(cuMemAllocPitch(&d, &pitch, n / 8 + 1, 8, 4));
            T(cusimEnqueueFill(CU_STREAM_PER_THREAD, d, pitch * 8, v, 0));
            T(cuMemcpyDtoH_v2_ptds(host, d, pitch * 8));
            check(host, pitch * 8, v);
            T(cuMemFree(d));
            break;
        case 2:
            T(cuMemAllocAsync_ptsz(&d, n, 0));
            T(cuMemsetD8Async_ptsz(d, v, n, 0));
            T(cuMemcpyDtoHAsync_v2_ptsz(host, d, n, 0));
            check(host, n, v);
            T(cuMemFreeAsync_ptsz(d, 0));
            break;
        case 3:
            T(cuMemAllocAsync(&d, n, own));
            T(cusimEnqueueFill(own, d, n, v, rand_r(&seed) % 50));
            T(cuMemcpyDtoHAsync(host, d, n, own));
            check(host, n, v);
            T(cuMemFreeAsync(d, own));
            break;
        }
    next:;
    }
    cuStreamSynchronize(own);
    cuStreamDestroy(own);
    free(host);
    return NULL;
}

static void *syncer(void *arg) {
    (void)arg;
    cuCtxSetCurrent(primary);
    while (!done) {
        CUresult r = cuCtxSynchronize();
        if (r != CUDA_SUCCESS) fail("cuCtxSynchronize", r);
    }
    return NULL;
}

static void *churner(void *arg) {
    (void)arg;
    while (!done) {
        CUcontext c;
        CUdeviceptr d;
        CUresult r = cuCtxCreate(&c, NULL, 0, 0);
        if (r != CUDA_SUCCESS) {
            fail("cuCtxCreate", r);
            continue;
        }
        if ((r = cuMemAlloc(&d, 4096)) != CUDA_SUCCESS) fail("cuMemAlloc in created", r);
        if ((r = cuCtxDestroy(c)) != CUDA_SUCCESS) fail("cuCtxDestroy", r);
    }
    return NULL;
}

int main(void) {
    CUdevice dev;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&primary, dev)) return 2;
    pthread_t t[THREADS], s, c;
    pthread_create(&s, NULL, syncer, NULL);
    pthread_create(&c, NULL, churner, NULL);
    for (long i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    done = 1;
    pthread_join(s, NULL);
    pthread_join(c, NULL);
    cuCtxSetCurrent(primary);
    cuCtxSynchronize();
    size_t bytes = 1, count = 1;
    cusimGetUsage(0, &bytes, &count);
    printf("mismatches\t%d\nfailures\t%d\nusage\t%zu %zu\n", mismatches, failures, bytes, count);
    return 0;
}
