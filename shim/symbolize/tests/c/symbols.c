/* Test program for the symbolizer: prints the call-site offset (return address - 1 - load
 * bias, i.e. the file vaddr of the call instruction) of calls made from a static function, an
 * inlined function, and a thread's start routine. Each call line carries a MARK comment that
 * the tests look up to know the expected line. */
#define _GNU_SOURCE
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

static uintptr_t base;
volatile int sink;

static int first_module(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    base = info->dlpi_addr; /* the main program comes first */
    return 1;
}

__attribute__((noinline)) void record(const char *tag) {
    uintptr_t ra = (uintptr_t)__builtin_return_address(0);
    printf("%s %lx\n", tag, (unsigned long)(ra - 1 - base));
    fflush(stdout);
}

static __attribute__((noinline)) void static_leaker(void) {
    record("static"); /* MARK:static */
    sink++;
}

static inline __attribute__((always_inline)) void inlined_leaker(void) {
    record("inlined"); /* MARK:inlined */
    sink++;
}

__attribute__((noinline)) void outer_of_inlined(void) {
    inlined_leaker(); /* MARK:outer */
    sink++;
}

static void *thread_start(void *arg) {
    (void)arg;
    record("thread"); /* MARK:thread */
    sink++;
    return NULL;
}

int main(void) {
    dl_iterate_phdr(first_module, NULL);
    static_leaker();
    outer_of_inlined();
    pthread_t t;
    pthread_create(&t, NULL, thread_start, NULL);
    pthread_join(t, NULL);
    return 0;
}
