// The parts of decode attention that attention_slice (attention.cuh) and persistent mode's attention tile
// (persistent.cuh) build on: the rotation and its coefficients made ahead, the per-head norm, a split's rows and
// its K/V passes' loads, where KV head g's rows lie in the cache, and a split's tagged q/k/v words.
#pragma once
#include <type_traits>

#include "common.cuh"

namespace kiec {

struct SoftmaxState {
  float m, l;
};

template <int ROTARY, bool INTERLEAVED>
__device__ __forceinline__ void rope_inplace(float* v, int heads, int stride, const float* inv_freq, int pos, int tid,
                                             int nthreads) {
  // v: `heads` heads in shared memory, `stride` floats apart; pairs (i, i + ROTARY/2) or (2i, 2i+1); all
  // threads take (head, pair) items at once
  for (int t = tid; t < heads * (ROTARY / 2); t += nthreads) {
    const int h = t / (ROTARY / 2), i = t % (ROTARY / 2);
    float s, c;
    sincosf(static_cast<float>(pos) * inv_freq[i], &s, &c);
    const int a = INTERLEAVED ? 2 * i : i, b = INTERLEAVED ? 2 * i + 1 : i + ROTARY / 2;
    float* hv = v + h * stride;
    const float x = hv[a], y = hv[b];
    hv[a] = x * c - y * s;
    hv[b] = y * c + x * s;
  }
}

// pair (x, y) turned by the angle whose sine and cosine are s and c, as rope_inplace turns it
__device__ __forceinline__ void rotate_pair(float x, float y, float s, float c, float& a, float& b) {
  a = x * c - y * s;
  b = y * c + x * s;
}

// rope_inplace's rotation coefficients for this thread's items (the GROUP query heads' pairs, then the new key's),
// computed ahead: they depend on the position alone, so persistent mode's attention tile makes them before it waits
// for its inputs (persist_attn_early_rope), taking inv_freq's load and sincosf off the chain. apply() rotates as
// rope_inplace does with the same coefficients: the same bits.
template <int ROTARY, int GROUP, int THREADS>
struct RopeCoeffs {
  static constexpr int PAIRS = ROTARY / 2, QI = (GROUP * PAIRS + THREADS - 1) / THREADS;
  static_assert(PAIRS <= THREADS, "a thread rotates at most one pair of the new key");
  float qs[QI], qc[QI], ks, kc;
  __device__ __forceinline__ void compute(const float* inv_freq, int pos) {
    const int tid = threadIdx.x;
#pragma unroll
    for (int e = 0; e < QI; ++e) {
      const int t = tid + e * THREADS;
      qs[e] = qc[e] = 0.f;
      if (t < GROUP * PAIRS) sincosf(static_cast<float>(pos) * inv_freq[t % PAIRS], &qs[e], &qc[e]);
    }
    ks = kc = 0.f;
    if (tid < PAIRS) sincosf(static_cast<float>(pos) * inv_freq[tid], &ks, &kc);
  }
  // compute() in two parts (persist_attn_q_pairs 2): the frequencies loaded (before the tile's wait, their round
  // trip under it), then the coefficients made from them (after it; the same bits as compute's)
  __device__ __forceinline__ void load_freqs(const float* inv_freq) {
    const int tid = threadIdx.x;
#pragma unroll
    for (int e = 0; e < QI; ++e) {
      const int t = tid + e * THREADS;
      qs[e] = t < GROUP * PAIRS ? inv_freq[t % PAIRS] : 0.f;
    }
    ks = tid < PAIRS ? inv_freq[tid] : 0.f;
  }
  __device__ __forceinline__ void finish(int pos) {
    const int tid = threadIdx.x;
#pragma unroll
    for (int e = 0; e < QI; ++e) {
      const int t = tid + e * THREADS;
      const float f = qs[e];
      qs[e] = qc[e] = 0.f;
      if (t < GROUP * PAIRS) sincosf(static_cast<float>(pos) * f, &qs[e], &qc[e]);
    }
    const float f = ks;
    ks = kc = 0.f;
    if (tid < PAIRS) sincosf(static_cast<float>(pos) * f, &ks, &kc);
  }
  // the coefficients from the step's table (persist_attn_q_pairs 3: RopeTable, made at the step's start; read after
  // the tile's wait, before its first barrier, which the next step's table waits behind): compute's bits
  template <typename Table>
  __device__ __forceinline__ void from_table(const Table& table) {
    static_assert(Table::PAIRS == PAIRS, "the table holds this rotation's pairs");
    const int tid = threadIdx.x;
#pragma unroll
    for (int e = 0; e < QI; ++e) {
      const int t = tid + e * THREADS;
      qs[e] = t < GROUP * PAIRS ? table.s[t % PAIRS] : 0.f;
      qc[e] = t < GROUP * PAIRS ? table.c[t % PAIRS] : 0.f;
    }
    ks = tid < PAIRS ? table.s[tid] : 0.f;
    kc = tid < PAIRS ? table.c[tid] : 0.f;
  }
  template <bool INTERLEAVED>
  __device__ __forceinline__ static void turn(float* hv, int i, float s, float c) {
    const int a = INTERLEAVED ? 2 * i : i, b = INTERLEAVED ? 2 * i + 1 : i + PAIRS;
    rotate_pair(hv[a], hv[b], s, c, hv[a], hv[b]);
  }
  // q: the GROUP heads, `stride` floats apart; k: the new key (its owner only), or null
  template <bool INTERLEAVED>
  __device__ __forceinline__ void apply(float* q, int stride, float* k) const {
    const int tid = threadIdx.x;
#pragma unroll
    for (int e = 0; e < QI; ++e) {
      const int t = tid + e * THREADS;
      if (t < GROUP * PAIRS) turn<INTERLEAVED>(q + (t / PAIRS) * stride, t % PAIRS, qs[e], qc[e]);
    }
    if (k && tid < PAIRS) turn<INTERLEAVED>(k, tid, ks, kc);
  }
};

// persist_attn_q_pairs where q and k have head norms (persist_attn_q_pairs_normed): a warp takes a whole head, lane
// l its dims l + 32 e (e < HEAD_DIM / 32: the order head_rmsnorm sums them in), so that it norms the head and rotates
// it in registers. The pairs (i, i + HEAD_DIM / 2) of a lane's dims are i = l + 32 j, j < J: its dims j and j + J.
// These are those pairs' coefficients, the same for every head (RopeCoeffs' expressions: the same bits).
template <int HEAD_DIM>
struct HeadPairsRope {
  static constexpr int J = HEAD_DIM / 64, PAIRS = HEAD_DIM / 2;
  static_assert(HEAD_DIM % 64 == 0, "a lane holds whole pairs: heads a multiple of 64 wide");
  float s[J], c[J];
  __device__ __forceinline__ static int pair(int j) { return (int)(threadIdx.x & 31) + 32 * j; }
  __device__ __forceinline__ void compute(const float* inv_freq, int pos) {  // (before the wait: 1)
    load_freqs(inv_freq);
    finish(pos);
  }
  __device__ __forceinline__ void load_freqs(const float* inv_freq) {  // (before the wait: persist_attn_q_pairs 2)
#pragma unroll
    for (int j = 0; j < J; ++j) s[j] = inv_freq[pair(j)];
  }
  __device__ __forceinline__ void finish(int pos) {  // (after it)
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const float f = s[j];
      sincosf(static_cast<float>(pos) * f, &s[j], &c[j]);
    }
  }
  template <typename Table>
  __device__ __forceinline__ void from_table(const Table& table) {  // (persist_attn_q_pairs 3)
    static_assert(Table::PAIRS == PAIRS, "the table holds this rotation's pairs");
#pragma unroll
    for (int j = 0; j < J; ++j) {
      s[j] = table.s[pair(j)];
      c[j] = table.c[pair(j)];
    }
  }
  // the lane's dims of a head (x[e]: dim lane + 32 e), each pair (j, j + J) turned
  __device__ __forceinline__ void turn(float (&x)[2 * J]) const {
#pragma unroll
    for (int j = 0; j < J; ++j) rotate_pair(x[j], x[j + J], s[j], c[j], x[j], x[j + J]);
  }
};

// persist_attn_q_pairs 3: a step's rotation coefficients, one sine and cosine a pair of dims, made once a step by
// each SM (persistent_kernel, before the step's first barrier) from the frequencies it keeps here, so that an
// attention split reads them after its wait instead of making them there (RopeCoeffs::finish's sincosf, on the
// chain with persist_attn_q_pairs 2) or before it (1, which held the wait back). The same bits: the same sincosf of
// the same product. Every attention that takes it shares the one rope (codegen/persistent_rules.py: rope_table_pairs).
template <int PAIRS_>
struct RopeTable {
  static constexpr int PAIRS = PAIRS_;
  static_assert(PAIRS <= 64, "at most 64 pairs: the room persistent.py's STATIC_SMEM leaves (rope_table_pairs)");
  float f[PAIRS], s[PAIRS], c[PAIRS];
  __device__ __forceinline__ static RopeTable& get() {
    __shared__ RopeTable table;
    return table;
  }
  // once, before the steps: this thread's frequency (threads below PAIRS; make reads only its own)
  __device__ __forceinline__ void keep(const float* inv_freq) {
    if ((int)threadIdx.x < PAIRS) f[threadIdx.x] = inv_freq[threadIdx.x];
  }
  __device__ __forceinline__ void make(int pos) {
    const int i = threadIdx.x;
    if (i < PAIRS) sincosf(static_cast<float>(pos) * f[i], &s[i], &c[i]);
  }
};

template <typename T, int HEAD_DIM>
__device__ __forceinline__ void head_rmsnorm(float* v, const T* w, float eps, float* red) {
  // one warp normalizes one head held in shared memory
  const int lane = threadIdx.x & 31;
  float ss = 0.f;
  for (int i = lane; i < HEAD_DIM; i += 32) ss += v[i] * v[i];
  const float scale = rsqrtf(warp_sum(ss) / HEAD_DIM + eps);
  __syncwarp();
  for (int i = lane; i < HEAD_DIM; i += 32) v[i] = v[i] * scale * to_float<T>(w[i]);
  __syncwarp();
}

// split_range_of (common.cuh) with the split count, minimum and solo context known at compile time.
template <int SPLITS, int MIN_KEYS, int SOLO = 0>
__device__ __forceinline__ void split_range(int pos, int window, int split, int& lo, int& hi, int& active) {
  split_range_of(pos, window, split, SPLITS, MIN_KEYS, lo, hi, active, SOLO);
}

// One pass of the key loop's K and V loads: lane (sub, part) of warp w takes rows j0 + u * WARPS * KPW + sub (j0 =
// lo + w * KPW on the first pass) for slots u in [0, U), the 16 bytes at part * 8 of each; rows at or past `hi`
// are zeros.
template <typename T, int HEAD_DIM, int WARPS, int U>
struct KvPass {
  static constexpr int LPK = HEAD_DIM / 8, KPW = 32 / LPK;
  static_assert(HEAD_DIM % 8 == 0 && 32 % LPK == 0, "head_dim must be 64 or 128 (or another divisor layout)");
  uint4 k[U], v[U];
  __device__ __forceinline__ void load(const T* kc, const T* vc, int j0, int hi) {
    const int lane = threadIdx.x & 31, sub = lane / LPK, part = lane % LPK;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = j0 + u * WARPS * KPW + sub;
      k[u] = v[u] = make_uint4(0, 0, 0, 0);
      if (j < hi && j != -1) {  // (j >= 0 always: without the test ptxas schedules graph mode's kernel
        // differently from the one measured, 2026-11-30; keep it until an A/B says otherwise)
        k[u] = *reinterpret_cast<const uint4*>(kc + (size_t)j * HEAD_DIM + part * 8);
        v[u] = *reinterpret_cast<const uint4*>(vc + (size_t)j * HEAD_DIM + part * 8);
      }
    }
  }
  // The slots whose rows lie in [from, hi), but row `skip`, loaded over what they hold (persist_attn_early_pass:
  // the rows the pass loaded before the wait left out).
  __device__ __forceinline__ void load_between(const T* kc, const T* vc, int j0, int from, int hi, int skip) {
    const int lane = threadIdx.x & 31, sub = lane / LPK, part = lane % LPK;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = j0 + u * WARPS * KPW + sub;
      if (j >= from && j < hi && j != skip) {
        k[u] = *reinterpret_cast<const uint4*>(kc + (size_t)j * HEAD_DIM + part * 8);
        v[u] = *reinterpret_cast<const uint4*>(vc + (size_t)j * HEAD_DIM + part * 8);
      }
    }
  }
  // The slot of row `pos`, where this lane holds it: the new row as the cache has it (kn, vn: its floats; pack8
  // rounds as the cache's write does: the same bits).
  __device__ __forceinline__ void put_row(int j0, int pos, const float* kn, const float* vn) {
    const int lane = threadIdx.x & 31, sub = lane / LPK, part = lane % LPK;
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (j0 + u * WARPS * KPW + sub == pos) {
        k[u] = pack8<T>(kn + part * 8);
        v[u] = pack8<T>(vn + part * 8);
      }
  }
};

// persist_attn_early_pass: the rows of a split's first pass that its tile loads before it waits for its inputs,
// [lo, early_rows_end): rows before pos - 1. Row pos - 1 is the previous step's: with tagged words only this
// step's wait on the head's arrivals acquires it (arrivals_waited); rows before it the same SM's wait of the
// previous step did. Row pos is this step's (the split holding it writes it after the wait).
__device__ __forceinline__ int early_rows_end(int hi, int pos) { return min(hi, pos - 1); }

// KV head g's K rows and V rows in the cache.
template <typename T, int HEAD_DIM>
__device__ __forceinline__ T* k_rows(T* cache, int max_seq, int g) {
  return cache + (size_t)g * max_seq * HEAD_DIM;
}
template <typename T, int HEAD_DIM>
__device__ __forceinline__ T* v_rows(T* cache, int kv_heads, int max_seq, int g) {
  return cache + ((size_t)kv_heads + g) * max_seq * HEAD_DIM;
}

// Thread 0 asks L2 for a split's cache rows of earlier steps, [lo, min(hi, pos)) of KV head g: they do not depend
// on this step, so a split can ask before its inputs are ready and find them in L2 when it loads them
// (attn_l2_prefetch 1).
template <typename T, int HEAD_DIM>
__device__ __forceinline__ void prefetch_split_l2(const T* cache, int kv_heads, int max_seq, int g, int lo, int hi,
                                                  int pos) {
  if (threadIdx.x == 0)
    prefetch_kv_rows_l2(reinterpret_cast<const char*>(cache), kv_heads, max_seq, HEAD_DIM * (int)sizeof(T), g, lo,
                        min(hi, pos) - lo);
}

// The marks attention_slice makes where nothing is traced (persistent.cuh passes its own in the traced step).
struct NoMarks {
  __device__ __forceinline__ void operator()(int) const {}
};
// A split's tagged q words and, where it appends, the new k and v words, all loaded at once (attention_slice); with
// tag waits (KIEC_TAG_WAITS) the persistent tile loads them before its wait (its waits left guard its writes, not
// these words, whose tags attention_slice checks), so that their round trip passes under the polls'.
template <int HEAD_DIM, int GROUP, int WARPS>
struct QkvWords {
  static constexpr int THREADS = WARPS * 32, QPER = (GROUP * HEAD_DIM + THREADS - 1) / THREADS;
  unsigned long long q[QPER], k = 0ull, v = 0ull;
  __device__ __forceinline__ void load(const float* qkv, int g, int kv_heads, bool owns_pos) {
    const int nq = kv_heads * GROUP;
#pragma unroll
    for (int e = 0; e < QPER; ++e) {
      const int i = threadIdx.x + e * THREADS;
      if (i < GROUP * HEAD_DIM) q[e] = ld_tagged(qkv, g * GROUP * HEAD_DIM + i);
    }
    if (owns_pos && (int)threadIdx.x < HEAD_DIM) {
      k = ld_tagged(qkv, (nq + g) * HEAD_DIM + threadIdx.x);
      v = ld_tagged(qkv, (nq + kv_heads + g) * HEAD_DIM + threadIdx.x);
    }
  }
};

// persist_attn_q_pairs: QkvWords' words a rotation pair a thread, as RopeCoeffs deals the pairs, so that a thread
// rotates its own in registers: pair p = thread + r x THREADS of the GROUP heads' in words q[r][0..1], and threads
// below HEAD_DIM / 2 pair `thread` of the new k and v in k[0..1], v[0..1].
template <int HEAD_DIM, int GROUP, int WARPS, bool INTERLEAVED>
struct QkvPairs {
  static constexpr int THREADS = WARPS * 32, HALF = HEAD_DIM / 2, QI = (GROUP * HALF + THREADS - 1) / THREADS;
  static_assert(HALF <= THREADS, "a thread takes at most one pair of the new k and v");
  unsigned long long q[QI][2], k[2] = {}, v[2] = {};
  // the element of the GROUP heads (head x HEAD_DIM + dim) that q[r][e] holds, or -1
  __device__ __forceinline__ static int q_elem(int r, int e) {
    const int p = (int)threadIdx.x + r * THREADS, i = p % HALF;
    return p < GROUP * HALF ? (p / HALF) * HEAD_DIM + (INTERLEAVED ? 2 * i + e : i + e * HALF) : -1;
  }
  // the dim of the new k and v that k[e] and v[e] hold, or -1
  __device__ __forceinline__ static int kv_elem(int e) {
    const int i = threadIdx.x;
    return i < HALF ? (INTERLEAVED ? 2 * i + e : i + e * HALF) : -1;
  }
  __device__ __forceinline__ void load(const float* qkv, int g, int kv_heads, bool owns_pos) {
    const int nq = kv_heads * GROUP;
#pragma unroll
    for (int r = 0; r < QI; ++r)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        if (q_elem(r, e) >= 0) q[r][e] = ld_tagged(qkv, g * GROUP * HEAD_DIM + q_elem(r, e));
    if (owns_pos && kv_elem(0) >= 0) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        k[e] = ld_tagged(qkv, (nq + g) * HEAD_DIM + kv_elem(e));
        v[e] = ld_tagged(qkv, (nq + kv_heads + g) * HEAD_DIM + kv_elem(e));
      }
    }
  }
};
// The words a split's tile loads before its wait: QkvPairs with persist_attn_q_pairs, else QkvWords.
template <int HEAD_DIM, int GROUP, int WARPS, bool PAIRS, bool INTERLEAVED>
using QkvWordsOf = std::conditional_t<PAIRS, QkvPairs<HEAD_DIM, GROUP, WARPS, INTERLEAVED>,
                                      QkvWords<HEAD_DIM, GROUP, WARPS>>;

}  // namespace kiec
