// The persistent kernel (the monokernel): one block per SM runs its instruction list (ir/passes/persistent.py)
// for every token of a generation, without returning to the host.
//
// An instruction waits until the phase counters it depends on reach their targets for this token (thread 0
// spins on an acquire load), runs one tile, and bumps its own phase's counter (release). Counters only grow, so
// nothing is reset between tokens. Weights never depend on activations: one thread of the block's last
// warpgroup copies every GEMV share into a ring of shared-memory pages ahead of the compute warps (TMA bulk
// copies, mbarriers; ring.cuh), so the memory keeps streaming while they wait on their inputs.
//
// The generated model source defines the instruction and kernel-descriptor formats (persistent_abi.h, from
// codegen/persistent_abi.py) and a Model::run(Turn, ring, smem) that dispatches an instruction to the tile
// functions below (the top-p draw is in device_sampler.cuh). They are inlined into the kernel: separately
// compiled (noinline) tile functions made ptxas spill (1,192 B in attention, ptxas -v, llama-3.2-1b).
#pragma once
#include "attention.cuh"
#include "common.cuh"
#include "device_sampler.cuh"
#include "gemv.cuh"
#include "persistent_args.cuh"
#include "ring.cuh"
#include "warp_batch.cuh"

namespace kiec {

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// kiec_trace's recording (TRACE_SLOTS in persistent_abi.h): thread 0 of the traced step writes it
__device__ __forceinline__ bool tracing(const Turn& u) {
  return u.a->trace && u.pos == u.a->trace_pos && threadIdx.x == 0;
}

__device__ __forceinline__ unsigned long long* trace_row(const Turn& u) {
  return u.a->trace + (u.ins - u.a->instrs) * TRACE_SLOTS;
}

// A timestamp (TR_START, TR_READY, TR_X_READY, TR_SUMS_DONE, TR_DONE); the SM cycles from start to done ride
// along.
__device__ __forceinline__ void trace(const Turn& u, TraceSlot what) {
  if (!tracing(u)) return;
  unsigned long long* row = trace_row(u);
  row[what] = global_ns();
  if (what == TR_START) row[TR_CYCLES] = clock64();
  if (what == TR_DONE) row[TR_CYCLES] = clock64() - row[TR_CYCLES];
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
  trace(u, TR_READY);
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
  trace(u, TR_DONE);
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
  static constexpr bool HOLD = NORM && PER <= 16;  // a register budget chosen, not measured against others
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
    if (!NORM) {  // a copy, 4 16-byte loads in flight per thread (8 spilled 12 B on llama-3.1-8b; x is 16-byte
                  // aligned: buffers.py)
      constexpr int V = (K / 4 + THREADS - 1) / THREADS, B = V < 4 ? V : 4;
#pragma unroll
      for (int e0 = 0; e0 < V; e0 += B) {
        float4 v[B];
#pragma unroll
        for (int e = 0; e < B; ++e) {
          const int i = threadIdx.x + (e0 + e) * THREADS;
          if (e0 + e < V && i < K / 4) v[e] = reinterpret_cast<const float4*>(x)[i];
        }
#pragma unroll
        for (int e = 0; e < B; ++e) {
          const int i = threadIdx.x + (e0 + e) * THREADS;
          if (e0 + e < V && i < K / 4) reinterpret_cast<float4*>(xs)[i] = v[e];
        }
      }
      sync_block();
      return;
    }
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

// A persistent GEMV's geometry: a row is SEGS segments of SEGC 16-byte chunks; work items are (row, segment)
// (for SiLU-mul: a gate row's segment and its up row's), PER_PAGE of them a ring page, dealt round-robin over the
// warps. SEGS divides WARPS, so a warp always has the same segment and keeps its slice of x in registers.
template <typename T, int K, int WARPS, int EPI, int SEGS, int PAGE>
struct GemvShape {
  static_assert(K % 8 == 0, "K must be a multiple of 8 (16-byte chunks)");
  static constexpr int CHUNKS = K / 8, SEGC = CHUNKS / SEGS, ROUNDS = (SEGC + 31) / 32, ITEM = SEGC * 16;
  static_assert(CHUNKS % SEGS == 0 && WARPS % SEGS == 0, "segments must tile a row and divide the warps");
  static constexpr bool SILU = EPI == EPI_SILU_MUL;
  static constexpr int PER_PAGE = items_per_page(PAGE, ITEM, SILU);
  static_assert(PER_PAGE >= 1, "a page holds at least one item");
  static constexpr int ROWS_PER_OUT = SILU ? 2 : 1;  // segment sums kept per output: gate and up rows
};

// This lane's chunks of segment `seg` of the prologue's output: xr[v] = x[(seg * SEGC + v * 32 + lane) * 8 ..].
template <typename G>
__device__ __forceinline__ void load_x_slice(const float* xs, int seg, int lane, float (&xr)[G::ROUNDS][8]) {
#pragma unroll
  for (int v = 0; v < G::ROUNDS; ++v) {
    const int c = v * 32 + lane;
    const bool in = G::SEGC % 32 == 0 || c < G::SEGC;
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
    const float4 xa = in ? *reinterpret_cast<const float4*>(xs + (seg * G::SEGC + c) * 8) : zero;
    const float4 xb = in ? *reinterpret_cast<const float4*>(xs + (seg * G::SEGC + c) * 8 + 4) : zero;
    xr[v][0] = xa.x; xr[v][1] = xa.y; xr[v][2] = xa.z; xr[v][3] = xa.w;
    xr[v][4] = xb.x; xr[v][5] = xb.y; xr[v][6] = xb.z; xr[v][7] = xb.w;
  }
}

// One item's dot products (w0: the row segment in the page; w1: its up row's, SiLU only): this lane's part.
template <typename T, typename G>
__device__ __forceinline__ void dot_lanes(const char* w0, const char* w1, const float (&xr)[G::ROUNDS][8], int lane,
                                          float& a0, float& a1) {
  float p0[G::ROUNDS], p1[G::ROUNDS];  // one sum a round: short dependency chains, added in a fixed order
#pragma unroll
  for (int v = 0; v < G::ROUNDS; ++v) {
    const int c = v * 32 + lane;
    p0[v] = p1[v] = 0.f;
    if (G::SEGC % 32 == 0 || c < G::SEGC) {
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
// arrive (else 0).
#ifndef KIEC_REDUCE_BATCH
#define KIEC_REDUCE_BATCH 1
#endif
template <typename T, typename G, int WARPS, int SEGS, typename R>
__device__ __forceinline__ long long gemv_pages(R& ring, int items, const float (&xr)[G::ROUNDS][8], float* acc,
                                                bool timed) {
  constexpr int B = KIEC_REDUCE_BATCH;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, seg = warp % SEGS;
  const int pages = (items + G::PER_PAGE - 1) / G::PER_PAGE;
  float b0[B], b1[B];
  int mine = 0;  // this warp's items so far
  auto push = [&](float a0, float a1) {
#pragma unroll
    for (int k = 0; k + 1 < B; ++k) {
      b0[k] = b0[k + 1];
      b1[k] = b1[k + 1];
    }
    b0[B - 1] = a0;
    b1[B - 1] = a1;
  };
  auto sums_out = [&](int have) {  // slot k < have: this warp's item mine - have + k
    const float s0 = warp_sum_batch<B>(b0, lane, WarpXor());
    const float s1 = G::SILU ? warp_sum_batch<B>(b1, lane, WarpXor()) : 0.f;
    const int k = lane / (32 / B);
    if (lane % (32 / B) == 0 && k < have) {
      const int row = (warp + (mine - have + k) * WARPS) / SEGS;
      acc[(G::ROWS_PER_OUT * row) * SEGS + seg] = s0;
      if (G::SILU) acc[(2 * row + 1) * SEGS + seg] = s1;
    }
  };
  long long waited = 0;
  for (int p = 0; p < pages; ++p, ++ring.seq) {
    const unsigned stage = ring.seq % R::STAGES;
    if (timed) {
      const long long c0 = clock64();
      mbar_wait(ring.full + stage, (ring.seq / R::STAGES) & 1);
      waited += clock64() - c0;
    } else {
      mbar_wait(ring.full + stage, (ring.seq / R::STAGES) & 1);
    }
    const char* page = ring.page(ring.seq);
    const int first = p * G::PER_PAGE, n = min(G::PER_PAGE, items - first);
    for (int j = (warp - first % WARPS + WARPS) % WARPS; j < n; j += WARPS) {
      float a0, a1;
      dot_lanes<T, G>(page + j * G::ITEM, page + (G::PER_PAGE + j) * G::ITEM, xr, lane, a0, a1);
      push(a0, a1);
      if (++mine % B == 0) sums_out(B);
    }
    mbar_arrive(ring.empty + stage);  // every lane: an arrive releases only its own thread's reads
  }
  if (const int have = mine % B) {  // the last, short batch: zeros shifted in behind its items
    for (int k = have; k < B; ++k) push(0.f, 0.f);
    sums_out(have);
  }
  return waited;
}

// Outputs [lo, hi) from the segment sums (added in segment order, so a run's result does not depend on which
// warp finished first): SiLU-mul, store, residual add, or store and the packed argmax.
// y_mine: with EPI_RESIDUAL, y[lo + threadIdx.x] as loaded before the dot products (residual_first).
template <typename T, int SEGS, int EPI, bool BIAS, int THREADS>
__device__ __forceinline__ void gemv_epilogue(const Turn& u, const float* acc, const T* bias, float* y, int lo,
                                              int outs, int n_out, float y_mine) {
  auto dot = [&](int r) {  // row r's sum (SiLU: 2 rows per output, gate then up)
    float v = 0.f;
#pragma unroll
    for (int s = 0; s < SEGS; ++s) v += acc[r * SEGS + s];
    return v;
  };
  unsigned long long best = 0ull;
  for (int j = threadIdx.x; j < outs; j += THREADS) {
    const int o = lo + j;
    if (EPI == EPI_SILU_MUL) {
      const float g = dot(2 * j) + (BIAS ? to_float<T>(bias[o]) : 0.f);
      const float up = dot(2 * j + 1) + (BIAS ? to_float<T>(bias[o + n_out]) : 0.f);
      y[o] = g / (1.f + expf(-g)) * up;
    } else {
      const float v = dot(j) + (BIAS ? to_float<T>(bias[o]) : 0.f);
      if (EPI == EPI_STORE || EPI == EPI_ARGMAX) y[o] = v;
      if (EPI == EPI_RESIDUAL) y[o] = (j == (int)threadIdx.x ? y_mine : y[o]) + v;
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
template <typename T, int K, int WARPS, bool NORM, int EPI, bool BIAS, int SEGS, typename R>
__device__ __forceinline__ bool gemv_tile(Turn u, R& ring, const T* bias, float* x, const T* norm_w, float eps,
                                          float* y, int n_out, float* smem) {
  using G = GemvShape<T, K, WARPS, EPI, SEGS, R::PAGE>;
  const int lo = u.ins->lo, outs = u.ins->hi - lo;
  float* xs = smem;                               // K: the prologue's output
  float* acc = smem + K;                          // [ROWS_PER_OUT * outs][SEGS]: each row's segment sums
  float* red = acc + G::ROWS_PER_OUT * outs * SEGS;  // WARPS

  Prologue<T, K, NORM, WARPS * 32> prologue;
  prologue.prefetch(norm_w);
  if (!wait_inputs(u)) return false;
  // the residual this tile adds to, asked for now: its load's latency passes under the prologue and the pages
  const float y_mine = EPI == EPI_RESIDUAL && (int)threadIdx.x < outs ? y[lo + threadIdx.x] : 0.f;
  prologue.run(x, norm_w, eps, xs, red);
  trace(u, TR_X_READY);
  float xr[G::ROUNDS][8];  // this warp's segment of x
  load_x_slice<G>(xs, (threadIdx.x >> 5) % SEGS, threadIdx.x & 31, xr);
  // every thread times its page waits in the traced step: with a branch only thread 0 took, the traced step of
  // llama-3.2-1b ran 1609 us against 859 untraced, its GEMVs about twice as long (93b2612, 2026-11-30)
  const bool timed = u.a->trace && u.pos == u.a->trace_pos;
  const long long waited = gemv_pages<T, G, WARPS, SEGS>(ring, outs * SEGS, xr, acc, timed);
  if (tracing(u)) trace_row(u)[TR_PAGE_WAIT_CYCLES] = waited;
  sync_block();
  trace(u, TR_SUMS_DONE);
  gemv_epilogue<T, SEGS, EPI, BIAS, WARPS * 32>(u, acc, bias, y, lo, outs, n_out, y_mine);
  signal_done(u);
  return true;
}

#ifndef KIEC_ATTN_EARLY_KV
#define KIEC_ATTN_EARLY_KV 0
#endif
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
  const int g = u.ins->lo, split = u.ins->tile % SPLITS;
  int lo, hi, active;
  split_range<SPLITS, MIN_KEYS>(u.pos, window, split, lo, hi, active);  // the position's alone
  // KIEC_ATTN_EARLY_KV: the split's first rows, but row pos, load before the wait: rows of earlier steps, whose
  // writes this SM's earlier waits in this step already ordered before it (ir/passes/vm.py checks they are there
  // when the SM reaches the tile). Up to MIN_KEYS rows (all of a split while the context is under SPLITS x
  // MIN_KEYS) in at most 2 of the first pass's U slots: the whole pass spilled 152 B on llama-3.2-1b, 4 slots
  // 40 B on llama-3.1-8b (ptxas -v; its 32 more live registers across the wait).
  using Pass = KvPass<T, HEAD_DIM, WARPS, U>;
  constexpr int SLOTS = (MIN_KEYS + WARPS * Pass::KPW - 1) / (WARPS * Pass::KPW), CAP = U < 2 ? U : 2;
  constexpr int EARLY = KIEC_ATTN_EARLY_KV ? (SLOTS < CAP ? SLOTS : CAP) : 0;
  Pass early;
  if (EARLY > 0 && split < active)
    early.template load<0, EARLY>(k_rows<T, HEAD_DIM>(cache, max_seq, g),
                                  v_rows<T, HEAD_DIM>(cache, kv_heads, max_seq, g),
                                  lo + (int)(threadIdx.x >> 5) * Pass::KPW, hi, u.pos);
  if (!wait_inputs(u)) return false;
#ifdef KIEC_SCRATCH_BYTES
  static_assert(sizeof(AttentionSmem<HEAD_DIM, GROUP, WARPS>) <= KIEC_SCRATCH_BYTES,
                "codegen/persistent.py sized the tiles' scratch below AttentionSmem");
#endif
  if (split < active) {
    auto& sm = *reinterpret_cast<AttentionSmem<HEAD_DIM, GROUP, WARPS>*>(smem);
    attention_slice<T, HEAD_DIM, GROUP, ROTARY, INTERLEAVED, QK_NORM, WARPS, U, EARLY>(
        sm, qkv, cache, kv_heads, max_seq, inv_freq, q_norm_w, k_norm_w, norm_eps, scale, softcap, g, u.pos, lo, hi,
        &early);
    attention_store<HEAD_DIM, GROUP, WARPS, SPLITS>(sm, g, split, active, part_o, part_ml, out);
  }
  trace(u, TR_X_READY);
  __shared__ int last;
  sync_block();
  if (threadIdx.x == 0) {  // releases this block's partial, acquires the others' when it is the last
    unsigned before;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(arrive + g) : "memory");
    last = before + 1 == (unsigned)SPLITS * (unsigned)(u.t + 1);
  }
  sync_block();
  if (!last) {
    trace(u, TR_DONE);
    return true;
  }
  if (active > 1) attention_combine<HEAD_DIM, GROUP, SPLITS>(g, active, part_o, part_ml, out);
  signal_done(u);
  return true;
}

// ---- select: the token after this step

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
// from the streaming warpgroup to the compute warps (setmaxnreg): the launch bounds alone give every thread 168
// (a 12-warp block; at that ptxas spilled 132 B for llama-3.2-1b before setmaxnreg, ptxas -v). Shared memory: the ring's barriers,
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
      trace(u, TR_START);
      if (!Model::run(u, ring, smem)) break;
    }
    if (i < end) break;
  }
  if (threadIdx.x == 0) quit = 1;
}

}  // namespace kiec
