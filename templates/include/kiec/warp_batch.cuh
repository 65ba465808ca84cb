// Summing several values over a warp's lanes at once (persistent GEMV tiles). Host code can run it too, with 32
// threads standing in for the lanes (tests/cpu/warp_batch.cu), so its bit-for-bit claim is checked without a GPU.
#pragma once

namespace kiec {

// The partner lane's value: __shfl_xor_sync over the full warp.
struct WarpXor {
  __device__ __forceinline__ float operator()(float x, int off) const { return __shfl_xor_sync(0xffffffffu, x, off); }
};

// B values of each lane (v[k]: value k) summed over the warp together: log2(B) halving exchanges leave each lane
// one value (k = lane / (32 / B)), then warp_sum's butterfly over the 32 / B lanes that share it. Each sum is made of
// the same additions in the same order as warp_sum's (own value + partner's at each step), so it is warp_sum's bit
// for bit; B values take B - 1 + log2(32 / B) shuffles instead of 5 B. B = 1 is warp_sum. Every lane calls it.
template <int B, typename Xor>
__host__ __device__ __forceinline__ float warp_sum_batch(float (&v)[B], int lane, const Xor& shfl_xor) {
  static_assert(B >= 1 && B <= 32 && (B & (B - 1)) == 0, "B is a power of two up to 32");
#pragma unroll
  for (int half = B / 2, off = 16; half >= 1; half /= 2, off /= 2) {
    const bool upper = lane & off;
#pragma unroll
    for (int i = 0; i < half; ++i) {
      const float send = upper ? v[i] : v[i + half], keep = upper ? v[i + half] : v[i];
      v[i] = keep + shfl_xor(send, off);
    }
  }
#pragma unroll
  for (int off = 16 / B; off > 0; off >>= 1) v[0] += shfl_xor(v[0], off);
  return v[0];
}

}  // namespace kiec
