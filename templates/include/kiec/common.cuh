// Shared device helpers and the step state every kernel of a decode step reads.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace kiec {

// Lives in device memory; the step's kernels read pos and token from here, so that one captured CUDA
// graph serves every position. The host writes it only between replays.
struct StepState {
  int pos;                       // position of the token being decoded
  int n_prompt;                  // tokens[0 .. n_prompt) are the prompt
  int n_steps;                   // steps requested in this generation (advance stops at the last)
  int _pad;
  unsigned long long argmax;     // packed (ordered float, ~index) of the LM head's maximum
};

// Programmatic dependent launch (Hopper): a kernel lets the next one start launching at once, and waits
// for the previous one's results only where it first reads them. Work before the wait may touch nothing
// the previous kernel writes (weights are fine). Without the launch attribute both are no-ops.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// Ask L2 for `bytes` from p (16-byte aligned) in one instruction (Hopper's bulk prefetch; nothing elsewhere);
// nothing waits for the data.
__device__ __forceinline__ void prefetch_bulk_l2(const void* p, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  bytes &= ~15u;
  if (bytes) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

// The cache rows [lo, hi) split `split` of `splits` takes at `pos`, and how many splits are in use
// (simulate.split_rows): each takes at least min_keys rows, so a short context is one split per KV head and a long
// one spreads over all of them; a context of at most `solo` rows (persist_attn_solo_keys; 0: off) is one split.
// Attention's split_range (compile-time counts) and the persistent weight stream's walk (the kernel descriptor's)
// both use it.
__host__ __device__ __forceinline__ void split_range_of(int pos, int window, int split, int splits, int min_keys,
                                                        int& lo, int& hi, int& active, int solo = 0) {
  const int start = window > 0 ? max(0, pos + 1 - window) : 0, n = pos + 1 - start;
  const int chunk = solo > 0 && n <= solo ? n : max(min_keys, (n + splits - 1) / splits);
  active = (n + chunk - 1) / chunk;
  lo = start + split * chunk;
  hi = min(lo + chunk, pos + 1);
}

// Rows [lo, lo + rows) of KV head g's K and of its V, asked of L2 (a cache is [K heads][max_seq rows], then the V
// heads, row_bytes a row): attn_l2_prefetch, from the split itself or from the weight stream.
__device__ __forceinline__ void prefetch_kv_rows_l2(const char* cache, int kv_heads, int max_seq, int row_bytes,
                                                    int g, int lo, int rows) {
  if (rows <= 0) return;
  const size_t head = (size_t)max_seq * row_bytes;
  const char* k = cache + (size_t)g * head + (size_t)lo * row_bytes;
  prefetch_bulk_l2(k, (unsigned)rows * row_bytes);
  prefetch_bulk_l2(k + (size_t)kv_heads * head, (unsigned)rows * row_bytes);
}

#ifndef __CUDACC_RTC__
// Launch with the programmatic-serialization attribute, so that captured graphs get programmatic edges.
template <typename... Params, typename... Args>
inline cudaError_t launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                              Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...);
}
#endif

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// warp_sum over each group of N lanes (N a power of two up to 32: lanes lane & ~(N - 1) .. + N - 1); every lane calls
// it. (warp_sum is N 32.)
template <int N>
__device__ __forceinline__ float lanes_sum(float v) {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "a group of lanes is a power of two up to 32");
#pragma unroll
  for (int o = N / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The threads that compute, and their barrier. In persistent mode (KIEC_COMPUTE_THREADS defined) the block's last
// warp only streams weights into shared memory and never joins: the compute warps meet on named barrier 1.
__device__ __forceinline__ int block_threads() {
#ifdef KIEC_COMPUTE_THREADS
  return KIEC_COMPUTE_THREADS;
#else
  return blockDim.x;
#endif
}
__device__ __forceinline__ void sync_block() {
#ifdef KIEC_COMPUTE_THREADS
  asm volatile("bar.sync 1, %0;" ::"n"(KIEC_COMPUTE_THREADS) : "memory");
#else
  __syncthreads();
#endif
}
// sync_block that also answers whether `v` holds on every computing thread.
__device__ __forceinline__ bool sync_block_and(bool v) {
#ifdef KIEC_COMPUTE_THREADS
  unsigned r;
  asm volatile("{ .reg .pred p, q; setp.ne.u32 p, %1, 0; bar.red.and.pred q, 1, %2, p; selp.u32 %0, 1, 0, q; }"
               : "=r"(r) : "r"((unsigned)v), "n"(KIEC_COMPUTE_THREADS) : "memory");
  return r;
#else
  return __syncthreads_and(v);
#endif
}

// Sum over the whole block; every thread gets the result. `scratch` holds one float per warp.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = block_threads() >> 5;
  v = warp_sum(v);
  sync_block();
  if (lane == 0) scratch[warp] = v;
  sync_block();
  float t = 0.f;
  for (int w = 0; w < nwarps; ++w) t += scratch[w];
  return t;
}

template <typename T> __device__ __forceinline__ float to_float(T v);
template <> __device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_float(float v) { return v; }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ __nv_bfloat16 from_float(float v) { return __float2bfloat16(v); }
template <> __device__ __forceinline__ __half from_float(float v) { return __float2half(v); }

// 8 consecutive 16-bit values (one 16-byte load) widened to float.
template <typename T>
__device__ __forceinline__ void unpack8(const uint4& raw, float* out) {
  const T* v = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = to_float<T>(v[i]);
}

// unpack8 with bf16 widened in one shift or one mask a value (nvcc's generic widening spends two on the odd ones;
// graph mode's GEMV keeps unpack8: this one changed its register allocation there into spills). The persistent
// GEMV's (ring.cuh) and attention_slice's LEAN.
template <typename T>
__device__ __forceinline__ void widen8(const uint4& raw, float* out) {
  if constexpr (__is_same(T, __nv_bfloat16)) {
    const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = __uint_as_float(w[i] << 16);
      out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  } else {
    unpack8<T>(raw, out);
  }
}

// 8 floats narrowed to T and packed as one 16-byte load of them would read (unpack8's inverse).
template <typename T>
__device__ __forceinline__ uint4 pack8(const float* in) {
  uint4 raw;
  T* v = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = from_float<T>(in[i]);
  return raw;
}

__device__ __forceinline__ uint4 load_stream(const void* p) {
  // Weights are read once per token: keep them out of L1. volatile keeps ptxas from sinking each load
  // next to its first use, which left only two 16-byte loads in flight per lane.
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Order-preserving map of a float to unsigned, packed with the inverted index so that a plain
// max picks the largest value and, among equal values, the smallest index (torch.argmax's rule).
__device__ __forceinline__ unsigned long long argmax_key(float v, int index) {
  unsigned int u = __float_as_uint(v);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<unsigned long long>(u) << 32) | static_cast<unsigned int>(~static_cast<unsigned int>(index));
}

__device__ __forceinline__ int argmax_index(unsigned long long key) {
  return static_cast<int>(~static_cast<unsigned int>(key & 0xffffffffull));
}

// The value argmax_key packed (its map undone).
__device__ __forceinline__ float argmax_value(unsigned long long key) {
  const unsigned int u = static_cast<unsigned int>(key >> 32);
  return __uint_as_float((u & 0x80000000u) ? (u & 0x7fffffffu) : ~u);
}

constexpr int MAX_EOS = 8;

// How a generation chooses its tokens and ends (kiec_configure): temperature 0 is greedy, otherwise top-p
// sampling with the seed (kiec/sampling.py); it ends after any of eos[0 .. n_eos) (0: only at its length).
struct Generation {
  float temperature = 0.f, top_p = 1.f;
  unsigned long long seed = 0;
  int n_eos = 0;
  int eos[MAX_EOS] = {};
};

// Tagged words (persistent mode's persist_tagged; ir/passes/tags.py: tag_plan): element i of a tagged vector
// is the 8 bytes at 2 * i floats, its value's bits then a tag, written and read in one access (an aligned 8-byte
// access is single-copy atomic), so a reader that finds its tag has the value that came with it, without the
// writer's release (persistent_tile.cuh: tag_of).
// KIEC_TAG_PARITY (persist_tag_parity): element i is the 4 bytes at i floats, the value's bits with the lowest
// replaced by the tag, a parity (persistent_tile.cuh: tag_of); a reader takes the value with that bit cleared, so
// every tagged value reaches its readers rounded to 23 bits the same way whatever the parity. The same functions
// and word type, so that every caller is the same code either way.
#ifndef KIEC_TAG_PARITY
#define KIEC_TAG_PARITY 0
#endif
__device__ __forceinline__ void st_tagged(float* v2, int i, float v, unsigned tag) {
#if KIEC_TAG_PARITY
  const unsigned w = (__float_as_uint(v) & ~1u) | (tag & 1u);
  asm volatile("st.relaxed.gpu.global.b32 [%0], %1;" ::"l"(v2 + i), "r"(w) : "memory");
#else
  const unsigned long long w = (unsigned long long)tag << 32 | __float_as_uint(v);
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(v2 + 2 * i), "l"(w) : "memory");
#endif
}
__device__ __forceinline__ unsigned long long ld_tagged(const float* v2, int i) {
#if KIEC_TAG_PARITY
  unsigned w;
  asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];" : "=r"(w) : "l"(v2 + i));
  return w;
#else
  unsigned long long w;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(w) : "l"(v2 + 2 * i));
  return w;
#endif
}
// y[i] = v: as a tagged word carrying `tag` when TAGGED, a plain float otherwise.
template <bool TAGGED>
__device__ __forceinline__ void store_value(float* y, int i, float v, unsigned tag) {
  if (TAGGED) st_tagged(y, i, v, tag);
  else y[i] = v;
}
// Words 2j and 2j + 1 in one 16-byte access (each 8-byte half single-copy atomic, as one word alone).
__device__ __forceinline__ void ld_tagged2(const float* v2, int j, unsigned long long& a, unsigned long long& b) {
#if KIEC_TAG_PARITY  // (8 bytes: two 4-byte words, each single-copy atomic)
  unsigned wa, wb;
  asm volatile("ld.relaxed.gpu.global.v2.b32 {%0, %1}, [%2];" : "=r"(wa), "=r"(wb) : "l"(v2 + 2 * j));
  a = wa;
  b = wb;
#else
  asm volatile("ld.relaxed.gpu.global.v2.b64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(v2 + 4 * j));
#endif
}
// KIEC_TAG_WAITS (persist_tag_waits): a reader of tagged words no longer waits on their writer's counter first, so
// its first loads may come before the writes, and a generation that ended may never write them: the spinning
// threads look at the stop position (stop_view: the block's position and its args' stop_pos, set by the
// persistent kernel's loop before each position) every 1024 spins, and give up on a word once it has passed.
#ifndef KIEC_TAG_WAITS
#define KIEC_TAG_WAITS 0
#endif
struct StopView {
  const int* stop_pos;
  int pos;
};
__device__ __forceinline__ StopView& stop_view() {
  __shared__ StopView view;
  return view;
}
__device__ __forceinline__ bool stop_passed() {
  const StopView& v = stop_view();
  return *(volatile const int*)v.stop_pos <= v.pos;
}
// Whether a loaded word carries `tag`.
__device__ __forceinline__ bool carries(unsigned long long w, unsigned tag) {
#if KIEC_TAG_PARITY
  return ((unsigned)w & 1u) == (tag & 1u);
#else
  return (unsigned)(w >> 32) == tag;
#endif
}
// settle_tags' look at the stop by default: with KIEC_TAG_WAITS (whose first loads may predate the writes, and a
// generation that ended may never make them) whether the generation passed its stop; never without.
struct TagWaitsStop {
  __device__ __forceinline__ bool operator()() const { return KIEC_TAG_WAITS && stop_passed(); }
};
// settle_tags' sleep between rounds by default: with KIEC_TAG_WAITS, a counter poll's (persist_poll_sleep_ns)
#if KIEC_TAG_WAITS && defined(KIEC_POLL_SLEEP_NS)
constexpr int TAG_SLEEP_NS = KIEC_POLL_SLEEP_NS;
#else
constexpr int TAG_SLEEP_NS = 0;
#endif
// Tagged words loaded at once: while any of the N is stale (stale(e)), every stale one is loaded again (reload(e)),
// all in one round trip, until none is or 2^20 rounds went by (a second: a wrong tag is a compiler bug), or
// stopped() (looked at every 1024 rounds) says the generation passed its stop: then false. settled_value then reads
// each word, a NaN where the tag never came. One loop for the batch, not tagged_value's loop a word: less code in
// every case that reads tagged x (see settled_value). TAG_SLEEP_NS > 0: about that long asleep before each round
// of reloads.
template <int N, typename Stale, typename Reload, typename Stopped = TagWaitsStop>
__device__ __forceinline__ bool settle_tags(Stale stale, Reload reload, Stopped stopped = {}) {
  for (unsigned spins = 1;; ++spins) {
    bool any = false;
#pragma unroll
    for (int e = 0; e < N; ++e) any |= stale(e);
    if (!any || spins == 1u << 20) return true;
    if (spins % 1024 == 0 && stopped()) return false;
    if (TAG_SLEEP_NS > 0) __nanosleep(TAG_SLEEP_NS);
#pragma unroll
    for (int e = 0; e < N; ++e)
      if (stale(e)) reload(e);
  }
}

// A word's value (with parity tags, the tag bit cleared).
__device__ __forceinline__ float word_value(unsigned long long w) {
  return __uint_as_float(KIEC_TAG_PARITY ? (unsigned)w & ~1u : (unsigned)w);
}

// A word loaded earlier, loaded again until it carries `tag`: its value. Readers look only once the writer's
// counter says its stores are issued, so the tag comes within a few round trips; after 2^20 (a second) it never
// will (a wrong tag is a compiler bug): the value is a NaN, which poisons the logits (the tests see it) instead of
// hanging the kernel. (A trap here made ptxas spill 796 bytes.)
__device__ __forceinline__ float tagged_value(unsigned long long w, const float* v2, int i, unsigned tag) {
  for (unsigned spins = 0; !carries(w, tag); ++spins) {
    if (spins == 1u << 20) return __uint_as_float(0x7fffffffu);
    if (KIEC_TAG_WAITS && spins % 1024 == 1023 && stop_passed()) return __uint_as_float(0x7fffffffu);
    w = ld_tagged(v2, i);
  }
  return word_value(w);
}

// A word that went through settle_tags: it carries `tag` unless settle_tags gave up on it, and then its value is a
// NaN, as tagged_value's would be, with no reload loop of its own: with a loop a word, llama-3.2-1b's tag-wait
// kernel was 13,920 SASS instructions against 12,152 without tag waits (its down projection case 2,280 vs 1,400)
// and every case ran slower, those whose waits tag waits leave alone too (scripts/code_size.py; bench/RESULTS.md).
__device__ __forceinline__ float settled_value(unsigned long long w, unsigned tag) {
  return carries(w, tag) ? word_value(w) : __uint_as_float(0x7fffffffu);
}

// Tagged pairs (persist_tagged_pairs): pair p of a paired vector (its elements 2p and 2p + 1) is the tagged word at
// 2 * p floats, the two values rounded to bf16 (2p in the low half) in place of the float, the tag beside them: half
// the bytes of two words. Not with parity tags (the emitter refuses them together).
__device__ __forceinline__ void st_tagged_pair(float* v2, int p, float a, float b, unsigned tag) {
  const unsigned lo = __bfloat16_as_ushort(__float2bfloat16_rn(a)), hi = __bfloat16_as_ushort(__float2bfloat16_rn(b));
  const unsigned long long w = (unsigned long long)tag << 32 | hi << 16 | lo;
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(v2 + 2 * p), "l"(w) : "memory");
}
// A pair word that went through settle_tags: its two values (NaNs where the tag never came, as settled_value's).
__device__ __forceinline__ void settled_pair(unsigned long long w, unsigned tag, float& a, float& b) {
  const bool ok = carries(w, tag);
  a = ok ? __uint_as_float((unsigned)w << 16) : __uint_as_float(0x7fffffffu);
  b = ok ? __uint_as_float((unsigned)w & 0xffff0000u) : __uint_as_float(0x7fffffffu);
}

// ---- the tensor cores' operands (attention_mma.cuh's mma_passes; bench/mma_rows.cu and bench/kv_slice.cu)

// Two floats as one register of a T pair, the first in the low half (an mma operand's element order), and each
// half widened back.
template <typename T>
__device__ __forceinline__ unsigned pack_pair(float lo_half, float hi_half) {
  if constexpr (__is_same(T, __nv_bfloat16)) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo_half, hi_half);
    return *reinterpret_cast<const unsigned*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo_half, hi_half);
    return *reinterpret_cast<const unsigned*>(&v);
  }
}
template <typename T>
__device__ __forceinline__ float low_of(unsigned w) {
  if constexpr (__is_same(T, __nv_bfloat16)) return __uint_as_float(w << 16);
  else return __half2float(__ushort_as_half((unsigned short)(w & 0xffffu)));
}
template <typename T>
__device__ __forceinline__ float high_of(unsigned w) {
  if constexpr (__is_same(T, __nv_bfloat16)) return __uint_as_float(w & 0xffff0000u);
  else return __half2float(__ushort_as_half((unsigned short)(w >> 16)));
}
// x and y as a rounded pair (hi) and what rounding left of them as another (lo): x = hi + lo to 16 significant bits
// with bf16 (22 with fp16)
template <typename T>
__device__ __forceinline__ void split_pair(float x, float y, unsigned& hi, unsigned& lo) {
  hi = pack_pair<T>(x, y);
  lo = pack_pair<T>(x - low_of<T>(hi), y - high_of<T>(hi));
}
// d += a b, m16n8k16 with T operands and fp32 accumulators
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  if constexpr (__is_same(T, __nv_bfloat16))
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace kiec
