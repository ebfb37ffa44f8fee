// planted_leaks: a CUDA C++ program (runtime API, built with nvcc) with leaks planted in known
// functions, for comparing cuguard with compute-sanitizer's leak check.
//   leak_in_static_function: 1 MiB, static function
//   leak_in_thread:          2 MiB, a std::thread's function
//   leak_in_loop:            3 x 256 KiB
//   balanced:                10 allocations, all freed
// Expected: 15 cudaMalloc, 5 kept, 3.75 MiB kept.
#include <cuda_runtime.h>
#include <cstdio>
#include <thread>
#include <vector>

#define CHECK(x)                                                                   \
    do {                                                                           \
        cudaError_t e_ = (x);                                                      \
        if (e_ != cudaSuccess) {                                                   \
            std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
            return;                                                                \
        }                                                                          \
    } while (0)

__global__ void fill(float *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = 1.0f;
}

static void leak_in_static_function() {
    void *p;
    CHECK(cudaMalloc(&p, 1 << 20));
}

void leak_in_thread() {
    void *p;
    CHECK(cudaMalloc(&p, 2 << 20));
    fill<<<(512 + 255) / 256, 256>>>(static_cast<float *>(p), 512);
    CHECK(cudaDeviceSynchronize());
}

void leak_in_loop() {
    for (int i = 0; i < 3; i++) {
        void *p;
        CHECK(cudaMalloc(&p, 256 << 10));
    }
}

void balanced() {
    std::vector<void *> v(10);
    for (auto &p : v) CHECK(cudaMalloc(&p, 64 << 10));
    for (auto p : v) CHECK(cudaFree(p));
}

int main() {
    balanced();
    leak_in_static_function();
    std::thread t(leak_in_thread);
    t.join();
    leak_in_loop();
    std::printf("{\"case\":\"planted\",\"allocated\":15,\"kept\":5,\"kept_sizes\":[%d,%d,%d,%d,%d],\"checksum\":0}\n",
                1 << 20, 2 << 20, 256 << 10, 256 << 10, 256 << 10);
    return 0;
}
