// The pool's wait for pending frees, on the real driver (issue 14, item 2): when frees still waiting
// for the GPU could serve an allocation, the pool waits on the host for the oldest fence in flight,
// not for the whole device, so work submitted after that fence keeps running.
//
//   nvcc -O1 -o fence_wait fence_wait.cu && LD_PRELOAD=libcuguard.so ./fence_wait [TRIALS]
//
// Each trial: allocate 16 blocks of 4 MiB (cudaMalloc: cuMemAlloc_v2, which the pool serves), start
// on stream A a kernel that spins about 20 ms and then fills them with 0xAA, a 1-byte memset on
// stream B (so the pending work is on two streams and stream-aware reuse does not apply), free the
// blocks (64 MiB waiting: the pool records a fence), start on B a kernel that spins about 300 ms
// (work after the fence), and allocate one more 4 MiB block: every chunk of the pool is pending, so
// the pool waits. Then: whether B is still busy (a synchronization would have waited for it),
// the allocation's time, and whether the new block, set to 0x55 on A, reads back 0x55 (the late
// fill did not land in it). Prints one JSON line.
#include <cstdio>
#include <cstdlib>
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
  const int trials = argc > 1 ? atoi(argv[1]) : 8;
  const size_t bytes = 4 << 20;
  const int blocks = 16;
  int khz = 0;
  CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  cudaStream_t a, b;
  CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  unsigned char *scratch = nullptr;
  CHECK(cudaMalloc(&scratch, 1));
  std::vector<unsigned char> host(bytes);
  int busy = 0, corrupt = 0, reused = 0;
  double alloc_ms_max = 0;
  for (int t = 0; t < trials; t++) {
    unsigned char *x[blocks], *y = nullptr;
    for (int i = 0; i < blocks; i++) CHECK(cudaMalloc(&x[i], bytes));
    for (int i = 0; i < blocks; i++) late_fill<<<64, 256, 0, a>>>(x[i], bytes, 0xAA, i == 0 ? (long long)khz * 20 : 0);
    CHECK(cudaGetLastError());
    CHECK(cudaMemsetAsync(scratch, 0, 1, b));
    for (int i = 0; i < blocks; i++) CHECK(cudaFree(x[i]));
    late_fill<<<1, 1, 0, b>>>(scratch, 1, 1, (long long)khz * 300);
    CHECK(cudaGetLastError());
    auto t0 = std::chrono::steady_clock::now();
    CHECK(cudaMalloc(&y, bytes));
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (ms > alloc_ms_max) alloc_ms_max = ms;
    if (cudaStreamQuery(b) == cudaErrorNotReady) busy++;
    for (int i = 0; i < blocks; i++) reused += x[i] == y;
    CHECK(cudaMemsetAsync(y, 0x55, bytes, a));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(host.data(), y, bytes, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (size_t i = 0; i < bytes; i++) bad += host[i] != 0x55;
    if (bad) corrupt++;
    CHECK(cudaFree(y));
  }
  printf("{\"trials\": %d, \"b_busy_after_alloc\": %d, \"reused_address\": %d, \"corrupt\": %d, \"alloc_ms_max\": %.2f}\n",
         trials, busy, reused, corrupt, alloc_ms_max);
  return corrupt ? 1 : 0;
}
