/* tag_steps: a program that names its memory with the C ABI's tags (cuguard_tag_push/_pop, what
 * Python's `with cuguard.tag(...)` calls, and cuguard_annotate, Python's cuguard.annotate;
 * reached through dlsym, so the program runs without cuguard too), for `summary --by tag`,
 * `--at`, the view and the exports.
 *
 *   (untagged)   1 MiB made and freed first (temp_plain_site)
 *   weights      16 MiB kept (weights_site)
 *   (untagged)   2 MiB kept (plain_site)
 *   activations  8 MiB kept (late_site), made untagged and annotated after the fact
 *   kv_cache     two 32 MiB kept (kv_site, one line)
 *   scratch      inside kv_cache (nested): 8 MiB kept (scratch_site), then 4 MiB (temp_site)
 *                freed last, 5 ms later: the run's peak, 102 MiB, is while it lives
 *
 * At exit 98 MiB leak in 6 allocations. It prints each site's line (`weights N`, ...). Built by
 * the tests with -g -O0. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

#include "cusim.h"

#define MIB (1ull << 20)

static int (*tag_push)(const char *);
static int (*tag_pop)(void);
static int (*annotate)(unsigned long long, const char *);

static void push(const char *name) {
    if (tag_push) tag_push(name);
}

static void pop(void) {
    if (tag_pop) tag_pop();
}

static int lines[7];

#define SITE(name, slot)                                               \
    static __attribute__((noinline)) CUdeviceptr name(size_t bytes) { \
        CUdeviceptr p = 0;                                             \
        lines[slot] = __LINE__;                                        \
        return cuMemAlloc(&p, bytes) == CUDA_SUCCESS ? p : 0;         \
    }

SITE(temp_plain_site, 0)
SITE(weights_site, 1)
SITE(plain_site, 2)
SITE(late_site, 3)
SITE(kv_site, 4)
SITE(scratch_site, 5)
SITE(temp_site, 6)

int main(void) {
    tag_push = (int (*)(const char *))dlsym(RTLD_DEFAULT, "cuguard_tag_push");
    tag_pop = (int (*)(void))dlsym(RTLD_DEFAULT, "cuguard_tag_pop");
    annotate = (int (*)(unsigned long long, const char *))dlsym(RTLD_DEFAULT, "cuguard_annotate");
    CUdevice device;
    CUcontext context;
    if (cuInit(0) || cuDeviceGet(&device, 0) || cuDevicePrimaryCtxRetain(&context, device) ||
        cuCtxSetCurrent(context))
        return 1;
    CUdeviceptr first = temp_plain_site(1 * MIB);
    if (!first || cuMemFree(first)) return 1;
    push("weights");
    if (!weights_site(16 * MIB)) return 1;
    pop();
    if (!plain_site(2 * MIB)) return 1;
    CUdeviceptr late = late_site(8 * MIB);
    if (!late) return 1;
    if (annotate && annotate(late, "activations") != 0) return 1;
    push("kv_cache");
    for (int i = 0; i < 2; i++)
        if (!kv_site(32 * MIB)) return 1;
    push("scratch");
    if (!scratch_site(8 * MIB)) return 1;
    CUdeviceptr temp = temp_site(4 * MIB);
    if (!temp) return 1;
    pop();
    pop();
    usleep(5000); /* the peak lasts 5 ms: a moment the view can show */
    if (cuMemFree(temp)) return 1;
    const char *names[7] = {"temp_plain", "weights", "plain", "late", "kv", "scratch", "temp"};
    for (int i = 0; i < 7; i++) printf("%s %d\n", names[i], lines[i]);
    return 0;
}
