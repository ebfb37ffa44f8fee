/* c10_report.h: the call PyTorch's CUDA caching allocator makes for every block, as the two
 * stand-ins (c10_stand_in.cc defines it, c10_cuda_stand_in.cc calls it) share it.
 *
 * Built with -DC10_REPORT_CHANGED, the call takes one more argument, so its mangled name is
 * another: a PyTorch that changed it, whose blocks cuguard's hook never receives. */
#ifndef C10_REPORT_H
#define C10_REPORT_H

#include <cstddef>
#include <cstdint>

#ifdef C10_REPORT_CHANGED
#define C10_REPORT_MORE , bool from_graph
#define C10_REPORT_MORE_ARG , false
#else
#define C10_REPORT_MORE
#define C10_REPORT_MORE_ARG
#endif

namespace c10 {
struct Device {
    int8_t type;
    int8_t index;
};
void reportMemoryUsageToProfiler(void *ptr, int64_t alloc_size, size_t total_allocated,
                                 size_t total_reserved, Device device C10_REPORT_MORE);
}  // namespace c10

#endif
