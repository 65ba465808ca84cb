// The MBU denominator: a streaming-read kernel (16-byte loads, 4 in flight per thread, every SM busy)
// over a buffer several times the L2. Built by `kiec bench` and called through ctypes.
#include <cuda_runtime.h>
#include <stdint.h>

#include <algorithm>
#include <vector>

#include "kiec/device_info.cuh"

// The current GPU's peak memory bandwidth, GB/s, from the driver's memory clock and bus width (the figure the
// persistent kernel's pace scales by, persist_pace_ref_gbps); 0 where the driver does not say.
extern "C" unsigned kiec_peak_gbps() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return kiec::device_peak_gbps(dev);
}

__global__ void read_kernel(const uint4* __restrict__ p, size_t n, unsigned int* sink) {
  unsigned int acc = 0;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 a = __ldg(p + i), b = __ldg(p + i + stride), c = __ldg(p + i + 2 * stride), d = __ldg(p + i + 3 * stride);
    acc ^= a.x ^ a.w ^ b.y ^ b.z ^ c.x ^ c.w ^ d.y ^ d.z;
  }
  for (; i < n; i += stride) acc ^= __ldg(p + i).x;
  if (acc == 0x9e3779b9u) *sink = acc;  // keeps the loads; practically never true
}

// Median TB/s of `reps` timed reads of `bytes` (after 3 warm-ups); negative on a CUDA error.
extern "C" double kiec_read_tbps(size_t bytes, int reps) {
  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  uint4* buf = nullptr;
  unsigned int* sink = nullptr;
  if (cudaMalloc(&buf, bytes) != cudaSuccess || cudaMalloc(&sink, 4) != cudaSuccess) return -1.0;
  cudaMemset(buf, 0x5a, bytes);
  const size_t n = bytes / sizeof(uint4);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> ms;
  for (int r = 0; r < reps + 3; ++r) {
    cudaEventRecord(a);
    read_kernel<<<sms * 4, 512>>>(buf, n, sink);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float t = 0.f;
    cudaEventElapsedTime(&t, a, b);
    if (r >= 3) ms.push_back(t);
  }
  const bool ok = cudaGetLastError() == cudaSuccess;
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaFree(buf);
  cudaFree(sink);
  if (!ok || ms.empty()) return -1.0;
  std::sort(ms.begin(), ms.end());
  return (double)bytes / (ms[ms.size() / 2] * 1e-3) / 1e12;
}
