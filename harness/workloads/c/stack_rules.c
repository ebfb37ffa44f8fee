/* stack_rules: the unwinder's rules outlive a library loaded later, and one thread's serve
 * another's (tests/it/stack.rs). Each phase ends with a snapshot through the in-process API
 * (`cuguard_snapshot`), DIR/<phase>.json, whose `cost.unwind` counts the rules evaluated so far:
 *
 *   1  the main thread: 20 pairs from site() (through chain_2 → chain_1 → chain_0)
 *   2  LIBRARY dlopened and one block allocated through its late_entry: a module the unwinder
 *      did not know, so the module list is read again
 *   3  the main thread: 20 pairs from site() again (every rule known: none evaluated)
 *   4  thread A: 20 pairs from worker()
 *   5  thread B, the same function: 20 pairs (every rule known from A: none evaluated)
 *
 *     stack_rules LIBRARY DIR
 *
 * Prints `ok` when every call succeeded. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "cusim.h"

static const char *dir;
static CUcontext ctx;
static volatile int sink;

static int snapshot(int phase) {
    int (*snap)(const char *, char **) = (int (*)(const char *, char **))dlsym(RTLD_DEFAULT, "cuguard_snapshot");
    void (*release)(char *) = (void (*)(char *))dlsym(RTLD_DEFAULT, "cuguard_free");
    if (!snap || !release) return 1;
    char path[4096], *json = NULL;
    snprintf(path, sizeof path, "%s/%d.json", dir, phase);
    int r = snap(path, &json);
    release(json);
    return r != 0;
}

static __attribute__((noinline)) int chain_0(void) {
    CUdeviceptr p;
    int r = cuMemAlloc(&p, 4096);
    if (r == CUDA_SUCCESS) r = cuMemFree(p);
    sink += r;
    return r;
}

static __attribute__((noinline)) int chain_1(void) {
    int r = chain_0();
    sink += 1;
    return r;
}

static __attribute__((noinline)) int chain_2(void) {
    int r = chain_1();
    sink += 2;
    return r;
}

static __attribute__((noinline)) int site(void) {
    int bad = 0;
    for (int i = 0; i < 20; i++) bad |= chain_2();
    return bad;
}

static void *worker(void *arg) {
    (void)arg;
    if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) return (void *)1;
    return site() ? (void *)1 : NULL;
}

static int on_thread(void) {
    pthread_t t;
    void *bad = (void *)1;
    if (pthread_create(&t, NULL, worker, NULL) != 0) return 1;
    pthread_join(t, &bad);
    return bad != NULL;
}

static int load_late(const char *path) {
    void *lib = dlopen(path, RTLD_NOW);
    int (*late_entry)(CUdeviceptr *, size_t) = lib ? (int (*)(CUdeviceptr *, size_t))dlsym(lib, "late_entry") : NULL;
    CUdeviceptr late;
    return !late_entry || late_entry(&late, 1 << 20) != CUDA_SUCCESS;
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    dir = argv[2];
    CUdevice dev;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return 1;
    /* One call site for each of site() and on_thread(): a phase meets the same return
     * addresses as the one before it, all the way out to main. */
    for (int phase = 1; phase <= 5; phase++) {
        int bad;
        if (phase == 2)
            bad = load_late(argv[1]);
        else if (phase <= 3)
            bad = site();
        else
            bad = on_thread();
        if (bad || snapshot(phase)) return 1;
    }
    puts("ok");
    return 0;
}
