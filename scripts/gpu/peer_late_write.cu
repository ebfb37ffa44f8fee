// Issue 13's peer check, for a machine with two GPUs (nvidia-h200-x2): device 1, with peer access to
// device 0, writes late into a block that device 0 has freed and at once allocates again.
//
//   nvcc -O1 -o peer_late_write peer_late_write.cu && LD_PRELOAD=libcuguard.so ./peer_late_write [TRIALS]
//
// Each trial: on device 0 allocate X (cudaMalloc: cuMemAlloc_v2, which the pool serves); on device 1
// start a kernel that spins about 20 ms and then fills X with 0xAA through peer access; on device 0
// free X, allocate Y of the same size, fill Y with 0x55 on a non-blocking stream of device 0,
// synchronize both devices and read Y back. A trial is corrupt when Y holds anything but 0x55.
// Prints one JSON line; exits 1 when any trial was corrupt, 3 when the devices cannot reach each other.
#include <chrono>
#include <cstdio>
#include <cstdlib>
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
  int n = 0, can = 0;
  CHECK(cudaGetDeviceCount(&n));
  if (n < 2) { fprintf(stderr, "needs two devices, found %d\n", n); return 3; }
  CHECK(cudaDeviceCanAccessPeer(&can, 1, 0));
  if (!can) { fprintf(stderr, "device 1 cannot access device 0\n"); return 3; }
  int khz = 0;
  CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 1));
  long long spin = (long long)khz * 20;
  cudaStream_t s0, s1;
  CHECK(cudaSetDevice(0));
  CHECK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  CHECK(cudaSetDevice(1));
  CHECK(cudaDeviceEnablePeerAccess(0, 0));
  CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  std::vector<unsigned char> host(bytes);
  int reused = 0, corrupt = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < trials; t++) {
    unsigned char *x = nullptr, *y = nullptr;
    CHECK(cudaSetDevice(0));
    CHECK(cudaMalloc(&x, bytes));
    CHECK(cudaSetDevice(1));
    late_fill<<<64, 256, 0, s1>>>(x, bytes, 0xAA, spin);
    CHECK(cudaGetLastError());
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(x));
    CHECK(cudaMalloc(&y, bytes));
    if (y == x) reused++;
    CHECK(cudaMemsetAsync(y, 0x55, bytes, s0));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaSetDevice(1));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaSetDevice(0));
    CHECK(cudaMemcpy(host.data(), y, bytes, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (size_t i = 0; i < bytes; i++) bad += host[i] != 0x55;
    if (bad) corrupt++;
    CHECK(cudaFree(y));
  }
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  printf("{\"bytes\": %zu, \"trials\": %d, \"reused_address\": %d, \"corrupt\": %d, \"ms_per_trial\": %.2f}\n",
         bytes, trials, reused, corrupt, ms / trials);
  return corrupt ? 1 : 0;
}
