// The persistent kernel's GEMV tile (persistent.cuh): a norm or copy prologue, the dot products over weight pages
// the ring (ring.cuh) streamed in, and the epilogue; each tile is one SM's share of a GEMV's rows.
#pragma once
#include <type_traits>

#include "attention_merge.cuh"
#include "gemv.cuh"
#include "gemv_mma.cuh"
#include "item_deal.cuh"
#include "item_share.cuh"
#include "persistent_tile.cuh"
#include "ring.cuh"
#include "warp_batch.cuh"

namespace kiec {

#ifndef KIEC_COPY_BATCH
#define KIEC_COPY_BATCH 8
#endif
// KIEC_NORM_BATCH (persist_norm_batch): a normed tagged x's words a thread loads at once (run_tagged). 8 takes
// llama-3.1-8b's K 4096 (16 words a thread) in two round trips, the others' K 2048 in one.
#ifndef KIEC_NORM_BATCH
#define KIEC_NORM_BATCH 8
#endif
// KIEC_WARP_COPY_ROUNDS (persist_warp_copy_rounds): rounds of a warp's own copy of tagged pairs loaded at once
// (load_x_slice_warp_copy's PX; 2 16-byte loads a lane a round). 4 takes llama-3.1-8b's 7 in two round trips.
#ifndef KIEC_WARP_COPY_ROUNDS
#define KIEC_WARP_COPY_ROUNDS 4
#endif

// The GEMV prologue (gemv_prologue's math, in its order) with the norm's weights loaded into registers before the
// tile waits on its inputs: weights never depend on activations, and after the wait only x is left to fetch.
// KIEC_NORM_W_RAW (persist_norm_w_raw): the held norm weights stay in their own type until the norm (the same
// bits). Converted at their load, the conversion stood before the tile's wait in the SASS, so the polling warp
// waited for the weights' round trip before its first poll.
#ifndef KIEC_NORM_W_RAW
#define KIEC_NORM_W_RAW 0
#endif
// KIEC_NORM_LATE_SCALE (persist_norm_late_scale; held weights only): normalize writes x times the norm's weights and
// keeps this thread's sum of squares; after the dot products each warp adds its lanes' (publish_late) and the
// epilogue multiplies each row's sum by the scale (late_scale: block_sum's additions, so the scale's bits are the
// same, not the outputs'). From x to the dot products the norm then takes one block barrier, not three, and no
// shuffles.
#ifndef KIEC_NORM_LATE_SCALE
#define KIEC_NORM_LATE_SCALE 0
#endif
// PAIRED (persist_tagged_pairs, a copy of tagged x): x's words are tagged pairs (common.cuh: st_tagged_pair).
template <typename T, int K, bool NORM, int THREADS, bool PAIRED = false>
struct Prologue {
  static_assert(!PAIRED || (!NORM && K % 4 == 0), "tagged pairs: a copied x, two pairs a 16-byte load");
  static constexpr int PER = (K + THREADS - 1) / THREADS;
  static constexpr bool HOLD = NORM && PER <= 16;  // a register budget chosen, not measured against others
  static constexpr bool LATE = HOLD && KIEC_NORM_LATE_SCALE != 0;
  // whether i = threadIdx.x + e * THREADS (e < N / THREADS rounded up) is below N: always where THREADS divides N,
  // known so at compile time, so that no index a word stays in a register for the test (llama-3.1-8b's norm: 16 of
  // them beside its 16 words made ptxas spill 36 B at persist_norm_batch 16). The default kernels lost 2-8% of their
  // instructions to it and ran 1.0-1.9% faster on H200 (same-run A/B, forty-fifth and forty-sixth sessions)
  template <int N>
  __device__ __forceinline__ static bool below(int i) { return N % THREADS == 0 || i < N; }
  float ss_late = 0.f;  // (LATE: this thread's sum of squares, for publish_late)
  using Held = std::conditional_t<KIEC_NORM_W_RAW != 0, T, float>;
  Held w[HOLD ? PER : 1];
  __device__ __forceinline__ void prefetch(const T* norm_w) {
    if constexpr (HOLD) {
#pragma unroll
      for (int e = 0; e < PER; ++e) {
        const int i = threadIdx.x + e * THREADS;
        if constexpr (KIEC_NORM_W_RAW != 0) w[e] = below<K>(i) ? norm_w[i] : T(0.f);
        else w[e] = below<K>(i) ? to_float<T>(norm_w[i]) : 0.f;
      }
    }
  }
  __device__ __forceinline__ float held(int e) const {
    if constexpr (KIEC_NORM_W_RAW != 0) return to_float<T>(w[e]);
    else return w[e];
  }
  __device__ __forceinline__ void run(const float* x, const T* norm_w, float eps, float* xs, float* red) {
    if (!NORM) {  // a copy, 4 16-byte loads in flight per thread (8 spilled 12 B on llama-3.1-8b; x is 16-byte
                  // aligned: buffers.py)
      constexpr int V = (K / 4 + THREADS - 1) / THREADS, B = V < 4 ? V : 4;
#pragma unroll
      for (int e0 = 0; e0 < V; e0 += B) {
        float4 v[B];
#pragma unroll
        for (int e = 0; e < B; ++e) {
          const int i = threadIdx.x + (e0 + e) * THREADS;
          if (e0 + e < V && below<K / 4>(i)) v[e] = reinterpret_cast<const float4*>(x)[i];
        }
#pragma unroll
        for (int e = 0; e < B; ++e) {
          const int i = threadIdx.x + (e0 + e) * THREADS;
          if (e0 + e < V && below<K / 4>(i)) reinterpret_cast<float4*>(xs)[i] = v[e];
        }
      }
      sync_block();
      return;
    }
    if constexpr (!HOLD) {
      gemv_prologue<T, K, NORM, THREADS>(x, norm_w, eps, xs, red);
    } else {
      float v[PER], ss = 0.f;
#pragma unroll
      for (int e = 0; e < PER; ++e) {
        const int i = threadIdx.x + e * THREADS;
        v[e] = below<K>(i) ? x[i] : 0.f;
        ss += v[e] * v[e];
      }
      normalize(ss, v, norm_w, eps, xs, red);
    }
  }
  // xs = this thread's elements of x (held in v, or already in xs without HOLD) times rsqrt(their mean square +
  // eps) and the norm's weights (held in w, or read from norm_w); ss: this thread's sum of their squares.
  __device__ __forceinline__ void normalize(float ss, const float (&v)[HOLD ? PER : 1], const T* norm_w, float eps,
                                            float* xs, float* red) {
    if (LATE) ss_late = ss;  // (LATE: times 1, the scale is the epilogue's)
    const float scale = LATE ? 1.f : rsqrtf(block_sum(ss, red) / K + eps);
#pragma unroll
    for (int e = 0; e < PER; ++e) {
      const int i = threadIdx.x + e * THREADS;
      if (below<K>(i)) xs[i] = (HOLD ? v[e] : xs[i]) * scale * (HOLD ? held(e) : to_float<T>(norm_w[i]));
    }
    sync_block();
  }
  // LATE: this warp's sum of squares into red[warp], after the dot products (red is free then; the tile's barrier
  // after them orders it before late_scale's reads)
  __device__ __forceinline__ void publish_late(float* red) const {
    if constexpr (LATE) {
      const float s = warp_sum(ss_late);
      if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
    }
  }
  // LATE: the norm's scale from the warps' sums, added as block_sum adds them
  __device__ __forceinline__ float late_scale(const float* red, float eps) const {
    float t = 0.f;
    for (int w = 0; w < THREADS / 32; ++w) t += red[w];
    return rsqrtf(t / K + eps);
  }
#if KIEC_TAG_WAITS
  // Tag waits: the first batch of x's tagged words (NORM: words, a copy: pairs), loaded before the tile waits on its
  // counters (what is left of them guards its writes and untagged reads, not these words, whose tags are checked
  // after), so that their round trip passes under the polls' instead of after it. run_tagged starts from them.
  static constexpr int PAIRS = (K / 2 + THREADS - 1) / THREADS;
  // (4 words or pairs at most, none past 8 a thread: held across the wait, a whole batch of 8 made ptxas spill 120 B
  // on llama-3.2-1b; on llama-3.1-8b (a K 4096 norm, a K 14336 copy) any preload of theirs, 1 or 2, spilled 4 B;
  // `python3 scripts/ptxas.py MODEL persistent persist_tag_waits=1`)
  static constexpr int PRE = NORM ? (PER < 4 ? PER : PER > 8 ? 0 : 4) : (PAIRS < 4 ? PAIRS : PAIRS > 8 ? 0 : 4);
  unsigned long long pa[PRE > 0 ? PRE : 1], pb[PRE > 0 && !NORM ? PRE : 1];
  __device__ __forceinline__ void preload(const float* x2) {
#pragma unroll
    for (int e = 0; e < PRE; ++e) {
      const int i = threadIdx.x + e * THREADS;
      if (NORM && e < PER && below<K>(i)) pa[e] = ld_tagged(x2, i);
      if (!NORM && e < PAIRS && below<K / 2>(i)) ld_tagged2(x2, i, pa[e], pb[e]);
    }
  }
#endif
  // run's math on x as tagged words (common.cuh) carrying `tag`: every word of a batch loaded at once,
  // then each one that does not carry the tag yet loaded again until it does. The elements each thread takes and
  // the order of the norm's sums are run's, so the result is the same bits.
  __device__ __forceinline__ void run_tagged(const float* x2, unsigned tag, const T* norm_w, float eps, float* xs,
                                             float* red) {
    if (!NORM) {  // a copy: two words a 16-byte load, KIEC_COPY_BATCH loads in flight a thread (persist_copy_batch;
                  // 8: llama-3.2-1b's down projection, K 8192, copies in two round trips; PAIRED: two pair words, 4
                  // elements, a load, so in one)
      static_assert(K % 2 == 0, "a copied x is pairs of words");
      constexpr int LOADS = PAIRED ? K / 4 : K / 2;  // 16-byte loads of x
      constexpr int P = (LOADS + THREADS - 1) / THREADS, BP = P < KIEC_COPY_BATCH ? P : KIEC_COPY_BATCH;
#pragma unroll
      for (int e0 = 0; e0 < P; e0 += BP) {
        unsigned long long wa[BP], wb[BP];
#pragma unroll
        for (int e = 0; e < BP; ++e) {
          const int j = threadIdx.x + (e0 + e) * THREADS;
#if KIEC_TAG_WAITS
          if (e0 == 0 && e < PRE) {  // (preload's)
            wa[e] = pa[e];
            wb[e] = pb[e];
            continue;
          }
#endif
          if (e0 + e < P && below<LOADS>(j)) ld_tagged2(x2, j, wa[e], wb[e]);
        }
        settle_tags<BP>(  // (the stale pairs again, together)
            [&](int e) {
              const int j = threadIdx.x + (e0 + e) * THREADS;
              return e0 + e < P && below<LOADS>(j) && !(carries(wa[e], tag) && carries(wb[e], tag));
            },
            [&](int e) { ld_tagged2(x2, threadIdx.x + (e0 + e) * THREADS, wa[e], wb[e]); });
#pragma unroll
        for (int e = 0; e < BP; ++e) {
          const int j = threadIdx.x + (e0 + e) * THREADS;
          if (e0 + e < P && below<LOADS>(j)) {
            if constexpr (PAIRED) {
              float4 v;
              settled_pair(wa[e], tag, v.x, v.y);
              settled_pair(wb[e], tag, v.z, v.w);
              reinterpret_cast<float4*>(xs)[j] = v;
            } else {
              xs[2 * j] = settled_value(wa[e], tag);
              xs[2 * j + 1] = settled_value(wb[e], tag);
            }
          }
        }
      }
      sync_block();
      return;
    }
    constexpr int B = PER < KIEC_NORM_BATCH ? PER : KIEC_NORM_BATCH;  // words a thread has in flight
    float ss = 0.f;
    float v[HOLD ? PER : 1];
#pragma unroll
    for (int e0 = 0; e0 < PER; e0 += B) {
      unsigned long long wd[B];
#pragma unroll
      for (int e = 0; e < B; ++e) {
        const int i = threadIdx.x + (e0 + e) * THREADS;
#if KIEC_TAG_WAITS
        if (e0 == 0 && e < PRE) {  // (preload's)
          wd[e] = pa[e];
          continue;
        }
#endif
        if (e0 + e < PER && below<K>(i)) wd[e] = ld_tagged(x2, i);
      }
      settle_tags<B>(
          [&](int e) {
            const int i = threadIdx.x + (e0 + e) * THREADS;
            return e0 + e < PER && below<K>(i) && !carries(wd[e], tag);
          },
          [&](int e) { wd[e] = ld_tagged(x2, threadIdx.x + (e0 + e) * THREADS); });
#pragma unroll
      for (int e = 0; e < B; ++e) {
        const int i = threadIdx.x + (e0 + e) * THREADS;
        if (e0 + e < PER) {
          const float val = below<K>(i) ? settled_value(wd[e], tag) : 0.f;
          if (HOLD) v[e0 + e] = val;
          else if (below<K>(i)) xs[i] = val;
          ss += val * val;
        }
      }
    }
    normalize(ss, v, norm_w, eps, xs, red);
  }
};

// A persistent GEMV's geometry: a row is SEGS segments of SEGC 16-byte chunks; work items are (row, segment)
// (for SiLU-mul: a gate row's segment and its up row's), PER_PAGE of them a ring page, dealt round-robin over the
// warps. SEGS divides WARPS, so a warp always has the same segment and keeps its slice of x in registers.
// LANES: the lanes that take one item together, 32 (a warp) or 16 (a half-warp: two items a warp at once,
// gemv_pages_half); lane % LANES takes chunks lane % LANES, + LANES, ... of its item, ROUNDS of them.
template <typename T, int K, int WARPS, int EPI, int SEGS, int PAGE, int LANES_ = 32>
struct GemvShape {
  static_assert(K % 8 == 0, "K must be a multiple of 8 (16-byte chunks)");
  static_assert(LANES_ == 32 || LANES_ == 16, "an item takes a warp or a half-warp");
  static constexpr int LANES = LANES_;
  static constexpr int CHUNKS = K / 8, SEGC = CHUNKS / SEGS, ROUNDS = (SEGC + LANES - 1) / LANES, ITEM = SEGC * 16;
  static_assert(CHUNKS % SEGS == 0 && WARPS % SEGS == 0, "segments must tile a row and divide the warps");
  static constexpr bool SILU = EPI == EPI_SILU_MUL;
  static constexpr int PER_PAGE = items_per_page(PAGE, ITEM, SILU);
  static_assert(PER_PAGE >= 1, "a page holds at least one item");
  static constexpr int ROWS_PER_OUT = SILU ? 2 : 1;  // segment sums kept per output: gate and up rows
};

// This lane's chunks of segment `seg` of the prologue's output: xr[v] = x[(seg * SEGC + v * LANES + lane % LANES) *
// 8 ..] (LANES 32: lane's own).
// One chunk's 8 floats of x at `p` (16-byte aligned: the scratch, or x itself with DIRECT), zeros where `in` is false.
__device__ __forceinline__ void load_chunk8(const float* p, bool in, float (&r)[8]) {
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
  const float4 xa = in ? *reinterpret_cast<const float4*>(p) : zero;
  const float4 xb = in ? *reinterpret_cast<const float4*>(p + 4) : zero;
  r[0] = xa.x; r[1] = xa.y; r[2] = xa.z; r[3] = xa.w;
  r[4] = xb.x; r[5] = xb.y; r[6] = xb.z; r[7] = xb.w;
}

template <typename G>
__device__ __forceinline__ void load_x_slice(const float* xs, int seg, int lane, float (&xr)[G::ROUNDS][8]) {
#pragma unroll
  for (int v = 0; v < G::ROUNDS; ++v) {
    const int c = v * G::LANES + lane % G::LANES;
    load_chunk8(xs + (seg * G::SEGC + c) * 8, G::SEGC % G::LANES == 0 || c < G::SEGC, xr[v]);
  }
}

// load_x_slice from x as tagged words carrying `tag` (DIRECT with persist_tagged): the same floats, every word
// loaded at once (two a 16-byte access), then a round's stale words again together (settle_tags: one round trip a
// retry for all of them). The writer's counter moves relaxed (its last tile's words may still be on their way), so
// some words come stale. Reloaded one at a time instead, each a round trip after the last: llama-3.2-1b 0.794 ms
// against 0.786 this way, both slower than the copy prologue's 0.739 (2026-12-01 seventeenth session, targets.py).
template <typename G>
__device__ __forceinline__ void load_x_slice_tagged(const float* x2, unsigned tag, int seg, int lane,
                                                    float (&xr)[G::ROUNDS][8]) {
  static_assert(G::LANES == 32, "tagged x slices: a warp an item");
  // rounds loaded together: up to 4 (llama-3.1-8b's 7 at once spilled 196 B, ptxas; in two groups, none)
  constexpr int GR = G::ROUNDS < 4 ? G::ROUNDS : 4;
#pragma unroll
  for (int v0 = 0; v0 < G::ROUNDS; v0 += GR) {
    unsigned long long w[GR][8];
#pragma unroll
    for (int g = 0; g < GR; ++g) {
      const int c = (v0 + g) * 32 + lane;
      if (v0 + g < G::ROUNDS && (G::SEGC % 32 == 0 || c < G::SEGC)) {
#pragma unroll
        for (int q = 0; q < 4; ++q) ld_tagged2(x2, (seg * G::SEGC + c) * 4 + q, w[g][2 * q], w[g][2 * q + 1]);
      }
    }
#pragma unroll
    for (int g = 0; g < GR; ++g) {
      const int c = (v0 + g) * 32 + lane;
      const bool in = v0 + g < G::ROUNDS && (G::SEGC % 32 == 0 || c < G::SEGC);
      const int at = (seg * G::SEGC + c) * 8;
      settle_tags<8>([&](int e) { return in && !carries(w[g][e], tag); },
                     [&](int e) { w[g][e] = ld_tagged(x2, at + e); });
      if (v0 + g < G::ROUNDS) {
#pragma unroll
        for (int e = 0; e < 8; ++e) xr[v0 + g][e] = in ? settled_value(w[g][e], tag) : 0.f;
      }
    }
  }
}

// WCOPY (persist_x_warp_copy_min_k): a copied x whose warps each hold a segment of their own (SEGS == WARPS) is
// copied by each warp for itself, a round (32 chunks, 256 floats) at a time through its own 1 KB `xw` of the
// scratch: the loads as coalesced as the block's copy (consecutive pairs of words a lane), no block barrier after
// them, and the scratch 8 KB instead of K floats (room for another ring page). The same floats as load_x_slice after
// the block's copy.
// TX: x as tagged words carrying `tag`; two rounds' loads in flight (8 pairs a lane, the block copy's batch).
// PX (persist_tagged_pairs, TX): x as tagged pairs (common.cuh), four elements a 16-byte load: a round is 2 loads a
// lane, and four rounds' loads go together (the same 8 a lane).
// `round_out(v, xw)`: round v of the segment is in xw (its chunk c at xw + 8 c), for the caller to take.
constexpr int WARP_COPY_FLOATS = 32 * 8;  // a warp's `xw`: a round of 32 chunks (codegen/persistent.py sizes it)
template <typename G, bool TX, bool PX = false, typename Out>
__device__ __forceinline__ void load_x_slice_warp_copy(const float* x, unsigned tag, int seg, int lane, float* xw,
                                                       Out&& round_out) {
  static_assert(G::LANES == 32, "a warp's own copy: a warp an item");
  static_assert(!PX || TX, "tagged pairs are tagged");
  constexpr int PR = PX ? 2 : 4, RT = PX ? KIEC_WARP_COPY_ROUNDS : 2;  // 16-byte loads a lane a round; rounds at once
  constexpr int GR = G::ROUNDS < RT ? G::ROUNDS : RT, EPL = PX ? 4 : 2;  // (elements a load)
#pragma unroll
  for (int v0 = 0; v0 < G::ROUNDS; v0 += GR) {
    unsigned long long wa[GR][PR], wb[GR][PR];
    // load p * 32 + lane of round v: words 2 j, 2 j + 1 of x (PX: pair words, elements 4 j ..), chunk
    // (p * 32 + lane) * EPL / 8 of the round's 32
    auto pair = [&](int v, int p) { return (seg * G::SEGC + v * 32) * (8 / EPL) + p * 32 + lane; };
    auto in = [&](int v, int p) {
      return v < G::ROUNDS && (G::SEGC % 32 == 0 || v * 32 + (p * 32 + lane) * EPL / 8 < G::SEGC);
    };
#pragma unroll
    for (int g = 0; g < GR; ++g)
#pragma unroll
      for (int p = 0; p < PR; ++p) {
        if (!in(v0 + g, p)) continue;
        if constexpr (TX) {
          ld_tagged2(x, pair(v0 + g, p), wa[g][p], wb[g][p]);
        } else {
          const float2 f = reinterpret_cast<const float2*>(x)[pair(v0 + g, p)];
          wa[g][p] = __float_as_uint(f.x);
          wb[g][p] = __float_as_uint(f.y);
        }
      }
    if constexpr (TX) {
      settle_tags<GR * PR>(  // (the stale pairs again, together)
          [&](int e) {
            const int g = e / PR, p = e % PR;
            return in(v0 + g, p) && !(carries(wa[g][p], tag) && carries(wb[g][p], tag));
          },
          [&](int e) { ld_tagged2(x, pair(v0 + e / PR, e % PR), wa[e / PR][e % PR], wb[e / PR][e % PR]); });
    }
#pragma unroll
    for (int g = 0; g < GR; ++g) {
      if (v0 + g >= G::ROUNDS) continue;
      __syncwarp();  // (the last round's reads of xw are done)
#pragma unroll
      for (int p = 0; p < PR; ++p) {
        if (!in(v0 + g, p)) continue;
        if constexpr (PX) {
          float4 f;
          settled_pair(wa[g][p], tag, f.x, f.y);
          settled_pair(wb[g][p], tag, f.z, f.w);
          reinterpret_cast<float4*>(xw)[p * 32 + lane] = f;
          continue;
        }
        const float a = TX ? settled_value(wa[g][p], tag) : __uint_as_float((unsigned)wa[g][p]);
        const float b = TX ? settled_value(wb[g][p], tag) : __uint_as_float((unsigned)wb[g][p]);
        reinterpret_cast<float2*>(xw)[p * 32 + lane] = make_float2(a, b);
      }
      __syncwarp();
      round_out(v0 + g, xw);
    }
  }
}

// The norm of a GEMV whose every warp holds all of x (WNORM, persist_norm_in_warps: one segment, 8 warps, x as plain
// floats): each warp loads x straight from memory into its slice's registers, sums their squares over its own lanes
// in block_sum's order (warp_batch.cuh: block_order_sum_squares) and scales them as Prologue does, so no x goes
// through the scratch and no block barrier stands between the wait and the dots, and xr ends as the staged
// prologue's floats, bit for bit.
// With half-warp items (G::LANES 16, persist_dot_half_warps) each half holds all of x and sums its squares over its
// own 16 lanes (a butterfly; not block_sum's order, so not the staged norm's bits: the half-warp dots change them
// anyway). LATE: where the staged norm applies its scale to the row sums (Prologue::LATE, persist_norm_late_scale),
// x is only times the weights and the scale is kept for the epilogue (`late`), so the bits stay the staged tile's.
template <typename T, typename G, int K, int THREADS>
struct WarpNorm {
  static constexpr bool LATE = Prologue<T, K, true, THREADS>::LATE;
  uint4 w[G::ROUNDS];  // this lane's chunks of the norm's weights (loaded before the wait)
  float late = 1.f;    // (LATE: the norm's scale, for the epilogue)
  __device__ __forceinline__ void prefetch(const T* norm_w, int lane) {
    static_assert((THREADS == 256 || G::LANES != 32) && G::SEGC == K / 8,
                  "a norm in the warps: 8 warps (block_sum's order), each with the whole row");
#pragma unroll
    for (int v = 0; v < G::ROUNDS; ++v) {
      const int c = v * G::LANES + lane % G::LANES;
      w[v] = G::SEGC % G::LANES == 0 || c < G::SEGC ? *reinterpret_cast<const uint4*>(norm_w + c * 8)
                                                    : make_uint4(0, 0, 0, 0);
    }
  }
  __device__ __forceinline__ void run(const float* x, float eps, int lane, float (&xr)[G::ROUNDS][8]) {
    load_x_slice<G>(x, 0, lane, xr);
    float ss;
    if constexpr (G::LANES == 32) {
      ss = block_order_sum_squares<G::ROUNDS>(xr, WarpShfl());
    } else {
      ss = 0.f;
#pragma unroll
      for (int v = 0; v < G::ROUNDS; ++v)
#pragma unroll
        for (int i = 0; i < 8; ++i) ss += xr[v][i] * xr[v][i];
      ss = lanes_sum<G::LANES>(ss);
    }
    const float norm_scale = rsqrtf(ss / K + eps);
    if (LATE) late = norm_scale;
    const float scale = LATE ? 1.f : norm_scale;
#pragma unroll
    for (int v = 0; v < G::ROUNDS; ++v) {
      float nw[8];
      widen8<T>(w[v], nw);
#pragma unroll
      for (int i = 0; i < 8; ++i) xr[v][i] = xr[v][i] * scale * nw[i];
    }
  }
};

// One item's dot products (w0: the row segment in the page; w1: its up row's, SiLU only): this lane's part.
template <typename T, typename G>
__device__ __forceinline__ void dot_lanes(const char* w0, const char* w1, const float (&xr)[G::ROUNDS][8], int lane,
                                          float& a0, float& a1) {
  float p0[G::ROUNDS], p1[G::ROUNDS];  // one sum a round: short dependency chains, added in a fixed order
#pragma unroll
  for (int v = 0; v < G::ROUNDS; ++v) {
    const int c = v * G::LANES + lane % G::LANES;
    p0[v] = p1[v] = 0.f;
    if (G::SEGC % G::LANES == 0 || c < G::SEGC) {
      float w[8];
      widen8<T>(lds128(w0 + c * 16), w);
#pragma unroll
      for (int i = 0; i < 8; ++i) p0[v] = fmaf(w[i], xr[v][i], p0[v]);
      if (G::SILU) {
        widen8<T>(lds128(w1 + c * 16), w);
#pragma unroll
        for (int i = 0; i < 8; ++i) p1[v] = fmaf(w[i], xr[v][i], p1[v]);
      }
    }
  }
  a0 = p0[0], a1 = p1[0];
#pragma unroll
  for (int v = 1; v < G::ROUNDS; ++v) {
    a0 += p0[v];
    a1 += p1[v];
  }
}

// Every page of a share of `items` items: this warp's items' segment sums into acc[(row * ROWS_PER_OUT + r) *
// SEGS + seg]; each thread releases each page when done with it. Items are dealt round-robin, so a warp's k-th item
// is warp + k * WARPS; its lane parts wait in a batch of KIEC_REDUCE_BATCH (a shift register: static indices) to be
// summed over the warp together (warp_batch.cuh). `timed`: returns the SM cycles this thread waited for pages to
// arrive (else 0). (The batch as a struct with member functions spilled 144 B on llama-3.1-8b at 8 where these
// lambdas spill none, ptxas -v.)
#ifndef KIEC_REDUCE_BATCH
#define KIEC_REDUCE_BATCH 1
#endif
// KIEC_PAGE_LOOK (persist_page_look): a warp looks at the share's first pages once, lane k at page k (up to 32 and
// the ring's), and takes the pages it found landed without waiting on each. Why: the traced step's ready-page count
// (Ring::landed, a test_wait a page in order) grew the traced tile 0.126 us a page counted (thirty-first session,
// bench/RESULTS.md); if the page wait before each page's items costs as much, the look saves it on resident pages.
// It does not: a barrier look is ~45 SM cycles, and the look left llama-3.2-1b's token as it was and made
// gemv_compute.cu's shares slower (thirty-second session; codegen/targets.py). The lane that saw a page land
// acquired it; __syncwarp orders the other lanes' reads after that. The same bits.
#ifndef KIEC_PAGE_LOOK
#define KIEC_PAGE_LOOK 0
#endif
// KIEC_DOT_ITEMS: gemv_pages' ITEMS unless given (bench/gemv_compute.cu sets it; the kernel passes each GEMV's own,
// persist_dot_items): a warp takes up to this many of its items at once (gemv_pages_items; 1: one after another),
// the most its ring and registers allow (item_deal.cuh: items_at_once, at most KIEC_DOT_ITEM_CHUNKS 16-byte chunks a
// lane a step).
#ifndef KIEC_DOT_ITEMS
#define KIEC_DOT_ITEMS 1
#endif
#ifndef KIEC_DOT_ITEM_CHUNKS
#define KIEC_DOT_ITEM_CHUNKS 16
#endif
#if KIEC_TRACE_DOTS
// (a traced step with persist_trace_dots) per warp, the moment its first item was summed and its last: gemv_tile
// writes the earliest and latest first (and the latest's warp) and the earliest and latest last to its recording.
// With batches of B items the first item is summed with its batch.
__device__ __forceinline__ unsigned long long (&dot_stamps())[2][32] {
  __shared__ unsigned long long stamps[2][32];
  return stamps;
}
#endif
// A tile's share dealt to the item (persist_item_shares, ON; Instr's head and tail): its items counted from segment
// `head` of its first row, so warp w's items are the segment (head + w) % SEGS of their rows (SEGS divides WARPS).
// Rows are completed a unit of U at a time (2: the outputs are tagged pairs), by the tile holding the unit's last
// item (ir/passes/persistent.py: lead_rows, share_end_rows). A share that starts mid-unit leaves its first `lead`
// rows to the tile before: each of their sums (RPO a row's segment: gate and up for a SiLU-mul) is stored as a tagged
// word at carry[((slot * U * SEGS + item in the unit) * RPO + r] (slot: this tile's index in its phase) as soon as it
// is summed (store_item_sums, in the share's first pages). A share that ends mid-unit (its end `at` items into its
// last unit) completes that unit with the next tile's words: warp 0's lanes, one a word, ask for them halfway through
// the pages (ask) and wait for their tags after (settle), into the acc's rows of that unit; the tile's barrier after
// the dot products orders them before the epilogue. A row's segments are then added in segment order, as a whole
// row's: the same bits. A generation that ended may never publish them: settle looks at its stop every 1024 loads and
// then leaves a NaN (the stopped position is not used). Off: head 0, nothing published or asked.
template <bool ON, int SEGS, int U = 1, int RPO = 1>
struct ItemShare {
  static_assert(!ON || (U * SEGS - 1) * RPO <= 32, "a trailing unit's missing words, a lane each of one warp");
  static constexpr bool DEALT = ON;
  static constexpr int SLOT = U * SEGS * RPO;  // words a tile's slot (the next tile's follows)
  int head = 0;
  int lead = 0;  // the rows at the start the tile before completes
  unsigned tag = 0u;
  float* carry = nullptr;  // this tile's slot
  unsigned long long word = 0ull;  // (warp 0's lanes below missing * RPO: word `lane` of the next tile's)
  ItemShare() = default;  // (a defaulted constructor takes no __device__: nvcc warns it ignores one)
  __device__ __forceinline__ ItemShare(const Instr& ins, unsigned tag_, float* carry_)
      : head(ins.head), lead(item_lead_rows<U>(ins.lo, ins.head)), tag(tag_),
        carry(carry_ + 2 * (size_t)ins.tile * SLOT) {}
  // the share's end in its last unit and that unit's first row (item_share.cuh): read from the instruction when used
  // (fewer registers held across the dot products)
  __device__ __forceinline__ static int at(const Instr& ins) { return item_end_at<SEGS, U>(ins.hi, ins.tail); }
  __device__ __forceinline__ int first_seg() const { return ON ? head : 0; }
  __device__ __forceinline__ int lead_rows() const { return ON ? lead : 0; }
  __device__ __forceinline__ static int end_rows(const Instr& ins, int rows) {
    return ON ? item_unit_row<U>(ins.lo, ins.hi) + U : rows;
  }
  __device__ __forceinline__ void publish(int row, int seg, float s0, float s1) const {
    if (ON && row < lead) {
      st_tagged(carry, item_lead_word<SEGS, U, RPO>(lead, row, seg, 0), s0, tag);
      if (RPO == 2) st_tagged(carry, item_lead_word<SEGS, U, RPO>(lead, row, seg, 1), s1, tag);
    }
  }
  __device__ __forceinline__ static bool asks(const Instr& ins, int warp, int lane) {
    return ON && warp == 0 && lane < (U * SEGS - at(ins)) * RPO;
  }
  __device__ __forceinline__ void ask(const Instr& ins, int warp, int lane) {
    if (asks(ins, warp, lane)) word = ld_tagged(carry, item_next_word<SEGS, U, RPO>(at(ins), lane));
  }
  __device__ __forceinline__ void settle(float* acc, const Turn& u, int warp, int lane) {
    const Instr& ins = *u.ins;
    if (!asks(ins, warp, lane)) return;
    for (unsigned spins = 1; !carries(word, tag); ++spins) {
      if (spins % 1024 == 0 && stop_reached(u)) break;
      word = ld_tagged(carry, item_next_word<SEGS, U, RPO>(at(ins), lane));
    }
    acc[item_settled_at<SEGS, RPO>(at(ins), item_unit_row<U>(ins.lo, ins.hi), lane)] = settled_value(word, tag);
  }
};

// A warp's batch of B items summed over its lanes (warp_sum_batch; b0: gate (or the only) rows' parts, b1: up rows')
// into acc[(row * ROWS_PER_OUT + r) * SEGS + seg]: slot k < have is the warp's item first + k (its items are warp,
// warp + WARPS, ...), the lane holding its sum stores it (and publishes it where it is a head's: ItemShare).
template <typename G, int WARPS, int SEGS, int B, typename Share = ItemShare<false, SEGS>>
__device__ __forceinline__ void store_item_sums(float (&b0)[B], float (&b1)[B], float* acc, int warp, int lane,
                                                int first, int have, const Share& share = {}) {
  const float s0 = warp_sum_batch<B>(b0, lane, WarpXor());
  const float s1 = G::SILU ? warp_sum_batch<B>(b1, lane, WarpXor()) : 0.f;
  const int k = lane / (32 / B);
  int row, seg;
  item_place<SEGS, WARPS>(share.first_seg(), warp, first + k, row, seg);
  if (lane % (32 / B) == 0 && k < have) {
    acc[(G::ROWS_PER_OUT * row) * SEGS + seg] = s0;
    if (G::SILU) acc[(2 * row + 1) * SEGS + seg] = s1;
    share.publish(row, seg, s0, s1);
  }
}

template <typename R>
struct TimedPages {  // half_warp_steps' and warp_item_steps' ring: the tile's, its waits timed in the traced step
  R& ring;
  bool timed;
  long long waited;
  __device__ __forceinline__ const char* page_at(int k) {
    const long long c0 = timed ? clock64() : 0;
    const char* p = ring.page_ahead(k);
    if (timed) waited += clock64() - c0;
    return p;
  }
  __device__ __forceinline__ void release() { ring.release(); }
};

// gemv_pages with U of a warp's items at once (persist_dot_items): the same deal (warp w's items w, w + WARPS, ...),
// taken U at a time (item_deal.cuh: warp_item_steps): their pages waited for first, then their loads and
// multiply-adds side by side (dot_lanes, each item's own), their sums over the warp together (warp_sum_batch:
// warp_sum's bits). So the same bits as one at a time. Why: on pages already landed a warp's items one after another
// are a chain of latencies (a page wait, the loads, the FMA chain, 5 shuffles, the store, the release:
// bench/gemv_compute.cu's 24-row QKV tile, 6 items a warp, takes 1.70 us), which side by side overlap. Measured 3-10%
// slower on every model, 1-4% with only the long shares (thirty-third session, codegen/targets.py): a short share's
// step code, fetched again each phase, costs more than the overlap wins, and a stream-bound share waits for U pages
// before each step. Off.
template <typename T, typename G, int WARPS, int SEGS, int U, typename R>
__device__ __forceinline__ long long gemv_pages_items(R& ring, int items, const float (&xr)[G::ROUNDS][8], float* acc,
                                                      bool timed) {
  static_assert(G::LANES == 32 && U >= 2 && (U & (U - 1)) == 0, "a warp an item, a power of two of them at once");
  static_assert(item_steps_reach(U, G::PER_PAGE, WARPS) < R::STAGES, "a step's pages fit the ring beside the oldest");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  TimedPages<R> pages{ring, timed, 0};
  warp_item_steps<WARPS, U>(pages, items, G::PER_PAGE, warp,
                            [&](int m0, const char* const (&page)[U], const int (&at)[U], int n) {
    float s0[U], s1[U];
#pragma unroll
    for (int i = 0; i < U; ++i)
      dot_lanes<T, G>(page[i] + at[i] * G::ITEM, page[i] + (G::PER_PAGE + at[i]) * G::ITEM, xr, lane, s0[i], s1[i]);
    store_item_sums<G, WARPS, SEGS, U>(s0, s1, acc, warp, lane, m0, n);
#if KIEC_TRACE_DOTS
    if (timed && m0 == 0 && lane == 0) dot_stamps()[0][warp] = global_ns();  // (its first step's)
#endif
  });
#if KIEC_TRACE_DOTS
  if (timed && lane == 0) {
    dot_stamps()[1][warp] = global_ns();
    if (warp >= items) dot_stamps()[0][warp] = dot_stamps()[1][warp];  // (a warp without items)
  }
#endif
  return pages.waited;
}

// TWICE (persist_probe_twice, a timing probe): bit 1: every item's dot products run twice. BATCH > 0: this GEMV's
// batch instead of KIEC_REDUCE_BATCH (persist_reduce_batch_head: the LM head's). With ITEMS above 1 (and neither
// the probe nor a dry pass) the items go several at once (gemv_pages_items), their sums in their own batch.
// `share` (persist_item_shares, an ItemShare that is ON): the share's items from its head on, its lead rows' sums
// published and its trailing unit's words asked for halfway; one item at a time.
template <typename T, typename G, int WARPS, int SEGS, int TWICE = 0, int BATCH = 0, int ITEMS = KIEC_DOT_ITEMS,
          typename R, typename Share = ItemShare<false, SEGS>>
__device__ __forceinline__ long long gemv_pages(R& ring, int items, const float (&xr)[G::ROUNDS][8], float* acc,
                                                bool timed, bool dry = false, Share* share = nullptr,
                                                const Instr* ins = nullptr) {
  constexpr bool SK = Share::DEALT;
  constexpr int U = items_at_once(ITEMS, G::PER_PAGE, WARPS, R::STAGES, G::ROUNDS, KIEC_DOT_ITEM_CHUNKS);
  static_assert(!SK || U == 1, "a share dealt to the item: one item at a time");
  if constexpr (U > 1 && TWICE == 0 && G::LANES == 32)
    if (!dry) return gemv_pages_items<T, G, WARPS, SEGS, U>(ring, items, xr, acc, timed);
  constexpr int B = BATCH > 0 ? BATCH : KIEC_REDUCE_BATCH;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int pages = (items + G::PER_PAGE - 1) / G::PER_PAGE;
  float b0[B], b1[B];  // the batch: gate (or the only) rows' parts, up rows'
  int mine = 0;        // this warp's items so far
  auto shift_in = [&](float a0, float a1) {
#pragma unroll
    for (int k = 0; k + 1 < B; ++k) {
      b0[k] = b0[k + 1];
      b1[k] = b1[k + 1];
    }
    b0[B - 1] = a0;
    b1[B - 1] = a1;
  };
  auto sums_out = [&](int have) {  // slot k < have: this warp's item mine - have + k
    if constexpr (SK) store_item_sums<G, WARPS, SEGS, B>(b0, b1, acc, warp, lane, mine - have, have, *share);
    else store_item_sums<G, WARPS, SEGS, B>(b0, b1, acc, warp, lane, mine - have, have);
  };
  long long waited = 0;
  unsigned looked = 0u;  // (KIEC_PAGE_LOOK) bit p: page p of the share had landed when the warp looked
  if (KIEC_PAGE_LOOK && !dry) {
    looked = __ballot_sync(0xffffffffu, lane < pages && lane < R::STAGES && ring.landed_at(lane));
    __syncwarp();
  }
  for (int p = 0; p < pages; ++p) {
    const long long c0 = timed ? clock64() : 0;
    const char* page = dry || (p < 32 && (looked >> p & 1u)) ? ring.page(ring.seq) : ring.next_page();
    if (timed) waited += clock64() - c0;
    const int first = p * G::PER_PAGE, n = min(G::PER_PAGE, items - first);
    for (int j = (warp - first % WARPS + WARPS) % WARPS; j < n; j += WARPS) {
      float a0, a1;
      dot_lanes<T, G>(page + j * G::ITEM, page + (G::PER_PAGE + j) * G::ITEM, xr, lane, a0, a1);
      if (TWICE & 1) {  // the same loads again, their sums kept alive times 0; the address moved by
        // gridDim.y - 1, 0 at run time but not known to ptxas, which merges identical shared loads (PTX has both)
        const int again = j * G::ITEM + (int)gridDim.y - 1;
        float b0, b1;
        dot_lanes<T, G>(page + again, page + G::PER_PAGE * G::ITEM + again, xr, lane, b0, b1);
        a0 = fmaf(b0, 0.f, a0);
        a1 = fmaf(b1, 0.f, a1);
      }
      shift_in(a0, a1);
      if (++mine % B == 0) sums_out(B);
#if KIEC_TRACE_DOTS
      if (timed && mine == B && lane == 0) dot_stamps()[0][warp] = global_ns();
#endif
    }
    if (!dry) ring.release();
    if constexpr (SK)
      if (p == pages / 2) share->ask(*ins, warp, lane);
  }
  if (const int have = mine % B) {  // the last, short batch: zeros shifted in behind its items
    for (int k = have; k < B; ++k) shift_in(0.f, 0.f);
    sums_out(have);
  }
#if KIEC_TRACE_DOTS
  if (timed && lane == 0) {  // (a warp without items, or fewer than a batch: its first is its last)
    dot_stamps()[1][warp] = global_ns();
    if (mine < B) dot_stamps()[0][warp] = dot_stamps()[1][warp];
  }
#endif
  return waited;
}

// gemv_pages with half-warp items (G::LANES 16, persist_dot_half_warps): each half-warp takes an item, so a warp takes
// two at once (half_warp_steps: items 2 w + 2 WARPS q and the one after, a pair that may straddle two pages), and
// each item's sum is a 16-lane butterfly, both halves' in the same shuffles. Where a warp would take several items
// one after another, it takes half as many steps (each of ROUNDS rounds over 16 lanes instead of a warp's over 32:
// K 576 is 72 chunks, 5 rounds of 16 against 3 of 32 with 8 lanes working in the third). Half h of warp w holds
// segment (2 w + h) % SEGS of x. `timed`: as gemv_pages.
template <typename T, typename G, int WARPS, int SEGS, typename R>
__device__ __forceinline__ long long gemv_pages_half(R& ring, int items, const float (&xr)[G::ROUNDS][8], float* acc,
                                                     bool timed) {
  static_assert(G::LANES == 16 && R::STAGES >= 2, "half-warp items, a pair of them over two pages at most");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  TimedPages<R> pages{ring, timed, 0};
  auto step = [&](int mine, bool valid, const char* page, int j) {
    float a0, a1;
    dot_lanes<T, G>(page + j * G::ITEM, page + (G::PER_PAGE + j) * G::ITEM, xr, lane, a0, a1);
    a0 = lanes_sum<G::LANES>(a0);
    if (G::SILU) a1 = lanes_sum<G::LANES>(a1);
    if ((lane & 15) == 0 && valid) {
      const int row = mine / SEGS, seg = mine % SEGS;
      acc[(G::ROWS_PER_OUT * row) * SEGS + seg] = a0;
      if (G::SILU) acc[(2 * row + 1) * SEGS + seg] = a1;
    }
  };
  half_warp_steps<WARPS>(pages, items, G::PER_PAGE, warp, lane >> 4, step);
  return pages.waited;
}

// Outputs [lo, hi) from the segment sums (added in segment order, so a run's result does not depend on which
// warp finished first): SiLU-mul, store, residual add, or store and the packed argmax.
// y_mine: with EPI_RESIDUAL, y[lo + threadIdx.x] as loaded before the dot products (residual_first).
// TY: y is tagged words (common.cuh): written with tag `mine`, the residual read carrying `res`. PY (SiLU-mul, TY):
// y is tagged pairs (common.cuh: st_tagged_pair), lo and outs even (the schedule deals such a GEMV's rows in pairs).
// scale: each row's sum times it before the bias (the norm's with persist_norm_late_scale, Prologue::LATE; else 1).
template <typename T, int SEGS, int EPI, bool BIAS, int THREADS, bool TY = false, bool PY = false>
__device__ __forceinline__ void gemv_epilogue(const Turn& u, const float* acc, const T* bias, float* y, int lo,
                                              int outs, int n_out, float y_mine, unsigned mine = 0,
                                              unsigned res = 0, float scale = 1.f) {
  static_assert(!PY || (TY && EPI == EPI_SILU_MUL && !KIEC_TAG_PARITY), "tagged pairs: a SiLU-mul's tagged output");
  auto dot = [&](int r) {  // row r's sum (SiLU: 2 rows per output, gate then up)
    float v = 0.f;
#pragma unroll
    for (int s = 0; s < SEGS; ++s) v += acc[r * SEGS + s];
    return v * scale;
  };
  auto silu_mul = [&](int j) {  // output lo + j
    const int o = lo + j;
    const float g = dot(2 * j) + (BIAS ? to_float<T>(bias[o]) : 0.f);
    const float up = dot(2 * j + 1) + (BIAS ? to_float<T>(bias[o + n_out]) : 0.f);
    return g / (1.f + expf(-g)) * up;
  };
  if constexpr (PY) {
    for (int p = threadIdx.x; p < outs / 2; p += THREADS) st_tagged_pair(y, lo / 2 + p, silu_mul(2 * p),
                                                                         silu_mul(2 * p + 1), mine);
    return;
  }
  unsigned long long best = 0ull;
  for (int j = threadIdx.x; j < outs; j += THREADS) {
    const int o = lo + j;
    if (EPI == EPI_SILU_MUL) {
      store_value<TY>(y, o, silu_mul(j), mine);
    } else {
      const float v = dot(j) + (BIAS ? to_float<T>(bias[o]) : 0.f);
      if (EPI == EPI_STORE || EPI == EPI_ARGMAX) store_value<TY>(y, o, v, mine);
      if (EPI == EPI_RESIDUAL) {
        const float r = j == (int)threadIdx.x ? y_mine : TY ? tagged_value(ld_tagged(y, o), y, o, res) : y[o];
        store_value<TY>(y, o, r + v, mine);
      }
      if (EPI == EPI_ARGMAX) {
        const unsigned long long key = argmax_key(v, o);
        best = key > best ? key : best;
      }
    }
  }
  if (EPI == EPI_ARGMAX) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const unsigned long long other = __shfl_xor_sync(0xffffffffu, best, o);
      best = other > best ? other : best;
    }
    if ((threadIdx.x & 31) == 0 && best) atomicMax(u.a->argmax + u.pos, best);
  }
}

// Outputs [lo, hi) of y = epilogue(W . prologue(x)), the weights read from the ring (GemvShape).
// DIRECT (persist_x_direct, a GEMV without a norm): each warp loads its slice of x straight from memory, and the
// tile takes no shared memory for x (a deeper ring where the longest such x set the scratch: llama-3.1-8b's down
// projection, K 14336, 57 KB); with TX it checks the words' tags itself (load_x_slice_tagged).
// TX, TY (persist_tagged): x, y as tagged words (common.cuh), x's and the residual's tags from the
// descriptor's tag_x and tag_res, y's this phase's; with TY the counter moves relaxed (signal_done).
// TWICE (persist_probe_twice, a timing probe; the emitter picks the GEMVs): bit 1: the dot products run twice, bit
// 2: the prologue (the same tokens).
// WNORM (persist_norm_in_warps, a GEMV with a norm, one segment, 8 warps, untagged x): each warp normalizes x in its
// own registers (WarpNorm: the same bits), none of it staged in shared memory. BATCH > 0: its items' warp sums in
// batches of BATCH (gemv_pages; the same bits), not KIEC_REDUCE_BATCH. HALF (persist_dot_half_warps, untagged x):
// an item a half-warp (gemv_pages_half; other bits: the dots' and, with WNORM, the norm's sums go another order).
// SUMS (persist_probe_mlp_local 2, a timing probe): after its epilogue the tile adds 1 to each of the n_out int64
// words at `sums` (relaxed adds in L2, before its signal), the adds a down projection cut by its K would make.
// ITEMS (persist_dot_items): a warp's items up to this many at once (gemv_pages_items; the same bits).
// WCOPY (persist_x_warp_copy_min_k, a GEMV without a norm whose warps each hold a segment of their own): each warp
// copies its segment of x for itself through 1 KB of the scratch (load_x_slice_warp_copy; the same bits).
// PX, PY (persist_tagged_pairs): x (copied into the scratch or a warp's, TX), y (a SiLU-mul's, TY) as tagged pairs
// (common.cuh).
// SK (persist_item_shares): the tile's share is dealt to the item (ItemShare: rows completed a unit at a time, a pair
// with PY; a lead unit's sums published as tagged words at `carry` for the tile before, a trailing unit completed
// with the next tile's); it writes rows [lo + its lead rows, the end of its last unit).
// MG (persist_attn_consumer_merges: ConsumerMerge, an output projection whose x is attention's tagged output, copied
// into the scratch): where the attention's splits in use at this position leave their merge to this GEMV
// (consumer_merges), x is made from their partials at part_o and part_ml (merge_partials), words carrying the
// attention phase's full tag (its counter: the descriptor's tag_x), instead of copied.
// MMA (persist_mma_rows; x staged in the scratch, one item at a time, no probe): the dot products on the tensor cores
// over the weights' 16-row blocks (gemv_mma.cuh), the share whole blocks; x's pieces made in the scratch after the
// prologue, one sum a row in acc (other bits than the FMA tile's: x to 16 significant bits, the tensor cores' order).
template <typename T, int K, int WARPS, bool NORM, int EPI, bool BIAS, int SEGS, bool DIRECT = false, bool TX = false,
          bool TY = false, int TWICE = 0, bool WNORM = false, int BATCH = 0, bool HALF = false, bool SUMS = false,
          int ITEMS = 1, bool WCOPY = false, bool PX = false, bool PY = false, bool SK = false,
          typename MG = NoConsumerMerge, bool MMA = false, typename R>
__device__ __forceinline__ bool gemv_tile(Turn u, R& ring, const T* bias, float* x, const T* norm_w, float eps,
                                          float* y, int n_out, float* smem, unsigned long long* sums = nullptr,
                                          float* carry = nullptr, const float* part_o = nullptr,
                                          const float* part_ml = nullptr) {
  static_assert(!(DIRECT && NORM), "a normed x is staged in shared memory (the norm needs all of it first)");
  static_assert(!WNORM || (NORM && SEGS == 1 && !TX), "a norm in the warps: a GEMV with a norm, one segment, plain x");

  static_assert(!HALF || (!TX && TWICE == 0 && BATCH == 0), "half-warp items: plain x, their own sums, no probe");
  static_assert(!WCOPY || (!NORM && !DIRECT && !HALF && SEGS == WARPS), "a warp's own copy: a segment a warp, no norm");
  using G = GemvShape<T, K, WARPS, EPI, SEGS, R::PAGE, HALF ? 16 : 32>;
  constexpr bool STAGED = !DIRECT && !WNORM && !WCOPY;  // x goes through the scratch, all of it at once
  static_assert(!PX || (TX && (STAGED || WCOPY) && !NORM && !KIEC_TAG_WAITS && !KIEC_TAG_PARITY && TWICE == 0),
                "tagged pairs in x: a copy of it into the scratch, without tag waits, parity tags or the probe");
  static_assert(!SK || (KIEC_ITEM_SHARES && !HALF && ITEMS == 1 && TWICE == 0 && !SUMS && !KIEC_PROBE_WARM_CODE
                         && !KIEC_TAG_PARITY),
                "a share dealt to the item: one item at a time, 8-byte tags, no probe");
  static_assert(!MG::ON || (TX && STAGED && !NORM && !PX && !SK && !SUMS && TWICE == 0 && !KIEC_TAG_WAITS),
                "x merged from attention's partials: tagged, copied into the scratch, no norm, pairs, share, probe "
                "or tag waits");
  static_assert(!MMA || (STAGED && !HALF && !SK && !MG::ON && TWICE == 0 && ITEMS == 1 && !SUMS
                         && !KIEC_PROBE_WARM_CODE),
                "tensor-core dots: x staged in the scratch, one item at a time, no consumer merge, share or probe");
  using M = MmaShape<MMA, K, G::SILU, WARPS>;
  constexpr int PARTS = MMA ? 1 : SEGS;  // sums a row in acc: a segment's, or the row's
  const int merge_active = MG::in_use(u.pos, u.desc->window);  // (MG::ON: the attention's splits in use)
  constexpr int UNIT = PY ? 2 : 1;  // (SK: the rows completed together)
  const int lo = u.ins->lo, outs = u.ins->hi - lo;  // the rows the share touches
  ItemShare<SK, SEGS, UNIT, G::ROWS_PER_OUT> share;
  if constexpr (SK) share = ItemShare<SK, SEGS, UNIT, G::ROWS_PER_OUT>(*u.ins, word_tag(u, u.ins->counter), carry);
  // it writes rows [lo + lead_rows(), lo + end_rows()) (the end read from the instruction where used: registers)
  auto lead_rows = [&] { return share.lead_rows(); };
  auto end_rows = [&] { return share.end_rows(*u.ins, outs); };
  float* xs = smem;  // K: the prologue's output (STAGED), or WARP_COPY_FLOATS a warp (WCOPY: a round of its segment)
  float* acc = smem + (STAGED ? K : WCOPY ? WARPS * WARP_COPY_FLOATS : 0);  // [ROWS_PER_OUT * rows][PARTS]: row sums
  float* red = acc + G::ROWS_PER_OUT * (SK ? outs + UNIT - 1 : outs) * PARTS;  // WARPS (past a trailing unit's rows)
  float* stage = red + WARPS;  // (MMA: the block sums' slots)

  Prologue<T, K, NORM && !WNORM, WARPS * 32, PX> prologue;
  WarpNorm<T, G, K, WARPS * 32> wnorm;
  if constexpr (WNORM) wnorm.prefetch(norm_w, threadIdx.x & 31);
  else prologue.prefetch(norm_w);
#if KIEC_TAG_WAITS
  if (TX && STAGED) prologue.preload(x);
#endif
  unsigned late_seen = 0u;  // (KIEC_TAG_WAITS 2: wait_writes')
  const bool res_mine = EPI == EPI_RESIDUAL && (int)threadIdx.x < end_rows() - lead_rows();
  float y_mine = 0.f;
  unsigned long long y_word = 0ull;
  float xr[G::ROUNDS][8];  // this warp's segment of x
  long long waited;
  // The tile from its wait to its sums: false if the generation ended first. `dry` (persist_probe_warm_code, a
  // timing probe; the same tokens): instead, the dot products over the tile's first page, if landed, with x zeros
  // (their sums overwritten after, the ring untouched), run before the wait so that their code is fetched before x
  // is ready: what a tile's first item costs without its code to fetch. Both passes run this one inlined copy.
  auto pass = [&](bool dry) {
    if (dry) {
      if (!ring.landed_at(0)) return true;
#pragma unroll
      for (int v = 0; v < G::ROUNDS; ++v)
#pragma unroll
        for (int e = 0; e < 8; ++e) xr[v][e] = 0.f;
    } else {
      if (!wait_inputs(u, nullptr, 0, &late_seen)) return false;
      // the residual this tile adds to, asked for now: its load's latency passes under the prologue and the pages
      if (TY) {
        if (res_mine) y_word = ld_tagged(y, lo + lead_rows() + threadIdx.x);
      } else if (res_mine) {
        y_mine = y[lo + lead_rows() + threadIdx.x];
      }
      auto stage_x = [&] {
        if constexpr (WNORM) wnorm.run(x, eps, threadIdx.x & 31, xr);
        else if constexpr (WCOPY)
          load_x_slice_warp_copy<G, TX, PX>(x, TX ? tag_of(u, u.desc->tag_x) : 0u,
                                            (share.first_seg() + (threadIdx.x >> 5)) % SEGS, threadIdx.x & 31,
                                            xs + (threadIdx.x >> 5) * WARP_COPY_FLOATS, [&](int v, const float* w) {
            const int lane = threadIdx.x & 31;
            load_chunk8(w + lane * 8, G::SEGC % 32 == 0 || v * 32 + lane < G::SEGC, xr[v]);
          });
        else if constexpr (MG::ON) {  // (TX, STAGED)
          if (consumer_merges<MG::MAX>(merge_active)) {
            merge_partials<MG, K, WARPS>(part_o, part_ml, merge_active, word_tag(u, u.desc->tag_x), xs,
                                         [&] { return stop_reached(u); });
            sync_block();
          } else {
            prologue.run_tagged(x, tag_of(u, u.desc->tag_x), norm_w, eps, xs, red);
          }
        } else if (TX && !DIRECT) prologue.run_tagged(x, tag_of(u, u.desc->tag_x), norm_w, eps, xs, red);
        else if (!DIRECT) prologue.run(x, norm_w, eps, xs, red);
      };
      if constexpr ((TWICE & 2) != 0) stage_x();  // the probe: the same x written once more before
      stage_x();
      if constexpr (MMA) mma_x_pieces<T, K, WARPS, M::STEPS>(xs);
      trace(u, TR_X_READY);
#if KIEC_PAGE_PACE_AHEAD_NS
      ring.consuming(u);  // (the weight stream's pace: ring.cuh)
#endif
      // (the traced step's count of the share's pages landed, by warp 0 at once: thread 0 counting alone, a look a
      // page, held its warp's dots back ~0.13 us a page, thirty-second session)
      if (traced_step(u) && threadIdx.x < 32) {
        const int items = SK ? share_items(*u.ins, SEGS) : outs * SEGS;
        const int landed = ring.landed_warp(MMA ? outs / 16 * M::PPB : (items + G::PER_PAGE - 1) / G::PER_PAGE,
                                            threadIdx.x);
        if (threadIdx.x == 0) trace_row(u)[TR_PAGES_READY] = landed;
      }
      if constexpr (TX && DIRECT)
        load_x_slice_tagged<G>(x, tag_of(u, u.desc->tag_x), (share.first_seg() + (threadIdx.x >> 5)) % SEGS,
                               threadIdx.x & 31, xr);
      else if (!WNORM && !WCOPY && !MMA)
        load_x_slice<G>(DIRECT ? x : xs, (HALF ? 2 * (threadIdx.x >> 5) + ((threadIdx.x >> 4) & 1)
                                               : share.first_seg() + (threadIdx.x >> 5)) % SEGS, threadIdx.x & 31, xr);
#if KIEC_TRACE_DOTS
      trace(u, TR_X_SLICED);
#endif
    }
    // every thread times its page waits in the traced step: with a branch only thread 0 took, the traced step of
    // llama-3.2-1b ran 1609 us against 859 untraced, its GEMVs about twice as long (93b2612, 2026-11-30)
    if constexpr (MMA) {
#if KIEC_TRACE_DOTS
      if (traced_step(u) && (threadIdx.x & 31) == 0) dot_stamps()[0][threadIdx.x >> 5] = global_ns();
#endif
      waited = gemv_pages_mma<T, K, WARPS, G::SILU>(ring, outs, xs, acc, stage, traced_step(u));
#if KIEC_TRACE_DOTS
      if (traced_step(u) && (threadIdx.x & 31) == 0) dot_stamps()[1][threadIdx.x >> 5] = global_ns();
#endif
    } else if constexpr (HALF) waited = gemv_pages_half<T, G, WARPS, SEGS>(ring, outs * SEGS, xr, acc, traced_step(u));
    else if constexpr (SK) waited = gemv_pages<T, G, WARPS, SEGS, TWICE, BATCH, ITEMS>(
        ring, share_items(*u.ins, SEGS), xr, acc, traced_step(u), false, &share, u.ins);  // (publishes, asks)
    else waited = gemv_pages<T, G, WARPS, SEGS, TWICE, BATCH, ITEMS>(ring, dry ? min(outs * SEGS, G::PER_PAGE)
                                                                           : outs * SEGS, xr, acc,
                                                                    traced_step(u) && !dry, dry);
    return true;
  };
  if constexpr (KIEC_PROBE_WARM_CODE && !HALF) {
#pragma unroll 1
    for (int p = 0; p < 2; ++p)
      if (!pass(p == 0)) return false;
  } else if (!pass(false)) {
    return false;
  }
  if (tracing(u)) trace_row(u)[TR_PAGE_WAIT_CYCLES] = waited;
  if constexpr (SK) share.settle(acc, u, threadIdx.x >> 5, threadIdx.x & 31);  // (the trailing unit's rest)
  prologue.publish_late(red);
  sync_block();
  trace(u, TR_SUMS_DONE);
#if KIEC_TRACE_DOTS
  if (!HALF && tracing(u)) {  // (gemv_pages_half stamps none)
    unsigned long long first = 0ull, lo_first = ~0ull, lo_done = ~0ull, hi_done = 0ull;
    int late = 0;
    for (int w = 0; w < WARPS; ++w) {
      if (dot_stamps()[0][w] > first) {
        first = dot_stamps()[0][w];
        late = w;
      }
      lo_first = min(lo_first, dot_stamps()[0][w]);
      lo_done = min(lo_done, dot_stamps()[1][w]);
      hi_done = max(hi_done, dot_stamps()[1][w]);
    }
    unsigned long long* row = trace_row(u);
    row[TR_FIRST_ITEM] = first;
    row[TR_WARP_DONE_MIN] = lo_done;
    row[TR_WARP_DONE_MAX] = hi_done;
    row[TR_FIRST_ITEM_MIN] = lo_first;
    row[TR_FIRST_ITEM_WARP] = late;
  }
#endif
#if KIEC_TAG_WAITS >= 2
  if (!wait_writes(u, late_seen)) return false;  // the waits that guard only this tile's writes
#endif
  const unsigned res_tag = TY && EPI == EPI_RESIDUAL ? tag_of(u, u.desc->tag_res) : 0u;
  const int lead = lead_rows();
  if (TY && res_mine) y_mine = tagged_value(y_word, y, lo + lead + threadIdx.x, res_tag);
  gemv_epilogue<T, PARTS, EPI, BIAS, WARPS * 32, TY, PY>(u, acc + lead * G::ROWS_PER_OUT * PARTS, bias, y, lo + lead,
                                                        end_rows() - lead, n_out, y_mine,
                                                        TY ? tag_of(u, u.ins->counter) : 0u, res_tag,
                                                        WNORM ? wnorm.late
                                                        : decltype(prologue)::LATE ? prologue.late_scale(red, eps)
                                                                                   : 1.f);
  if constexpr (SUMS) {
    for (int j = threadIdx.x; j < n_out; j += WARPS * 32)
      asm volatile("red.relaxed.gpu.global.add.u64 [%0], 1;" ::"l"(sums + j) : "memory");
  }
  trace(u, TR_STORED);
  signal_done<TY>(u);
  return true;
}

}  // namespace kiec
