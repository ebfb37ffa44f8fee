/* exit_paths MODE: allocates three blocks (1, 2 and 3 MiB), frees the 2 MiB one, prints
 * "ready 0xA 0xC" and then ends the way MODE says. The report must hold exactly the 1 MiB and
 * 3 MiB blocks, whichever way the process ends.
 *
 * Modes:
 *   return exit exit_thread quick_exit _exit abort segv bus fpe ill raise_term
 *   wait            sleep until a signal ends the process (the test sends it)
 *   churn           like wait, but keep allocating and freeing (1000 pairs a second)
 *   handler_before  install a SIGSEGV handler before CUDA is used (the shim chains to it), segv
 *   handler_after   install it after the first allocation (it replaces the shim's), segv
 *   term_handler    install a SIGTERM handler before CUDA is used; on SIGTERM, exit(0) cleanly
 *   sigaltstack_overflow  recurse until the stack overflows, with an alternate signal stack */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cusim.h"

#define CHECK(x)                                                                   \
    do {                                                                           \
        CUresult r_ = (x);                                                         \
        if (r_ != CUDA_SUCCESS) {                                                  \
            fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, (int)r_); \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

static volatile sig_atomic_t term_seen;

static void program_segv_handler(int sig) {
    (void)sig;
    static const char msg[] = "program handler ran\n";
    write(1, msg, sizeof msg - 1);
    _exit(42);
}

static void program_term_handler(int sig) {
    (void)sig;
    term_seen = 1;
}

static void *exit_from_thread(void *arg) {
    (void)arg;
    usleep(50 * 1000);
    exit(4);
    return NULL;
}

static void churn_forever(void) {
    for (;;) {
        CUdeviceptr p;
        CHECK(cuMemAlloc(&p, 4096));
        CHECK(cuMemFree(p));
        usleep(1000);
    }
}

static int recurse(int n) {
    volatile char pad[4096];
    pad[0] = (char)n;
    return recurse(n + 1) + pad[0];
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "return";
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    if (!strcmp(mode, "handler_before")) {
        sa.sa_handler = program_segv_handler;
        sigaction(SIGSEGV, &sa, NULL);
    }
    if (!strcmp(mode, "term_handler")) {
        sa.sa_handler = program_term_handler;
        sigaction(SIGTERM, &sa, NULL);
    }
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CUdeviceptr a, b, c;
    CHECK(cuMemAlloc(&a, 1 << 20));
    CHECK(cuMemAlloc(&b, 2 << 20));
    CHECK(cuMemAlloc(&c, 3 << 20));
    CHECK(cuMemFree(b));
    if (!strcmp(mode, "handler_after")) {
        sa.sa_handler = program_segv_handler;
        sigaction(SIGSEGV, &sa, NULL);
    }
    printf("ready 0x%llx 0x%llx\n", (unsigned long long)a, (unsigned long long)c);
    fflush(stdout);

    if (!strcmp(mode, "return")) return 0;
    if (!strcmp(mode, "exit")) exit(3);
    if (!strcmp(mode, "exit_thread")) {
        pthread_t t;
        pthread_create(&t, NULL, exit_from_thread, NULL);
        churn_forever();
    }
    if (!strcmp(mode, "quick_exit")) quick_exit(5);
    if (!strcmp(mode, "_exit")) _exit(6);
    if (!strcmp(mode, "abort")) abort();
    if (!strcmp(mode, "segv") || !strcmp(mode, "handler_before") || !strcmp(mode, "handler_after")) {
        *(volatile int *)(uintptr_t)8 = 1;
    }
    if (!strcmp(mode, "bus")) {
        char path[] = "/tmp/cuguard-exit-bus-XXXXXX";
        int fd = mkstemp(path);
        if (fd < 0 || ftruncate(fd, 4096) != 0) return 1;
        volatile char *m = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
        unlink(path);
        if (ftruncate(fd, 0) != 0) return 1;
        return m[0];
    }
    if (!strcmp(mode, "fpe")) {
        volatile int zero = 0;
        return 10 / zero;
    }
    if (!strcmp(mode, "ill")) __builtin_trap();
    if (!strcmp(mode, "raise_term")) raise(SIGTERM);
    if (!strcmp(mode, "wait")) {
        for (;;) pause();
    }
    if (!strcmp(mode, "churn")) churn_forever();
    if (!strcmp(mode, "term_handler")) {
        while (!term_seen) usleep(1000);
        printf("clean shutdown\n");
        fflush(stdout);
        exit(0);
    }
    if (!strcmp(mode, "sigaltstack_overflow")) {
        stack_t ss;
        ss.ss_sp = malloc(1 << 16);
        ss.ss_size = 1 << 16;
        ss.ss_flags = 0;
        sigaltstack(&ss, NULL);
        return recurse(0);
    }
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
