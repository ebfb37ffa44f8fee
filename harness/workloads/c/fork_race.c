/* fork_race THREADS FORKS CHILD: THREADS threads allocate and free in a loop, so that the shim's
 * locks (tracker shards, pool, stack table, events) are held at random moments; meanwhile the
 * main thread forks FORKS times. alarm(20) ends a child that hangs, with SIGALRM. CHILD says
 * what each child does:
 *
 *   alloc  allocate three 64 KiB blocks, set one on a new non-blocking stream, free it, destroy the
 *          stream, exit(0), while the parent's threads also create, use and destroy streams (so
 *          the pool's stream bookkeeping is held at random moments too). Its report must hold
 *          exactly its own two blocks (none of the parent's). Pool on or off: the simulated driver holds its own
 *          locks across the fork, so the child can allocate from it.
 *   exit   exit(0) without touching CUDA, while the parent's threads also push and pop contexts
 *          (which holds the driver's lock often): the exit path alone must not hang.
 *   exec   exec this program as "fork_race child_exec", which allocates one 7 MiB block and
 *          returns: the shim must still be preloaded there.
 *
 * The parent prints one line per child, "child PID STATUS" (the raw wait status), then keeps one
 * 5 MiB block and returns from main. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cusim.h"

#define CHECK(x)                                                                   \
    do {                                                                           \
        CUresult r_ = (x);                                                         \
        if (r_ != CUDA_SUCCESS) {                                                  \
            fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, (int)r_); \
            _exit(1);                                                              \
        }                                                                          \
    } while (0)

static CUcontext primary;
static atomic_int stop;
static int push_pop;
static int streams;

static void *churn(void *arg) {
    unsigned seed = (unsigned)(uintptr_t)arg;
    CHECK(cuCtxSetCurrent(primary));
    CUdeviceptr live[8] = {0};
    while (!atomic_load(&stop)) {
        int i = rand_r(&seed) % 8;
        if (live[i]) {
            CHECK(cuMemFree(live[i]));
            live[i] = 0;
        } else {
            CHECK(cuMemAlloc(&live[i], 256 + (size_t)(rand_r(&seed) % 65536)));
        }
        if (streams) {
            /* Stream bookkeeping (the pool's streams table, its runs of one stream) is held at
             * random moments too. */
            CUstream s;
            CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
            if (live[i]) CHECK(cuMemsetD8Async(live[i], 0, 256, s));
            CHECK(cuStreamDestroy(s));
        }
        if (push_pop) {
            CHECK(cuCtxPushCurrent(primary));
            CUcontext popped;
            CHECK(cuCtxPopCurrent(&popped));
        }
    }
    for (int i = 0; i < 8; i++)
        if (live[i]) CHECK(cuMemFree(live[i]));
    return NULL;
}

static int child_work(void) {
    CUdeviceptr p[3];
    for (int i = 0; i < 3; i++) CHECK(cuMemAlloc(&p[i], 64 << 10));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemsetD8Async(p[1], 0, 64 << 10, s));
    CHECK(cuMemFree(p[1]));
    CHECK(cuStreamDestroy(s));
    return 0;
}

int main(int argc, char **argv) {
    CUdevice dev;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&primary, dev));
    CHECK(cuCtxSetCurrent(primary));
    if (argc > 1 && !strcmp(argv[1], "child_exec")) {
        CUdeviceptr p;
        CHECK(cuMemAlloc(&p, 7 << 20));
        return 0;
    }
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    int forks = argc > 2 ? atoi(argv[2]) : 20;
    const char *child = argc > 3 ? argv[3] : "alloc";
    int exec_mode = !strcmp(child, "exec");
    push_pop = !strcmp(child, "exit");
    streams = !strcmp(child, "alloc");
    pthread_t t[64];
    for (int i = 0; i < threads && i < 64; i++) pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < forks; i++) {
        usleep(2000);
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            alarm(20);
            if (exec_mode) {
                execl("/proc/self/exe", argv[0], "child_exec", (char *)NULL);
                _exit(127);
            }
            if (push_pop) exit(0);
            exit(child_work());
        }
        int status = 0;
        waitpid(pid, &status, 0);
        printf("child %d %d\n", (int)pid, status);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < threads && i < 64; i++) pthread_join(t[i], NULL);
    CUdeviceptr keep;
    CHECK(cuMemAlloc(&keep, 5 << 20));
    return 0;
}
