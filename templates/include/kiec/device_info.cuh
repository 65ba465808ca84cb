// What the driver says of a GPU, as numbers kiec uses: no other kiec header needed (kiec bench's read-ceiling
// library includes it too).
#pragma once
#include <cuda_runtime.h>

namespace kiec {

// A GPU's peak memory bandwidth in GB/s (bytes a ns) from its memory clock (kHz) and bus width (bits), two transfers
// a clock: 3,201,000 kHz (H200's memory clock as nvidia-smi gave it in our runs) x 6144 bits -> 4916, though H200's
// driver attributes give 4814 (kiec bench, 2026-12-01); 2,619,000 x 5120 (H100 SXM's published figures, not read
// here) -> 3352; 0 where either is unknown.
__host__ __device__ __forceinline__ unsigned memory_peak_gbps(long long mem_khz, int bus_bits) {
  return mem_khz > 0 && bus_bits > 0 ? (unsigned)(mem_khz * bus_bits / 4000000) : 0u;
}

// memory_peak_gbps of a device, from the driver's attributes; 0 where it does not say (the error is cleared: it is
// not the caller's).
inline unsigned device_peak_gbps(int device) {
  int khz = 0, bits = 0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return memory_peak_gbps(khz, bits);
}

}  // namespace kiec
