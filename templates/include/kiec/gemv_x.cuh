// How x reaches a persistent GEMV tile's dot products (persistent_gemv.cuh): the block's norm or copy prologue into
// the scratch (Prologue), a tile's geometry (GemvShape), and each lane's slice of x in registers: from the scratch,
// from x itself as tagged words, from a warp's own copy, or normed in the warps (WarpNorm).
#pragma once
#include <type_traits>

#include "common.cuh"
#include "gemv.cuh"
#include "mbarrier.cuh"
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
// KIEC_X_SPREAD (persist_x_spread): a lane loads its chunk of x (8 floats, 32 bytes) from the scratch half by half in
// an order that spreads each load's quarter-warp over all 32 banks (load_chunk8). In order, the lanes of a
// quarter-warp (8 consecutive chunks, 256 bytes) that lie 128 bytes apart hit the same banks: two wavefronts a load
// where one would do. ncu counted the x slices' LDS.128 at twice their ideal wavefronts on every GEMV of
// smollm2-135m (the fifty-seventh session's profile) and of llama-3.2-1b (the fourteenth's), the kernel's largest
// excess of shared-memory wavefronts, and QKV's dots stalled on them (bench/RESULTS.md, seventieth session).
#ifndef KIEC_X_SPREAD
#define KIEC_X_SPREAD 0
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

// Which half of chunk n (its floats 4 h .. 4 h + 3) load_chunk8 loads first: with KIEC_X_SPREAD the second where
// n % 8 >= 4, so that a 16-byte load of 8 consecutive chunks' lanes lies on 8 different 16-byte bank groups, (2 n +
// h) % 8 (a lane's 32 bytes are two groups; in order, chunks n and n + 4 share them). Else the first.
__host__ __device__ __forceinline__ int chunk_first_half(int n) { return KIEC_X_SPREAD ? (n >> 2) & 1 : 0; }

// This lane's chunks of segment `seg` of the prologue's output: xr[v] = x[(seg * SEGC + v * LANES + lane % LANES) *
// 8 ..] (LANES 32: lane's own).
// One chunk's 8 floats of x at `p` (16-byte aligned: the scratch, or x itself with DIRECT), zeros where `in` is false;
// n: the chunk's index, p being 8 n floats past a start the lanes share (chunk_first_half: the same floats either way).
__host__ __device__ __forceinline__ void load_chunk8(const float* p, int n, bool in, float (&r)[8]) {
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
  const int h = chunk_first_half(n);
  const float4 first = in ? *reinterpret_cast<const float4*>(p + 4 * h) : zero;
  const float4 second = in ? *reinterpret_cast<const float4*>(p + 4 - 4 * h) : zero;
  const float4 xa = h ? second : first, xb = h ? first : second;
  r[0] = xa.x; r[1] = xa.y; r[2] = xa.z; r[3] = xa.w;
  r[4] = xb.x; r[5] = xb.y; r[6] = xb.z; r[7] = xb.w;
}

template <typename G>
__device__ __forceinline__ void load_x_slice(const float* xs, int seg, int lane, float (&xr)[G::ROUNDS][8]) {
#pragma unroll
  for (int v = 0; v < G::ROUNDS; ++v) {
    const int c = v * G::LANES + lane % G::LANES, n = seg * G::SEGC + c;
    load_chunk8(xs + n * 8, n, G::SEGC % G::LANES == 0 || c < G::SEGC, xr[v]);
  }
}

// load_x_slice from x as tagged words carrying `tag` (DIRECT with persist_tagged): the same floats, every word
// loaded at once (two a 16-byte access), then a round's stale words again together (settle_tags: one round trip a
// retry for all of them). The writer's counter moves relaxed (its last tile's words may still be on their way), so
// some words come stale. Reloaded one at a time instead, each a round trip after the last: llama-3.2-1b 0.794 ms
// against 0.786 this way, both slower than the copy prologue's 0.739 (2026-12-01 seventeenth session,
// codegen/TUNING.md).
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

}  // namespace kiec
