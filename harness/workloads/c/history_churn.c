/* history_churn: many events from many threads, for the history's bounds and losses.
 *
 *   history_churn THREADS BATCHES PAIRS [KEEP]
 *
 * runs BATCHES batches of THREADS threads at once (THREADS x BATCHES short-lived threads in
 * all); each thread makes PAIRS 4 KiB cuMemAlloc + cuMemFree pairs, and the first KEEP threads
 * (default 0) each keep one 1 MiB allocation to the end. It prints
 * `{"threads": N, "pairs": N, "kept": N}`. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "cusim.h"

static CUcontext ctx;
static int pairs;
static int keep;
static int started;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void *worker(void *arg) {
    (void)arg;
    if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) exit(2);
    for (int i = 0; i < pairs; i++) {
        CUdeviceptr p;
        if (cuMemAlloc(&p, 4096) != CUDA_SUCCESS || cuMemFree(p) != CUDA_SUCCESS) exit(3);
    }
    pthread_mutex_lock(&lock);
    int mine = started++;
    pthread_mutex_unlock(&lock);
    if (mine < keep) {
        CUdeviceptr p;
        if (cuMemAlloc(&p, 1 << 20) != CUDA_SUCCESS) exit(4);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: history_churn THREADS BATCHES PAIRS [KEEP]\n");
        return 1;
    }
    int threads = atoi(argv[1]), batches = atoi(argv[2]);
    pairs = atoi(argv[3]);
    keep = argc > 4 ? atoi(argv[4]) : 0;
    CUdevice dev;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return 1;
    pthread_t *t = calloc(threads, sizeof *t);
    for (int b = 0; b < batches; b++) {
        for (int i = 0; i < threads; i++)
            if (pthread_create(&t[i], NULL, worker, NULL)) return 5;
        for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    }
    printf("{\"threads\": %d, \"pairs\": %d, \"kept\": %d}\n", threads * batches,
           threads * batches * pairs, keep < threads * batches ? keep : threads * batches);
    return 0;
}
