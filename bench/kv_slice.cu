// How fast attention's long-context slice reads its K/V rows, alone on the GPU and beside a weight refill. At 8192
// llama-3.2-1b's attention costs the token ~15 us a layer (bench/RESULTS.md, 2026-12-02 twenty-fourth session: the
// idle probe) for 16.8 MB of cache rows, 3.6 us at the read ceiling (arithmetic); the split's slice alone took ~10
// us in the trace, and graph mode's attention kernel, with nothing else running, 15.7 us at 8192 against 4.8 at 32
// (kiec bench's kernel table, 2026-12-03). Pacing the ring's refill behind the splits' loads won ~1% (the same
// session). This times the slice itself: 128 blocks (8 KV heads x 16 splits, one block of 8 warps an SM,
// llama-3.2-1b's shape: head_dim 64, 4 query heads a KV head) each run kiec::attention_slice over its 512 rows at
// position 8191 of a 16-layer cache (268 MB, more than L2 holds), one launch a layer, each launch's span from its
// first block's start to its last block's end (%globaltimer), median over the launches:
//   slice            attention_slice as graph mode runs it (a pass's loads, then its math, pass after pass)
//   slice pipelined  as the persistent kernel runs it (persist_attn_pipeline: the next pass loads under this one)
//   rows in L2       slice pipelined with every block on the same split's rows (L2 holds them after the first):
//                    the slice's own time, HBM's share and latency left out (TB/s: as if the rows were distinct)
//   tensor cores     mma_slice below: the scores and the weighted sum as bf16 mmas (q and the weights split in
//                    two bf16 halves, so little is lost), its warps' states merged and compared with slice
//                    pipelined's (the 8-warp, 512-row shape only: 64 rows a warp)
//   lean             slice pipelined with attention_slice's LEAN (fewer instructions a key; its warp states are
//                    compared with slice pipelined's bit for bit, on full passes only: every split here has 512 rows)
//   kernel's tensor cores  attention_slice as the persistent kernel runs it by default (persist_attn_mma 16: 16 rows
//                    a warp a pass, the next pass in flight), and with 2 or 3 passes in flight (persist_attn_mma_ahead;
//                    their warp states compared with 1's bit for bit)
//   loads only       the same rows loaded with the same 16-byte loads, every pass's at once, and summed (the
//                    access pattern's rate with the most bytes in flight this layout allows a thread)
//   ... + refill N   one more thread copies N pages of 16 KB from its own region into a ring in shared memory (TMA bulk
//                    copies, all in flight at once, evict-first) as the slice starts: the ring's refill at attention
//                    (12 pages: ring.cuh's whole ring)
// Prints us a launch and the cache rows' TB/s (their 16.8 MB over the span). Built with -DKV_WARPS=N (compute warps,
// 8) and -DKV_U=N (keys a pass per lane group, 8): fewer keys a pass is more passes of fewer registers, more warps
// fewer rows a warp.
// Build and run (on the GPU machine; DIR holds persistent_abi.h, which ring.cuh's header chain includes):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I templates/include -I DIR bench/kv_slice.cu
//        -o /tmp/kv_slice && /tmp/kv_slice
#ifndef KV_WARPS
#define KV_WARPS 8  // compute warps a block (the persistent kernel's persist_warps; graph mode's 8)
#endif
#ifndef KV_U
#define KV_U 8  // keys a pass per lane group (persist_attn_keys: 0 gives 8)
#endif
#define KIEC_COMPUTE_THREADS (KV_WARPS * 32)  // (the compute warps' barrier, sync_block, leaves the refill warps out)
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "persistent_abi.h"
#include "kiec/attention.cuh"
#include "kiec/persistent_tile.cuh"
#include "kiec/ring.cuh"
#include "bench_common.cuh"

using T = __nv_bfloat16;
constexpr int HEAD_DIM = 64, GROUP = 4, ROTARY = 64, WARPS = KV_WARPS, U = KV_U, KV_HEADS = 8, SPLITS = 16;
constexpr int POS = 8191, MAX_SEQ = 8192, LAYERS = 16, ROUNDS = 8;
constexpr int ROWS = (POS + 1) / SPLITS;  // 512 rows a split
// the compute warps and a warpgroup whose first thread refills, their registers shared as the persistent kernel
// shares them (persistent.cuh: STREAM_REGS, ComputeRegs; at the launch bounds' 168 the pipelined slice spilled 460 B,
// ptxas -v)
constexpr int THREADS = (WARPS + 4) * 32, REFILL_REGS = 40;
constexpr int COMPUTE_REGS_FREE = (65536 / 32 - 4 * REFILL_REGS) / WARPS / 8 * 8;
constexpr int COMPUTE_REGS = COMPUTE_REGS_FREE > 256 ? 256 : COMPUTE_REGS_FREE;  // (setmaxnreg's most)
using R = kiec::Ring<12, 16 << 10>;
using Smem = kiec::AttentionSmem<HEAD_DIM, GROUP, WARPS>;
constexpr size_t LAYER_ELEMS = (size_t)2 * KV_HEADS * MAX_SEQ * HEAD_DIM;
constexpr size_t REFILL_REGION = 1 << 20;  // a block's region for the refill's pages (at most 64 pages)
constexpr int OUT_FLOATS = 2 * WARPS * GROUP + WARPS * GROUP * HEAD_DIM;  // a block's: sm.wm, sm.wl, sm.wo
static_assert(OUT_FLOATS >= WARPS * 32, "loads only writes a float a thread");
enum Mode { SLICE = 0, PIPELINED = 1, LOADS = 2, HOT = 3, LEAN = 4, MMA = 5, KERNEL_MMA = 6 };

// The slice on the tensor cores (MMA, a sketch for timing: full splits only, no softcap, no masking, head_dim 64,
// 4 query heads). Warp w takes rows [lo + 64w, + 64). The scores: an mma's 16 rows are the 4 heads' q split in two
// bf16 halves (rows 0-3 the rounded q, rows 8-11 what rounding left; the other rows 0), its 8 columns 8 keys, its k
// 16 of the 64 dims: the dims are permuted so that lane t holds 32 contiguous bytes of key t / 4's row (dims
// 16 (t % 4) ..), and q's fragments follow the same permutation. Lanes 0-15 then hold two scores each of head t / 4
// (the two halves' rows summed), for keys 2 (t % 4) and + 1 of each 8. The weighted sum: the same lanes' weights
// (again split in two halves, rows 0-3 and 8-11) are the A fragment of an mma over 16 keys as k, whose 8 columns are
// 8 of the 64 dims, permuted so that lane t reads 16 contiguous bytes (dims 8 (t / 4) ..) of each of its 4 rows.
// Writes the warps' (m, l, o) into sm as attention_slice does (their keys other than its warps': compare merged).
__device__ __forceinline__ void mma_slice(Smem& sm, const float* qkv, const T* cache, const float* inv_freq, int g,
                                          int lo) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, quad = lane & 3, grp = lane >> 2;
  for (int i = threadIdx.x; i < GROUP * HEAD_DIM; i += WARPS * 32)
    sm.qs[i / HEAD_DIM][i % HEAD_DIM] = qkv[g * GROUP * HEAD_DIM + i];
  kiec::sync_block();
  kiec::rope_inplace<ROTARY, false>(&sm.qs[0][0], GROUP, HEAD_DIM, inv_freq, POS, threadIdx.x, WARPS * 32);
  kiec::sync_block();
  const T* kc = kiec::k_rows<T, HEAD_DIM>(const_cast<T*>(cache), MAX_SEQ, g);
  const T* vc = kiec::v_rows<T, HEAD_DIM>(const_cast<T*>(cache), KV_HEADS, MAX_SEQ, g);
  const int base = lo + warp * 64;
  uint4 kr[8][2], vr[4][4];  // every load of the warp's 64 rows at once
#pragma unroll
  for (int b = 0; b < 8; ++b)
#pragma unroll
    for (int i = 0; i < 2; ++i)
      kr[b][i] = *reinterpret_cast<const uint4*>(kc + (size_t)(base + 8 * b + grp) * HEAD_DIM + quad * 16 + i * 8);
#pragma unroll
  for (int c = 0; c < 4; ++c)
#pragma unroll
    for (int r = 0; r < 4; ++r) {  // rows 16c + 2 quad + (r & 1) + 8 (r >> 1)
      const int row = base + 16 * c + 2 * quad + (r & 1) + 8 * (r >> 1);
      vr[c][r] = *reinterpret_cast<const uint4*>(vc + (size_t)row * HEAD_DIM + grp * 8);
    }
  // q's fragments: lane t < 16 holds head t / 4's dims 16 (t % 4) + [0, 16) (scaled), as 8 pairs, rounded and rest
  unsigned qh[8] = {}, ql[8] = {};
  if (lane < 16) {
    const float* q = &sm.qs[grp][quad * 16];
#pragma unroll
    for (int w = 0; w < 8; ++w) kiec::split_pair<T>(q[2 * w] * 0.125f, q[2 * w + 1] * 0.125f, qh[w], ql[w]);
  }
  float sc[8][2];  // (lanes 0-15) head grp's scores of keys 8b + 2 quad + {0, 1}
#pragma unroll
  for (int b = 0; b < 8; ++b) {
    const unsigned* kw = reinterpret_cast<const unsigned*>(&kr[b][0]);  // 8 words: dims 16 quad + [0, 16)
    float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const unsigned a[4] = {qh[2 * s], ql[2 * s], qh[2 * s + 1], ql[2 * s + 1]};
      kiec::mma_16816<T>(d, a, kw[2 * s], kw[2 * s + 1]);
    }
    sc[b][0] = d[0] + d[2];
    sc[b][1] = d[1] + d[3];
  }
  float m = -INFINITY;
#pragma unroll
  for (int b = 0; b < 8; ++b) m = fmaxf(m, fmaxf(sc[b][0], sc[b][1]));
  m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
  m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
  float l = 0.f, o[8][4] = {};
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    float p[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      p[i] = __expf(sc[2 * c + (i >> 1)][i & 1] - m);
      l += p[i];
    }
    unsigned a[4];  // rows 0-3: the weights rounded, rows 8-11: the rest; k: keys 2 quad + {0, 1}, then + 8
    kiec::split_pair<T>(p[0], p[1], a[0], a[1]);
    kiec::split_pair<T>(p[2], p[3], a[2], a[3]);
    if (lane >= 16) a[0] = a[1] = a[2] = a[3] = 0u;
    const unsigned* v0 = reinterpret_cast<const unsigned*>(&vr[c][0]);
    const unsigned* v1 = reinterpret_cast<const unsigned*>(&vr[c][1]);
    const unsigned* v2 = reinterpret_cast<const unsigned*>(&vr[c][2]);
    const unsigned* v3 = reinterpret_cast<const unsigned*>(&vr[c][3]);
#pragma unroll
    for (int j = 0; j < 8; ++j) {  // dim 8 grp + j of the two rows a k pair holds
      const unsigned sel = (j & 1) ? 0x7632u : 0x5410u;
      kiec::mma_16816<T>(o[j], a, __byte_perm(v0[j >> 1], v1[j >> 1], sel), __byte_perm(v2[j >> 1], v3[j >> 1], sel));
    }
  }
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  if (lane < 16) {
    if (quad == 0) {
      sm.wm[warp][grp] = m;
      sm.wl[warp][grp] = l;
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {  // columns 2 quad + {0, 1}: dims 8 (2 quad + e) + j
      sm.wo[warp][grp][8 * (2 * quad) + j] = o[j][0] + o[j][2];
      sm.wo[warp][grp][8 * (2 * quad + 1) + j] = o[j][1] + o[j][3];
    }
  }
  kiec::sync_block();
}

// Block b: split b / KV_HEADS of KV head b % KV_HEADS; ns[2b], ns[2b + 1]: its start and end. AHEAD: KERNEL_MMA's
// passes in flight (persist_attn_mma_ahead)
template <Mode MODE, int AHEAD = 1, int KEYS = 16>
__global__ void __launch_bounds__(THREADS, 1)
    slice(const float* qkv, T* cache, const float* inv_freq, const char* refill, int refill_pages, float* out,
          unsigned long long* ns) {
  extern __shared__ __align__(128) char smem_raw[];
  R ring;
  Smem& sm = *reinterpret_cast<Smem*>(ring.carve(smem_raw));
  // (HOT: every block reads KV head 0's first split, which L2 then holds: the slice without HBM's share)
  const int g = MODE == HOT ? 0 : blockIdx.x % KV_HEADS, split = MODE == HOT ? 0 : blockIdx.x / KV_HEADS;
  const int lo = split * ROWS, hi = lo + ROWS;
  if (threadIdx.x == 0) ring.init(1);
  __syncthreads();
  const unsigned long long t0 = kiec::global_ns();
  if (threadIdx.x >= WARPS * 32) {  // the refill: every page in flight at once, then wait for them
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REFILL_REGS));
    if (threadIdx.x == WARPS * 32 && refill_pages > 0) {
      const char* src = refill + blockIdx.x * REFILL_REGION;
      const unsigned long long policy = kiec::evict_first_policy();
      for (int s = 0; s < refill_pages; ++s) ring.copy_landed(s, src + (size_t)s * R::PAGE, R::STAGES, policy);
      ring.drain(refill_pages);
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(COMPUTE_REGS));
  if constexpr (MODE == LOADS) {
    using Pass = kiec::KvPass<T, HEAD_DIM, WARPS, U>;
    constexpr int STEP = WARPS * Pass::KPW * U, PASSES = ROWS / STEP;
    const T* kc = kiec::k_rows<T, HEAD_DIM>(cache, MAX_SEQ, g);
    const T* vc = kiec::v_rows<T, HEAD_DIM>(cache, KV_HEADS, MAX_SEQ, g);
    Pass p[PASSES];
#pragma unroll
    for (int i = 0; i < PASSES; ++i) p[i].load(kc, vc, lo + (threadIdx.x >> 5) * Pass::KPW + i * STEP, hi);
    unsigned x = 0;
#pragma unroll
    for (int i = 0; i < PASSES; ++i)
#pragma unroll
      for (int u = 0; u < U; ++u) x ^= p[i].k[u].x ^ p[i].k[u].w ^ p[i].v[u].y ^ p[i].v[u].z;
    out[blockIdx.x * OUT_FLOATS + threadIdx.x] = (float)x;
  } else {
    if constexpr (MODE == MMA)
      mma_slice(sm, qkv, cache, inv_freq, g, lo);
    else if constexpr (MODE == KERNEL_MMA)  // (the persistent kernel's default: 16 rows a warp a pass)
      kiec::attention_slice<T, HEAD_DIM, GROUP, ROTARY, false, false, WARPS, U, false, true, false, 0, false, false,
                            true, KEYS, AHEAD>(
          sm, qkv, cache, KV_HEADS, MAX_SEQ, inv_freq, nullptr, nullptr, 1e-5f, 0.125f, 0.f, g, POS, lo, hi);
    else
      kiec::attention_slice<T, HEAD_DIM, GROUP, ROTARY, false, false, WARPS, U, false, MODE != SLICE, false, 0,
                            false, false, MODE == LEAN>(
          sm, qkv, cache, KV_HEADS, MAX_SEQ, inv_freq, nullptr, nullptr, 1e-5f, 0.125f, 0.f, g, POS, lo, hi);
    // the warps' states as the tile's merge would read them (what `same bits` and the tensor cores' check compare)
    const float* st = &sm.wm[0][0];
    for (int i = threadIdx.x; i < OUT_FLOATS; i += WARPS * 32) out[blockIdx.x * OUT_FLOATS + i] = st[i];
  }
  kiec::sync_block();  // (the compute warps only: the last to end marks the block's end)
  if (threadIdx.x == 0) {
    ns[2 * blockIdx.x] = t0;
    ns[2 * blockIdx.x + 1] = kiec::global_ns();
  }
}

template <Mode MODE, int AHEAD = 1, int KEYS = 16>
void run(const char* name, int refill_pages, const float* qkv, T* cache, const float* inv_freq, const char* refill,
         float* out, unsigned long long* ns) {
  constexpr int BLOCKS = KV_HEADS * SPLITS;
  const int smem = R::BYTES + (int)sizeof(Smem);
  CHECK(cudaFuncSetAttribute(slice<MODE, AHEAD, KEYS>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  std::vector<double> us;
  std::vector<unsigned long long> h(2 * BLOCKS);
  for (int r = 0; r < ROUNDS + 1; ++r)
    for (int l = 0; l < LAYERS; ++l) {
      slice<MODE, AHEAD, KEYS><<<BLOCKS, THREADS, smem>>>(qkv, cache + l * LAYER_ELEMS, inv_freq, refill, refill_pages,
                                                          out, ns);
      CHECK(cudaGetLastError());
      CHECK(cudaMemcpy(h.data(), ns, h.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
      unsigned long long first = ~0ull, last = 0;
      for (int b = 0; b < BLOCKS; ++b) {
        first = std::min(first, h[2 * b]);
        last = std::max(last, h[2 * b + 1]);
      }
      if (r > 0) us.push_back((last - first) / 1e3);  // (round 0 warms up)
    }
  std::sort(us.begin(), us.end());
  const double bytes = 2.0 * KV_HEADS * (POS + 1) * HEAD_DIM * sizeof(T), med = us[us.size() / 2];
  printf("%-28s %9.2f %9.2f %9.2f %8.2f\n", name, us[0], med, us[us.size() - 1], bytes / (med * 1e-6) / 1e12);
}

// Each block's warp states (OUT_FLOATS: sm.wm, sm.wl, sm.wo) merged into its heads' outputs, o / l.
std::vector<double> merged(const std::vector<float>& st) {
  std::vector<double> o;
  for (int b = 0; b < KV_HEADS * SPLITS; ++b) {
    const float *wm = &st[(size_t)b * OUT_FLOATS], *wl = wm + WARPS * GROUP, *wo = wl + WARPS * GROUP;
    for (int h = 0; h < GROUP; ++h) {
      double mx = -INFINITY, l = 0.0;
      for (int w = 0; w < WARPS; ++w) mx = std::max(mx, (double)wm[w * GROUP + h]);
      std::vector<double> acc(HEAD_DIM, 0.0);
      for (int w = 0; w < WARPS; ++w) {
        const double c = std::exp(wm[w * GROUP + h] - mx);
        l += wl[w * GROUP + h] * c;
        for (int d = 0; d < HEAD_DIM; ++d) acc[d] += wo[(w * GROUP + h) * HEAD_DIM + d] * c;
      }
      for (int d = 0; d < HEAD_DIM; ++d) o.push_back(acc[d] / l);
    }
  }
  return o;
}

// The largest distance between merged outputs `ref` and those of warp states `st` (other passes, other bits).
double farthest(const std::vector<double>& ref, const std::vector<float>& st) {
  const std::vector<double> o = merged(st);
  double err = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) err = std::max(err, std::fabs(ref[i] - o[i]));
  return err;
}

__global__ void fill(T* p, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = __float2bfloat16(0.01f * (float)((i * 2654435761u) % 199) - 1.f);
}

int main() {
  const int nq = KV_HEADS * GROUP, qkv_n = (nq + 2 * KV_HEADS) * HEAD_DIM;
  T* cache;
  float *qkv, *inv_freq, *out;
  char* refill;
  unsigned long long* ns;
  CHECK(cudaMalloc(&cache, LAYERS * LAYER_ELEMS * sizeof(T)));
  fill<<<1024, 256>>>(cache, LAYERS * LAYER_ELEMS);
  std::vector<float> hq(qkv_n), hf(ROTARY / 2);
  for (int i = 0; i < qkv_n; ++i) hq[i] = 0.01f * (float)(i % 97) - 0.5f;
  for (int i = 0; i < ROTARY / 2; ++i) hf[i] = powf(500000.f, -2.f * i / ROTARY);
  CHECK(cudaMalloc(&qkv, qkv_n * sizeof(float)));
  CHECK(cudaMemcpy(qkv, hq.data(), qkv_n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&inv_freq, ROTARY / 2 * sizeof(float)));
  CHECK(cudaMemcpy(inv_freq, hf.data(), ROTARY / 2 * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&refill, KV_HEADS * SPLITS * REFILL_REGION));
  CHECK(cudaMemset(refill, 1, KV_HEADS * SPLITS * REFILL_REGION));
  CHECK(cudaMalloc(&out, KV_HEADS * SPLITS * OUT_FLOATS * sizeof(float)));
  CHECK(cudaMalloc(&ns, 2 * KV_HEADS * SPLITS * sizeof(unsigned long long)));
  CHECK(cudaDeviceSynchronize());
  printf("llama-3.2-1b's attention slice at position %d: %d blocks x %d rows, %d compute warps, %d keys a pass (%d "
         "passes), %d layers' cache (%.0f MB), %d launches\n", POS, KV_HEADS * SPLITS, ROWS, WARPS, U,
         ROWS / (WARPS * kiec::KvPass<T, HEAD_DIM, WARPS, U>::KPW * U), LAYERS, LAYERS * LAYER_ELEMS * sizeof(T) / 1e6,
         ROUNDS * LAYERS);
  printf("%-28s %9s %9s %9s %8s\n", "us a launch", "min", "median", "max", "TB/s");
  run<SLICE>("slice", 0, qkv, cache, inv_freq, refill, out, ns);
  run<PIPELINED>("slice pipelined", 0, qkv, cache, inv_freq, refill, out, ns);
  std::vector<float> want(KV_HEADS * SPLITS * OUT_FLOATS), got(want.size());  // (the last launch's: layer 15's)
  CHECK(cudaMemcpy(want.data(), out, want.size() * sizeof(float), cudaMemcpyDeviceToHost));
  const std::vector<double> ref = merged(want);  // (the FMA slice's outputs, what other passes are held to)
  run<LEAN>("slice pipelined, lean", 0, qkv, cache, inv_freq, refill, out, ns);
  CHECK(cudaMemcpy(got.data(), out, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  printf("  lean: %s bits as the slice pipelined (every block's warp states, the last layer)\n",
         memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0 ? "the same" : "OTHER");
  if (HEAD_DIM == 64 && GROUP == 4 && ROWS % (WARPS * 64) == 0) {  // (mma_slice's shape: 64 rows a warp)
    run<MMA>("slice on the tensor cores", 0, qkv, cache, inv_freq, refill, out, ns);
    CHECK(cudaMemcpy(got.data(), out, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
    double top = 0.0;
    for (double v : ref) top = std::max(top, std::fabs(v));
    printf("  tensor cores: the heads' outputs within %.2e of the slice pipelined's (largest |o| %.3f)\n",
           farthest(ref, got), top);
  }
  // the persistent kernel's passes on the tensor cores (persist_attn_mma 16), with 1, 2 and 3 passes' rows in flight
  // (persist_attn_mma_ahead): more in flight must give the same bits
  std::vector<float> one(got.size());
  run<KERNEL_MMA, 1>("kernel's tensor cores", 0, qkv, cache, inv_freq, refill, out, ns);
  CHECK(cudaMemcpy(one.data(), out, one.size() * sizeof(float), cudaMemcpyDeviceToHost));
  printf("  kernel's tensor cores: the heads' outputs within %.2e of the slice pipelined's\n",
         farthest(ref, one));
  run<KERNEL_MMA, 2>("kernel's tensor cores, ahead 2", 0, qkv, cache, inv_freq, refill, out, ns);
  CHECK(cudaMemcpy(got.data(), out, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  printf("  ahead 2: %s bits as ahead 1\n", memcmp(one.data(), got.data(), one.size() * 4) == 0 ? "the same" : "OTHER");
  run<KERNEL_MMA, 3>("kernel's tensor cores, ahead 3", 0, qkv, cache, inv_freq, refill, out, ns);
  CHECK(cudaMemcpy(got.data(), out, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  printf("  ahead 3: %s bits as ahead 1\n", memcmp(one.data(), got.data(), one.size() * 4) == 0 ? "the same" : "OTHER");
  // other pass shapes: KEYS rows a warp a pass, AHEAD 0: a pass's rows loaded as it starts (64: the sketch's 64 a warp)
  run<KERNEL_MMA, 0, 16>("kernel's t. c., 16 keys, ahead 0", 0, qkv, cache, inv_freq, refill, out, ns);
  run<KERNEL_MMA, 0, 32>("kernel's t. c., 32 keys, ahead 0", 0, qkv, cache, inv_freq, refill, out, ns);
  run<KERNEL_MMA, 1, 32>("kernel's t. c., 32 keys, ahead 1", 0, qkv, cache, inv_freq, refill, out, ns);
  run<KERNEL_MMA, 0, 64>("kernel's t. c., 64 keys, ahead 0", 0, qkv, cache, inv_freq, refill, out, ns);
  CHECK(cudaMemcpy(got.data(), out, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  printf("  64 keys: the heads' outputs within %.2e of the slice pipelined's\n", farthest(ref, got));
  run<KERNEL_MMA, 1>("kernel's tensor cores + refill 12", 12, qkv, cache, inv_freq, refill, out, ns);
  run<KERNEL_MMA, 2>("kernel's t. c., ahead 2 + refill 12", 12, qkv, cache, inv_freq, refill, out, ns);
  run<LOADS>("loads only", 0, qkv, cache, inv_freq, refill, out, ns);
  run<HOT>("slice pipelined, rows in L2", 0, qkv, cache, inv_freq, refill, out, ns);
  run<PIPELINED>("slice pipelined + refill 6", 6, qkv, cache, inv_freq, refill, out, ns);
  run<PIPELINED>("slice pipelined + refill 12", 12, qkv, cache, inv_freq, refill, out, ns);
  run<LOADS>("loads only + refill 12", 12, qkv, cache, inv_freq, refill, out, ns);
  return 0;
}
