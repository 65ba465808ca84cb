// A persistent GEMV item's dot products on the tensor cores (persist_dot_mma; persistent_gemv.cuh's gemv_pages takes
// an MmaX where it takes x's floats). Host code can run it too, with 32 threads as the lanes and the tensor cores'
// operations emulated (tests/cpu/mma_dot.cu), so its fragments are checked without a GPU.
#pragma once

#ifndef KIEC_MMA_CHAINS
#define KIEC_MMA_CHAINS 2  // an item's independent chains of dependent mmas at most (persist_dot_mma_chains)
#endif

namespace kiec {

// 16 chunks (128 elements) of an item's segment an mma.m16n8k16, as a block diagonal (bench/mma_rows.cu's diag_rows,
// forty-ninth session). B's column n is chunks n (its k 0-7) and 8 + n (k 8-15) of the step, as ldmatrix.x4 gives two
// steps from a warp's 512 contiguous bytes with lane l's row address at chunk 32 v + l: dot_lanes' own 16-byte chunk a
// lane, so the layout, pages and deal stay as they are, free of bank conflicts. A's row n holds x's hi pieces of the
// same two chunks and row 8 + n their lo pieces (x = hi + lo: 16 significant bits with bf16), so D[n][n] + D[8 + n][n]
// is column n's part of the item's dot; D's other 112 entries are products nobody reads (256 of the mma's 2048 used:
// one mma a 256-byte step, where the ninth session's diagonal, taken out, took two), in up to KIEC_MMA_CHAINS chains
// of dependent mmas added at the item's end. Sums in fp32 in the tensor cores' order: not dot_lanes' bits.
// A lane (g = lane / 4, q = lane % 4) holds step t's A in a[t]: x's elements 2q, 2q + 1 of chunk 16 t + g (a0 hi,
// a1 lo) and of chunk 16 t + 8 + g (a2, a3), zeros past the segment, where the lanes' loads are clamped to the item's
// first chunk (whose finite weights then add nothing); as many registers as dot_lanes' floats of x. D[n][n] and
// D[8 + n][n] are lane 4 n + n / 2's elements n % 2 and 2 + n % 2: a lane's part of the item's sum is those two or
// zero, and the warp sum adds the columns as it adds dot_lanes' lanes.
// G: the GEMV's shape (persistent_gemv.cuh: GemvShape's SEGC, ROUNDS, SILU); Core: the tensor cores' operations
// (persistent_gemv.cuh: TensorCores): ldsm4(p, m) (ldmatrix.x4 from this lane's row address p), mma(d, a, b0, b1)
// (d += A B) and split(x, y, hi, lo) (two elements' hi and lo pieces, packed as a pair each).
template <typename G, typename Core>
struct MmaX {
  static constexpr int STEPS = (G::SEGC + 15) / 16, ACC = STEPS < KIEC_MMA_CHAINS ? STEPS : KIEC_MMA_CHAINS;
  Core core;
  unsigned a[STEPS][4];
  // Round v of the segment's x (its 32 chunks' floats from xr on, 16-byte aligned; nothing read past the segment):
  // steps 2 v and 2 v + 1.
  __host__ __device__ __forceinline__ void load_round(const float* xr, int v, int lane) {
    const int g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int t = 2 * v + s;
      if (t >= STEPS) break;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int c = 16 * s + 8 * h + g;  // (in the round)
        const bool in = G::SEGC % 16 == 0 || 32 * v + c < G::SEGC;
        float2 pair = {0.f, 0.f};
        if (in) {
#ifdef __CUDA_ARCH__
          pair = *reinterpret_cast<const float2*>(xr + c * 8 + 2 * q);  // (one 8-byte load: xr is 16-byte aligned)
#else
          pair = {xr[c * 8 + 2 * q], xr[c * 8 + 2 * q + 1]};
#endif
        }
        core.split(pair.x, pair.y, a[t][2 * h], a[t][2 * h + 1]);
      }
    }
  }
  // Segment `seg` of x (floats, 16-byte aligned: the scratch).
  __host__ __device__ __forceinline__ void load(const float* xs, int seg, int lane) {
#pragma unroll
    for (int v = 0; v < G::ROUNDS; ++v) load_round(xs + (seg * G::SEGC + 32 * v) * 8, v, lane);
  }
  __host__ __device__ __forceinline__ void zero() {
#pragma unroll
    for (int t = 0; t < STEPS; ++t) a[t][0] = a[t][1] = a[t][2] = a[t][3] = 0u;
  }
  // dot_lanes' contract: the item's segment at w0 (w1: its up row's, SiLU-mul), this lane's part of each sum.
  __host__ __device__ __forceinline__ void dot(const char* w0, const char* w1, int lane, float& a0, float& a1) const {
    float d0[ACC][4], d1[ACC][4];
#pragma unroll
    for (int i = 0; i < ACC; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) d0[i][e] = d1[i][e] = 0.f;
#pragma unroll
    for (int v = 0; v < G::ROUNDS; ++v) {
      const int c = 32 * v + lane, at = (G::SEGC % 32 == 0 || c < G::SEGC ? c : 0) * 16;
      const bool second = 32 * v + 16 < G::SEGC;  // (the round's second step holds chunks of the segment)
      const int t0 = 2 * v, t1 = second ? 2 * v + 1 : 2 * v;
      unsigned b[4];
      core.ldsm4(w0 + at, b);
      core.mma(d0[t0 % ACC], a[t0], b[0], b[1]);
      if (second) core.mma(d0[t1 % ACC], a[t1], b[2], b[3]);
      if (G::SILU) {
        core.ldsm4(w1 + at, b);
        core.mma(d1[t0 % ACC], a[t0], b[0], b[1]);
        if (second) core.mma(d1[t1 % ACC], a[t1], b[2], b[3]);
      }
    }
#pragma unroll
    for (int i = 1; i < ACC; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        d0[0][e] += d0[i][e];
        d1[0][e] += d1[i][e];
      }
    const int g = lane >> 2;
    const bool diag = (lane & 3) == g >> 1;
    a0 = diag ? (g & 1 ? d0[0][1] + d0[0][3] : d0[0][0] + d0[0][2]) : 0.f;
    a1 = diag && G::SILU ? (g & 1 ? d1[0][1] + d1[0][3] : d1[0][0] + d1[0][2]) : 0.f;
  }
};

}  // namespace kiec
