// throws.cc: a C++ library that throws and catches three exceptions at each call: the runtime's
// own type (std::runtime_error, its type information in libstdc++), a type of its own and an
// int. Loaded by Python's ctypes, in a scope of its own, under the shim, whose __cxa_throw must
// hand each throw on to this library's C++ runtime (tests/it/rmm_oom.rs).
#include <stdexcept>

namespace mine {
struct oops : std::runtime_error {
    oops() : std::runtime_error("mine") {}
};
}  // namespace mine

extern "C" int throws_caught() {
    int n = 0;
    try {
        throw std::runtime_error("the runtime's");
    } catch (std::exception const&) {
        n++;
    }
    try {
        throw mine::oops();
    } catch (std::exception const&) {
        n++;
    }
    try {
        throw 42;
    } catch (int) {
        n++;
    }
    return n;
}
