/* c10_stand_in: a stand-in for PyTorch's libc10.so, for the cache-block tests
 * (tests/it/torch_blocks.rs): it defines c10::reportMemoryUsageToProfiler, which PyTorch's CUDA
 * caching allocator calls for every block it hands out (+size) and takes back (-size), with
 * PyTorch's signature (so its mangled name is PyTorch's), and counts the calls it receives: the
 * shim, preloaded, takes them first and must forward every one.
 *
 *     extern "C" long c10_stand_in_calls(void);   // calls received so far
 *
 * Build: c++ -O0 -g -shared -fPIC -Wl,-soname,libc10.so -o libc10.so c10_stand_in.cc
 * (-DC10_REPORT_CHANGED: the call as a PyTorch that changed it, c10_report.h) */
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "c10_report.h"

namespace c10 {
static std::atomic<long> calls{0};

void reportMemoryUsageToProfiler(void *ptr, int64_t alloc_size, size_t total_allocated,
                                 size_t total_reserved, Device device C10_REPORT_MORE) {
    (void)ptr;
    (void)alloc_size;
    (void)total_allocated;
    (void)total_reserved;
    (void)device;
    calls.fetch_add(1);
}
}  // namespace c10

extern "C" long c10_stand_in_calls(void) { return c10::calls.load(); }
