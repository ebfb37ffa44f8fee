/* phase_odd: phases that do not pair, and too many names, through the C ABI's phases
 * (cuguard_phase_begin/_end, reached through dlsym), for the readers' bounds and notes.
 *
 *   open        begun, never ended
 *   cross       begun on this thread, "ended" on another: that thread has nothing begun (a
 *               pop without a push), and cross never ends
 *   n0..nN-1    N distinct names (argument 1, default 20000), each begun and ended: past the
 *               shim's 4096 names, one name stands for the rest
 *
 * Built by the tests with -g -O0. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "cusim.h"

static int (*phase_begin)(const char *);
static int (*phase_end)(void);

static void *other_thread(void *arg) {
    (void)arg;
    phase_end();
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    phase_begin = (int (*)(const char *))dlsym(RTLD_DEFAULT, "cuguard_phase_begin");
    phase_end = (int (*)(void))dlsym(RTLD_DEFAULT, "cuguard_phase_end");
    if (!phase_begin || !phase_end) return 1;
    CUdevice device;
    CUcontext context;
    CUdeviceptr p;
    if (cuInit(0) || cuDeviceGet(&device, 0) || cuDevicePrimaryCtxRetain(&context, device) ||
        cuCtxSetCurrent(context) || cuMemAlloc(&p, 1 << 20))
        return 1;
    phase_begin("open");
    phase_begin("cross");
    pthread_t t;
    if (pthread_create(&t, NULL, other_thread, NULL) || pthread_join(t, NULL)) return 1;
    char name[32];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "n%d", i);
        phase_begin(name);
        phase_end();
    }
    return 0;
}
