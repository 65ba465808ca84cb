// What the driver says of a GPU, as numbers kiec uses: host and device code, no other kiec header needed (kiec
// bench's read-ceiling library includes it too).
#pragma once

namespace kiec {

// A GPU's peak memory bandwidth in GB/s (bytes a ns) from its memory clock (kHz) and bus width (bits), two transfers
// a clock: H200 3,201,000 kHz x 6144 bits -> 4916, H100 SXM 2,619,000 x 5120 -> 3352; 0 where either is unknown.
__host__ __device__ __forceinline__ unsigned memory_peak_gbps(long long mem_khz, int bus_bits) {
  return mem_khz > 0 && bus_bits > 0 ? (unsigned)(mem_khz * bus_bits / 4000000) : 0u;
}

}  // namespace kiec
