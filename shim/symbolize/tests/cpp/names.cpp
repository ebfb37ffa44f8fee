// Test program for the symbolizer's qualified names in C++: prints the call-site offset (return
// address - 1 - load bias) of calls made from an inlined constructor, an inlined template method,
// a lambda inside a function and an out-of-line destructor, all in nested namespaces. Each call
// line carries a MARK comment that the tests look up to know the expected line.
#include <execinfo.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>

static uintptr_t base;
volatile int sink;

static int first_module(struct dl_phdr_info *info, size_t, void *) {
    base = info->dlpi_addr; /* the main program comes first */
    return 1;
}

extern "C" __attribute__((noinline)) void record(const char *tag) {
    void *frames[2];
    backtrace(frames, 2);
    printf("%s %lx\n", tag, (unsigned long)((uintptr_t)frames[1] - 1 - base));
    fflush(stdout);
}

namespace outer {
namespace inner {

struct Widget {
    int v;
    __attribute__((always_inline)) inline Widget(int x) : v(x) {
        record("ctor"); /* MARK:ctor */
        sink++;
    }
    __attribute__((noinline)) ~Widget() {
        record("dtor"); /* MARK:dtor */
        sink++;
    }
    template <typename T> __attribute__((always_inline)) inline int grow(T t) {
        record("method"); /* MARK:method */
        return v + (int)t;
    }
};

__attribute__((noinline)) int run(int x) {
    Widget w(x); /* MARK:run */
    auto f = [&](int y) __attribute__((always_inline)) {
        record("lambda"); /* MARK:lambda */
        return y + w.grow(2.0);
    };
    return f(x);
}

} // namespace inner
} // namespace outer

int main() {
    dl_iterate_phdr(first_module, nullptr);
    return outer::inner::run(3) > 100;
}
