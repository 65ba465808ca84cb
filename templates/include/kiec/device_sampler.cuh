// The persistent kernel's draw of the next token on the device (select_tile in persistent.cuh): the same top-p
// sampling as kiec/sampling.py, by one block over the logits.
#pragma once
#include "common.cuh"
#include "sampling.cuh"

namespace kiec {

// Block-wide inclusive scan of one float per thread; `scratch` holds one float per warp. Every thread gets its
// prefix and (in total) the block's sum.
__device__ __forceinline__ float block_scan(float v, float* scratch, float& total) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = block_threads() >> 5;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float n = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += n;
  }
  sync_block();
  if (lane == 31) scratch[warp] = v;
  sync_block();
  float before = 0.f;
  total = 0.f;
  for (int w = 0; w < nwarps; ++w) {
    if (w < warp) before += scratch[w];
    total += scratch[w];
  }
  return v + before;
}

// Sampling (kiec/sampling.py): p ~ exp((logit - max) / temperature); top-p keeps every token with p >= tau, tau
// the largest probability whose at-or-above mass reaches top_p; the token is the first by id whose running kept
// mass exceeds u * (kept mass), u = sample_uniform(seed, pos).
//
// tau from candidates: tokens whose weight e = exp((logit - max) / T) is at least CAND_MIN go to shared memory
// (up to SAMPLE_CANDIDATES, persistent_abi.h) and are sorted there; when they are too many or do not hold the
// mass, tau is found by bisection over all logits (a flat distribution: slower, same answer). The draw scans the
// kept mass over contiguous id ranges, one per thread.
constexpr int CAND = SAMPLE_CANDIDATES;
constexpr float CAND_MIN = 1e-4f;

// A token's unnormalized probability: exp((logit - max) / temperature), in (0, 1].
struct Weights {
  const float* logits;
  float mx, inv_t;
  __device__ __forceinline__ float operator()(int i) const { return __expf((logits[i] - mx) * inv_t); }
};

__device__ __forceinline__ float kept_mass_above(const Weights& weight, int vocab, float tau, float* red) {
  float s = 0.f;
  for (int i = threadIdx.x; i < vocab; i += block_threads()) {
    const float e = weight(i);
    s += e >= tau ? e : 0.f;
  }
  return block_sum(s, red);
}

__device__ __forceinline__ int sample_block(const float* logits, int vocab, float mx, const Generation& gen, int pos,
                                            float* smem) {
  float* red = smem;                          // 32
  float* cand_e = smem + 32;                  // CAND
  int* cand_id = reinterpret_cast<int*>(cand_e + CAND);  // CAND
  __shared__ int n_cand, pick;
  __shared__ float s_tau;
  const Weights weight{logits, mx, 1.f / gen.temperature};
  if (threadIdx.x == 0) n_cand = 0;
  sync_block();
  float z = 0.f, cmass = 0.f;
  for (int i = threadIdx.x; i < vocab; i += block_threads()) {
    const float e = weight(i);
    z += e;
    if (gen.top_p < 1.f && e >= CAND_MIN) {
      const int slot = atomicAdd(&n_cand, 1);
      if (slot < CAND) { cand_e[slot] = e; cand_id[slot] = i; cmass += e; }
    }
  }
  z = block_sum(z, red);
  cmass = block_sum(cmass, red);
  float tau = 0.f;  // top_p == 1: every token with mass
  if (gen.top_p < 1.f) {
    const float target = gen.top_p * z;
    if (n_cand <= CAND && cmass >= target) {
      // bitonic sort of the candidates by e, largest first (padding sorts last)
      for (int i = n_cand + threadIdx.x; i < CAND; i += block_threads()) cand_e[i] = -1.f;
      sync_block();
      for (int k = 2; k <= CAND; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
          for (int i = threadIdx.x; i < CAND; i += block_threads()) {
            const int l = i ^ j;
            if (l > i) {
              const bool down = (i & k) == 0;  // descending runs first
              if ((cand_e[i] < cand_e[l]) == down) {
                const float te = cand_e[i]; cand_e[i] = cand_e[l]; cand_e[l] = te;
                const int ti = cand_id[i]; cand_id[i] = cand_id[l]; cand_id[l] = ti;
              }
            }
          }
          sync_block();
        }
      // the first prefix reaching the target: each thread scans `per` consecutive candidates, in order
      const int per = (CAND + block_threads() - 1) / block_threads();
      float mine = 0.f;
      for (int k = 0; k < per && threadIdx.x * per + k < CAND; ++k) mine += fmaxf(cand_e[threadIdx.x * per + k], 0.f);
      float total;
      float run = block_scan(mine, red, total) - mine;
      if (threadIdx.x == 0) s_tau = cand_e[n_cand - 1];
      sync_block();
      for (int k = 0; k < per && threadIdx.x * per + k < CAND; ++k) {
        const int i = threadIdx.x * per + k;
        const float e = fmaxf(cand_e[i], 0.f);
        if (run < target && run + e >= target) s_tau = e;  // one thread sees the crossing
        run += e;
      }
      sync_block();
      tau = s_tau;
    } else {
      // bisection on the bits of tau in (0, 1]: the largest threshold whose kept mass still reaches the target
      unsigned lo = 0u, hi = __float_as_uint(1.f);
      while (lo < hi) {
        const unsigned mid = lo + (hi - lo + 1) / 2;
        if (kept_mass_above(weight, vocab, __uint_as_float(mid), red) >= target) lo = mid;
        else hi = mid - 1;
      }
      tau = __uint_as_float(lo);
    }
  }
  // the draw: thread i holds ids [i * span, (i + 1) * span); the scan finds the thread whose range crosses
  const int span = (vocab + block_threads() - 1) / block_threads(), first = threadIdx.x * span, last = min(first + span, vocab);
  float mine = 0.f;
  for (int i = first; i < last; ++i) {
    const float e = weight(i);
    mine += e >= tau ? e : 0.f;
  }
  float total;
  const float end = block_scan(mine, red, total);
  const float x = sample_uniform(gen.seed, (unsigned long long)pos) * total;
  if (threadIdx.x == 0) pick = -1;
  sync_block();
  if (end - mine <= x && x < end) {
    float run = end - mine;
    int chosen = -1, fallback = -1;
    for (int i = first; i < last; ++i) {
      const float e = weight(i);
      if (e < tau) continue;
      fallback = i;
      run += e;
      if (run > x) { chosen = i; break; }
    }
    pick = chosen >= 0 ? chosen : fallback;
  }
  sync_block();
  if (pick < 0 && threadIdx.x == 0) {  // rounding put x past the last kept token: take the last one
    for (int i = vocab - 1; i >= 0; --i)
      if (weight(i) >= tau) { pick = i; break; }
  }
  sync_block();
  return pick;
}

}  // namespace kiec
