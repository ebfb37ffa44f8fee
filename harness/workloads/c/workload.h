/* workload.h: shared by the leak workloads. Each program says, on stdout, exactly what it did,
 * as one JSON object, so a test can compare cuguard's report with the truth:
 *
 *   {"allocations": N,
 *    "kept":   [{"address","size","requested","api","memory","context","thread","state"}...],
 *    "events": [{"kind","address","api","result"}...],
 *    "contexts": [{"handle","device","primary"}...]}
 *
 * "context" is the context's handle ("0x..."); the test maps it to the report's context ids. */
#ifndef WORKLOAD_H
#define WORKLOAD_H

#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cusim.h"

#define CHECK(x)                                                                        \
    do {                                                                                \
        CUresult r_ = (x);                                                              \
        if (r_ != CUDA_SUCCESS) {                                                       \
            fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, (int)r_);      \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

#define MAX_ITEMS 4096

static pthread_mutex_t wl_lock = PTHREAD_MUTEX_INITIALIZER;
static char *wl_kept[MAX_ITEMS];
static int wl_nkept;
static char *wl_events[MAX_ITEMS];
static int wl_nevents;
static char *wl_contexts[64];
static int wl_ncontexts;
static int wl_allocations;

static __attribute__((unused)) unsigned wl_tid(void) { return (unsigned)syscall(SYS_gettid); }

/* Counts one allocation the program made. */
static __attribute__((unused)) void wl_allocated(void) {
    pthread_mutex_lock(&wl_lock);
    wl_allocations++;
    pthread_mutex_unlock(&wl_lock);
}

/* Records an allocation the program keeps past exit (or loses with its context). */
static __attribute__((unused)) void wl_keep(unsigned long long addr, size_t size, size_t requested, const char *api,
                    const char *memory, CUcontext ctx, unsigned tid, const char *state) {
    char *s = malloc(512);
    snprintf(s, 512,
             "{\"address\":\"0x%llx\",\"size\":%zu,\"requested\":%zu,\"api\":\"%s\",\"memory\":\"%s\","
             "\"context\":\"0x%llx\",\"thread\":%u,\"state\":\"%s\"}",
             addr, size, requested, api, memory, (unsigned long long)(uintptr_t)ctx, tid, state);
    pthread_mutex_lock(&wl_lock);
    wl_kept[wl_nkept++] = s;
    pthread_mutex_unlock(&wl_lock);
}

/* Marks every kept allocation of `ctx` as lost with its context. */
static __attribute__((unused)) void wl_context_lost(CUcontext ctx) {
    char needle[64];
    snprintf(needle, sizeof needle, "\"context\":\"0x%llx\"", (unsigned long long)(uintptr_t)ctx);
    pthread_mutex_lock(&wl_lock);
    for (int i = 0; i < wl_nkept; i++) {
        char *s = wl_kept[i];
        char *live = strstr(s, "\"live_at_exit\"");
        if (strstr(s, needle) && live) {
            char *n = malloc(600);
            size_t head = (size_t)(live - s);
            snprintf(n, 600, "%.*s\"released_by_context_destroy\"%s", (int)head, s, live + strlen("\"live_at_exit\""));
            wl_kept[i] = n;
        }
    }
    pthread_mutex_unlock(&wl_lock);
}

static __attribute__((unused)) void wl_event(const char *kind, unsigned long long addr, const char *api, CUresult result) {
    char *s = malloc(256);
    snprintf(s, 256, "{\"kind\":\"%s\",\"address\":\"0x%llx\",\"api\":\"%s\",\"result\":%d}", kind, addr, api,
             (int)result);
    pthread_mutex_lock(&wl_lock);
    wl_events[wl_nevents++] = s;
    pthread_mutex_unlock(&wl_lock);
}

static __attribute__((unused)) void wl_context(CUcontext ctx, int device, int primary) {
    char *s = malloc(128);
    snprintf(s, 128, "{\"handle\":\"0x%llx\",\"device\":%d,\"primary\":%s}", (unsigned long long)(uintptr_t)ctx,
             device, primary ? "true" : "false");
    pthread_mutex_lock(&wl_lock);
    wl_contexts[wl_ncontexts++] = s;
    pthread_mutex_unlock(&wl_lock);
}

static __attribute__((unused)) void wl_print(void) {
    printf("{\"allocations\":%d,\"kept\":[", wl_allocations);
    for (int i = 0; i < wl_nkept; i++) printf("%s%s", i ? "," : "", wl_kept[i]);
    printf("],\"events\":[");
    for (int i = 0; i < wl_nevents; i++) printf("%s%s", i ? "," : "", wl_events[i]);
    printf("],\"contexts\":[");
    for (int i = 0; i < wl_ncontexts; i++) printf("%s%s", i ? "," : "", wl_contexts[i]);
    printf("]}\n");
    fflush(stdout);
}

/* Retains device `dev`'s primary context and makes it current. */
static __attribute__((unused)) CUcontext wl_primary(int dev) {
    CUdevice d;
    CUcontext c;
    CHECK(cuDeviceGet(&d, dev));
    CHECK(cuDevicePrimaryCtxRetain(&c, d));
    CHECK(cuCtxSetCurrent(c));
    wl_context(c, dev, 1);
    return c;
}

#endif
