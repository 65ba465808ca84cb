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

// The sum of squares of a row of x that one warp holds in the persistent GEMV's chunk layout (xr[v][i]: element
// 256 v + 8 lane + i, zero past the row), as the staged norm's block_sum over 256 threads makes it: thread t's own
// sum over its elements t + 256 e (e in order: lane t / 8's element t % 8 of each round), warp_sum's butterfly over
// each warp's 32 threads (its offsets 16 and 8 are lanes 2 and 1 apart here, 4, 2 and 1 are within a lane; each add is
// own + partner's, and a + b == b + a), then the 8 warps' sums added in warp order. So the same bits, in every lane.
// `shfl.xor(x, off)`: the value of lane ^ off; `shfl.idx(x, src)`: lane src's. Every lane calls it.
template <int ROUNDS, typename Shfl>
__host__ __device__ __forceinline__ float block_order_sum_squares(const float (&xr)[ROUNDS][8], const Shfl& shfl) {
  float q[8];  // the sums of threads 8 lane .. 8 lane + 7
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    q[i] = 0.f;
#pragma unroll
    for (int v = 0; v < ROUNDS; ++v) q[i] += xr[v][i] * xr[v][i];
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) q[i] += shfl.xor_(q[i], 2);  // (a thread's offset 16)
#pragma unroll
  for (int i = 0; i < 8; ++i) q[i] += shfl.xor_(q[i], 1);  // (8)
  const float mine = ((q[0] + q[4]) + (q[2] + q[6])) + ((q[1] + q[5]) + (q[3] + q[7]));  // (4, 2, 1)
  float ss = 0.f;  // warp w's sum is in lanes 4 w .. 4 w + 3
#pragma unroll
  for (int w = 0; w < 8; ++w) ss += shfl.idx(mine, 4 * w);
  return ss;
}

// The full warp's shuffles for block_order_sum_squares.
struct WarpShfl {
  __device__ __forceinline__ float xor_(float x, int off) const { return __shfl_xor_sync(0xffffffffu, x, off); }
  __device__ __forceinline__ float idx(float x, int src) const { return __shfl_sync(0xffffffffu, x, src); }
};

}  // namespace kiec
