// Decode attention for one layer, split over the KV length (flash-decoding), with the layer's q/k norm,
// RoPE and KV-cache append folded in, and the combine done by the last block of each KV head.
//
// Grid (kv_heads, SPLITS). Block (g, s) takes the GROUP query heads of KV head g over the s-th slice of
// rows [start, pos]; how many slices are in use depends on the context (at least MIN_KEYS rows each). The
// block whose slice holds row `pos` writes the new k (normed, rotated) and v there first. Lanes are grouped
// LPK = HEAD_DIM/8 to a key (16 bytes each), so a warp reads 32/LPK keys per pass (the tensor cores' passes:
// attention_mma.cuh). The splits' results meet in attention_merge.cuh.
#pragma once
#include "attention_merge.cuh"
#include "attention_mma.cuh"
#include "attention_rows.cuh"
#include "common.cuh"

namespace kiec {

// KV head g's GROUP query heads over cache rows [lo, hi): q normed, rotated and scaled; the block holding row pos
// writes the new k (normed, rotated) and v there first. Leaves each warp's (m, l, o) in sm. TAGGED (persistent
// mode's persist_tagged 2): qkv is tagged words (common.cuh) carrying `tag`. PIPE (persist_attn_pipeline): the
// next pass's K and V rows are loaded before this pass's scores, so a slice of several passes waits for one round
// trip of loads instead of one a pass (twice the registers for them: codegen halves U). SOFTCAP false: the model
// has no logit softcap, and the step leaves out its tanhf (inlined GROUP x U times: 936 of the 6,312 instructions of
// llama-3.2-1b's persistent attention case, scripts/code_size.py before and at 271523f; without it the kernel ran
// 0.804 vs 0.825 ms on llama-3.2-1b, gpu_run.sh's AB in one call at 236e4bf).
// U_SHORT > 0 (persist_attn_short_keys): a slice that one pass of U_SHORT keys covers runs that pass instead (the
// same rows in the same order: the same bits), so a short context runs a step unrolled U_SHORT times, not U
// times, and the longer step's code stays out of the instruction caches.
// rope (persist_attn_early_rope): the rotation's coefficients made before the inputs were waited for (RopeCoeffs),
// used instead of inv_freq. mark(0) once q is rotated and the new row written, mark(1) once the keys are done
// (persistent mode's traced step with persist_trace_attention; a no-op otherwise). KV_FIRST
// (persist_attn_kv_first): a slice one short pass covers loads its rows of earlier steps before q (their round trip
// under q's, the rotation and the new row's write) and takes the new row, where it holds it, from shared memory as
// the cache has it (pack8: the same bits). EARLY (persist_attn_early_pass): `early` holds the first pass's rows
// before pos - 1 (early_rows_end), loaded by the tile before its wait; the rest of that pass's rows are loaded at
// once here (row pos - 1, beside q's load), the new row taken from shared memory as the cache has it (the same
// bits); the passes, or the one short pass (the early pass's first U_SHORT slots: the same rows), start from it.
// LEAN (persist_attn_lean; bench/kv_slice.cu times it): fewer instructions a key, the same bits: the rows widened
// with widen8, and each score's weight taken without a test of the score (the step's m0)
// MMA_KEYS (persist_attn_mma): the passes on the tensor cores, MMA_KEYS rows a warp a pass (mma_passes; not the FMA
// passes' bits); MMA_AHEAD (persist_attn_mma_ahead): their passes in flight while one computes (64 wide; the same bits)
// MMA_FIRST (persist_attn_mma_first, 64 wide): 1: those first passes' rows loaded beside q's (mfirst; the same
// bits); 2: their rows before pos - 1 loaded by the tile before its wait (`mearly`: early_rows_end), row pos - 1
// beside q's (MmaPass::load_row; the same bits)
// Q_PAIRS (persist_attn_q_pairs; TAGGED, every dim rotated, `rope` given): without QK_NORM q's and the new k's words
// taken a rotation pair a thread (QkvPairs), rotated in registers and stored rotated, the new row written to
// the cache by the same threads: one block barrier before the keys where there were three (the same bits: rotate_pair's
// arithmetic on the same coefficients). With QK_NORM (persist_attn_q_pairs_normed; TAGGED, every dim rotated, not
// INTERLEAVED, `rope` a HeadPairsRope): a warp takes a whole head instead, warp h < GROUP query head h and warp
// GROUP the new k and v, normed and rotated in its registers (head_rmsnorm's and rotate_pair's arithmetic in their
// order: the same bits), one block barrier before the keys where there were four
template <typename T, int HEAD_DIM, int GROUP, int ROTARY, bool INTERLEAVED, bool QK_NORM, int WARPS, int U,
          bool TAGGED = false, bool PIPE = false, bool SOFTCAP = true, int U_SHORT = 0, bool KV_FIRST = false,
          bool EARLY = false, bool LEAN = false, int MMA_KEYS = 0, int MMA_AHEAD = 1, int MMA_FIRST = 0,
          bool Q_PAIRS = false, typename Marks = NoMarks, typename Rope = RopeCoeffs<ROTARY, GROUP, WARPS * 32>>
__device__ __forceinline__ void attention_slice(AttentionSmem<HEAD_DIM, GROUP, WARPS>& sm, const float* qkv, T* cache,
                                                int kv_heads, int max_seq, const float* inv_freq, const T* q_norm_w,
                                                const T* k_norm_w, float norm_eps, float scale, float softcap, int g,
                                                int pos, int lo, int hi, unsigned tag = 0,
                                                const Rope* rope = nullptr,
                                                Marks mark = {},
                                                const QkvWordsOf<HEAD_DIM, GROUP, WARPS, Q_PAIRS, INTERLEAVED>* pre =
                                                    nullptr,
                                                const KvPass<T, HEAD_DIM, WARPS, U>* early = nullptr,
                                                const FirstPasses<T, HEAD_DIM, MMA_KEYS,
                                                                  FirstPassCount<MMA_KEYS, MMA_FIRST,
                                                                                 MMA_AHEAD>::value>* mearly = nullptr) {
  using Pass = KvPass<T, HEAD_DIM, WARPS, U>;
  constexpr int LPK = Pass::LPK, KPW = Pass::KPW;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nq = kv_heads * GROUP;
  T* kc = k_rows<T, HEAD_DIM>(cache, max_seq, g);
  T* vc = v_rows<T, HEAD_DIM>(cache, kv_heads, max_seq, g);

  // q of this group: norm, rotate, scale; the new k and v (their loads beside q's)
  const bool owns_pos = hi == pos + 1;  // the last active split holds row pos
  constexpr int US = U_SHORT > 0 ? U_SHORT : 1;
  const bool short_pass = U_SHORT > 0 && hi - lo <= WARPS * KPW * U_SHORT;  // (block-uniform)
  static_assert(!EARLY || US <= U, "the early pass's first slots hold the short pass's rows");
  KvPass<T, HEAD_DIM, WARPS, US> first;  // KV_FIRST: the short pass's rows before pos, loaded now
  if (!EARLY && KV_FIRST && short_pass) first.load(kc, vc, lo + warp * KPW, owns_pos ? pos : hi);
  Pass head;  // EARLY: the first pass, its rows before pos - 1 loaded before the wait; the others but pos now
  if constexpr (EARLY) {
    head = *early;
    head.load_between(kc, vc, lo + warp * KPW, early_rows_end(hi, pos), hi, pos);
  }
  // MMA_FIRST: the tensor cores' first passes (as many as they keep in flight), their rows before pos loaded now,
  // beside q's words, so that their round trip passes under q's, the rotation and the new row's write (2: only row
  // pos - 1 now, the others in `mearly` since before the wait); row pos is put in from shared memory once written
  // (MmaPass::put_row)
  constexpr int FIRST = FirstPassCount<MMA_KEYS, MMA_FIRST, MMA_AHEAD>::value;
  FirstPasses<T, HEAD_DIM, MMA_KEYS, FIRST> mfirst[FIRST > 0 ? FIRST : 1];
  auto first_row = [&](int a) { return first_pass_row<WARPS, MMA_KEYS>(lo, warp, a); };
  if constexpr (FIRST > 0) {
#pragma unroll
    for (int a = 0; a < FIRST; ++a) {
      if (MMA_FIRST == 2) {
        mfirst[a] = mearly[a];
        if (first_row(a) < hi) mfirst[a].load_row(kc, vc, first_row(a), pos - 1, hi);
      } else if (first_row(a) < hi) {
        mfirst[a].load(kc, vc, first_row(a), owns_pos ? pos : hi);
      }
    }
  }
  static_assert(!Q_PAIRS || (TAGGED && ROTARY == HEAD_DIM && (!QK_NORM || !INTERLEAVED)),
                "q's pairs rotated in registers: tagged words, every dim rotated, with head norms not interleaved");
  if constexpr (Q_PAIRS && QK_NORM) {  // a warp a head: its words loaded at once, each stale one again; normed,
    // rotated with rope's coefficients (HeadPairsRope: the dims a lane holds) and stored rotated; the new row written
    // to the cache from there too. The tile loads no words before its wait here (persistent.cuh asserts it).
    static_assert(std::is_same_v<Rope, HeadPairsRope<HEAD_DIM>>, "a lane's pairs' coefficients (HeadPairsRope)");
    static_assert(GROUP < WARPS, "a warp for each query head and one for the new key");
    constexpr int E = HEAD_DIM / 32;
    const bool q_warp = warp < GROUP, kv_warp = warp == GROUP && owns_pos, mine = q_warp || kv_warp;
    const int w0 = q_warp ? (g * GROUP + warp) * HEAD_DIM : (nq + g) * HEAD_DIM, v0 = (nq + kv_heads + g) * HEAD_DIM;
    const T* nw = q_warp ? q_norm_w : k_norm_w;
    unsigned long long w[E], wv[E];
    float x[E], gain[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      if (mine) {
        w[e] = ld_tagged(qkv, w0 + lane + 32 * e);
        gain[e] = to_float<T>(nw[lane + 32 * e]);
      }
      if (kv_warp) wv[e] = ld_tagged(qkv, v0 + lane + 32 * e);
    }
    settle_tags<2 * E>(  // (the head's words, then the new v's)
        [&](int e) { return e < E ? mine && !carries(w[e], tag) : kv_warp && !carries(wv[e - E], tag); },
        [&](int e) {
          if (e < E) w[e] = ld_tagged(qkv, w0 + lane + 32 * e);
          else wv[e - E] = ld_tagged(qkv, v0 + lane + 32 * (e - E));
        });
    if (mine) {  // (warp-uniform: warp_sum's lanes all take part)
      float ss = 0.f;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        x[e] = settled_value(w[e], tag);
        ss += x[e] * x[e];
      }
      const float norm = rsqrtf(warp_sum(ss) / HEAD_DIM + norm_eps);
#pragma unroll
      for (int e = 0; e < E; ++e) x[e] = x[e] * norm * gain[e];
      rope->turn(x);
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int i = lane + 32 * e;
        if (q_warp) {
          sm.qs[warp][i] = x[e];
        } else {
          const float v = settled_value(wv[e], tag);
          sm.kn[i] = x[e];
          sm.vn[i] = v;
          kc[(size_t)pos * HEAD_DIM + i] = from_float<T>(x[e]);
          vc[(size_t)pos * HEAD_DIM + i] = from_float<T>(v);
        }
      }
    }
  } else if constexpr (Q_PAIRS) {  // every word loaded at once, each stale one again; each pair rotated in registers
    // with rope's coefficients (the tile's: made before its wait, with persist_attn_q_pairs 2 after it, with 3 read
    // after it from the step's table), stored rotated; the new row written to the cache from here too
    using Words = QkvPairs<HEAD_DIM, GROUP, WARPS, INTERLEAVED>;
    using Rope = RopeCoeffs<ROTARY, GROUP, WARPS * 32>;
    constexpr int QI = Words::QI;
    static_assert(QI == Rope::QI, "a thread's q pairs are the ones RopeCoeffs made its coefficients for");
    Words words;
#if KIEC_TAG_WAITS
    if (pre) words = *pre;  // (loaded before the wait)
    else
#endif
      words.load(qkv, g, kv_heads, owns_pos);
    const int q0 = g * GROUP * HEAD_DIM, k0 = (nq + g) * HEAD_DIM, v0 = (nq + kv_heads + g) * HEAD_DIM;
    const bool kv_mine = owns_pos && Words::kv_elem(0) >= 0;
    settle_tags<2 * QI + 4>(  // (q's pairs, then the new k's and v's)
        [&](int e) {
          if (e < 2 * QI) return Words::q_elem(e / 2, e % 2) >= 0 && !carries(words.q[e / 2][e % 2], tag);
          return kv_mine && !carries(e < 2 * QI + 2 ? words.k[e - 2 * QI] : words.v[e - 2 * QI - 2], tag);
        },
        [&](int e) {
          if (e < 2 * QI) words.q[e / 2][e % 2] = ld_tagged(qkv, q0 + Words::q_elem(e / 2, e % 2));
          else if (e < 2 * QI + 2) words.k[e - 2 * QI] = ld_tagged(qkv, k0 + Words::kv_elem(e - 2 * QI));
          else words.v[e - 2 * QI - 2] = ld_tagged(qkv, v0 + Words::kv_elem(e - 2 * QI - 2));
        });
    float* qs = &sm.qs[0][0];
#pragma unroll
    for (int r = 0; r < QI; ++r) {
      const int a = Words::q_elem(r, 0), b = Words::q_elem(r, 1);
      if (a >= 0)
        rotate_pair(settled_value(words.q[r][0], tag), settled_value(words.q[r][1], tag), rope->qs[r], rope->qc[r],
                    qs[a], qs[b]);
    }
    if (kv_mine) {
      const int a = Words::kv_elem(0), b = Words::kv_elem(1);
      float ka, kb;
      rotate_pair(settled_value(words.k[0], tag), settled_value(words.k[1], tag), rope->ks, rope->kc, ka, kb);
      const float va = settled_value(words.v[0], tag), vb = settled_value(words.v[1], tag);
      sm.kn[a] = ka;
      sm.kn[b] = kb;
      sm.vn[a] = va;
      sm.vn[b] = vb;
      kc[(size_t)pos * HEAD_DIM + a] = from_float<T>(ka);
      kc[(size_t)pos * HEAD_DIM + b] = from_float<T>(kb);
      vc[(size_t)pos * HEAD_DIM + a] = from_float<T>(va);
      vc[(size_t)pos * HEAD_DIM + b] = from_float<T>(vb);
    }
  } else if constexpr (TAGGED) {  // every word loaded at once, then each stale one again
    constexpr int THREADS = WARPS * 32, QPER = (GROUP * HEAD_DIM + THREADS - 1) / THREADS;
    static_assert(HEAD_DIM <= THREADS, "a thread takes at most one element of the new k and v");
    QkvWords<HEAD_DIM, GROUP, WARPS> words;
#if KIEC_TAG_WAITS
    if (pre) words = *pre;  // (loaded before the wait)
    else
#endif
      words.load(qkv, g, kv_heads, owns_pos);
    unsigned long long(&wq)[QPER] = words.q, &wk = words.k, &wv = words.v;
    const int q0 = g * GROUP * HEAD_DIM, k0 = (nq + g) * HEAD_DIM, v0 = (nq + kv_heads + g) * HEAD_DIM;
    const bool kv_mine = owns_pos && (int)threadIdx.x < HEAD_DIM;
    settle_tags<QPER + 2>(  // (q, then the new k and v: each stale one again, together)
        [&](int e) {
          if (e < QPER) return threadIdx.x + e * THREADS < GROUP * HEAD_DIM && !carries(wq[e], tag);
          return kv_mine && !carries(e == QPER ? wk : wv, tag);
        },
        [&](int e) {
          if (e < QPER) wq[e] = ld_tagged(qkv, q0 + threadIdx.x + e * THREADS);
          else if (e == QPER) wk = ld_tagged(qkv, k0 + threadIdx.x);
          else wv = ld_tagged(qkv, v0 + threadIdx.x);
        });
#pragma unroll
    for (int e = 0; e < QPER; ++e) {
      const int i = threadIdx.x + e * THREADS;
      if (i < GROUP * HEAD_DIM) sm.qs[i / HEAD_DIM][i % HEAD_DIM] = settled_value(wq[e], tag);
    }
    if (kv_mine) {
      sm.kn[threadIdx.x] = settled_value(wk, tag);
      sm.vn[threadIdx.x] = settled_value(wv, tag);
    }
  } else {
    for (int i = threadIdx.x; i < GROUP * HEAD_DIM; i += WARPS * 32) sm.qs[i / HEAD_DIM][i % HEAD_DIM] = qkv[g * GROUP * HEAD_DIM + i];
    if (owns_pos)
      for (int i = threadIdx.x; i < HEAD_DIM; i += WARPS * 32) {
        sm.kn[i] = qkv[(nq + g) * HEAD_DIM + i];
        sm.vn[i] = qkv[(nq + kv_heads + g) * HEAD_DIM + i];
      }
  }
  sync_block();  // (with Q_PAIRS the only one: q rotated, the new row in sm and in the cache, visible to the block)
  if constexpr (!Q_PAIRS) {
    if (QK_NORM) {
      for (int h = warp; h < GROUP; h += WARPS) head_rmsnorm<T, HEAD_DIM>(sm.qs[h], q_norm_w, norm_eps, nullptr);
      if (owns_pos && warp == WARPS - 1) head_rmsnorm<T, HEAD_DIM>(sm.kn, k_norm_w, norm_eps, nullptr);
      sync_block();
    }
    if (rope) {
      rope->template apply<INTERLEAVED>(&sm.qs[0][0], HEAD_DIM, owns_pos ? sm.kn : nullptr);
    } else {
      rope_inplace<ROTARY, INTERLEAVED>(&sm.qs[0][0], GROUP, HEAD_DIM, inv_freq, pos, threadIdx.x, WARPS * 32);
      if (owns_pos) rope_inplace<ROTARY, INTERLEAVED>(sm.kn, 1, HEAD_DIM, inv_freq, pos, threadIdx.x, WARPS * 32);
    }
    sync_block();
    if (owns_pos) {
      for (int i = threadIdx.x; i < HEAD_DIM; i += WARPS * 32) {
        kc[(size_t)pos * HEAD_DIM + i] = from_float<T>(sm.kn[i]);
        vc[(size_t)pos * HEAD_DIM + i] = from_float<T>(sm.vn[i]);
      }
    }
    sync_block();  // the new row is visible to this block (plain loads below, not the read-only path)
  }
  if (EARLY && owns_pos) head.put_row(lo + warp * KPW, pos, sm.kn, sm.vn);
  if constexpr (FIRST > 0) {
    if (owns_pos) {
#pragma unroll
      for (int a = 0; a < FIRST; ++a) mfirst[a].put_row(first_row(a), pos, sm.kn, sm.vn);
    }
  }
  mark(0);
  if constexpr (MMA_KEYS > 0) {  // (the passes on the tensor cores: their own loads, layout and merge of a warp)
    static_assert(!KV_FIRST && !EARLY, "the tensor cores' slice loads its rows after the new one's write");
    if constexpr (FIRST > 0)
      mma_passes<T, HEAD_DIM, GROUP, WARPS, MMA_KEYS, SOFTCAP, MMA_AHEAD, true>(sm, kc, vc, scale, softcap, lo, hi,
                                                                               mfirst);
    else
      mma_passes<T, HEAD_DIM, GROUP, WARPS, MMA_KEYS, SOFTCAP, MMA_AHEAD>(sm, kc, vc, scale, softcap, lo, hi);
    mark(1);
    return;
  }

  const int sub = lane / LPK, part = lane % LPK;
  float q[GROUP][8], acc[GROUP][8], m[GROUP], l[GROUP];
#pragma unroll
  for (int h = 0; h < GROUP; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      q[h][i] = sm.qs[h][part * 8 + i] * scale;
      acc[h][i] = 0.f;
    }
  }
  // One pass: slots u of this warp hold rows j0 + u * WARPS * KPW + sub (of its lane group), valid below `end`.
  // Scores of all U slots first (their dot products and shuffles are independent), then one rescale per head, then
  // the weighted V sum: the serial online-softmax chain is one step per pass, not per key.
  auto step = [&](const auto& kr, const auto& vr, int j0, int end) {  // kr, vr: uint4[U] (or [U_SHORT])
    constexpr int N = sizeof(kr) / sizeof(kr[0]);
    float sc[GROUP][N];
#pragma unroll
    for (int u = 0; u < N; ++u) {
      const int j = j0 + u * WARPS * KPW + sub;
      if (j0 + u * WARPS * KPW < end) {  // warp-uniform: the shuffles below run on all lanes or none
        float k[8];
        if constexpr (LEAN) widen8<T>(kr[u], k);
        else unpack8<T>(kr[u], k);
#pragma unroll
        for (int h = 0; h < GROUP; ++h) {
          float sv = 0.f;
#pragma unroll
          for (int i = 0; i < 8; ++i) sv = fmaf(q[h][i], k[i], sv);
#pragma unroll
          for (int o = LPK / 2; o > 0; o >>= 1) sv += __shfl_xor_sync(0xffffffffu, sv, o);
          if (SOFTCAP && softcap > 0.f) sv = softcap * tanhf(sv / softcap);
          sc[h][u] = j < end ? sv : -INFINITY;
        }
      } else {
#pragma unroll
        for (int h = 0; h < GROUP; ++h) sc[h][u] = -INFINITY;
      }
    }
#pragma unroll
    for (int h = 0; h < GROUP; ++h) {
      float mx = m[h];
#pragma unroll
      for (int u = 0; u < N; ++u) mx = fmaxf(mx, sc[h][u]);
      const float corr = m[h] == -INFINITY ? 0.f : __expf(m[h] - mx);  // m = -inf: l and acc are still 0
      l[h] *= corr;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[h][i] *= corr;
      m[h] = mx;
    }
    // LEAN: each score's weight without a test a score: from m, or from 0 where m is still -inf (every score of the
    // lane's so far masked), so that a masked score's exp(-inf) is the test's 0 (the same bits)
    float m0[GROUP];
#pragma unroll
    for (int h = 0; h < GROUP; ++h) m0[h] = LEAN && m[h] == -INFINITY ? 0.f : m[h];
#pragma unroll
    for (int u = 0; u < N; ++u) {
      if (j0 + u * WARPS * KPW >= end) break;
      float v[8];
      if constexpr (LEAN) widen8<T>(vr[u], v);
      else unpack8<T>(vr[u], v);
#pragma unroll
      for (int h = 0; h < GROUP; ++h) {
        const float p = LEAN ? __expf(sc[h][u] - m0[h]) : sc[h][u] == -INFINITY ? 0.f : __expf(sc[h][u] - m[h]);
        l[h] += p;
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[h][i] = fmaf(p, v[i], acc[h][i]);
      }
    }
  };
  // U keys per lane group per pass: 2U 16-byte loads in flight per lane before the first use. Key groups go
  // round the warps first (warp w, slot u takes rows j0 + (u * WARPS + w) * KPW ...), so a short slice
  // spreads over all warps instead of making one warp's online softmax a long serial chain.
  constexpr int STEP = WARPS * KPW * U;
  auto passes = [&] {
    if constexpr (PIPE) {
      int j0 = lo + warp * KPW;
      Pass cur;
      if (EARLY) cur = head;
      else if (j0 < hi) cur.load(kc, vc, j0, hi);
      for (; j0 < hi; j0 += STEP) {
        Pass next;
        if (j0 + STEP < hi) next.load(kc, vc, j0 + STEP, hi);  // in flight while this pass computes
        step(cur.k, cur.v, j0, hi);
        cur = next;
      }
    } else {
      for (int j0 = lo + warp * KPW; j0 < hi; j0 += STEP) {
        Pass kv;
        if (EARLY && j0 == lo + warp * KPW) kv = head;
        else kv.load(kc, vc, j0, hi);
        step(kv.k, kv.v, j0, hi);
      }
    }
  };
  if constexpr (U_SHORT > 0) {
    if (short_pass) {  // one short pass
      if constexpr (EARLY) {  // (its slots are the first US of the early pass's: the same rows)
        KvPass<T, HEAD_DIM, WARPS, US> kv;
#pragma unroll
        for (int u = 0; u < US; ++u) {
          kv.k[u] = head.k[u];
          kv.v[u] = head.v[u];
        }
        step(kv.k, kv.v, lo + warp * KPW, hi);
      } else if (KV_FIRST) {
        if (owns_pos) first.put_row(lo + warp * KPW, pos, sm.kn, sm.vn);  // (row pos's slot: zeros so far)
        step(first.k, first.v, lo + warp * KPW, hi);
      } else {
        KvPass<T, HEAD_DIM, WARPS, U_SHORT> kv;
        kv.load(kc, vc, lo + warp * KPW, hi);
        step(kv.k, kv.v, lo + warp * KPW, hi);
      }
    } else {
      passes();
    }
  } else {
    passes();
  }
  mark(1);
  // merge the KPW key slots of the warp (lanes with the same `part`)
#pragma unroll
  for (int off = LPK; off < 32; off <<= 1) {
#pragma unroll
    for (int h = 0; h < GROUP; ++h) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m[h], off), l2 = __shfl_xor_sync(0xffffffffu, l[h], off);
      const float mn = fmaxf(m[h], m2);
      const float c1 = mn == -INFINITY ? 0.f : __expf(m[h] - mn), c2 = mn == -INFINITY ? 0.f : __expf(m2 - mn);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[h][i] = acc[h][i] * c1 + __shfl_xor_sync(0xffffffffu, acc[h][i], off) * c2;
      l[h] = l[h] * c1 + l2 * c2;
      m[h] = mn;
    }
  }
  if (lane < LPK) {
#pragma unroll
    for (int h = 0; h < GROUP; ++h) {
      if (lane == 0) { sm.wm[warp][h] = m[h]; sm.wl[warp][h] = l[h]; }
#pragma unroll
      for (int i = 0; i < 8; ++i) sm.wo[warp][h][part * 8 + i] = acc[h][i];
    }
  }
  sync_block();
}

// Graph mode: grid (kv_heads, SPLITS); block (g, s) takes slice s of KV head g, and the last block of each KV
// head to finish combines (a counter per KV head, reset for the next layer). L2_HINT: before waiting on the QKV
// kernel (it launches while that one runs), each block asks L2 for its cache rows of earlier steps; the position is
// this step's (the step's kernels run after the previous step's advance: a graph replay starts after the last).
template <typename T, int HEAD_DIM, int GROUP, int ROTARY, bool INTERLEAVED, bool QK_NORM, int WARPS, int SPLITS, int U,
          int MIN_KEYS, bool L2_HINT = false>
__global__ void __launch_bounds__(WARPS * 32)
attention_kernel(const float* __restrict__ qkv, T* cache, int kv_heads, int max_seq, const float* __restrict__ inv_freq,
                 const T* __restrict__ q_norm_w, const T* __restrict__ k_norm_w, float norm_eps, float scale,
                 float softcap, int window, float* part_o, float* part_ml, unsigned int* counters, float* out,
                 StepState* st) {
  __shared__ AttentionSmem<HEAD_DIM, GROUP, WARPS> sm;
  __shared__ int last;
  pdl_launch_dependents();
  if (L2_HINT) {
    int lo, hi, active;
    const int hint = *(volatile const int*)&st->pos;
    split_range<SPLITS, MIN_KEYS>(hint, window, blockIdx.y, lo, hi, active);
    if (blockIdx.y < active) prefetch_split_l2<T, HEAD_DIM>(cache, kv_heads, max_seq, blockIdx.x, lo, hi, hint);
  }
  pdl_wait();
  const int g = blockIdx.x, split = blockIdx.y, pos = st->pos;
  int lo, hi, active;
  split_range<SPLITS, MIN_KEYS>(pos, window, split, lo, hi, active);
  if (split >= active) return;  // the context is too short for this split
  attention_slice<T, HEAD_DIM, GROUP, ROTARY, INTERLEAVED, QK_NORM, WARPS, U>(
      sm, qkv, cache, kv_heads, max_seq, inv_freq, q_norm_w, k_norm_w, norm_eps, scale, softcap, g, pos, lo, hi);
  attention_store<HEAD_DIM, GROUP, WARPS, SPLITS>(sm, g, split, active, part_o, part_ml, out);
  if (active == 1) return;
  __threadfence();
  sync_block();
  if (threadIdx.x == 0) last = atomicAdd(&counters[g], 1u) == (unsigned)active - 1;
  sync_block();
  if (!last) return;
  __threadfence();
  attention_combine<HEAD_DIM, GROUP, SPLITS>(g, active, part_o, part_ml, out);
  if (threadIdx.x == 0) counters[g] = 0;  // ready for the next layer
}

}  // namespace kiec
