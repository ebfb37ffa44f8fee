/* pool_ipc: a pooled allocation shared with another process through CUDA IPC.
 *
 * Usage: pool_ipc SIZE shim|plain   the exporter: allocates SIZE bytes between two others (so
 *                                   that a chunk shared with them would not start at it), marks
 *                                   its first, middle and last 16 bytes, exports it, and runs
 *                                   itself as the receiver, under the shim (`shim`: its
 *                                   LD_PRELOAD kept) or not (`plain`: LD_PRELOAD and CUGUARD_*
 *                                   removed); then reads back what the receiver wrote, frees it,
 *                                   and allocates the same size again.
 *        pool_ipc receive HEX SIZE  the receiver: opens the handle, checks the marks at the
 *                                   address it got, writes at offset 16, closes.
 * Prints "export.*" and "receive.*" lines ("export.handle" is the export's result; on a refusal
 * nothing else is tried). */
#define _GNU_SOURCE
#include "cusim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void up(void) {
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) {
        fprintf(stderr, "driver setup failed\n");
        exit(2);
    }
}

/* The 16-byte mark at `offset` of an allocation of `size`. */
static void mark(unsigned char out[16], size_t offset, size_t size) {
    for (int i = 0; i < 16; i++) out[i] = (unsigned char)(0x11 * (i + 1) ^ (offset * 7 / (size ? size : 1)) ^ offset);
}

static size_t offsets(size_t size, size_t out[3]) {
    out[0] = 0;
    out[1] = size / 2;
    out[2] = size - 16;
    return 3;
}

static int receive(const char *hex, size_t size) {
    CUipcMemHandle h;
    for (int i = 0; i < CU_IPC_HANDLE_SIZE; i++) {
        unsigned int b;
        sscanf(hex + 2 * i, "%2x", &b);
        h.reserved[i] = (char)b;
    }
    up();
    printf("receive.preloaded\t%d\n", getenv("LD_PRELOAD") != NULL);
    CUdeviceptr d = 0;
    printf("receive.open\t%d\n", (int)cuIpcOpenMemHandle(&d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    size_t at[3];
    int right = 1;
    for (size_t i = 0; i < offsets(size, at); i++) {
        unsigned char want[16], got[16];
        mark(want, at[i], size);
        if (cuMemcpyDtoH(got, d + at[i], 16) != CUDA_SUCCESS || memcmp(want, got, 16)) right = 0;
    }
    printf("receive.marks_at_its_address\t%d\n", right);
    CUdeviceptr base = 0;
    size_t range = 0;
    cuMemGetAddressRange(&base, &range, d + 10);
    printf("receive.range_starts_at_it\t%d\n", base == d);
    printf("receive.range_holds_it\t%d\n", range >= size);
    unsigned char reply[16];
    memset(reply, 0xc5, sizeof reply);
    cuMemcpyHtoD(d + 16, reply, sizeof reply);
    cuCtxSynchronize();
    printf("receive.close\t%d\n", (int)cuIpcCloseMemHandle(d));
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 4 && !strcmp(argv[1], "receive")) return receive(argv[2], strtoull(argv[3], NULL, 0));
    if (argc != 3) {
        fprintf(stderr, "usage: pool_ipc SIZE shim|plain\n");
        return 2;
    }
    size_t size = strtoull(argv[1], NULL, 0);
    int plain = !strcmp(argv[2], "plain");
    up();
    CUdeviceptr before, p, after;
    if (cuMemAlloc(&before, 4096) || cuMemAlloc(&p, size) || cuMemAlloc(&after, 4096)) return 3;
    size_t at[3];
    for (size_t i = 0; i < offsets(size, at); i++) {
        unsigned char m[16];
        mark(m, at[i], size);
        if (cuMemcpyHtoD(p + at[i], m, 16)) return 3;
    }
    CUipcMemHandle h;
    CUresult r = cuIpcGetMemHandle(&h, p + 100); /* an interior address names the allocation */
    printf("export.handle\t%d\n", (int)r);
    if (r != CUDA_SUCCESS) return 0;
    int capable = -1;
    cuPointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p);
    printf("export.ipc_capable\t%d\n", capable);

    char hex[2 * CU_IPC_HANDLE_SIZE + 1];
    for (int i = 0; i < CU_IPC_HANDLE_SIZE; i++) sprintf(hex + 2 * i, "%02x", (unsigned char)h.reserved[i]);
    char sizebuf[32];
    snprintf(sizebuf, sizeof sizebuf, "%zu", size);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (plain) {
            unsetenv("LD_PRELOAD");
            for (char **e = environ; *e;) {
                if (!strncmp(*e, "CUGUARD_", 8)) {
                    char name[256];
                    size_t n = strcspn(*e, "=");
                    snprintf(name, sizeof name, "%.*s", (int)n, *e);
                    unsetenv(name);
                } else {
                    e++;
                }
            }
        }
        execl("/proc/self/exe", argv[0], "receive", hex, sizebuf, (char *)NULL);
        _exit(127);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    printf("export.receiver_exit\t%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status));
    unsigned char back[16];
    cuMemcpyDtoH(back, p + 16, 16);
    int seen = 1;
    for (int i = 0; i < 16; i++) seen &= back[i] == 0xc5;
    printf("export.sees_receiver_write\t%d\n", seen);
    printf("export.free\t%d\n", (int)cuMemFree(p));
    CUdeviceptr again;
    printf("export.alloc_again\t%d\n", (int)cuMemAlloc(&again, size));
    cuMemFree(again);
    cuMemFree(before);
    cuMemFree(after);
    return 0;
}
