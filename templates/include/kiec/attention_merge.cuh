// A decode attention block's shared state and how the splits' results meet: each warp's softmax state merged into
// the block's (slice_state), a split's partial or the output stored (attention_store), and the partials of a KV
// head's splits folded in split order, by the last block to arrive (attention_combine, graph and persistent mode) or
// by the split that holds the new row (attention_owner_merge, persist_attn_owner_merges). attention.cuh computes the
// slices.
#pragma once
#include "common.cuh"

namespace kiec {

// Shared memory of one attention block: its group's queries, the new key, and each warp's softmax state and output.
template <int HEAD_DIM, int GROUP, int WARPS>
struct AttentionSmem {  // codegen/persistent.py sizes it: keep the two in step
  float qs[GROUP][HEAD_DIM];
  float kn[HEAD_DIM], vn[HEAD_DIM];  // the new row (the split that holds row pos)
  float wm[WARPS][GROUP], wl[WARPS][GROUP];
  float wo[WARPS][GROUP][HEAD_DIM];
};

// A slice's (m, l, o) for head h, element d: its warps' states in sm merged.
template <int HEAD_DIM, int GROUP, int WARPS>
__device__ __forceinline__ void slice_state(const AttentionSmem<HEAD_DIM, GROUP, WARPS>& sm, int h, int d, float& mx,
                                            float& lsum, float& o) {
  mx = -INFINITY;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) mx = fmaxf(mx, sm.wm[w][h]);
  lsum = 0.f;
  o = 0.f;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) {
    const float c = mx == -INFINITY ? 0.f : __expf(sm.wm[w][h] - mx);
    lsum += sm.wl[w][h] * c;
    o += sm.wo[w][h][d] * c;
  }
}

// Element i of attention's output: store_value's, or with PAIRED (persist_tagged_pairs 2; TAGGED) the even lane's
// tagged pair of elements i and i + 1, its odd neighbour's value shuffled over. Every lane of a warp calls it at once,
// lane parity i's (the writers' loops give a warp 32 consecutive elements).
template <bool TAGGED, bool PAIRED>
__device__ __forceinline__ void store_out(float* out, int i, float v, unsigned tag) {
  static_assert(!PAIRED || TAGGED, "tagged pairs are tagged");
  if constexpr (PAIRED) {
    const float next = __shfl_down_sync(0xffffffffu, v, 1);
    if ((i & 1) == 0) st_tagged_pair(out, i / 2, v, next, tag);
  } else {
    store_value<TAGGED>(out, i, v, tag);
  }
}

// Partials as 8-byte words (persist_attn_owner_merges): the value's bits, then the tag of the attention phase that
// wrote them, whatever KIEC_TAG_PARITY says (a partial keeps all its bits); element i at 2 * i floats.
__device__ __forceinline__ void st_part(float* p2, size_t i, float v, unsigned tag) {
  const unsigned long long w = (unsigned long long)tag << 32 | __float_as_uint(v);
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p2 + 2 * i), "l"(w) : "memory");
}
__device__ __forceinline__ unsigned long long ld_part(const float* p2, size_t i) {
  unsigned long long w;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(w) : "l"(p2 + 2 * i));
  return w;
}
__device__ __forceinline__ bool part_carries(unsigned long long w, unsigned tag) { return (unsigned)(w >> 32) == tag; }
// A partial word's value, a NaN where it does not carry `tag` (settle_tags gave up on it), as settled_value.
__device__ __forceinline__ float part_value(unsigned long long w, unsigned tag) {
  return part_carries(w, tag) ? __uint_as_float((unsigned)w) : __uint_as_float(0x7fffffffu);
}

// Partial words 2j and 2j + 1 in one 16-byte access: 8-byte words whatever KIEC_TAG_PARITY says, as st_part's.
__device__ __forceinline__ void ld_part2(const float* p2, size_t j, unsigned long long& a, unsigned long long& b) {
  asm volatile("ld.relaxed.gpu.global.v2.b64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p2 + 4 * j));
}

// persist_attn_consumer_merges: while 2 to MAX of a KV head's splits are in use, no split merges them; every split
// stores its partial as words (st_part) carrying its phase's full tag, and the output projection's tiles merge them
// while they copy their x (merge_partials), so that the chain from the last partial to the output projection's x
// loses the arrival, the merging split's loads of the others' partials and its output's hand-over. The geometry is
// the attention's (the output projection's x is its output: heads of HEAD_DIM, GROUP a KV head).
#ifndef KIEC_MERGE_LOADS
#define KIEC_MERGE_LOADS 8  // merge_partials' 16-byte loads of o words a lane at once (persist_merge_loads)
#endif
struct NoConsumerMerge {
  static constexpr bool ON = false;
  static constexpr int MAX = 0;
  __device__ __forceinline__ static int in_use(int, int) { return 0; }
};
template <int HEAD_DIM_, int GROUP_, int SPLITS_, int MIN_KEYS_, int MAX_>
struct ConsumerMerge {
  static constexpr bool ON = true;
  static constexpr int HEAD_DIM = HEAD_DIM_, GROUP = GROUP_, SPLITS = SPLITS_, MIN_KEYS = MIN_KEYS_, MAX = MAX_;
  static_assert(MAX >= 2 && MAX <= SPLITS, "the consumer merges 2 to SPLITS splits");
  static_assert(HEAD_DIM % 64 == 0, "a warp's lanes take a head's elements, an even count a lane");
  // the splits in use at `pos` (split_range_of's `active`, the attention tiles' own)
  __device__ __forceinline__ static int in_use(int pos, int window) {
    int lo, hi, active;
    split_range_of(pos, window, 0, SPLITS, MIN_KEYS, lo, hi, active);
    return active;
  }
};
// Whether the consumer merges at `active` splits in use, MAX the most (0: never): the attention tiles' rule and
// the output projection's, one rule.
template <int MAX>
__device__ __forceinline__ bool consumer_merges(int active) {
  return MAX >= 2 && active >= 2 && active <= MAX;
}

// Merge the warps of a slice: with one split in use the block writes the output, with several its partial
// (o not yet divided by l, and m, l per head) at slot (g, split). TAGGED: the output as tagged words with `tag`.
// part_tag (persist_attn_owner_merges), not 0: the partial as words carrying it (st_part), the merging split's reads.
template <int HEAD_DIM, int GROUP, int WARPS, int SPLITS, bool TAGGED = false, bool PAIRED = false>
__device__ __forceinline__ void attention_store(const AttentionSmem<HEAD_DIM, GROUP, WARPS>& sm, int g, int split,
                                                int active, float* part_o, float* part_ml, float* out,
                                                unsigned tag = 0, unsigned part_tag = 0) {
  for (int i = threadIdx.x; i < GROUP * HEAD_DIM; i += WARPS * 32) {
    const int h = i / HEAD_DIM, d = i % HEAD_DIM;
    float mx, lsum, o;
    slice_state(sm, h, d, mx, lsum, o);
    if (active == 1) {
      store_out<TAGGED, PAIRED>(out, (g * GROUP + h) * HEAD_DIM + d, o / lsum, tag);
      continue;
    }
    const size_t slot = ((size_t)g * SPLITS + split) * GROUP + h;
    if (part_tag) {
      st_part(part_o, slot * HEAD_DIM + d, o, part_tag);
      if (d == 0) { st_part(part_ml, slot * 2, mx, part_tag); st_part(part_ml, slot * 2 + 1, lsum, part_tag); }
      continue;
    }
    part_o[slot * HEAD_DIM + d] = o;
    if (d == 0) { part_ml[slot * 2] = mx; part_ml[slot * 2 + 1] = lsum; }
  }
}

// One split's partial folded into a running (m, l, o) (attention_combine's step).
__device__ __forceinline__ void fold_partial(float& mx, float& lsum, float& o, float ms, float ls, float os) {
  const float mn = fmaxf(mx, ms);
  const float c_old = mx == -INFINITY ? 0.f : __expf(mx - mn), c_new = ms == -INFINITY ? 0.f : __expf(ms - mn);
  lsum = lsum * c_old + ls * c_new;
  o = o * c_old + os * c_new;
  mx = mn;
}

// persist_attn_owner_merges: the last split in use (the one that holds row pos) merges KV head g's `active` splits
// in split order as attention_combine does (the same bits): the others' partials loaded as words (st_part) carrying
// `tag`, a batch of up to 4 splits at once settled together (settle_tags), and its own state taken from sm (never
// stored); the output as attention_store writes it (TAGGED: words with `out_tag`). False, every thread's answer,
// when the generation passed its stop first (stopped(): a split that saw the stop may never write its partial); a
// word whose tag never came (2^20 rounds: a compiler bug) makes its output a NaN, as settled_value's.
template <int HEAD_DIM, int GROUP, int WARPS, int SPLITS, bool TAGGED, typename Stopped>
__device__ __forceinline__ bool attention_owner_merge(const AttentionSmem<HEAD_DIM, GROUP, WARPS>& sm, int g,
                                                      int active, const float* part_o, const float* part_ml,
                                                      float* out, unsigned tag, unsigned out_tag, Stopped stopped) {
  constexpr int B = 4, W = 3 * B;  // a batch's words: split s0 + e's m, l and o at 3e, 3e + 1 and 3e + 2
  bool ok = true;
  for (int i = threadIdx.x; i < GROUP * HEAD_DIM; i += WARPS * 32) {
    const int h = i / HEAD_DIM, d = i % HEAD_DIM;
    float mx = -INFINITY, lsum = 0.f, o = 0.f;
    for (int s0 = 0; s0 < active - 1; s0 += B) {
      auto load = [&](int e) {
        const size_t slot = ((size_t)g * SPLITS + s0 + e / 3) * GROUP + h;
        return e % 3 < 2 ? ld_part(part_ml, slot * 2 + e % 3) : ld_part(part_o, slot * HEAD_DIM + d);
      };
      unsigned long long w[W];
#pragma unroll
      for (int e = 0; e < W; ++e)  // (past the others: a word that carries the tag, never read)
        w[e] = s0 + e / 3 < active - 1 ? load(e) : (unsigned long long)tag << 32;
      ok &= settle_tags<W>([&](int e) { return !part_carries(w[e], tag); }, [&](int e) { w[e] = load(e); }, stopped);
#pragma unroll
      for (int e = 0; e < B; ++e)
        if (s0 + e < active - 1)
          fold_partial(mx, lsum, o, part_value(w[3 * e], tag), part_value(w[3 * e + 1], tag),
                       part_value(w[3 * e + 2], tag));
    }
    float ms, ls, os;
    slice_state(sm, h, d, ms, ls, os);
    fold_partial(mx, lsum, o, ms, ls, os);
    store_value<TAGGED>(out, (g * GROUP + h) * HEAD_DIM + d, o / lsum, out_tag);
  }
  return sync_block_and(ok);
}

// Combined attention's staging in shared memory (attention_combine's STAGED): every split's o, then its m and l.
template <int HEAD_DIM, int GROUP, int SPLITS>
struct CombineStage {
  float o[SPLITS * GROUP * HEAD_DIM];
  float ml[SPLITS * GROUP * 2];
};

// KV head g's output from the partials of its `active` splits, in split order (loads independent of the math).
// TAGGED: the output as tagged words with `tag`. BATCH > 0 (persist_combine_batch): BATCH splits' partials loaded
// at once into registers, then folded in the same order (the same bits), where the loop unrolled by 8 leaves it to
// the compiler which loads go together (smollm2-135m at 8192, 44 splits: 7.4 us from the last partial to the signal
// in the eighteenth session's trace; 16 a batch 0.714 ms a token against 0.752, codegen/TUNING.md). `stage`
// (persist_combine_staged; the persistent kernel's scratch, 16-byte aligned): all `active` splits' partials copied
// into it at once (cp.async of 16 bytes, through L2 alone as __ldcg; m and l through registers), then folded from
// shared memory in split order (the same bits): one round trip for any number of splits, where 44 splits took three
// batches of 16 (the twenty-fourth session's 8192 trace: 5.7 us from the last partial to the signal). Block-wide:
// every compute thread calls it.
template <int HEAD_DIM, int GROUP, int SPLITS, bool TAGGED = false, int BATCH = 0, bool PAIRED = false>
__device__ __forceinline__ void attention_combine(int g, int active, const float* part_o, const float* part_ml,
                                                  float* out, unsigned tag = 0,
                                                  CombineStage<HEAD_DIM, GROUP, SPLITS>* stage = nullptr) {
  static_assert(HEAD_DIM % 4 == 0, "a partial's o is copied 16 bytes at a time");
  if (stage) {
    const float* po = part_o + (size_t)g * SPLITS * GROUP * HEAD_DIM;  // (slots of head g: (g SPLITS + s) GROUP + h)
    const float* pml = part_ml + (size_t)g * SPLITS * GROUP * 2;
    for (int c = threadIdx.x; c < active * GROUP * HEAD_DIM / 4; c += block_threads()) {
      const unsigned dst = (unsigned)__cvta_generic_to_shared(stage->o + 4 * c);
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(po + 4 * c) : "memory");
    }
    for (int e = threadIdx.x; e < active * GROUP * 2; e += block_threads()) stage->ml[e] = __ldcg(pml + e);
    asm volatile("cp.async.wait_all;" ::: "memory");
    sync_block();
    for (int i = threadIdx.x; i < GROUP * HEAD_DIM; i += block_threads()) {
      const int h = i / HEAD_DIM, d = i % HEAD_DIM;
      float mx = -INFINITY, lsum = 0.f, o = 0.f;
      for (int s = 0; s < active; ++s) {
        const int slot = s * GROUP + h;
        fold_partial(mx, lsum, o, stage->ml[slot * 2], stage->ml[slot * 2 + 1], stage->o[slot * HEAD_DIM + d]);
      }
      store_out<TAGGED, PAIRED>(out, (g * GROUP + h) * HEAD_DIM + d, o / lsum, tag);
    }
    return;
  }
  for (int i = threadIdx.x; i < GROUP * HEAD_DIM; i += block_threads()) {
    const int h = i / HEAD_DIM, d = i % HEAD_DIM;
    float mx = -INFINITY, lsum = 0.f, o = 0.f;
    if (BATCH > 0) {
      constexpr int B = BATCH > 0 ? BATCH : 1;
      for (int s0 = 0; s0 < active; s0 += B) {
        float ms[B], ls[B], os[B];
#pragma unroll
        for (int e = 0; e < B; ++e) {
          const size_t slot = ((size_t)g * SPLITS + s0 + e) * GROUP + h;
          if (s0 + e < active) {
            ms[e] = __ldcg(part_ml + slot * 2);
            ls[e] = __ldcg(part_ml + slot * 2 + 1);
            os[e] = __ldcg(part_o + slot * HEAD_DIM + d);
          }
        }
#pragma unroll
        for (int e = 0; e < B; ++e)
          if (s0 + e < active) fold_partial(mx, lsum, o, ms[e], ls[e], os[e]);
      }
    } else {
#pragma unroll 8
      for (int s = 0; s < active; ++s) {
        const size_t slot = ((size_t)g * SPLITS + s) * GROUP + h;
        fold_partial(mx, lsum, o, __ldcg(part_ml + slot * 2), __ldcg(part_ml + slot * 2 + 1),
                     __ldcg(part_o + slot * HEAD_DIM + d));
      }
    }
    store_out<TAGGED, PAIRED>(out, (g * GROUP + h) * HEAD_DIM + d, o / lsum, tag);
  }
}

// The output projection's x (K elements: its heads in order) from the partials of the `active` splits of each KV
// head, as attention_combine makes the output (the same folds in split order, then o / l: the same bits), written to
// xs. A warp takes heads warp, warp + WARPS, ...; lane l takes elements l * E .. l * E + E - 1 of a head (E =
// HEAD_DIM / 32): a split's o words are E / 2 loads of 16 bytes a lane. Its m and l (one 16-byte load) are the same
// for the warp's lanes, so lane j loads those of (head j / MAX, split j % MAX) alone and the warp shuffles them
// after. HB heads at once, their o loads at most KIEC_MERGE_LOADS a lane (with 16, ptxas spilled on llama-3.2-1b),
// all settled together (settle_tags), their tags the attention phase's full tag (`tag`). stopped(): whether the
// generation passed its stop (a split that saw it may never store its partial: the words left stale, x NaNs, as
// attention_owner_merge's). Block-wide: every compute thread calls it; no barrier (the caller's).
template <typename MG, int K, int WARPS, typename Stopped>
__device__ __forceinline__ void merge_partials(const float* part_o, const float* part_ml, int active, unsigned tag,
                                               float* xs, Stopped stopped) {
  constexpr int HD = MG::HEAD_DIM, E = HD / 32, OL = E / 2, HEADS = K / HD;
  static_assert(K % HD == 0, "the output projection's x is whole heads");
  constexpr int HPW = (HEADS + WARPS - 1) / WARPS, LPH = MG::MAX * OL;  // heads a warp, o loads a head
  constexpr int HB = KIEC_MERGE_LOADS / LPH < 1 ? 1 : KIEC_MERGE_LOADS / LPH < HPW ? KIEC_MERGE_LOADS / LPH : HPW;
  static_assert(HB * MG::MAX <= 32, "a lane a (head, split)'s m and l");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll 1
  for (int h0 = 0; h0 < HPW; h0 += HB) {
    unsigned long long w[HB][MG::MAX][E], ml[2];  // the lane's o words of each (head, split); its (head, split)'s m, l
    int slot0[HB];  // head hb's partial slot of split 0 (split s: + s * GROUP)
    bool head_in[HB];  // (the warp's alike)
#pragma unroll
    for (int hb = 0; hb < HB; ++hb) {
      const int h = warp + (h0 + hb) * WARPS;
      head_in[hb] = (HEADS % WARPS == 0 && HPW % HB == 0) || (h0 + hb < HPW && h < HEADS);  // (known: all)
      slot0[hb] = (h / MG::GROUP) * MG::SPLITS * MG::GROUP + h % MG::GROUP;
    }
    // o word k of (head hb, split s): at slot HD + lane E + k of part_o's words
    const float* lane_o = part_o + 2 * lane * E;
    auto o_word = [&](int hb, int s, int k) { return lane_o + 2 * ((slot0[hb] + s * MG::GROUP) * HD + k); };
    const int mh = lane / MG::MAX, ms = lane % MG::MAX;  // the (head, split) whose m and l this lane loads
    bool ml_in = false;
    const float* ml_word = part_ml;
#pragma unroll
    for (int hb = 0; hb < HB; ++hb)
      if (hb == mh) {  // (a constant index into head_in and slot0: registers)
        ml_in = head_in[hb] && ms < active;
        ml_word = part_ml + 4 * (slot0[hb] + ms * MG::GROUP);  // (m and l: words 2 slot, 2 slot + 1)
      }
    if (ml_in) ld_part2(ml_word, 0, ml[0], ml[1]);
#pragma unroll
    for (int hb = 0; hb < HB; ++hb)
#pragma unroll
      for (int s = 0; s < MG::MAX; ++s)
        if (head_in[hb] && s < active) {
#pragma unroll
          for (int q = 0; q < OL; ++q) ld_part2(o_word(hb, s, 2 * q), 0, w[hb][s][2 * q], w[hb][s][2 * q + 1]);
        }
    constexpr int NO = HB * MG::MAX * E;  // (settle_tags' words: the o words, then m and l)
    settle_tags<NO + 2>(
        [&](int e) {
          if (e >= NO) return ml_in && !part_carries(ml[e - NO], tag);
          const int hb = e / (MG::MAX * E), s = e / E % MG::MAX;
          return head_in[hb] && s < active && !part_carries(w[hb][s][e % E], tag);
        },
        [&](int e) {
          if (e >= NO) {
            ml[e - NO] = ld_part(ml_word, e - NO);
            return;
          }
          const int hb = e / (MG::MAX * E), s = e / E % MG::MAX;
          w[hb][s][e % E] = ld_part(o_word(hb, s, e % E), 0);
        },
        stopped);
    const float m_mine = ml_in ? part_value(ml[0], tag) : 0.f, l_mine = ml_in ? part_value(ml[1], tag) : 0.f;
#pragma unroll
    for (int hb = 0; hb < HB; ++hb) {
      if (!head_in[hb]) continue;  // (warp-uniform)
      float m[MG::MAX], l[MG::MAX];
#pragma unroll
      for (int s = 0; s < MG::MAX; ++s) {
        m[s] = __shfl_sync(0xffffffffu, m_mine, hb * MG::MAX + s);
        l[s] = __shfl_sync(0xffffffffu, l_mine, hb * MG::MAX + s);
      }
      const int h = warp + (h0 + hb) * WARPS;
#pragma unroll
      for (int k = 0; k < E; ++k) {
        float mx = -INFINITY, lsum = 0.f, o = 0.f;
#pragma unroll
        for (int s = 0; s < MG::MAX; ++s)
          if (s < active) fold_partial(mx, lsum, o, m[s], l[s], part_value(w[hb][s][k], tag));
        xs[h * HD + lane * E + k] = o / lsum;
      }
    }
  }
}

}  // namespace kiec
