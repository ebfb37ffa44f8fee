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
 *   sigaltstack_overflow  recurse until the stack overflows, with an alternate signal stack
 *   reset_dfl_raise install a SIGINT handler before CUDA is used; at the end, restore SIG_DFL with
 *                   signal() and raise SIGINT (what a program that cleans up on Ctrl-C does)
 *   readback        change the dispositions of SIGINT, SIGTERM, SIGSEGV and SIGUSR1 every way
 *                   (sigaction, signal, SIG_DFL, SIG_IGN, handlers with flags and masks) and print
 *                   what sigaction reads back each time; then return. The output must be the
 *                   same with and without the shim. */
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

static void program_int_handler(int sig) { (void)sig; }
static void h1(int sig) { (void)sig; }
static void h2(int sig, siginfo_t *info, void *ctx) { (void)sig; (void)info; (void)ctx; }

/* What sigaction reads back for sig, as a line. */
static void show(const char *what, int sig, const struct sigaction *o) {
    const char *h = o->sa_handler == SIG_DFL   ? "dfl"
                    : o->sa_handler == SIG_IGN ? "ign"
                    : o->sa_handler == h1      ? "h1"
                    : (void *)o->sa_sigaction == (void *)h2 ? "h2"
                    : o->sa_handler == program_int_handler ? "program_int_handler"
                                                           : "other";
    printf("%s sig=%d handler=%s flags=%#x mask_term=%d mask_usr2=%d\n", what, sig, h,
           (unsigned)o->sa_flags, sigismember(&o->sa_mask, SIGTERM), sigismember(&o->sa_mask, SIGUSR2));
}

static void read_back(const char *what, int sig) {
    struct sigaction o;
    memset(&o, 0, sizeof o);
    if (sigaction(sig, NULL, &o) != 0) {
        printf("%s sig=%d failed\n", what, sig);
        return;
    }
    show(what, sig, &o);
}

static void readback_all(void) {
    int sigs[] = {SIGINT, SIGTERM, SIGSEGV, SIGUSR1};
    for (unsigned i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        int sig = sigs[i];
        struct sigaction a, o;
        read_back("start", sig);
        memset(&a, 0, sizeof a);
        a.sa_handler = h1;
        a.sa_flags = SA_RESTART;
        sigemptyset(&a.sa_mask);
        sigaddset(&a.sa_mask, SIGTERM);
        memset(&o, 0, sizeof o);
        sigaction(sig, &a, &o);
        show("set-h1-old", sig, &o);
        read_back("after-h1", sig);
        void (*prev)(int) = signal(sig, SIG_DFL);
        printf("signal-dfl-returned %s\n", prev == h1 ? "h1" : "other");
        read_back("after-signal-dfl", sig);
        memset(&a, 0, sizeof a);
        a.sa_handler = SIG_IGN;
        memset(&o, 0, sizeof o);
        sigaction(sig, &a, &o);
        show("set-ign-old", sig, &o);
        read_back("after-ign", sig);
        memset(&a, 0, sizeof a);
        a.sa_sigaction = h2;
        a.sa_flags = SA_SIGINFO | SA_RESETHAND;
        sigemptyset(&a.sa_mask);
        sigaddset(&a.sa_mask, SIGUSR2);
        memset(&o, 0, sizeof o);
        sigaction(sig, &a, &o);
        show("set-h2-old", sig, &o);
        read_back("after-h2", sig);
        memset(&a, 0, sizeof a);
        a.sa_handler = SIG_DFL;
        a.sa_flags = SA_NODEFER;
        sigemptyset(&a.sa_mask);
        sigaddset(&a.sa_mask, SIGUSR2);
        memset(&o, 0, sizeof o);
        sigaction(sig, &a, &o);
        show("set-dfl-old", sig, &o);
        read_back("after-dfl", sig);
        prev = signal(sig, SIG_DFL);
        printf("signal-dfl-again-returned %s\n", prev == SIG_DFL ? "dfl" : "other");
        read_back("end", sig);
    }
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
    if (!strcmp(mode, "reset_dfl_raise")) {
        sa.sa_handler = program_int_handler;
        sigaction(SIGINT, &sa, NULL);
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
    if (!strcmp(mode, "reset_dfl_raise")) {
        read_back("before-reset", SIGINT);
        signal(SIGINT, SIG_DFL);
        read_back("after-reset", SIGINT);
        fflush(stdout);
        raise(SIGINT);
        printf("went on after raise\n");
        return 0;
    }
    if (!strcmp(mode, "readback")) {
        readback_all();
        return 0;
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
