/* Issue 53, thin probe: can a preloaded library see RMM's out-of-memory where it is thrown?
 * It interposes the C++ runtime's __cxa_throw, says the thrown type's name (and what() for
 * RMM's), and hands the throw on unchanged. Built on the GPU machine:
 *   gcc -O2 -shared -fPIC -o /tmp/cxa_throw_probe.so scripts/gpu/cxa_throw_probe.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef void (*throw_fn)(void *, void *, void (*)(void *));

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

void __cxa_throw(void *obj, void *tinfo, void (*dest)(void *)) {
    static throw_fn real;
    if (!real) real = (throw_fn)dlsym(RTLD_NEXT, "__cxa_throw");
    const char *name = ((const char **)tinfo)[1];
    if (name && strstr(name, "rmm")) {
        double t0 = now_us();
        void **vtbl = *(void ***)obj;
        const char *(*what)(void *) = (const char *(*)(void *))vtbl[2];
        const char *w = what(obj);
        Dl_info info;
        int found = dladdr(__builtin_return_address(0), &info);
        fprintf(stderr, "cxa_throw_probe: %s from %s: %.400s (%.1f us)\n", name,
                found && info.dli_fname ? info.dli_fname : "?", w ? w : "(null)", now_us() - t0);
    } else {
        fprintf(stderr, "cxa_throw_probe: %s\n", name ? name : "(null)");
    }
    real(obj, tinfo, dest);
    __builtin_unreachable();
}
