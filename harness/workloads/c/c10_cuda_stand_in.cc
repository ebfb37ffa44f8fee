/* c10_cuda_stand_in: a stand-in for PyTorch's libc10_cuda.so, for the cache-block tests
 * (tests/it/torch_blocks.rs): a caching allocator with PyTorch's names that takes segments
 * from the driver (cuMemAlloc, at least 2 MiB), carves blocks from them (sizes rounded up to
 * 512 bytes, first fit, split, merged again when freed), keeps freed blocks for reuse, gives
 * empty segments back on empty_cache, and reports every block handed out and freed to
 * c10::reportMemoryUsageToProfiler (libc10.so, c10_stand_in.cc), as PyTorch's does. Python
 * loads it with ctypes (a library scope of its own, as Python loads PyTorch's).
 *
 * With PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, as PyTorch's: one segment, an address
 * range reserved once (cuMemAddressReserve, 1 GiB) into which 2 MiB pages of physical memory
 * (cuMemCreate) are mapped (cuMemMap, cuMemSetAccess) as the cache grows, a block spanning
 * pages where it needs to; empty_cache unmaps and releases the free pages at its end.
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
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <vector>

#include "c10_report.h"
#include "cusim.h"

namespace c10 {
namespace cuda {
namespace CUDACachingAllocator {
namespace Native {

const size_t kRound = 512;
const size_t kSegment = 2 << 20;
const size_t kReserve = size_t(1) << 30;

bool expandable_asked() {
    const char *conf = getenv("PYTORCH_CUDA_ALLOC_CONF");
    return conf && strstr(conf, "expandable_segments:True");
}

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
    // The expandable segment: its range, the bytes mapped at its start, each page's handle.
    bool expandable = expandable_asked();
    CUdeviceptr range = 0;
    size_t mapped = 0;
    std::vector<CUmemGenericAllocationHandle> pages;

    __attribute__((noinline)) CUdeviceptr malloc(size_t bytes);
    __attribute__((noinline)) void free(CUdeviceptr p);
    __attribute__((noinline)) int emptyCache();
    __attribute__((noinline)) bool alloc_block(size_t size);
    __attribute__((noinline)) bool map_more(size_t size);
    int unmap_free_end();
};

// The expandable segment grows by the pages `size` needs beyond the free block at its end.
bool DeviceCachingAllocator::map_more(size_t size) {
    if (range == 0) {
        if (cuMemAddressReserve(&range, kReserve, kSegment, 0, 0) != CUDA_SUCCESS) return false;
        segments[range] = 0;
    }
    size_t tail = 0;
    if (!blocks.empty()) {
        auto last = std::prev(blocks.end());
        if (!last->second.used && last->first + last->second.size == range + mapped)
            tail = last->second.size;
    }
    size_t grow = (size - tail + kSegment - 1) / kSegment * kSegment;
    if (mapped + grow > kReserve) return false;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemAccessDesc access;
    memset(&access, 0, sizeof access);
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    // As PyTorch's ExpandableSegment::map: every page made first, then each mapped; a page
    // refused gives back the ones made for this growth.
    std::vector<CUmemGenericAllocationHandle> made;
    for (size_t done = 0; done < grow; done += kSegment) {
        CUmemGenericAllocationHandle h = 0;
        if (cuMemCreate(&h, kSegment, &prop, 0) != CUDA_SUCCESS) {
            for (auto m : made) cuMemRelease(m);
            return false;
        }
        made.push_back(h);
    }
    size_t start = mapped;
    for (auto h : made) {
        if (cuMemMap(range + mapped, kSegment, 0, h, 0) != CUDA_SUCCESS ||
            cuMemSetAccess(range + mapped, kSegment, &access, 1) != CUDA_SUCCESS) {
            cuMemRelease(h);
            continue;
        }
        pages.push_back(h);
        mapped += kSegment;
    }
    size_t added = mapped - start;
    if (added == 0) return false;
    reserved += added;
    segments[range] = mapped;
    if (tail > 0)
        std::prev(blocks.end())->second.size += added;
    else
        blocks[range + start] = Block{added, false};
    return added >= size - tail;
}

// Unmaps and releases the whole pages of the free block at the expandable segment's end.
int DeviceCachingAllocator::unmap_free_end() {
    if (blocks.empty() || mapped == 0) return 0;
    auto last = std::prev(blocks.end());
    if (last->second.used || last->first + last->second.size != range + mapped) return 0;
    size_t keep = (last->first - range + kSegment - 1) / kSegment * kSegment;
    int given = 0;
    while (mapped > keep) {
        mapped -= kSegment;
        cuMemUnmap(range + mapped, kSegment);
        cuMemRelease(pages.back());
        pages.pop_back();
        reserved -= kSegment;
        given++;
    }
    if (range + mapped > last->first)
        last->second.size = range + mapped - last->first;
    else
        blocks.erase(last);
    segments[range] = mapped;
    return given;
}

bool DeviceCachingAllocator::alloc_block(size_t size) {
    if (expandable) return map_more(size);
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
    if (expandable) return unmap_free_end();
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
