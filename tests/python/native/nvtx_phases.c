/* nvtx_phases: a training loop marked with NVTX ranges through NVIDIA's own headers (nvtx3,
 * header-only, from the `nvidia-nvtx` wheel), for `cuguard summary --by phase`. It reaches the
 * driver by dlopen and dlsym, as keeps.c does. Built by tests/python/test_phases.py with -g -O0
 * and run under `cuguard run --driver sim`, which makes the shim NVTX's tool.
 *
 *   load          pushed (nvtxRangePushA): 64 MiB kept to the end (load_site)
 *   epoch         started (nvtxRangeStartA) around the three steps, ended after them
 *   step #1..#3   pushed in domain "train" (nvtxDomainRangePushEx): a temporary of 32 MiB x i
 *                 (temp_site), inside it "forward" (nvtxRangePushW) with 16 MiB made and freed,
 *                 then 8 MiB kept (keep_site), then the temporary freed
 *
 * So step #i begins with 64 + 8(i-1) MiB live, peaks at 64 + 8(i-1) + 32i + 16 MiB (112, 152,
 * 192), allocates 32i + 24 MiB in 3 allocations and keeps 8 MiB. */
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <wchar.h>

#include <nvtx3/nvToolsExt.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

#define MIB (1ull << 20)

static CUresult (*mem_alloc)(CUdeviceptr *, size_t);
static CUresult (*mem_free)(CUdeviceptr);

static __attribute__((noinline)) CUdeviceptr load_site(size_t bytes) {
    CUdeviceptr p = 0;
    return mem_alloc(&p, bytes) ? 0 : p;
}

static __attribute__((noinline)) CUdeviceptr temp_site(size_t bytes) {
    CUdeviceptr p = 0;
    return mem_alloc(&p, bytes) ? 0 : p;
}

static __attribute__((noinline)) CUdeviceptr keep_site(size_t bytes) {
    CUdeviceptr p = 0;
    return mem_alloc(&p, bytes) ? 0 : p;
}

int main(void) {
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) {
        fprintf(stderr, "nvtx_phases: %s\n", dlerror());
        return 1;
    }
    CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(cuda, "cuInit");
    CUresult (*device_get)(CUdevice *, int) = (CUresult(*)(CUdevice *, int))dlsym(cuda, "cuDeviceGet");
    CUresult (*retain)(CUcontext *, CUdevice) =
        (CUresult(*)(CUcontext *, CUdevice))dlsym(cuda, "cuDevicePrimaryCtxRetain");
    CUresult (*set_current)(CUcontext) = (CUresult(*)(CUcontext))dlsym(cuda, "cuCtxSetCurrent");
    mem_alloc = (CUresult(*)(CUdeviceptr *, size_t))dlsym(cuda, "cuMemAlloc_v2");
    mem_free = (CUresult(*)(CUdeviceptr))dlsym(cuda, "cuMemFree_v2");
    if (!init || !device_get || !retain || !set_current || !mem_alloc || !mem_free) return 1;
    CUdevice device;
    CUcontext context;
    if (init(0) || device_get(&device, 0) || retain(&context, device) || set_current(context)) return 1;

    nvtxRangePushA("load");
    if (!load_site(64 * MIB)) return 1;
    nvtxRangePop();

    nvtxDomainHandle_t train = nvtxDomainCreateA("train");
    nvtxRangeId_t epoch = nvtxRangeStartA("epoch");
    for (int i = 1; i <= 3; i++) {
        nvtxEventAttributes_t a = {0};
        a.version = NVTX_VERSION;
        a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
        a.messageType = NVTX_MESSAGE_TYPE_ASCII;
        a.message.ascii = "step";
        nvtxDomainRangePushEx(train, &a);
        CUdeviceptr temp = temp_site((size_t)i * 32 * MIB);
        if (!temp) return 1;
        nvtxRangePushW(L"forward");
        CUdeviceptr act = temp_site(16 * MIB);
        if (!act || mem_free(act)) return 1;
        nvtxRangePop();
        if (!keep_site(8 * MIB)) return 1;
        if (mem_free(temp)) return 1;
        nvtxDomainRangePop(train);
    }
    nvtxRangeEnd(epoch);
    return 0;
}
