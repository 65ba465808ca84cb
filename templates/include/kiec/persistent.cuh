// The persistent kernel (the monokernel): one block per SM runs its instruction list (ir/passes/persistent.py)
// for every token of a generation, without returning to the host.
//
// An instruction waits until the phase counters it depends on reach their targets for this token (thread 0
// spins on an acquire load), runs one tile, and bumps its own phase's counter (release). Counters only grow, so
// nothing is reset between tokens. Weights never depend on activations: a GEMV tile asks for its share's first
// bytes (into L2, and a first batch into registers) before it waits, so the memory keeps streaming across waits.
//
// The generated model source defines the instruction and kernel-descriptor formats (persistent_abi.h, from
// codegen/persistent_abi.py) and a Model::run(Turn, smem) that dispatches an instruction to the tile functions
// below. They are inlined into the kernel: with separately compiled (noinline) tile functions ptxas spilled the
// weight registers the GEMV keeps in flight (512 B) and 1,192 B in attention (ptxas -v, llama-3.2-1b).
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
// target (tiles * (t + 1), or tiles * t on the previous token's run); false when the generation ended first.
__device__ __forceinline__ bool wait_inputs(const Turn& u) {
  __shared__ int go;
  if (threadIdx.x == 0) {
    int ok = 1;
    const int n = u.ins->n_waits;
    for (int i = 0; i < n && ok; ++i) {
      const Wait w = u.ins->waits[i];
      const unsigned target = w.tiles * (unsigned)(u.t + 1 - w.previous);
      while (ld_acquire(u.a->counters + w.counter * u.a->counter_stride) < target)
        if (*(volatile int*)u.a->stop_pos <= u.pos) { ok = 0; break; }
    }
    go = ok;
  }
  trace(u, 1);
  __syncthreads();
  return go;
}

// The tile is done: every thread's writes are ordered before the counter moves.
__device__ __forceinline__ void signal_done(const Turn& u) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(u.a->counters + u.ins->counter * u.a->counter_stride, 1u);
  }
  trace(u, 2);
}

// Ask L2 for `bytes` from p (16-byte aligned) in one instruction; the SM does not wait for the data.
__device__ __forceinline__ void prefetch_bulk_l2(const void* p, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  bytes &= ~15u;
  if (bytes) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

// ---- tiles: each waits, computes rows [ins.lo, ins.hi) of its kernel, and signals; false when stopped

template <typename T>
__device__ __forceinline__ bool embed_tile(Turn u, const T* table, int dim, int vocab, float* x) {
  if (!wait_inputs(u)) return false;
  const int token = min(max(*(volatile int*)(u.a->tokens + u.pos), 0), vocab - 1);
  for (int i = u.ins->lo + threadIdx.x; i < u.ins->hi; i += blockDim.x) x[i] = to_float<T>(table[(size_t)token * dim + i]);
  signal_done(u);
  return true;
}

// Outputs [lo, hi) of y = epilogue(W . prologue(x)). Work items are (row pair, K segment): a warp loads U
// 16-byte chunks per lane of each of the pair's two weight rows (for SiLU-mul: a gate row and its up row), so the
// block's warps keep up to 2 x U x 16 B per lane in flight. Segment sums meet in shared memory and are added in
// segment order, so a run's result does not depend on which warp finished first.
template <typename T, int K, int WARPS, bool NORM, int EPI, bool BIAS, int U>
__device__ __forceinline__ bool gemv_tile(Turn u, const T* W, const T* bias, float* x, const T* norm_w, float eps, float* y,
                                       int n_out, unsigned prefetch_bytes, float* smem) {
  static_assert(K % 8 == 0, "K must be a multiple of 8 (16-byte loads)");
  constexpr int CHUNKS = K / 8, SEG = 32 * U, SEGS = (CHUNKS + SEG - 1) / SEG;
  constexpr bool SILU = EPI == EPI_SILU_MUL;
  const int lo = u.ins->lo, hi = u.ins->hi, outs = hi - lo;
  const int pairs = SILU ? outs : (outs + 1) / 2, items = pairs * SEGS;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* xs = smem;                 // K: the prologue's output
  float* acc = smem + K;            // [2 * pairs][SEGS]: each row's segment sums
  float* red = acc + 2 * pairs * SEGS;  // WARPS
  auto row = [&](int p, int r) {
    const int o = SILU ? lo + p + (r ? n_out : 0) : min(lo + 2 * p + r, hi - 1);  // a tail's copy is discarded
    return W + (size_t)o * K;
  };
  auto load = [&](int item, uint4 (&raw)[2][U]) {
    const int p = item / SEGS, s = item % SEGS;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const T* w = row(p, r);
#pragma unroll
      for (int v = 0; v < U; ++v) {
        const int c = s * SEG + v * 32 + lane;
        raw[r][v] = (CHUNKS % SEG == 0 || c < CHUNKS) ? load_stream(w + c * 8) : make_uint4(0, 0, 0, 0);
      }
    }
  };

  // Before waiting: the share's first bytes into L2, and this warp's first item into registers.
  if (threadIdx.x == 0 && prefetch_bytes) {
    const unsigned share = (unsigned)outs * K * sizeof(T);
    if (SILU) {
      prefetch_bulk_l2(W + (size_t)lo * K, min(share, prefetch_bytes / 2));
      prefetch_bulk_l2(W + (size_t)(lo + n_out) * K, min(share, prefetch_bytes / 2));
    } else {
      prefetch_bulk_l2(W + (size_t)lo * K, min(share, prefetch_bytes));
    }
  }
  uint4 cur[2][U];
  int item = warp;
  if (item < items) load(item, cur);
  if (!wait_inputs(u)) return false;

  gemv_prologue<T, K, NORM, WARPS * 32>(x, norm_w, eps, xs, red);

  for (; item < items; item += WARPS) {
    if (item != warp) load(item, cur);  // the first came before the wait
    const int p = item / SEGS, s = item % SEGS;
    float a0 = 0.f, a1 = 0.f;
#pragma unroll
    for (int v = 0; v < U; ++v) {
      const int c = s * SEG + v * 32 + lane;
      if (CHUNKS % SEG == 0 || c < CHUNKS) {
        const float4 xa = *reinterpret_cast<const float4*>(xs + c * 8);
        const float4 xb = *reinterpret_cast<const float4*>(xs + c * 8 + 4);
        const float xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
        float w0[8], w1[8];
        unpack8<T>(cur[0][v], w0);
        unpack8<T>(cur[1][v], w1);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          a0 = fmaf(w0[i], xv[i], a0);
          a1 = fmaf(w1[i], xv[i], a1);
        }
      }
    }
    a0 = warp_sum(a0);
    a1 = warp_sum(a1);
    if (lane == 0) {
      acc[(2 * p) * SEGS + s] = a0;
      acc[(2 * p + 1) * SEGS + s] = a1;
    }
  }
  __syncthreads();
  auto dot = [&](int r) {  // row r of the tile (2 per pair)
    float v = 0.f;
#pragma unroll
    for (int s = 0; s < SEGS; ++s) v += acc[r * SEGS + s];
    return v;
  };

  unsigned long long best = 0ull;
  for (int j = threadIdx.x; j < outs; j += blockDim.x) {
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
// in use, as the output). Splits the context is too short for only signal.
template <typename T, int HEAD_DIM, int GROUP, int ROTARY, bool INTERLEAVED, bool QK_NORM, int WARPS, int SPLITS, int U,
          int MIN_KEYS>
__device__ __forceinline__ bool attention_tile(Turn u, const float* qkv, T* cache, int kv_heads, int max_seq,
                                            const float* inv_freq, const T* q_norm_w, const T* k_norm_w, float norm_eps,
                                            float scale, float softcap, int window, float* part_o, float* part_ml,
                                            float* out, float* smem) {
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
  signal_done(u);
  return true;
}

// KV head ins.lo: merge its splits' partials (nothing to do when one split wrote the output).
template <int HEAD_DIM, int GROUP, int SPLITS, int MIN_KEYS>
__device__ __forceinline__ bool combine_tile(Turn u, int window, const float* part_o, const float* part_ml, float* out) {
  if (!wait_inputs(u)) return false;
  int lo, hi, active;
  split_range<SPLITS, MIN_KEYS>(u.pos, window, 0, lo, hi, active);
  if (active > 1) attention_combine<HEAD_DIM, GROUP, SPLITS>(u.ins->lo, active, part_o, part_ml, out);
  signal_done(u);
  return true;
}

// ---- select: the token after this step

// Block-wide inclusive scan of one float per thread; `scratch` holds one float per warp. Every thread gets its
// prefix and (in total) the block's sum.
__device__ __forceinline__ float block_scan(float v, float* scratch, float& total) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float n = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += n;
  }
  __syncthreads();
  if (lane == 31) scratch[warp] = v;
  __syncthreads();
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
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
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
  __syncthreads();
  float z = 0.f, cmass = 0.f;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
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
      for (int i = n_cand + threadIdx.x; i < CAND; i += blockDim.x) cand_e[i] = -1.f;
      __syncthreads();
      for (int k = 2; k <= CAND; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
          for (int i = threadIdx.x; i < CAND; i += blockDim.x) {
            const int l = i ^ j;
            if (l > i) {
              const bool down = (i & k) == 0;  // descending runs first
              if ((cand_e[i] < cand_e[l]) == down) {
                const float te = cand_e[i]; cand_e[i] = cand_e[l]; cand_e[l] = te;
                const int ti = cand_id[i]; cand_id[i] = cand_id[l]; cand_id[l] = ti;
              }
            }
          }
          __syncthreads();
        }
      // the first prefix reaching the target: each thread scans `per` consecutive candidates, in order
      const int per = (CAND + blockDim.x - 1) / blockDim.x;
      float mine = 0.f;
      for (int k = 0; k < per && threadIdx.x * per + k < CAND; ++k) mine += fmaxf(cand_e[threadIdx.x * per + k], 0.f);
      float total;
      float run = block_scan(mine, red, total) - mine;
      if (threadIdx.x == 0) s_tau = cand_e[n_cand - 1];
      __syncthreads();
      for (int k = 0; k < per && threadIdx.x * per + k < CAND; ++k) {
        const int i = threadIdx.x * per + k;
        const float e = fmaxf(cand_e[i], 0.f);
        if (run < target && run + e >= target) s_tau = e;  // one thread sees the crossing
        run += e;
      }
      __syncthreads();
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
  const int span = (vocab + blockDim.x - 1) / blockDim.x, first = threadIdx.x * span, last = min(first + span, vocab);
  float mine = 0.f;
  for (int i = first; i < last; ++i) {
    const float e = weight(i);
    mine += e >= tau ? e : 0.f;
  }
  float total;
  const float end = block_scan(mine, red, total);
  const float x = sample_uniform(gen.seed, (unsigned long long)pos) * total;
  if (threadIdx.x == 0) pick = -1;
  __syncthreads();
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
  __syncthreads();
  if (pick < 0 && threadIdx.x == 0) {  // rounding put x past the last kept token: take the last one
    for (int i = vocab - 1; i >= 0; --i)
      if (weight(i) >= tau) { pick = i; break; }
  }
  __syncthreads();
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

// One block per SM, each running its list token after token (Model::run dispatches an instruction).
template <typename Model, int THREADS>
__global__ void __launch_bounds__(THREADS, 1) persistent_kernel(PersistentArgs a) {
  extern __shared__ __align__(16) float smem[];
  __shared__ int stopped;
  const int begin = a.starts[blockIdx.x], end = a.starts[blockIdx.x + 1];
  for (int pos = a.p0, t = 0; pos < a.p_end; ++pos, ++t) {
    if (threadIdx.x == 0) stopped = *(volatile int*)a.stop_pos <= pos;
    __syncthreads();
    if (stopped) return;
    for (int i = begin; i < end; ++i) {
      const Turn u{a.instrs + i, t, pos, &a};
      trace(u, 0);
      if (!Model::run(u, smem)) return;
    }
  }
}

}  // namespace kiec
