/* keeps: keeps one device block, allocated in a function of its own, and prints its address.
 * It reaches the driver as cudarc does, by dlopen and dlsym (no link to libcuda), so it needs
 * nothing but a C compiler. Built by tests/python/test_distribution.py with -g -O0, and run
 * under `cuguard run --driver sim`: the leak's site must be the marked line. */
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

static CUresult (*mem_alloc)(CUdeviceptr *, size_t);

static __attribute__((noinline)) CUdeviceptr keep(size_t bytes) {
    CUdeviceptr block = 0;
    if (mem_alloc(&block, bytes) != 0) return 0; /* kept */
    return block;
}

int main(void) {
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) {
        fprintf(stderr, "keeps: %s\n", dlerror());
        return 1;
    }
    CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(cuda, "cuInit");
    CUresult (*device_get)(CUdevice *, int) = (CUresult(*)(CUdevice *, int))dlsym(cuda, "cuDeviceGet");
    CUresult (*retain)(CUcontext *, CUdevice) =
        (CUresult(*)(CUcontext *, CUdevice))dlsym(cuda, "cuDevicePrimaryCtxRetain");
    CUresult (*set_current)(CUcontext) = (CUresult(*)(CUcontext))dlsym(cuda, "cuCtxSetCurrent");
    mem_alloc = (CUresult(*)(CUdeviceptr *, size_t))dlsym(cuda, "cuMemAlloc_v2");
    if (!init || !device_get || !retain || !set_current || !mem_alloc) return 1;
    CUdevice device;
    CUcontext context;
    if (init(0) || device_get(&device, 0) || retain(&context, device) || set_current(context)) return 1;
    CUdeviceptr block = keep(1 << 20);
    if (!block) return 1;
    printf("0x%llx\n", block);
    return 0;
}
