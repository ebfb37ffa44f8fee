// nvtx_sequence: the shim's NVTX sequence for one chunk, made with NVIDIA's own nvtx3 headers
// (CUDA 13 ships them: /usr/local/cuda/include/nvtx3/), so that compute-sanitizer's verdict on
// it tells whether the sequence or the shim's hand-written protocol is at fault (issue 24). Run
// by scripts/gpu/sanitizer.sh under compute-sanitizer --tool memcheck, without the shim.
//
// Modes (argv[1]):
//   free      the shim's order for a chunk given back: cuMemAlloc a 2 MiB chunk, heap register
//             (domain "cuguard", SUB_ALLOCATOR, VIRTUAL_ADDRESS), a 1,000-byte region at its
//             start, a kernel writing the region's last byte (correct) and one byte past it (in
//             the red zone: memcheck should report it), region unregister, heap unregister,
//             cuMemFree;
//   live      the same, but the heap unregistered with its region still registered;
//   late      the old shim's order when a context went: the heap unregistered after cuMemFree
//             (compute-sanitizer should refuse it: "One or more of the parameters is invalid");
//   null      the "free" sequence with the default (NULL) domain.
// Prints each step and its result, flushed, so a crash shows where it happened. Build:
// nvcc -O2 -lineinfo -I/usr/local/cuda/include -o nvtx_sequence nvtx_sequence.cu -lcuda
#include <cstdio>
#include <cstring>
#include <cuda.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtMem.h>

__global__ void poke(unsigned char *p, size_t i) { p[i] = 1; }

static void say(const char *what) {
    std::printf("%s\n", what);
    std::fflush(stdout);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "free";
    cudaFree(0); // "Compute Sanitizer requires the CUDA runtime to be initialized before calling NVTX."
    const size_t chunk = 2u << 20, n = 1000;
    CUdeviceptr base = 0;
    CUresult r = cuMemAlloc(&base, chunk);
    std::printf("mode %s: cuMemAlloc -> %d, chunk 0x%llx\n", mode, (int)r, (unsigned long long)base);
    std::fflush(stdout);
    if (r != CUDA_SUCCESS) return 1;

    nvtxDomainHandle_t domain = std::strcmp(mode, "null") ? nvtxDomainCreateA("cuguard") : nullptr;
    std::printf("domain %p\n", (void *)domain);

    nvtxMemVirtualRangeDesc_t range = {};
    range.size = chunk;
    range.ptr = (void *)base;
    nvtxMemHeapDesc_t heap_desc = {};
    heap_desc.extCompatID = NVTX_EXT_COMPATID_MEM;
    heap_desc.structSize = sizeof(heap_desc);
    heap_desc.usage = NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR;
    heap_desc.type = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
    heap_desc.typeSpecificDescSize = sizeof(range);
    heap_desc.typeSpecificDesc = &range;
    heap_desc.messageType = NVTX_MESSAGE_TYPE_ASCII;
    heap_desc.message.ascii = "cuguard pool chunk";
    nvtxMemHeapHandle_t heap = nvtxMemHeapRegister(domain, &heap_desc);
    std::printf("heap register -> %p (sizes: heap desc %zu, register batch %zu, unregister batch %zu)\n",
                (void *)heap, sizeof(nvtxMemHeapDesc_t), sizeof(nvtxMemRegionsRegisterBatch_t),
                sizeof(nvtxMemRegionsUnregisterBatch_t));
    std::fflush(stdout);

    nvtxMemVirtualRangeDesc_t region = {};
    region.size = n;
    region.ptr = (void *)base;
    nvtxMemRegionsRegisterBatch_t reg = {};
    reg.extCompatID = NVTX_EXT_COMPATID_MEM;
    reg.structSize = sizeof(reg);
    reg.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
    reg.heap = heap;
    reg.regionCount = 1;
    reg.regionDescElementSize = sizeof(region);
    reg.regionDescElements = &region;
    nvtxMemRegionsRegister(domain, &reg);
    say("region registered");

    poke<<<1, 1>>>((unsigned char *)base, n - 1);
    std::printf("last byte of the region (correct): %s\n", cudaGetErrorName(cudaDeviceSynchronize()));
    poke<<<1, 1>>>((unsigned char *)base, n);
    std::printf("one past the region (want reported): %s\n", cudaGetErrorName(cudaDeviceSynchronize()));
    std::fflush(stdout);

    if (std::strcmp(mode, "live")) {
        nvtxMemRegionRef_t ref;
        ref.pointer = (void *)base;
        nvtxMemRegionsUnregisterBatch_t unreg = {};
        unreg.extCompatID = NVTX_EXT_COMPATID_MEM;
        unreg.structSize = sizeof(unreg);
        unreg.refType = NVTX_MEM_REGION_REF_TYPE_POINTER;
        unreg.refCount = 1;
        unreg.refElementSize = sizeof(ref);
        unreg.refElements = &ref;
        nvtxMemRegionsUnregister(domain, &unreg);
        say("region unregistered");
    }
    if (!std::strcmp(mode, "late")) {
        std::printf("cuMemFree first -> %d\n", (int)cuMemFree(base));
        std::fflush(stdout);
        nvtxMemHeapUnregister(domain, heap);
        say("heap unregistered after the free");
    } else {
        nvtxMemHeapUnregister(domain, heap);
        say("heap unregistered");
        std::printf("cuMemFree -> %d\n", (int)cuMemFree(base));
    }
    say("done");
    return 0;
}
