/* stack_sites: allocations whose call stacks the test knows. It keeps one block allocated from a
 * static function called by main, and one from a thread's start routine, and prints, per block,
 * its address and the [start, end) file offsets of the code that made the cuMemAlloc call
 * (from the function's entry to a label just after the call) and of its caller's call:
 *
 *   static 0x<addr> <start> <end> <caller start> <caller end>
 *   thread 0x<addr> <start> <end>
 *
 * Offsets are relative to the program's load bias (what the report's frames carry). */
#define _GNU_SOURCE
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "cusim.h"

static uintptr_t base;

static int first_module(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    base = info->dlpi_addr; /* the main program comes first */
    return 1;
}

static uintptr_t off(void *p) { return (uintptr_t)p - base; }

static CUdeviceptr static_block;
static uintptr_t static_end;

static __attribute__((noinline)) void static_site(void) {
    if (cuMemAlloc(&static_block, 4096) != CUDA_SUCCESS) return;
after:
    static_end = off(&&after);
}

static CUdeviceptr thread_block;
static uintptr_t thread_end;

static void *thread_start(void *arg) {
    if (cuCtxSetCurrent((CUcontext)arg) != CUDA_SUCCESS) return NULL;
    if (cuMemAlloc(&thread_block, 8192) != CUDA_SUCCESS) return NULL;
after:
    thread_end = off(&&after);
    return NULL;
}

int main(void) {
    dl_iterate_phdr(first_module, NULL);
    if (cuInit(0) != CUDA_SUCCESS) return 1;
    CUdevice dev;
    CUcontext ctx;
    if (cuDeviceGet(&dev, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return 1;
    static_site();
after_static:;
    uintptr_t main_end = off(&&after_static);
    pthread_t t;
    pthread_create(&t, NULL, thread_start, ctx);
    pthread_join(t, NULL);
    if (!static_block || !thread_block) return 1;
    printf("static 0x%llx %lx %lx %lx %lx\n", (unsigned long long)static_block, (unsigned long)off((void *)static_site),
           (unsigned long)static_end, (unsigned long)off((void *)main), (unsigned long)main_end);
    printf("thread 0x%llx %lx %lx\n", (unsigned long long)thread_block, (unsigned long)off((void *)thread_start),
           (unsigned long)thread_end);
    return 0;
}
