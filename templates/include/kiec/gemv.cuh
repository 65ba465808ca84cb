// GEMV y = W x for batch-1 decode, with the norm as prologue and elementwise work as epilogue.
//
// W is [rows, K] row-major in T (bf16/fp16). Each warp owns ROWS outputs at a time and streams their weight
// rows with 16-byte loads, lane l taking chunks l, l+32, ...; U chunks per row are loaded before the first
// use so that several loads are in flight. x (after the prologue) sits in shared memory as float.
#pragma once
#include "common.cuh"

namespace kiec {

enum Epilogue { EPI_STORE = 0, EPI_RESIDUAL = 1, EPI_SILU_MUL = 2, EPI_ARGMAX = 3 };

// The prologue: x (K floats) into shared memory, RMS-normed with norm_w when NORM. `red` holds one float a warp.
template <typename T, int K, bool NORM, int THREADS>
__device__ __forceinline__ void gemv_prologue(const float* x, const T* norm_w, float eps, float* xs, float* red) {
  float ss = 0.f;
  for (int i = threadIdx.x; i < K; i += THREADS) {
    const float v = x[i];
    xs[i] = v;
    ss += v * v;
  }
  if (NORM) {
    const float scale = rsqrtf(block_sum(ss, red) / K + eps);
    for (int i = threadIdx.x; i < K; i += THREADS) xs[i] = xs[i] * scale * to_float<T>(norm_w[i]);
  }
  sync_block();
}

// MIN_BLOCKS in the launch bounds matters: without it ptxas aims at full occupancy, keeps ~40 registers
// and sinks each weight load next to its use (two loads in flight); with it, all U x NR loads issue first.
template <typename T, int K, int WARPS, int ROWS, bool NORM, int EPI, bool BIAS, int PREFETCH, int MIN_BLOCKS,
          bool EARLY>
__global__ void __launch_bounds__(WARPS * 32, MIN_BLOCKS)
gemv_kernel(const T* __restrict__ W, const T* __restrict__ bias, const float* __restrict__ x,
            const T* __restrict__ norm_w, float eps, float* __restrict__ y, int n_out, StepState* st) {
  static_assert(K % 8 == 0, "K must be a multiple of 8 (16-byte loads)");
  constexpr int NR = EPI == EPI_SILU_MUL ? 2 * ROWS : ROWS;  // weight rows per warp pass
  // 16 loads of 16 bytes in flight per lane: U chunks of each of the NR rows
  constexpr int CHUNKS = K / 8, ITERS = (CHUNKS + 31) / 32, U = NR >= 16 ? 1 : 16 / NR;
  extern __shared__ float xs[];
  __shared__ float red[WARPS];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  const int stride = gridDim.x * WARPS * ROWS, first = (blockIdx.x * WARPS + warp) * ROWS;
  auto rows_of = [&](int o0, const T* (&wrow)[NR]) {
#pragma unroll
    for (int r = 0; r < NR; ++r) {
      const int o = min(o0 + (r % ROWS), n_out - 1);  // clamp the tail; its result is discarded
      wrow[r] = W + (size_t)(r >= ROWS ? o + n_out : o) * K;
    }
  };
  auto load_batch = [&](const T* const (&wrow)[NR], int it0, uint4 (&raw)[U][NR]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = (it0 + u) * 32 + lane;
#pragma unroll
      for (int r = 0; r < NR; ++r)
        raw[u][r] = (it0 + u < ITERS && (CHUNKS % 32 == 0 || c < CHUNKS)) ? load_stream(wrow[r] + c * 8)
                                                                          : make_uint4(0, 0, 0, 0);
    }
  };

  // Weights never depend on the previous kernel: load this warp's first batch into registers (EARLY) and pull
  // more of its first rows into L2 while the previous kernel finishes, then wait for its results (x, the
  // residual, st) and run the prologue with those loads in flight.
  pdl_launch_dependents();
  const T* wrow[NR];
  uint4 raw[U][NR];
  rows_of(first, wrow);
  constexpr int P0 = EARLY ? U : 0;  // chunks already on their way into registers
  if (first < n_out) {
    if (EARLY) load_batch(wrow, 0, raw);
#pragma unroll
    for (int r = 0; r < NR; ++r)
#pragma unroll
      for (int it = P0; it < P0 + PREFETCH; ++it)
        if (it < ITERS && it * 32 + lane < CHUNKS) prefetch_l2(wrow[r] + (it * 32 + lane) * 8);
  }
  pdl_wait();

  gemv_prologue<T, K, NORM, WARPS * 32>(x, norm_w, eps, xs, red);

  unsigned long long best = 0ull;
  for (int o0 = first; o0 < n_out; o0 += stride) {
    if (o0 != first) rows_of(o0, wrow);
    float acc[NR];
#pragma unroll
    for (int r = 0; r < NR; ++r) acc[r] = 0.f;
#pragma unroll
    for (int it0 = 0; it0 < ITERS; it0 += U) {
      if (!EARLY || o0 != first || it0 != 0) load_batch(wrow, it0, raw);  // EARLY: batch 0 came before the wait
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = (it0 + u) * 32 + lane;
        if (it0 + u < ITERS && (CHUNKS % 32 == 0 || c < CHUNKS)) {
          const float4 xa = *reinterpret_cast<const float4*>(xs + c * 8);
          const float4 xb = *reinterpret_cast<const float4*>(xs + c * 8 + 4);
          const float xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
          for (int r = 0; r < NR; ++r) {
            float w[8];
            unpack8<T>(raw[u][r], w);
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[r] = fmaf(w[i], xv[i], acc[r]);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < NR; ++r) acc[r] = warp_sum(acc[r]);
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const int o = o0 + r;
        if (o >= n_out) break;
        float v = acc[r] + (BIAS ? to_float<T>(bias[o]) : 0.f);
        if (EPI == EPI_STORE) y[o] = v;
        if (EPI == EPI_RESIDUAL) y[o] += v;
        if (EPI == EPI_SILU_MUL) y[o] = v / (1.f + expf(-v)) * acc[r + ROWS];
        if (EPI == EPI_ARGMAX) {
          y[o] = v;
          const unsigned long long k = argmax_key(v, o);
          best = k > best ? k : best;
        }
      }
    }
  }
  if (EPI == EPI_ARGMAX && lane == 0 && best) atomicMax(&st->argmax, best);
}

}  // namespace kiec
