/* pool_integrity: heavy churn where every block carries its own pattern. Each of THREADS threads
 * keeps up to LIVE blocks of random sizes (256 B .. 4 MiB); each new block is filled with a 32-bit
 * pattern unique to it, half of the time by a memset queued on a non-blocking stream (which the
 * simulator runs late with CUGUARD_SIM_WORK_DELAY_US), half synchronously; freed blocks are
 * checked first. At the end every live block is checked. Any block whose bytes are not its own
 * pattern means two live blocks overlapped or a block was reused while work still wrote it.
 * Prints {"blocks": N, "checked": N, "bad_blocks": N}. Usage: pool_integrity [steps] */
#include "workload.h"

#define THREADS 4
#define LIVE 48

struct block {
    CUdeviceptr p;
    size_t words;
    unsigned pattern;
};

static CUcontext ctx;
static int steps = 3000;
static long total_blocks, total_checked, total_bad;

static unsigned rng(unsigned *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static int check(struct block *b) {
    static __thread unsigned *buf;
    static __thread size_t cap;
    if (cap < b->words) {
        free(buf);
        cap = b->words;
        buf = malloc(cap * 4);
    }
    CHECK(cuMemcpyDtoH(buf, b->p, b->words * 4));
    for (size_t i = 0; i < b->words; i++)
        if (buf[i] != b->pattern) return 1;
    return 0;
}

static void *worker(void *arg) {
    unsigned seed = 0x9E3779B9u * (unsigned)(uintptr_t)arg + 1;
    CHECK(cuCtxSetCurrent(ctx));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    struct block live[LIVE];
    int n = 0;
    long blocks = 0, checked = 0, bad = 0;
    for (int step = 0; step < steps; step++) {
        if (n == LIVE || (n > 0 && rng(&seed) % 100 < 45)) {
            int i = rng(&seed) % n;
            /* Wait for this block's own fill before reading it back. */
            CHECK(cuStreamSynchronize(s));
            bad += check(&live[i]);
            checked++;
            CHECK(cuMemFree(live[i].p));
            live[i] = live[--n];
        } else {
            struct block b;
            b.words = 64 + rng(&seed) % (1u << 20);
            b.pattern = rng(&seed) | 1;
            CHECK(cuMemAlloc(&b.p, b.words * 4));
            if (rng(&seed) & 1)
                CHECK(cuMemsetD32Async(b.p, b.pattern, b.words, s));
            else
                CHECK(cuMemsetD32(b.p, b.pattern, b.words));
            live[n++] = b;
            blocks++;
        }
    }
    CHECK(cuCtxSynchronize());
    for (int i = 0; i < n; i++) {
        bad += check(&live[i]);
        checked++;
        CHECK(cuMemFree(live[i].p));
    }
    __sync_fetch_and_add(&total_blocks, blocks);
    __sync_fetch_and_add(&total_checked, checked);
    __sync_fetch_and_add(&total_bad, bad);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) steps = atoi(argv[1]);
    CHECK(cuInit(0));
    ctx = wl_primary(0);
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)(i + 1));
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    printf("{\"blocks\":%ld,\"checked\":%ld,\"bad_blocks\":%ld}\n", total_blocks, total_checked, total_bad);
    return 0;
}
