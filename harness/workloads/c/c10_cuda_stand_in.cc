/* c10_cuda_stand_in: a stand-in for PyTorch's libc10_cuda.so, for the cache-block tests
 * (tests/it/torch_blocks.rs): a caching allocator with PyTorch's names that takes segments
 * from the driver (cuMemAlloc, at least 2 MiB), carves blocks from them (sizes rounded up to
 * 512 bytes, first fit, split, merged again when freed), keeps freed blocks for reuse, gives
 * empty segments back on empty_cache, and reports every block handed out and freed to
 * c10::reportMemoryUsageToProfiler (libc10.so, c10_stand_in.cc), as PyTorch's does. Python
 * loads it with ctypes (a library scope of its own, as Python loads PyTorch's).
 *
 *     extern "C" unsigned long long stand_in_alloc(size_t bytes);  // the block, 0 on failure
 *     extern "C" void stand_in_free(unsigned long long ptr);
 *     extern "C" int stand_in_empty_cache(void);                     // segments given back
 *     extern "C" unsigned long long stand_in_reserved(void);         // bytes in segments
 *     extern "C" void stand_in_report(unsigned long long ptr, long long size);  // another's block
 *
 * Build: c++ -O0 -g -shared -fPIC -o libc10_cuda.so c10_cuda_stand_in.cc -L. -lc10
 *        -Wl,-rpath,'$ORIGIN' -L<simcuda> -lcuda */
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <mutex>

#include "c10_report.h"
#include "cusim.h"

namespace c10 {
namespace cuda {
namespace CUDACachingAllocator {
namespace Native {

const size_t kRound = 512;
const size_t kSegment = 2 << 20;

struct Block {
    size_t size;
    bool used;
};

struct DeviceCachingAllocator {
    std::mutex mutex;
    // Segments by base (their sizes), blocks by address.
    std::map<CUdeviceptr, size_t> segments;
    std::map<CUdeviceptr, Block> blocks;
    size_t allocated = 0;
    size_t reserved = 0;

    __attribute__((noinline)) CUdeviceptr malloc(size_t bytes);
    __attribute__((noinline)) void free(CUdeviceptr p);
    __attribute__((noinline)) int emptyCache();
    __attribute__((noinline)) bool alloc_block(size_t size);
};

bool DeviceCachingAllocator::alloc_block(size_t size) {
    size_t seg = size < kSegment ? kSegment : (size + kSegment - 1) / kSegment * kSegment;
    CUdeviceptr base = 0;
    if (cuMemAlloc(&base, seg) != CUDA_SUCCESS) return false;
    segments[base] = seg;
    blocks[base] = Block{seg, false};
    reserved += seg;
    return true;
}

CUdeviceptr DeviceCachingAllocator::malloc(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex);
    size_t size = bytes == 0 ? kRound : (bytes + kRound - 1) / kRound * kRound;
    for (int tries = 0; tries < 2; tries++) {
        for (auto &b : blocks) {
            if (b.second.used || b.second.size < size) continue;
            CUdeviceptr p = b.first;
            size_t rest = b.second.size - size;
            b.second = Block{size, true};
            if (rest > 0) blocks[p + size] = Block{rest, false};
            allocated += size;
            reportMemoryUsageToProfiler(reinterpret_cast<void *>(p), int64_t(size), allocated,
                                        reserved, Device{1, 0} C10_REPORT_MORE_ARG);
            return p;
        }
        if (!alloc_block(size)) return 0;
    }
    return 0;
}

void DeviceCachingAllocator::free(CUdeviceptr p) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = blocks.find(p);
    if (it == blocks.end() || !it->second.used) return;
    it->second.used = false;
    allocated -= it->second.size;
    reportMemoryUsageToProfiler(reinterpret_cast<void *>(p), -int64_t(it->second.size), allocated,
                                reserved, Device{1, 0} C10_REPORT_MORE_ARG);
    // Merge with the free block after it and before it, inside one segment.
    auto next = std::next(it);
    if (next != blocks.end() && !next->second.used && segments.count(next->first) == 0 &&
        it->first + it->second.size == next->first) {
        it->second.size += next->second.size;
        blocks.erase(next);
    }
    if (it != blocks.begin() && segments.count(it->first) == 0) {
        auto prev = std::prev(it);
        if (!prev->second.used && prev->first + prev->second.size == it->first) {
            prev->second.size += it->second.size;
            blocks.erase(it);
        }
    }
}

int DeviceCachingAllocator::emptyCache() {
    std::lock_guard<std::mutex> lock(mutex);
    int given = 0;
    for (auto s = segments.begin(); s != segments.end();) {
        auto b = blocks.find(s->first);
        if (b != blocks.end() && !b->second.used && b->second.size == s->second) {
            cuMemFree(s->first);
            reserved -= s->second;
            blocks.erase(b);
            s = segments.erase(s);
            given++;
        } else {
            ++s;
        }
    }
    return given;
}

DeviceCachingAllocator *allocator() {
    static DeviceCachingAllocator *a = [] {
        CUcontext ctx = nullptr;
        cuInit(0);
        cuDevicePrimaryCtxRetain(&ctx, 0);
        cuCtxSetCurrent(ctx);
        return new DeviceCachingAllocator();
    }();
    return a;
}

}  // namespace Native
}  // namespace CUDACachingAllocator
}  // namespace cuda
}  // namespace c10

using c10::cuda::CUDACachingAllocator::Native::allocator;

extern "C" unsigned long long stand_in_alloc(size_t bytes) { return allocator()->malloc(bytes); }
extern "C" void stand_in_free(unsigned long long p) { allocator()->free(p); }
extern "C" int stand_in_empty_cache(void) { return allocator()->emptyCache(); }
extern "C" unsigned long long stand_in_reserved(void) { return allocator()->reserved; }
// For an allocator written elsewhere (the Python stand-in of harness/workloads/python/
// standin_torch/): reports one block it handed out (size > 0) or took back (size < 0), as
// PyTorch's allocator does, through this library's call to libc10.so.
extern "C" void stand_in_report(unsigned long long p, long long size) {
    c10::reportMemoryUsageToProfiler(reinterpret_cast<void *>(p), int64_t(size), 0, 0,
                                     c10::Device{1, 0} C10_REPORT_MORE_ARG);
}
