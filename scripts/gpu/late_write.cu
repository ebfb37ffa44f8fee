// The cross-stream late-write check (issues 13 and 14): a block freed while a slow kernel on stream A
// still writes into it must not be handed out, and written on stream B, before that kernel is done.
//
//   nvcc -O1 -o late_write late_write.cu && LD_PRELOAD=libcuguard.so ./late_write [TRIALS] [BYTES] [same]
//
// With `same`, Y is filled on stream A itself (after the late kernel, in stream order): never
// corrupt, and what stream-aware reuse hands out at once.
//
// Each trial: allocate X (cudaMalloc, so cuMemAlloc_v2, which the pool serves), start on stream A a
// kernel that spins for about 20 ms and then fills X with 0xAA, free X at once, allocate Y of the same
// size, fill Y with 0x55 on stream B (cudaMemsetAsync), synchronize the device and read Y back. A
// trial is corrupt when Y holds anything but 0x55: the late write landed in the reused block. Prints
// one JSON line: trials, how many reused X's address, how many were corrupt, and the time per trial.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <vector>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); exit(2); } } while (0)

__global__ void late_fill(unsigned char *p, size_t n, unsigned char v, long long spin) {
  long long start = clock64();
  while (clock64() - start < spin) {}
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = v;
}

int main(int argc, char **argv) {
  int trials = argc > 1 ? atoi(argv[1]) : 24;
  const size_t bytes = argc > 2 ? strtoull(argv[2], nullptr, 0) : (8 << 20);
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  int khz = 0;
  CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  long long spin = (long long)khz * 20;  // about 20 ms at the SM clock
  cudaStream_t a, b;
  const bool same = argc > 3 && !strcmp(argv[3], "same");
  CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  std::vector<unsigned char> host(bytes);
  int reused = 0, corrupt = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < trials; t++) {
    unsigned char *x = nullptr, *y = nullptr;
    CHECK(cudaMalloc(&x, bytes));
    late_fill<<<64, 256, 0, a>>>(x, bytes, 0xAA, spin);
    CHECK(cudaGetLastError());
    CHECK(cudaFree(x));
    CHECK(cudaMalloc(&y, bytes));
    if (y == x) reused++;
    CHECK(cudaMemsetAsync(y, 0x55, bytes, same ? a : b));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(host.data(), y, bytes, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (size_t i = 0; i < bytes; i++) bad += host[i] != 0x55;
    if (bad) corrupt++;
    CHECK(cudaFree(y));
  }
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  printf("{\"device\": \"%s\", \"bytes\": %zu, \"stream\": \"%s\", \"trials\": %d, \"reused_address\": %d, \"corrupt\": %d, \"ms_per_trial\": %.2f}\n",
         prop.name, bytes, same ? "same" : "other", trials, reused, corrupt, ms / trials);
  return corrupt ? 1 : 0;
}
