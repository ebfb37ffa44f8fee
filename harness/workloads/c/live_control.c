/* live_control: a long-running program whose device memory a test drives, one command a line on
 * stdin, so that the test can look at the process (its stats page, its alerts) between steps.
 * Each command is answered on stdout with one line once it is done ("ok", or "ok PID" for k).
 *
 *   w SLOT BYTES   allocate BYTES into SLOT (0..63) from grow_weights()
 *   c SLOT BYTES   allocate BYTES into SLOT from grow_cache()
 *   f SLOT         free SLOT
 *   k BYTES        fork; the child allocates BYTES from child_buffers() and waits for a signal
 *                  (answered "ok CHILDPID" once the child has allocated)
 *   t NAME         open tag NAME on this thread (cuguard_tag_push, through dlsym)
 *   u              close it (cuguard_tag_pop)
 *   x CODE         exit(CODE)
 *
 * End of input exits with 0. The two grow_ functions are distinct allocation sites, so the
 * test knows which site holds what. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static CUdeviceptr slots[64];

__attribute__((noinline)) static void grow_weights(int slot, size_t bytes) {
    CHECK(cuMemAlloc(&slots[slot], bytes));
}

__attribute__((noinline)) static void grow_cache(int slot, size_t bytes) {
    CHECK(cuMemAlloc(&slots[slot], bytes));
}

__attribute__((noinline)) static void child_buffers(size_t bytes) {
    CUdeviceptr p;
    CHECK(cuMemAlloc(&p, bytes));
}

int main(void) {
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    char line[256];
    while (fgets(line, sizeof line, stdin)) {
        char cmd = 0;
        int slot = 0;
        unsigned long long bytes = 0;
        if (sscanf(line, " %c", &cmd) != 1) continue;
        switch (cmd) {
        case 'w':
        case 'c':
            if (sscanf(line, " %c %d %llu", &cmd, &slot, &bytes) != 3 || slot < 0 || slot >= 64) {
                fprintf(stderr, "bad command: %s", line);
                return 2;
            }
            if (cmd == 'w')
                grow_weights(slot, bytes);
            else
                grow_cache(slot, bytes);
            printf("ok\n");
            break;
        case 'f':
            if (sscanf(line, " %c %d", &cmd, &slot) != 2 || slot < 0 || slot >= 64) {
                fprintf(stderr, "bad command: %s", line);
                return 2;
            }
            CHECK(cuMemFree(slots[slot]));
            slots[slot] = 0;
            printf("ok\n");
            break;
        case 'k': {
            if (sscanf(line, " %c %llu", &cmd, &bytes) != 2) {
                fprintf(stderr, "bad command: %s", line);
                return 2;
            }
            int ready[2];
            if (pipe(ready) != 0) return 1;
            fflush(stdout);
            pid_t pid = fork();
            if (pid < 0) return 1;
            if (pid == 0) {
                close(ready[0]);
                child_buffers(bytes);
                if (write(ready[1], "r", 1) != 1) _exit(1);
                for (;;) pause();
            }
            close(ready[1]);
            char r;
            if (read(ready[0], &r, 1) != 1) return 1;
            close(ready[0]);
            printf("ok %d\n", (int)pid);
            break;
        }
        case 't':
        case 'u': {
            char name[200] = "";
            int (*push)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "cuguard_tag_push");
            int (*pop)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "cuguard_tag_pop");
            if (!push || !pop || (cmd == 't' && sscanf(line, " %c %199s", &cmd, name) != 2)) {
                fprintf(stderr, "bad command, or no shim: %s", line);
                return 2;
            }
            int r = cmd == 't' ? push(name) : pop();
            printf("ok %d\n", r);
            break;
        }
        case 'x':
            sscanf(line, " %c %d", &cmd, &slot);
            exit(slot);
        default:
            fprintf(stderr, "bad command: %s", line);
            return 2;
        }
        fflush(stdout);
    }
    return 0;
}
