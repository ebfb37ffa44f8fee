/* blocks_probe.c: is PyTorch's block-level hook reachable from a preloaded library, and at what
 * cost? (issue 54: tensors in the history.) Built on the GPU machine by scripts/gpu/blocks.sh:
 *   cc -O2 -shared -fPIC -o blocks_probe.so blocks_probe.c -ldl
 *
 * libc10_cuda.so's caching allocator calls c10::reportMemoryUsageToProfiler(ptr, size, total
 * allocated, total reserved, device) for every block it hands out (+size) and every block the
 * program frees (-size), whether or not a profiler runs (the function itself asks whether one
 * does). It is exported by libc10.so and called across libraries, so a preloaded library that
 * exports the same symbol sees every call first. This probe does so, forwards every call to the
 * real function (found in libc10.so itself: torch loads its libraries in a local scope, where
 * RTLD_NEXT does not see them; run 36 looked it up with RTLD_NEXT, found nothing and looked again
 * at every call), and keeps for CUDA blocks: counts, the last EVENTS events (address, signed size),
 * and, when `probe_mode` has bit 0, the Python line that asked (read with the GIL held by the
 * caller: PyGILState_Check, then PyEval_GetFrame). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stddef.h>

typedef struct { int8_t type; int8_t index; } device_t; /* c10::Device: DeviceType, DeviceIndex */
typedef void (*report_fn)(void *, int64_t, size_t, size_t, device_t);

#define EVENTS 65536
uint64_t probe_mode, probe_allocs, probe_frees, probe_other, probe_lines, probe_count;
int64_t probe_last_line;
uint64_t probe_addr[EVENTS];
int64_t probe_size[EVENTS];

static report_fn real_report;
static int looked; /* the real function was looked for (found or not): once */
uint64_t probe_forwarded;
static int (*gil_check)(void);
static void *(*get_frame)(void);
static int (*frame_line)(void *);

static void python_line(void) {
  if (!gil_check) {
    gil_check = (int (*)(void))dlsym(RTLD_DEFAULT, "PyGILState_Check");
    get_frame = (void *(*)(void))dlsym(RTLD_DEFAULT, "PyEval_GetFrame");
    frame_line = (int (*)(void *))dlsym(RTLD_DEFAULT, "PyFrame_GetLineNumber");
  }
  if (gil_check && get_frame && frame_line && gil_check()) {
    void *f = get_frame();
    if (f) {
      probe_last_line = frame_line(f);
      probe_lines++;
    }
  }
}

void _ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE(void *ptr, int64_t size, size_t allocated,
                                                        size_t reserved, device_t device) {
  if (!looked) {
    void *c10 = dlopen("libc10.so", RTLD_NOLOAD | RTLD_LAZY);
    const char *name = "_ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE";
    real_report = (report_fn)(c10 ? dlsym(c10, name) : dlsym(RTLD_NEXT, name));
    looked = 1;
  }
  if (device.type == 1) { /* DeviceType::CUDA */
    uint64_t k = probe_count++ % EVENTS;
    probe_addr[k] = (uint64_t)(uintptr_t)ptr;
    probe_size[k] = size;
    if (size >= 0)
      probe_allocs++;
    else
      probe_frees++;
    if (probe_mode & 1)
      python_line();
  } else {
    probe_other++;
  }
  if (real_report) {
    probe_forwarded++;
    real_report(ptr, size, allocated, reserved, device);
  }
}
