/* stress_churn PAIRS [EVERY]: PAIRS cuMemAlloc/cuMemFree pairs (sizes cycling from 256 B to
 * 1 MiB, from three call sites) on one thread, with 64 blocks live at any time; every EVERY pairs
 * (default 1000000) prints "PAIRS RSS_KIB SECONDS HWM_KIB" (HWM: the peak RSS so far). The shim's bookkeeping for freed allocations
 * must be reclaimed: RSS stays flat however many pairs go through. */
#include <time.h>

#include "workload.h"

static long rss_kib(void) {
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
        fclose(f);
    }
    return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

static long hwm_kib(void) {
    char line[256];
    long v = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld", &v) == 1) break;
    fclose(f);
    return v;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static CUdeviceptr site_a(size_t n) { CUdeviceptr p; CHECK(cuMemAlloc(&p, n)); return p; }
static CUdeviceptr site_b(size_t n) { CUdeviceptr p; CHECK(cuMemAlloc(&p, n)); return p; }
static CUdeviceptr site_c(size_t n) { CUdeviceptr p; CHECK(cuMemAlloc(&p, n)); return p; }

int main(int argc, char **argv) {
    long long pairs = argc > 1 ? atoll(argv[1]) : 1000000;
    long long every = argc > 2 ? atoll(argv[2]) : 1000000;
    CHECK(cuInit(0));
    wl_primary(0);
    CUdeviceptr live[64] = {0};
    double t0 = now();
    printf("0 %ld 0.0 %ld\n", rss_kib(), hwm_kib());
    fflush(stdout);
    for (long long i = 0; i < pairs; i++) {
        int s = (int)(i % 64);
        if (live[s]) CHECK(cuMemFree(live[s]));
        size_t n = (size_t)256 << (i % 13);
        live[s] = (i % 3 == 0) ? site_a(n) : (i % 3 == 1) ? site_b(n) : site_c(n);
        if ((i + 1) % every == 0) {
            printf("%lld %ld %.1f %ld\n", i + 1, rss_kib(), now() - t0, hwm_kib());
            fflush(stdout);
        }
    }
    for (int s = 0; s < 64; s++)
        if (live[s]) CHECK(cuMemFree(live[s]));
    return 0;
}
