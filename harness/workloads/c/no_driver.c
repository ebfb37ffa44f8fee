/* no_driver: what a program sees of the driver through dlopen and dlsym alone (no -lcuda), so
 * it runs where no driver exists. Prints whether libcuda.so.1 loaded and whether the driver's
 * names resolve through RTLD_DEFAULT; under the shim the answers must be the same. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

int main(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    void *a = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
    void *g = dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2");
    void *m = dlsym(RTLD_NEXT, "malloc");
    printf("driver=%s cuMemAlloc_v2=%s cuGetProcAddress_v2=%s malloc=%s\n", h ? "yes" : "no", a ? "found" : "none",
           g ? "found" : "none", m ? "found" : "none");
    return h ? 0 : 3;
}
