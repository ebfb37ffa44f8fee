// sanitizer_planted: two planted memory errors for compute-sanitizer's memcheck (issue 24),
// run by scripts/gpu/sanitizer.sh bare, under cuguard's pool without NVTX registration, and
// under the pool with it.
//
//   1. one element past the end of a 1,000-byte cudaMalloc allocation, written by a kernel
//      (a second 1,000-byte allocation follows it, so under the pool the byte is inside the
//      pool's chunk);
//   2. a kernel writing a 1,000-byte allocation after its cudaFree.
//
// A correct write (the last byte of the second allocation) is made too: it must not be
// reported. Prints the two target addresses ("oob_target", "uaf_target") so the script can
// match each report to its error, and "done" at the end. Build: nvcc -O2 -lineinfo.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void poke(unsigned char *p, size_t i, unsigned char v) { p[i] = v; }

static void step(const char *what) {
    cudaError_t launch = cudaGetLastError();
    cudaError_t sync = cudaDeviceSynchronize();
    std::printf("%s: launch %s, sync %s\n", what, cudaGetErrorName(launch), cudaGetErrorName(sync));
    std::fflush(stdout);
}

int main() {
    const size_t n = 1000;
    unsigned char *a = nullptr, *b = nullptr, *c = nullptr;
    if (cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess) {
        std::printf("cudaMalloc failed\n");
        return 1;
    }
    cudaMemset(a, 0, n);
    cudaMemset(b, 0, n);
    std::printf("allocations a=%p b=%p (%zu bytes each)\n", (void *)a, (void *)b, n);
    std::printf("oob_target %p\n", (void *)(a + n));
    poke<<<1, 1>>>(a, n, 1);
    step("one past the end of a");

    if (cudaMalloc(&c, n) != cudaSuccess) return 1;
    cudaMemset(c, 0, n);
    cudaFree(c);
    std::printf("uaf_target %p\n", (void *)c);
    poke<<<1, 1>>>(c, 0, 2);
    step("write after free of c");

    poke<<<1, 1>>>(b, n - 1, 3);
    step("last byte of b (correct)");
    cudaFree(a);
    cudaFree(b);
    std::printf("done\n");
    return 0;
}
