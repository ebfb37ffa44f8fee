/* stress_tsan_glue: the ThreadSanitizer entry points that rustc's instrumentation calls and gcc's
 * libtsan does not export (LLVM's runtime has them). Linked into the stress program for the race
 * run (tests/it/reliability_race.rs); each forwards to an entry libtsan does have, so the
 * accesses are still checked. Not compiled with -fsanitize. */
#include <stddef.h>
#include <string.h>

void __tsan_read_range(const void *addr, size_t size);
void __tsan_write_range(void *addr, size_t size);

void *__tsan_memcpy(void *d, const void *s, size_t n) {
    __tsan_read_range(s, n);
    __tsan_write_range(d, n);
    return memcpy(d, s, n);
}
void *__tsan_memmove(void *d, const void *s, size_t n) {
    __tsan_read_range(s, n);
    __tsan_write_range(d, n);
    return memmove(d, s, n);
}
void *__tsan_memset(void *d, int c, size_t n) {
    __tsan_write_range(d, n);
    return memset(d, c, n);
}
#define UNALIGNED(n)                                                                           \
    void __tsan_unaligned_read##n(const void *a) { __tsan_read_range(a, n); }                 \
    void __tsan_unaligned_write##n(void *a) { __tsan_write_range(a, n); }
UNALIGNED(2)
UNALIGNED(4)
UNALIGNED(8)
