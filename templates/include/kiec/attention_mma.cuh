// Decode attention's slice on the tensor cores (persist_attn_mma; bench/kv_slice.cu's mma_slice timed the idea
// first): a warp's pass of rows as the mmas take them (MmaPass), the first passes a split may load early, and the
// passes themselves (mma_passes), which leave each warp's (m, l, o) where attention.cuh's FMA passes do.
#pragma once
#include <type_traits>

#include "attention_merge.cuh"
#include "common.cuh"

namespace kiec {

struct NoMmaPass {};  // (attention_slice's mfirst without MMA_FIRST, so that it makes no MmaPass for heads other
                      // than 64 or 128 wide: graph mode's slice has any width)

// A warp's pass on the tensor cores: KEYS rows from j0 (16 a chunk), each lane's share of them as the mmas take it
// (lane t: group t / 4, quad t % 4). K, for each 8 rows b: row j0 + 8b + group, its HEAD_DIM / 4 dims from
// HEAD_DIM / 4 * quad; V, for each 16 rows c: rows j0 + 16c + 2 quad + {0, 1, 8, 9}, their HEAD_DIM / 8 dims from
// HEAD_DIM / 8 * group. Rows from `hi` on are zeros (never loaded).
template <typename T, int HEAD_DIM, int KEYS>
struct MmaPass {
  static_assert(HEAD_DIM % 64 == 0 && KEYS % 16 == 0, "the tensor cores' slice: head_dim 64 or 128, 16 keys a chunk");
  static constexpr int C = KEYS / 16, KW = HEAD_DIM / 32, VW = HEAD_DIM / 64;  // chunks; uint4s of a K, a V row
  uint4 k[2 * C][KW], v[C][4][VW];
  // The cache row a lane's slot holds in the pass from j0 (the mma fragments' layout): K's slot b (grp: lane / 4), V's
  // slot r of chunk c (quad: lane % 4). load, put_row and load_row all place rows by these.
  __device__ __forceinline__ static int k_row(int j0, int b, int grp) { return j0 + 8 * b + grp; }
  __device__ __forceinline__ static int v_row(int j0, int c, int r, int quad) {
    return j0 + 16 * c + 2 * quad + (r & 1) + 8 * (r >> 1);
  }
  __device__ __forceinline__ void load(const T* kc, const T* vc, int j0, int hi) {
    const int lane = threadIdx.x & 31, quad = lane & 3, grp = lane >> 2;
#pragma unroll
    for (int b = 0; b < 2 * C; ++b) {
      const int j = k_row(j0, b, grp);
#pragma unroll
      for (int w = 0; w < KW; ++w)
        k[b][w] = j < hi ? *reinterpret_cast<const uint4*>(kc + (size_t)j * HEAD_DIM + quad * (HEAD_DIM / 4) + 8 * w)
                         : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int j = v_row(j0, c, r, quad);
#pragma unroll
        for (int w = 0; w < VW; ++w)
          v[c][r][w] = j < hi ? *reinterpret_cast<const uint4*>(vc + (size_t)j * HEAD_DIM + grp * (HEAD_DIM / 8) +
                                                                8 * w)
                              : make_uint4(0, 0, 0, 0);
      }
  }
  // Row `pos` of the pass from j0, where this lane holds it: the new row as the cache has it (kn, vn: its floats;
  // pack8 rounds as the cache's write does: the same bits as loading it).
  __device__ __forceinline__ void put_row(int j0, int pos, const float* kn, const float* vn) {
    const int lane = threadIdx.x & 31, quad = lane & 3, grp = lane >> 2;
#pragma unroll
    for (int b = 0; b < 2 * C; ++b)
      if (k_row(j0, b, grp) == pos)
#pragma unroll
        for (int w = 0; w < KW; ++w) k[b][w] = pack8<T>(kn + quad * (HEAD_DIM / 4) + 8 * w);
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        if (v_row(j0, c, r, quad) == pos)
#pragma unroll
          for (int w = 0; w < VW; ++w) v[c][r][w] = pack8<T>(vn + grp * (HEAD_DIM / 8) + 8 * w);
  }
  // Row `row` of the pass from j0, where this lane holds it and it lies below `hi`, loaded over what its slots hold
  // (persist_attn_mma_first 2: the row the tile's loads before its wait left out).
  __device__ __forceinline__ void load_row(const T* kc, const T* vc, int j0, int row, int hi) {
    if (row < 0 || row >= hi) return;
    const int lane = threadIdx.x & 31, quad = lane & 3, grp = lane >> 2;
#pragma unroll
    for (int b = 0; b < 2 * C; ++b)
      if (k_row(j0, b, grp) == row)
#pragma unroll
        for (int w = 0; w < KW; ++w)
          k[b][w] = *reinterpret_cast<const uint4*>(kc + (size_t)row * HEAD_DIM + quad * (HEAD_DIM / 4) + 8 * w);
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        if (v_row(j0, c, r, quad) == row)
#pragma unroll
          for (int w = 0; w < VW; ++w)
            v[c][r][w] = *reinterpret_cast<const uint4*>(vc + (size_t)row * HEAD_DIM + grp * (HEAD_DIM / 8) + 8 * w);
  }
};
// How many of the tensor cores' passes a split loads early with persist_attn_mma_first (MMA_FIRST): those in flight
// (MMA_AHEAD), or none without the tensor cores or MMA_FIRST.
template <int MMA_KEYS, int MMA_FIRST, int MMA_AHEAD>
struct FirstPassCount {  // (a struct: as a variable template, attention_slice's parameter failed to match)
  static constexpr int value = MMA_KEYS > 0 && MMA_FIRST ? MMA_AHEAD : 0;
};
// Those passes' registers, or nothing where there are none.
template <typename T, int HEAD_DIM, int KEYS, int FIRST>
using FirstPasses = std::conditional_t<(FIRST > 0), MmaPass<T, HEAD_DIM, KEYS>, NoMmaPass>;
// The first row of warp `warp`'s pass `a` of a slice from `lo` (mma_passes' j0 for its first passes).
template <int WARPS, int KEYS>
__device__ __forceinline__ int first_pass_row(int lo, int warp, int a) {
  return lo + warp * KEYS + a * (WARPS * KEYS);
}

// Rows [lo, hi) of a slice on the tensor cores (persist_attn_mma), q (normed, rotated) in sm.qs: each warp's (m, l,
// o) into sm as attention_slice's FMA passes leave them (the same merge follows). Warp w's passes take KEYS rows from
// lo + KEYS w, WARPS KEYS apart, the next AHEAD passes' rows loaded while one computes where heads are 64 wide (0:
// none); 128 wide, a pass's rows are loaded as it starts (two passes' rows beside 64 accumulators a lane spilled
// 608 B on qwen3-1.7b, scripts/ptxas.py 2026-12-03; one pass's spill nothing). The scores: A's 16 rows are the
// group's q (scaled) split in two T halves, row h the rounded q of head h, row 8 + h what rounding left (GROUP <= 8;
// rows of no head are zeros); B's 8 columns 8 keys, its k 16 dims of the head, permuted so that each lane's K share
// (MmaPass) is contiguous, q's fragments permuted alike. Lane t then holds, for head t / 4, the two halves' sums for
// keys 2 (t % 4) + {0, 1} of each 8. The weighted sum: those weights, split in two halves likewise, are A of an mma
// over 16 keys as its k, whose 8 columns are 8 of the head's dims (lane t's columns dims HEAD_DIM / 8 * (t / 4) +
// j, mma j). Not the FMA passes' bits: q and the weights carry 16 of fp32's 24 significant bits with bf16, K and V
// exactly.
// FIRST (persist_attn_mma_first, 64 wide): `first` holds the first AHEAD passes' rows, loaded by attention_slice
// beside q's (the new row put in from shared memory): the same rows, the same bits.
template <typename T, int HEAD_DIM, int GROUP, int WARPS, int KEYS, bool SOFTCAP, int AHEAD = 1, bool FIRST = false>
__device__ __forceinline__ void mma_passes(AttentionSmem<HEAD_DIM, GROUP, WARPS>& sm, const T* kc, const T* vc,
                                           float scale, float softcap, int lo, int hi,
                                           const MmaPass<T, HEAD_DIM, KEYS>* first = nullptr) {
  static_assert(GROUP <= 8, "the tensor cores' slice: at most 8 query heads a KV head (16 rows: two halves)");
  using Pass = MmaPass<T, HEAD_DIM, KEYS>;
  constexpr int C = Pass::C, DQ = HEAD_DIM / 4, DV = HEAD_DIM / 8, STEP = WARPS * KEYS;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, quad = lane & 3, grp = lane >> 2;
  unsigned qh[DQ / 2] = {}, ql[DQ / 2] = {};  // head grp's dims DQ quad + [0, DQ), as pairs, rounded and the rest
  if (grp < GROUP) {
    const float* q = &sm.qs[grp][quad * DQ];
#pragma unroll
    for (int w = 0; w < DQ / 2; ++w) split_pair<T>(q[2 * w] * scale, q[2 * w + 1] * scale, qh[w], ql[w]);
  }
  float m = -INFINITY, l = 0.f, o[DV][4] = {};
  auto step = [&](const Pass& p, int j0) {
    float sc[2 * C][2];  // keys j0 + 8b + 2 quad + e
#pragma unroll
    for (int b = 0; b < 2 * C; ++b) {
      const unsigned* kw = reinterpret_cast<const unsigned*>(&p.k[b][0]);
      float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int s = 0; s < HEAD_DIM / 16; ++s) {
        const unsigned a[4] = {qh[2 * s], ql[2 * s], qh[2 * s + 1], ql[2 * s + 1]};
        mma_16816<T>(d, a, kw[2 * s], kw[2 * s + 1]);
      }
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float sv = d[e] + d[2 + e];
        if (SOFTCAP && softcap > 0.f) sv = softcap * tanhf(sv / softcap);
        sc[b][e] = j0 + 8 * b + 2 * quad + e < hi ? sv : -INFINITY;
      }
    }
    float mx = m;
#pragma unroll
    for (int b = 0; b < 2 * C; ++b) mx = fmaxf(mx, fmaxf(sc[b][0], sc[b][1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));  // finite: the pass's first row is below hi
    const float corr = __expf(m - mx);  // (m = -inf: 0, and l and o are still 0)
    l *= corr;
#pragma unroll
    for (int j = 0; j < DV; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[j][e] *= corr;
    m = mx;
#pragma unroll
    for (int c = 0; c < C; ++c) {
      float w[4];  // keys 16c + 2 quad + {0, 1, 8, 9}: the mma's k 2 quad + {0, 1}, then + 8
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        w[i] = __expf(sc[2 * c + (i >> 1)][i & 1] - m);
        l += w[i];
      }
      unsigned a[4];  // rows grp: the weights rounded; rows 8 + grp: the rest
      split_pair<T>(w[0], w[1], a[0], a[1]);
      split_pair<T>(w[2], w[3], a[2], a[3]);
      const unsigned* v0 = reinterpret_cast<const unsigned*>(&p.v[c][0][0]);
      const unsigned* v1 = reinterpret_cast<const unsigned*>(&p.v[c][1][0]);
      const unsigned* v2 = reinterpret_cast<const unsigned*>(&p.v[c][2][0]);
      const unsigned* v3 = reinterpret_cast<const unsigned*>(&p.v[c][3][0]);
#pragma unroll
      for (int j = 0; j < DV; ++j) {  // dim DV grp + j of the rows a k pair holds
        const unsigned sel = (j & 1) ? 0x7632u : 0x5410u;
        mma_16816<T>(o[j], a, __byte_perm(v0[j >> 1], v1[j >> 1], sel), __byte_perm(v2[j >> 1], v3[j >> 1], sel));
      }
    }
  };
  int j0 = lo + warp * KEYS;
  static_assert(AHEAD >= 0 && (AHEAD == 1 || HEAD_DIM == 64), "the tensor cores' slice: passes in flight, 64 wide");
  constexpr int INFLIGHT = HEAD_DIM == 64 ? AHEAD : 0;  // passes loading while one computes (128 wide: none)
  static_assert(!FIRST || INFLIGHT > 0, "the first passes' rows loaded early: heads 64 wide (passes in flight)");
  Pass p[INFLIGHT + 1];
#pragma unroll
  for (int a = 0; a < INFLIGHT; ++a) {
    if (FIRST) p[a] = first[a];
    else if (j0 + a * STEP < hi) p[a].load(kc, vc, j0 + a * STEP, hi);
  }
  for (; j0 < hi; j0 += STEP) {  // (warp-uniform: the mmas and shuffles run on all lanes or none)
    if (j0 + INFLIGHT * STEP < hi) p[INFLIGHT].load(kc, vc, j0 + INFLIGHT * STEP, hi);
    step(p[0], j0);
#pragma unroll
    for (int a = 0; a < INFLIGHT; ++a) p[a] = p[a + 1];  // (a pass past hi is moved, never stepped)
  }
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  if (grp < GROUP) {
    if (quad == 0) {
      sm.wm[warp][grp] = m;
      sm.wl[warp][grp] = l;
    }
#pragma unroll
    for (int j = 0; j < DV; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) sm.wo[warp][grp][DV * (2 * quad + e) + j] = o[j][e] + o[j][2 + e];
  }
  sync_block();
}

}  // namespace kiec
