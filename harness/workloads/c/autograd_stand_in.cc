/* autograd_stand_in: a stand-in for PyTorch's autograd engine, for the origin tests
 * (tests/it/origin.rs): a backward "node" that allocates on a native thread of the library's
 * own, which has no Python frames, while the calling thread waits, as the engine does. Its
 * functions carry the engine's names (torch::autograd::Engine::thread_main, an
 * AddmmBackward0::apply node), so the site rules read its stacks as they read PyTorch's.
 *
 *     extern "C" int run_backward(CUdeviceptr *out, size_t bytes);  // 0 or the CUresult
 *
 * Build: c++ -O0 -g -shared -fPIC autograd_stand_in.cc -lcuda -lpthread. */
#include <pthread.h>

#include "cusim.h"

namespace {
struct Task {
    CUdeviceptr *out;
    size_t bytes;
    CUcontext ctx;
    int result;
};
}  // namespace

namespace torch {
namespace autograd {
namespace generated {
struct AddmmBackward0 {
    __attribute__((noinline)) int apply(Task *t);
};
__attribute__((noinline)) int AddmmBackward0::apply(Task *t) {
    return cuMemAlloc(t->out, t->bytes);
}
}  // namespace generated

struct Engine {
    static void *thread_main(void *arg);
};

__attribute__((noinline)) void *Engine::thread_main(void *arg) {
    Task *t = static_cast<Task *>(arg);
    if (cuCtxSetCurrent(t->ctx) != CUDA_SUCCESS) {
        t->result = -1;
        return nullptr;
    }
    generated::AddmmBackward0 node;
    t->result = node.apply(t);
    return nullptr;
}
}  // namespace autograd
}  // namespace torch

extern "C" int run_backward(CUdeviceptr *out, size_t bytes) {
    Task t{out, bytes, nullptr, -1};
    if (cuCtxGetCurrent(&t.ctx) != CUDA_SUCCESS) return -1;
    pthread_t thread;
    if (pthread_create(&thread, nullptr, torch::autograd::Engine::thread_main, &t) != 0) return -1;
    pthread_join(thread, nullptr);
    return t.result;
}
