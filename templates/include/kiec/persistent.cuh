// The persistent kernel (the monokernel): one block per SM runs its instruction list (ir/passes/persistent.py)
// for every token of a generation, without returning to the host.
//
// An instruction waits until the phase counters it depends on reach their targets for this token (thread 0
// spins on an acquire load), runs one tile, and bumps its own phase's counter (release). Counters only grow, so
// nothing is reset between tokens. Weights never depend on activations: the block's last warp copies every GEMV
// share into a ring of shared-memory pages ahead of the compute warps (TMA bulk copies, mbarriers), so the
// memory keeps streaming while they wait on their inputs.
//
// The generated model source defines the instruction and kernel-descriptor formats (persistent_abi.h, from
// codegen/persistent_abi.py) and a Model::run(Turn, ring, smem) that dispatches an instruction to the tile
// functions below. They are inlined into the kernel: separately compiled (noinline) tile functions made ptxas
// spill (1,192 B in attention, ptxas -v, llama-3.2-1b).
#pragma once
#include "attention.cuh"
#include "common.cuh"
#include "gemv.cuh"
#include "sampling.cuh"

namespace kiec {

// Everything a generation needs, passed by value at launch.
struct PersistentArgs {
  const Instr* instrs;        // every SM's list, back to back
  const int* starts;          // SM i runs instrs[starts[i] .. starts[i + 1])
  const KernelDesc* kernels;  // per fused kernel: which tile function, its operands
  unsigned int* counters;     // one per phase, counter_stride apart, zero at launch
  unsigned int* arrivals;     // attention: one per (layer, KV head), its splits' arrivals; zero at launch
  int counter_stride;         // 32: each phase's counter on its own 128-byte line
  const char* weights;
  float* arena;
  char* kv;
  int* tokens;                // prompt, then each chosen token (device)
  int* host_tokens;           // mapped pinned: the token chosen at each position; -2 after the last when stopped
  const volatile int* host_stop;  // mapped pinned: the host sets it to end the generation early
  unsigned long long* argmax; // per position: packed (ordered logit, ~index) of the LM head's maximum, zero at launch
  int* stop_pos;              // positions from here on are not run (EOS or the host's stop)
  int p0, p_end, n_prompt;    // run positions [p0, p_end); tokens[0 .. n_prompt) are the prompt
  Generation gen;             // argmax or the draw; the EOS ids
  unsigned long long* trace;  // null, or 3 timestamps (ns) per instruction at position trace_pos: start, inputs
  int trace_pos;              // ready, done
};

// One instruction on one token.
struct Turn {
  const Instr* ins;
  int t, pos;  // token index in this launch, and its position
  const PersistentArgs* a;
};

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void trace(const Turn& u, int what) {
  if (u.a->trace && u.pos == u.a->trace_pos && threadIdx.x == 0) u.a->trace[(u.ins - u.a->instrs) * 3 + what] = global_ns();
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Every thread calls it. Thread 0 spins until each counter the instruction waits on reaches this token's
// target (tiles * (t + 1), or tiles * t on the previous token's run); false when the generation ended first
// (looked at every KIEC_STOP_POLL_EVERY polls: each look is one more load in the spin).
#ifndef KIEC_STOP_POLL_EVERY
#define KIEC_STOP_POLL_EVERY 1
#endif
__device__ __forceinline__ bool wait_inputs(const Turn& u) {
  __shared__ int go;
  if (threadIdx.x == 0) {
    int ok = 1;
    const int n = u.ins->n_waits;
    for (int i = 0; i < n && ok; ++i) {
      const Wait w = u.ins->waits[i];
      const unsigned target = w.tiles * (unsigned)(u.t + 1 - w.previous);
      for (unsigned spins = 1; ld_acquire(u.a->counters + w.counter * u.a->counter_stride) < target; ++spins)
        if (spins % KIEC_STOP_POLL_EVERY == 0 && *(volatile int*)u.a->stop_pos <= u.pos) { ok = 0; break; }
    }
    go = ok;
  }
  trace(u, 1);
  sync_block();
  return go;
}

// The tile is done: every thread's writes are ordered before the counter moves (the barrier orders them before
// thread 0's release).
__device__ __forceinline__ void signal_done(const Turn& u) {
  sync_block();
  if (threadIdx.x == 0) {  // a release add: lighter than a full fence and a relaxed add
    unsigned* c = u.a->counters + u.ins->counter * u.a->counter_stride;
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(c) : "memory");
  }
  trace(u, 2);
}

// ---- the weight stream: a ring of shared-memory pages that one thread of the last warpgroup fills with TMA
// bulk copies
//
// Weights never depend on activations, so one thread (the producer) walks the SM's instruction list ahead of the
// compute warps and copies each GEMV share, page by page, into the ring: it is stopped only by a full ring, never
// by a dependency. A page's `full` barrier completes when its bytes have landed; its `empty` barrier when every
// compute thread is done with it. Both sides count pages the same way (seq), so page seq sits in stage
// seq % STAGES and is that stage's (seq / STAGES)-th use.

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ bool mbar_test(unsigned long long* bar, unsigned parity) {
  unsigned ok;
  asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
               : "=r"(ok) : "r"(smem_addr(bar)), "r"(parity) : "memory");
  return ok;
}

__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
  while (!mbar_test(bar, parity)) {}
}

__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_expect(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

// One 16-byte shared-memory load (a plain dereference of a page's uint4 let nvcc split it into eight 2-byte
// loads, 8-way bank conflicts each). volatile keeps it after the page's mbarrier wait.
__device__ __forceinline__ uint4 lds128(const void* p) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(smem_addr(p)));
  return v;
}

// unpack8 with bf16 widened in one shift or one mask a value (nvcc's generic widening spends two on the odd ones;
// graph mode keeps unpack8: this one changed its register allocation there into spills).
template <typename T>
__device__ __forceinline__ void widen8(const uint4& raw, float* out) {
  if constexpr (sizeof(T) == 2 && !__is_same(T, __half)) {
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

// `bytes` (a multiple of 16) from global src to shared dst; bar's transaction count drops by them on arrival.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, unsigned long long* bar,
                                          unsigned long long policy) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
               " [%0], [%1], %2, [%3], %4;"
               ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(policy) : "memory");
}

// Ask L2 for `bytes` from p (16-byte aligned) in one instruction; nothing waits for the data.
__device__ __forceinline__ void prefetch_bulk_l2(const void* p, unsigned bytes) {
  bytes &= ~15u;
  if (bytes) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

// How a GEMV share is cut into pages: items are (row, K segment) of item_bytes each, in memory order, so a run
// of them is one contiguous copy; with SiLU-mul a page holds `per_page` gate items and then the same up items.
__host__ __device__ constexpr int items_per_page(int page_bytes, int item_bytes, bool silu) {
  return page_bytes / (item_bytes * (silu ? 2 : 1));
}

template <int STAGES_, int PAGE_>
struct Ring {
  static constexpr int STAGES = STAGES_, PAGE = PAGE_;
  char* pages;                 // STAGES x PAGE bytes, 128-byte aligned
  unsigned long long* full;    // STAGES: the page's bytes landed (one arrival and the transaction count)
  unsigned long long* empty;   // STAGES: every compute thread released the page (one arrival each)
  unsigned seq;                // pages this thread has gone through
  __device__ __forceinline__ char* page(unsigned s) const { return pages + (size_t)(s % STAGES) * PAGE; }
};

// The pages of an SM's GEMV shares, position after position, in the order the compute warps use them. After
// next(), gate (and for SiLU-mul up) hold the current page's sources, `bytes` each, and up_at where its up half
// goes in the page.
template <int PAGE>
struct PageWalk {
  const PersistentArgs* a;
  int begin, end, pos, i, first;  // the next page: position, instruction, first item
  const char* gate;
  const char* up;
  unsigned bytes, up_at;
  __host__ __device__ __forceinline__ PageWalk(const PersistentArgs* a_, int begin_, int end_)
      : a(a_), begin(begin_), end(end_), pos(a_->p0), i(begin_), first(0) {}
  __host__ __device__ __forceinline__ bool next() {  // host too: tests/cpu/page_walk.cu runs it
    for (; pos < a->p_end; ++pos, i = begin) {
      for (; i < end; ++i, first = 0) {
        const Instr& ins = a->instrs[i];
        if (ins.opcode != OP_GEMV) continue;
        const KernelDesc& d = a->kernels[ins.kernel];
        const int per_page = items_per_page(PAGE, d.item_bytes, d.silu);
        const int items = (ins.hi - ins.lo) * (d.row_bytes / d.item_bytes);
        if (first >= items) continue;
        const size_t at = (size_t)ins.lo * d.row_bytes + (size_t)first * d.item_bytes;
        gate = a->weights + d.w[0] + at;
        up = d.silu ? gate + (size_t)d.n * d.row_bytes : nullptr;
        bytes = (unsigned)min(per_page, items - first) * d.item_bytes;
        up_at = per_page * d.item_bytes;
        first += per_page;
        return true;
      }
    }
    return false;
  }
};

// The producer: thread 0 of the last warp. Copies every GEMV share of positions [p0, p_end) into the ring in
// instruction order, until the compute warps set `quit` (the generation ended early). While the ring is full it
// asks L2 for up to AHEAD pages beyond it (a second walk over the same pages), so that the memory keeps streaming
// through waits longer than the ring covers. Before returning it waits for its copies in flight, so that none
// lands after the block is gone.
template <typename R, int AHEAD>
__device__ void stream_weights(const PersistentArgs& a, R ring, int begin, int end, const volatile int* quit) {
  unsigned long long policy;  // weights are read once a token: first out of L2
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  PageWalk<R::PAGE> copy(&a, begin, end), ahead(&a, begin, end);
  unsigned seq = 0, asked = 0;  // pages copied into the ring; pages asked of L2 (the walk `ahead` is past them)
  for (; copy.next(); ++seq) {
    const unsigned stage = seq % R::STAGES, use = seq / R::STAGES;
    if (use > 0) {
      while (!mbar_test(ring.empty + stage, (use - 1) & 1)) {
        if (*quit) goto drain;
        if (AHEAD > 0 && asked < seq + AHEAD) {
          if (asked <= seq) {  // start from this page
            ahead = copy;
            asked = seq + 1;
          } else if (ahead.next()) {
            ++asked;
          } else {
            continue;
          }
          prefetch_bulk_l2(ahead.gate, ahead.bytes);
          if (ahead.up) prefetch_bulk_l2(ahead.up, ahead.bytes);
        }
      }
    }
    mbar_expect(ring.full + stage, copy.up ? 2 * copy.bytes : copy.bytes);
    char* dst = ring.page(seq);
    bulk_copy(dst, copy.gate, copy.bytes, ring.full + stage, policy);
    if (copy.up) bulk_copy(dst + copy.up_at, copy.up, copy.bytes, ring.full + stage, policy);
  }
drain:
  for (unsigned s = seq > R::STAGES ? seq - R::STAGES : 0; s < seq; ++s)
    mbar_wait(ring.full + s % R::STAGES, (s / R::STAGES) & 1);
}

// ---- tiles: each waits, computes rows [ins.lo, ins.hi) of its kernel, and signals; false when stopped

template <typename T>
__device__ __forceinline__ bool embed_tile(Turn u, const T* table, int dim, int vocab, float* x) {
  if (!wait_inputs(u)) return false;
  const int token = min(max(*(volatile int*)(u.a->tokens + u.pos), 0), vocab - 1);
  for (int i = u.ins->lo + threadIdx.x; i < u.ins->hi; i += block_threads()) x[i] = to_float<T>(table[(size_t)token * dim + i]);
  signal_done(u);
  return true;
}

// The GEMV prologue (gemv_prologue's math, in its order) with the norm's weights loaded into registers before the
// tile waits on its inputs: weights never depend on activations, and after the wait only x is left to fetch.
template <typename T, int K, bool NORM, int THREADS>
struct Prologue {
  static constexpr int PER = (K + THREADS - 1) / THREADS;
  static constexpr bool HOLD = NORM && PER <= 16;  // more would cost registers the GEMV's loop wants
  float w[HOLD ? PER : 1];
  __device__ __forceinline__ void prefetch(const T* norm_w) {
    if (HOLD) {
#pragma unroll
      for (int e = 0; e < PER; ++e) {
        const int i = threadIdx.x + e * THREADS;
        w[e] = i < K ? to_float<T>(norm_w[i]) : 0.f;
      }
    }
  }
  __device__ __forceinline__ void run(const float* x, const T* norm_w, float eps, float* xs, float* red) {
    if (!HOLD) {
      gemv_prologue<T, K, NORM, THREADS>(x, norm_w, eps, xs, red);
      return;
    }
    float v[PER], ss = 0.f;
#pragma unroll
    for (int e = 0; e < PER; ++e) {
      const int i = threadIdx.x + e * THREADS;
      v[e] = i < K ? x[i] : 0.f;
      ss += v[e] * v[e];
    }
    const float scale = rsqrtf(block_sum(ss, red) / K + eps);
#pragma unroll
    for (int e = 0; e < PER; ++e) {
      const int i = threadIdx.x + e * THREADS;
      if (i < K) xs[i] = v[e] * scale * w[e];
    }
    sync_block();
  }
};

// Outputs [lo, hi) of y = epilogue(W . prologue(x)), the weights read from the ring. A row is SEGS segments of
// SEGC 16-byte chunks; work items are (row, segment) (for SiLU-mul: a gate row's segment and its up row's), dealt
// round-robin over the warps. SEGS divides WARPS, so a warp always has the same segment: its slice of x stays in
// registers. Segment sums meet in shared memory and are added in segment order, so a run's result does not
// depend on which warp finished first.
template <typename T, int K, int WARPS, bool NORM, int EPI, bool BIAS, int SEGS, typename R>
__device__ __forceinline__ bool gemv_tile(Turn u, R& ring, const T* bias, float* x, const T* norm_w, float eps,
                                          float* y, int n_out, float* smem) {
  static_assert(K % 8 == 0, "K must be a multiple of 8 (16-byte chunks)");
  constexpr int CHUNKS = K / 8, SEGC = CHUNKS / SEGS, ROUNDS = (SEGC + 31) / 32;
  static_assert(CHUNKS % SEGS == 0 && WARPS % SEGS == 0, "segments must tile a row and divide the warps");
  constexpr bool SILU = EPI == EPI_SILU_MUL;
  constexpr int ITEM = SEGC * 16, PER_PAGE = items_per_page(R::PAGE, ITEM, SILU);
  static_assert(PER_PAGE >= 1, "a page holds at least one item");
  const int lo = u.ins->lo, hi = u.ins->hi, outs = hi - lo, items = outs * SEGS;
  const int pages = (items + PER_PAGE - 1) / PER_PAGE;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, seg = warp % SEGS;
  float* xs = smem;                        // K: the prologue's output
  float* acc = smem + K;                   // [(SILU ? 2 : 1) * outs][SEGS]: each row's segment sums
  float* red = acc + (SILU ? 2 : 1) * outs * SEGS;  // WARPS

  Prologue<T, K, NORM, WARPS * 32> prologue;
  prologue.prefetch(norm_w);
  if (!wait_inputs(u)) return false;
  prologue.run(x, norm_w, eps, xs, red);
  float xr[ROUNDS][8];  // this warp's segment of x
#pragma unroll
  for (int v = 0; v < ROUNDS; ++v) {
    const int c = v * 32 + lane;
    const bool in = SEGC % 32 == 0 || c < SEGC;
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
    const float4 xa = in ? *reinterpret_cast<const float4*>(xs + (seg * SEGC + c) * 8) : zero;
    const float4 xb = in ? *reinterpret_cast<const float4*>(xs + (seg * SEGC + c) * 8 + 4) : zero;
    xr[v][0] = xa.x; xr[v][1] = xa.y; xr[v][2] = xa.z; xr[v][3] = xa.w;
    xr[v][4] = xb.x; xr[v][5] = xb.y; xr[v][6] = xb.z; xr[v][7] = xb.w;
  }

  for (int p = 0; p < pages; ++p, ++ring.seq) {
    const unsigned stage = ring.seq % R::STAGES;
    mbar_wait(ring.full + stage, (ring.seq / R::STAGES) & 1);
    const char* page = ring.page(ring.seq);
    const int first = p * PER_PAGE, n = min(PER_PAGE, items - first);
    for (int j = (warp - first % WARPS + WARPS) % WARPS; j < n; j += WARPS) {
      const int row = (first + j) / SEGS;
      const char* w0 = page + j * ITEM;
      const char* w1 = page + (PER_PAGE + j) * ITEM;
      float p0[ROUNDS], p1[ROUNDS];  // one sum a round: short dependency chains, added in a fixed order
#pragma unroll
      for (int v = 0; v < ROUNDS; ++v) {
        const int c = v * 32 + lane;
        p0[v] = p1[v] = 0.f;
        if (SEGC % 32 == 0 || c < SEGC) {
          float w[8];
          widen8<T>(lds128(w0 + c * 16), w);
#pragma unroll
          for (int i = 0; i < 8; ++i) p0[v] = fmaf(w[i], xr[v][i], p0[v]);
          if (SILU) {
            widen8<T>(lds128(w1 + c * 16), w);
#pragma unroll
            for (int i = 0; i < 8; ++i) p1[v] = fmaf(w[i], xr[v][i], p1[v]);
          }
        }
      }
      float a0 = p0[0], a1 = p1[0];
#pragma unroll
      for (int v = 1; v < ROUNDS; ++v) {
        a0 += p0[v];
        a1 += p1[v];
      }
      a0 = warp_sum(a0);
      if (SILU) a1 = warp_sum(a1);
      if (lane == 0) {
        if (SILU) {
          acc[(2 * row) * SEGS + seg] = a0;
          acc[(2 * row + 1) * SEGS + seg] = a1;
        } else {
          acc[row * SEGS + seg] = a0;
        }
      }
    }
    mbar_arrive(ring.empty + stage);  // every lane: an arrive releases only its own thread's reads
  }
  sync_block();
  auto dot = [&](int r) {  // row r's sum (SiLU: 2 rows per output, gate then up)
    float v = 0.f;
#pragma unroll
    for (int s = 0; s < SEGS; ++s) v += acc[r * SEGS + s];
    return v;
  };

  unsigned long long best = 0ull;
  for (int j = threadIdx.x; j < outs; j += WARPS * 32) {
    const int o = lo + j;
    if (SILU) {
      const float g = dot(2 * j) + (BIAS ? to_float<T>(bias[o]) : 0.f);
      const float up = dot(2 * j + 1) + (BIAS ? to_float<T>(bias[o + n_out]) : 0.f);
      y[o] = g / (1.f + expf(-g)) * up;
    } else {
      const float v = dot(j) + (BIAS ? to_float<T>(bias[o]) : 0.f);
      if (EPI == EPI_STORE || EPI == EPI_ARGMAX) y[o] = v;
      if (EPI == EPI_RESIDUAL) y[o] += v;
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
    if (lane == 0 && best) atomicMax(u.a->argmax + u.pos, best);
  }
  signal_done(u);
  return true;
}

// Split (ins.tile % SPLITS) of KV head ins.lo: its slice of the context, written as a partial (or, with one split
// in use, as the output), then an arrival on the head's counter in `arrive` (splits the context is too short for
// only arrive). The split that arrives last (SPLITS x (t + 1) arrivals: the counter only grows) merges the
// partials and bumps the phase counter, so that the output projection waits on one hop, not a combine phase.
template <typename T, int HEAD_DIM, int GROUP, int ROTARY, bool INTERLEAVED, bool QK_NORM, int WARPS, int SPLITS, int U,
          int MIN_KEYS>
__device__ __forceinline__ bool attention_tile(Turn u, const float* qkv, T* cache, int kv_heads, int max_seq,
                                            const float* inv_freq, const T* q_norm_w, const T* k_norm_w, float norm_eps,
                                            float scale, float softcap, int window, float* part_o, float* part_ml,
                                            float* out, unsigned* arrive, float* smem) {
  if (!wait_inputs(u)) return false;
  const int g = u.ins->lo, split = u.ins->tile % SPLITS;
  int lo, hi, active;
  split_range<SPLITS, MIN_KEYS>(u.pos, window, split, lo, hi, active);
  if (split < active) {
    auto& sm = *reinterpret_cast<AttentionSmem<HEAD_DIM, GROUP, WARPS>*>(smem);
    attention_slice<T, HEAD_DIM, GROUP, ROTARY, INTERLEAVED, QK_NORM, WARPS, U>(
        sm, qkv, cache, kv_heads, max_seq, inv_freq, q_norm_w, k_norm_w, norm_eps, scale, softcap, g, u.pos, lo, hi);
    attention_store<HEAD_DIM, GROUP, WARPS, SPLITS>(sm, g, split, active, part_o, part_ml, out);
  }
  __shared__ int last;
  sync_block();
  if (threadIdx.x == 0) {  // releases this block's partial, acquires the others' when it is the last
    unsigned before;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(arrive + g) : "memory");
    last = before + 1 == (unsigned)SPLITS * (unsigned)(u.t + 1);
  }
  sync_block();
  if (!last) {
    trace(u, 2);
    return true;
  }
  if (active > 1) attention_combine<HEAD_DIM, GROUP, SPLITS>(g, active, part_o, part_ml, out);
  signal_done(u);
  return true;
}

// ---- select: the token after this step

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
// (up to SAMPLE_CANDIDATES, persistent_abi.h) and are sorted there; when they are too many or do not hold the mass, tau is found by bisection over all logits (a flat
// distribution: slower, same answer). The draw scans the kept mass over contiguous id ranges, one per thread.
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

// The token after the step at `pos`: the prompt's next token, or the argmax / the draw; EOS and the host's stop
// end the generation. Publishes the token to the host.
__device__ __forceinline__ bool select_tile(Turn u, const float* logits, int vocab, float* smem) {
  if (!wait_inputs(u)) return false;
  const PersistentArgs& a = *u.a;
  const unsigned long long key = *(volatile unsigned long long*)(a.argmax + u.pos);
  int chosen = argmax_index(key);
  if (a.gen.temperature > 0.f && u.pos + 1 >= a.n_prompt)
    chosen = sample_block(logits, vocab, argmax_value(key), a.gen, u.pos, smem);
  if (threadIdx.x == 0) {
    const int next = u.pos + 1;
    a.host_tokens[u.pos] = chosen;
    if (next >= a.n_prompt) {
      a.tokens[next] = chosen;
      bool stop = *a.host_stop != 0;
      for (int i = 0; i < a.gen.n_eos; ++i) stop |= chosen == a.gen.eos[i];
      if (stop && next < a.p_end) {
        *(volatile int*)a.stop_pos = next;
        __threadfence_system();
        a.host_tokens[next] = -2;
      }
    }
    __threadfence_system();
  }
  signal_done(u);
  return true;
}

// One block per SM: warps [0, COMPUTE_WARPS) run its list token after token (Model::run dispatches an
// instruction); one more warpgroup streams the weights (stream_weights: one thread of it works). Registers move
// from the streaming warpgroup to the compute warps (setmaxnreg): the launch bounds alone would give every thread
// 168 (a 12-warp block), and the attention and select tiles spill at that. Shared memory: the ring's barriers,
// its pages, then the tiles' scratch.
constexpr int STREAM_WARPS = 4, STREAM_REGS = 40;
template <int COMPUTE_WARPS>
struct ComputeRegs {  // what the register file leaves the compute warps, in steps of 8, at most 248
  static constexpr int free = (65536 / 32 - STREAM_WARPS * STREAM_REGS) / COMPUTE_WARPS / 8 * 8;
  static constexpr int value = free > 248 ? 248 : free;
};

template <typename Model, typename R, int COMPUTE_WARPS, int L2_AHEAD>
__global__ void __launch_bounds__((COMPUTE_WARPS + STREAM_WARPS) * 32, 1) persistent_kernel(PersistentArgs a) {
  static_assert(COMPUTE_WARPS % 4 == 0, "the compute warps are whole warpgroups (setmaxnreg)");
  extern __shared__ __align__(128) char smem_raw[];
  __shared__ int stopped;
  __shared__ volatile int quit;
  R ring;
  ring.full = reinterpret_cast<unsigned long long*>(smem_raw);
  ring.empty = ring.full + R::STAGES;
  ring.pages = smem_raw + 128 * ((2 * R::STAGES * 8 + 127) / 128);
  ring.seq = 0;
  float* smem = reinterpret_cast<float*>(ring.pages + (size_t)R::STAGES * R::PAGE);
  const int begin = a.starts[blockIdx.x], end = a.starts[blockIdx.x + 1];
  if (threadIdx.x == 0) {
    for (int s = 0; s < R::STAGES; ++s) {
      mbar_init(ring.full + s, 1);
      mbar_init(ring.empty + s, COMPUTE_WARPS * 32);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    quit = 0;
  }
  __syncthreads();  // the last one with the streaming warps
  if (threadIdx.x >= COMPUTE_WARPS * 32) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(STREAM_REGS));
    if (threadIdx.x == COMPUTE_WARPS * 32) stream_weights<R, L2_AHEAD>(a, ring, begin, end, &quit);
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(ComputeRegs<COMPUTE_WARPS>::value));
  for (int pos = a.p0, t = 0; pos < a.p_end; ++pos, ++t) {
    if (threadIdx.x == 0) stopped = *(volatile int*)a.stop_pos <= pos;
    sync_block();
    if (stopped) break;
    int i = begin;
    for (; i < end; ++i) {
      const Turn u{a.instrs + i, t, pos, &a};
      trace(u, 0);
      if (!Model::run(u, ring, smem)) break;
    }
    if (i < end) break;
  }
  if (threadIdx.x == 0) quit = 1;
}

}  // namespace kiec
