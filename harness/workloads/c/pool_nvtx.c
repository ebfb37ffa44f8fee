/* pool_nvtx: the pool's blocks as an NVTX tool sees them (tests/it/pool_nvtx.rs, with the
 * nvtx_recorder injection). Says on stdout what it did, one line each, in the order it happened
 * on each thread:
 *
 *   phase NAME                 (also appended to NVTX_RECORDER_OUT, to cut the tool's log)
 *   alloc PID 0xADDR SIZE      a block it got (SIZE: what it asked; pitch × height for a pitch)
 *   free PID 0xADDR            a block it freed
 *   bad PID 0xADDR RESULT      a free the driver refused (an interior pointer, a double free)
 *   lost PID 0xADDR            a block lost with its context
 *   live PID 0xADDR SIZE       a block still held at exit
 *   child PID STATUS           a forked child's exit status
 *
 * Phases: "sequence" (one thread: sizes around the alignment, a pitch, a dedicated chunk, frees
 * out of order, refused frees), "threads" (THREADS threads, pairs through their caches, each
 * leaving one block to the main thread and exiting), "contexts" (a block freed with another
 * context current, a context destroyed with a block live), "fork" (a child allocates and frees
 * its own), "end" (one block held at exit); "primary", only when asked, alone (the primary
 * context reset with a block live, then gone with its last release with one). Each block is filled and read back, so a block handed
 * to two owners would show ("mismatch" lines). */
#include <fcntl.h>
#include <sys/wait.h>

#include "workload.h"

#define THREADS 8
#define PAIRS 100
#define EVENTS (PAIRS * 2 + 8)

static CUcontext primary;

static void phase(const char *name) {
    printf("phase %s\n", name);
    fflush(stdout);
    const char *path = getenv("NVTX_RECORDER_OUT");
    if (!path) return;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) return;
    char line[128];
    int n = snprintf(line, sizeof line, "phase %d %s\n", (int)getpid(), name);
    ssize_t w = write(fd, line, (size_t)n);
    (void)w;
    close(fd);
}

static int check(CUdeviceptr p, size_t size, unsigned char v) {
    unsigned char first, last;
    CHECK(cuMemsetD8(p, v, size));
    CHECK(cuMemcpyDtoH(&first, p, 1));
    CHECK(cuMemcpyDtoH(&last, p + size - 1, 1));
    return first == v && last == v;
}

static CUdeviceptr get(size_t size, unsigned char v) {
    CUdeviceptr p;
    CHECK(cuMemAlloc(&p, size));
    printf("alloc %d 0x%llx %zu\n", (int)getpid(), (unsigned long long)p, size);
    if (!check(p, size, v)) printf("mismatch 0x%llx\n", (unsigned long long)p);
    return p;
}

static void put(CUdeviceptr p) {
    CHECK(cuMemFree(p));
    printf("free %d 0x%llx\n", (int)getpid(), (unsigned long long)p);
}

static void sequence(void) {
    phase("sequence");
    size_t sizes[] = {1000, 256, 1024, 4096, 1, 65536, 3u << 20, 255};
    enum { N = sizeof sizes / sizeof sizes[0] };
    CUdeviceptr p[N];
    for (int i = 0; i < N; i++) p[i] = get(sizes[i], (unsigned char)(i + 1));
    CUdeviceptr pitched;
    size_t pitch;
    CHECK(cuMemAllocPitch(&pitched, &pitch, 1000, 3, 4));
    printf("alloc %d 0x%llx %zu\n", (int)getpid(), (unsigned long long)pitched, pitch * 3);
    /* Refused frees: an interior pointer, and (below) a double free. */
    CUresult r = cuMemFree(p[3] + 256);
    printf("bad %d 0x%llx %d\n", (int)getpid(), (unsigned long long)(p[3] + 256), (int)r);
    int order[N] = {3, 0, 6, 1, 7, 2, 5, 4};
    for (int i = 0; i < N; i++) put(p[order[i]]);
    r = cuMemFree(p[3]);
    printf("bad %d 0x%llx %d\n", (int)getpid(), (unsigned long long)p[3], (int)r);
    put(pitched);
    /* Blocks handed out again after their frees. */
    for (int k = 0; k < 3; k++) put(get(1000, 0x40));
    put(get(3u << 20, 0x41));
}

struct worker_log {
    int n;
    char line[EVENTS][64];
};
static struct worker_log logs[THREADS];
static CUdeviceptr for_main[THREADS];

static void note(struct worker_log *l, const char *op, CUdeviceptr p, long size) {
    if (l->n >= EVENTS) return;
    if (size >= 0)
        snprintf(l->line[l->n++], 64, "%s %d 0x%llx %ld", op, (int)getpid(), (unsigned long long)p, size);
    else
        snprintf(l->line[l->n++], 64, "%s %d 0x%llx", op, (int)getpid(), (unsigned long long)p);
}

static int mismatches;

static void *worker(void *arg) {
    int i = (int)(intptr_t)arg;
    struct worker_log *l = &logs[i];
    CHECK(cuCtxSetCurrent(primary));
    size_t size = 512 + (size_t)i * 300;
    for (int k = 0; k < PAIRS; k++) {
        CUdeviceptr a;
        CHECK(cuMemAlloc(&a, size));
        note(l, "alloc", a, (long)size);
        if (!check(a, size, (unsigned char)i)) __atomic_add_fetch(&mismatches, 1, __ATOMIC_RELAXED);
        CHECK(cuMemFree(a));
        note(l, "free", a, -1);
    }
    CUdeviceptr b;
    CHECK(cuMemAlloc(&b, 8192));
    note(l, "alloc", b, 8192);
    for_main[i] = b;
    return NULL;
}

static void threads(void) {
    phase("threads");
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < THREADS; i++)
        for (int k = 0; k < logs[i].n; k++) printf("%s\n", logs[i].line[k]);
    /* The exited threads' blocks, freed here; then pairs that adopt their caches. */
    for (int i = 0; i < THREADS; i++) put(for_main[i]);
    for (int k = 0; k < 20; k++) put(get(512 + (size_t)(k % THREADS) * 300, 0x50));
    if (mismatches) printf("mismatch threads %d\n", mismatches);
}

static void contexts(void) {
    phase("contexts");
    CUdevice dev;
    CUcontext other;
    CHECK(cuDeviceGet(&dev, 0));
    CUdeviceptr a = get(2048, 0x60);
    CHECK(cuCtxCreate(&other, NULL, 0, dev));
    /* The primary context's block freed while another is current. */
    put(a);
    CUdeviceptr b = get(4096, 0x61);
    CUdeviceptr c = get(4096, 0x62);
    put(c);
    CHECK(cuCtxDestroy(other));
    printf("lost %d 0x%llx\n", (int)getpid(), (unsigned long long)b);
    CHECK(cuCtxSetCurrent(primary));
    put(get(2048, 0x63));
}

/* Run alone ("primary"): the primary context reset with a block live, made again, then gone
 * with its last release with a block live, and made once more. */
static void primary_gone(void) {
    phase("primary");
    CUdevice dev;
    CHECK(cuDeviceGet(&dev, 0));
    CUdeviceptr a = get(3000, 0x80);
    CHECK(cuDevicePrimaryCtxReset(dev));
    printf("lost %d 0x%llx\n", (int)getpid(), (unsigned long long)a);
    primary = wl_primary(0);
    put(get(3000, 0x81));
    CUdeviceptr b = get(3000, 0x82);
    /* main's retain and this one: the second release is the last. */
    CHECK(cuDevicePrimaryCtxRelease(dev));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    printf("lost %d 0x%llx\n", (int)getpid(), (unsigned long long)b);
    primary = wl_primary(0);
    put(get(3000, 0x83));
}

static void forked(void) {
    phase("fork");
    CUdeviceptr a = get(1500, 0x70);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        for (int k = 0; k < 5; k++) put(get(1500, 0x71));
        CUdeviceptr own = get(100000, 0x72);
        put(own);
        fflush(stdout);
        _exit(0);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    printf("child %d %d\n", (int)pid, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    put(a);
}

int main(int argc, char **argv) {
    CHECK(cuInit(0));
    primary = wl_primary(0);
    const char *only = argc > 1 ? argv[1] : "all";
    int all = !strcmp(only, "all");
    if (all || !strcmp(only, "sequence")) sequence();
    if (all || !strcmp(only, "threads")) threads();
    if (all || !strcmp(only, "contexts")) contexts();
    if (all || !strcmp(only, "fork")) forked();
    if (!strcmp(only, "primary")) primary_gone();
    phase("end");
    CUdeviceptr held = get(777, 0x7f);
    printf("live %d 0x%llx 777\n", (int)getpid(), (unsigned long long)held);
    fflush(stdout);
    return 0;
}
