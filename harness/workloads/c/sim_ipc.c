/* sim_ipc: IPC memory handles between two processes on the simulated driver.
 *
 * Usage: sim_ipc            the parent: allocates, fills with 0x5c, exports a handle (through an
 *                           interior address: the handle names the whole allocation), runs itself
 *                           as the child, then reads back what the child wrote.
 *        sim_ipc child HEX  the child: opens the handle, reads, writes 0xc5 at offset 100 (16
 *                           bytes), closes.
 * Prints "parent.*" and "child.*" lines. */
#include "cusim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SIZE (1 << 20)

static CUcontext up(void) {
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) {
        fprintf(stderr, "driver setup failed\n");
        exit(2);
    }
    return ctx;
}

static int child(const char *hex) {
    CUipcMemHandle h;
    for (int i = 0; i < CU_IPC_HANDLE_SIZE; i++) {
        unsigned int b;
        sscanf(hex + 2 * i, "%2x", &b);
        h.reserved[i] = (char)b;
    }
    up();
    CUdeviceptr d = 0;
    printf("child.open\t%d\n", (int)cuIpcOpenMemHandle(&d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    unsigned char first = 0, last = 0;
    cuMemcpyDtoH(&first, d, 1);
    cuMemcpyDtoH(&last, d + SIZE - 1, 1);
    printf("child.read\t%02x %02x\n", first, last);
    size_t size = 0;
    CUdeviceptr base = 0;
    cuMemGetAddressRange(&base, &size, d + 10);
    printf("child.range\t%d %zu\n", base == d, size);
    cuMemsetD8(d + 100, 0xc5, 16);
    cuCtxSynchronize();
    printf("child.free_mapping\t%d\n", (int)cuMemFree(d));
    printf("child.close\t%d\n", (int)cuIpcCloseMemHandle(d));
    printf("child.close_again\t%d\n", (int)cuIpcCloseMemHandle(d));
    printf("child.bad_handle\t%d\n", (int)cuIpcOpenMemHandle(&d, (CUipcMemHandle){{0}}, 0));
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && !strcmp(argv[1], "child")) return child(argv[2]);

    up();
    CUdeviceptr d, async_ptr;
    cuMemAlloc(&d, SIZE);
    cuMemsetD8(d, 0x5c, SIZE);
    CUipcMemHandle h;
    printf("parent.get_handle\t%d\n", (int)cuIpcGetMemHandle(&h, d + 4096));
    CUdeviceptr same = 0;
    printf("parent.open_own\t%d\n", (int)cuIpcOpenMemHandle(&same, h, 0));
    cuMemAllocAsync(&async_ptr, 4096, 0);
    CUipcMemHandle h2;
    printf("parent.get_handle_async\t%d\n", (int)cuIpcGetMemHandle(&h2, async_ptr));
    printf("parent.get_handle_unknown\t%d\n", (int)cuIpcGetMemHandle(&h2, 0x100000));
    unsigned char check = 0;
    cuMemcpyDtoH(&check, d + 5, 1);
    printf("parent.still_readable\t%02x\n", check);

    char hex[2 * CU_IPC_HANDLE_SIZE + 1];
    for (int i = 0; i < CU_IPC_HANDLE_SIZE; i++) sprintf(hex + 2 * i, "%02x", (unsigned char)h.reserved[i]);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", argv[0], "child", hex, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    printf("parent.child_exit\t%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    unsigned char got[3];
    cuMemcpyDtoH(&got[0], d + 99, 1);
    cuMemcpyDtoH(&got[1], d + 100, 1);
    cuMemcpyDtoH(&got[2], d + 116, 1);
    printf("parent.sees_child_writes\t%02x %02x %02x\n", got[0], got[1], got[2]);
    printf("parent.free\t%d\n", (int)cuMemFree(d));
    cuMemFreeAsync(async_ptr, 0);
    return 0;
}
