// Would the persistent GEMV tile's dot products run faster on the tensor cores with 16 weight rows a step instead of
// one row a warp on the FMA pipe? The ninth session's persist_dot_mma (05ab278, taken out) put one row's elements on
// the diagonal of an mma.m16n8k16 and used 1/16 of its products: slower than the FMA tile. Here an mma takes 16 rows
// x 16 elements of K (ldmatrix from a tile-major layout: 512 contiguous bytes a 16 x 16 block) against x as two
// bf16 columns (hi and lo pieces: 16 significant bits of x; fp32 sums), 512 useful products of its 2048; each warp
// takes every WARPS-th step of K for all of the share's row blocks, and the warps' sums meet in shared memory.
// Baseline in the same run, the same shares: the FMA tile's way (rows cut into segments as row_segments cuts them,
// a segment a warp, 16 bytes a lane a round, x in registers, widened bf16, a warp sum a segment). Pages already in
// shared memory (no HBM), one block of 8 warps on every SM. Prints GB/s of weights an SM (one SM's share of a
// 4.6 TB/s read ceiling is 35 GB/s) and each way's largest error against a double-precision dot of the same bf16
// weights and fp32 x, relative to the sum of |w x|.
// The third way (forty-eighth session): the same mmas on the FMA tile's row-major rows, each row's 16-byte chunks
// stored XOR-swizzled in groups of 8 (chunk c at c ^ (row & 7): a permutation inside each 128 bytes, so a ring page
// would still hold the same bytes of the same rows and the kernel's page walk would stay as it is). Without the
// swizzle an ldmatrix of 8 rows K x 2 bytes apart reads one bank group 8 times over; with it, 8 different ones.
// The fourth (mma8_rows): the swizzled rows 8 at a time as B, x's pieces as A's first two rows, so that a share's
// rows need not come in 16s.
// (The forty-ninth session's fifth, diag_rows: the FMA tile's own rows and deal, unswizzled, 16 chunks of one row an
// mma as a block diagonal with persist_dot_mma's MmaX, also 2 and 4 items a warp at once; on an H100 0.84-0.92x the
// FMA tile on the wide shapes an item at a time, at most 1.34x four at once in 4 chains, and the kernel slower with
// it: taken out with persist_dot_mma in the fifty-first session, `git show e9d6f36:bench/mma_rows.cu`.)
// The sixth (page_rows, fiftieth session): the kernel's pages and items, swizzled, the warps splitting each item's
// steps; 8 items an mma (below), in KIEC_MMA_CHAINS chains of mmas, a page's tile of 8 items at a time and (fifty-first
// session) two at once.
// bench/mma_rows_emulate.py repeats the three swizzled ways' index arithmetic on the CPU under PTX's fragment rules
// (its formulas copied from here: change both together).
// Build (GPU machine): nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I templates/include
//   bench/mma_rows.cu -o /tmp/mma_rows   (scripts/gpu_run.sh: MMA=1)
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>

#include <algorithm>
#include <cmath>
#include <vector>

#define KIEC_COMPUTE_THREADS 256  // (the kernel's headers: page_rows takes kiec::GemvShape and the mma from them)
#include "persistent_abi.h"
#include "kiec/persistent.cuh"
#include "bench_common.cuh"

constexpr int WARPS = 8, THREADS = WARPS * 32, BUF = 128 << 10, BLOCK_BYTES = 512, REPS = 400;
constexpr int MAX_ROWS = 64;
#ifndef KIEC_MMA_CHAINS
#define KIEC_MMA_CHAINS 2  // page_rows' independent chains of mmas a unit at most (the build's -D: 1, 2 or 4)
#endif

__device__ __forceinline__ unsigned shared_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void ldmatrix_x2(unsigned addr, unsigned& a0, unsigned& a1) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(a0), "=r"(a1) : "r"(addr));
}

// x[k] for the benchmark (finite, varied, some negative)
__host__ __device__ __forceinline__ float made_x(int k) { return 0.5f + 0.37f * sinf(0.1f * k) - 1e-4f * k; }

// x[k] and x[k + 1] as a bf16 pair: their hi pieces, or (lo) x less its bf16 rounding (kiec::split_pair)
__device__ __forceinline__ unsigned x_pair(int k, bool lo) {
  unsigned hi, low;
  kiec::split_pair<__nv_bfloat16>(made_x(k), made_x(k + 1), hi, low);
  return lo ? low : hi;
}

// The 16 x 16 block (row block rb, step s) of a share with `steps` steps a row: where it sits in the buffer (the
// buffer goes round: shares past 128 KB read its blocks again).
__device__ __forceinline__ int block_at(int rb, int s, int steps) { return (rb * steps + s) % (BUF / BLOCK_BYTES); }

// The share's 128 KB of weights into the block's shared memory (each way's layout reads them as its own).
__device__ __forceinline__ void fill_buffer(char* smem, const __nv_bfloat16* w) {
  for (int i = threadIdx.x; i < BUF / 16; i += THREADS)
    reinterpret_cast<uint4*>(smem)[i] = reinterpret_cast<const uint4*>(w)[i];
}

// A rep's end: each row's PARTS sums (red[part * ROWS + row]: one a warp, or one a segment) added and kept in
// `keep` (so that the work stays), block 0's first rep written to out for the error check.
template <int ROWS, int PARTS>
__device__ __forceinline__ void rows_out(const float* red, float& keep, float* out, int r) {
  __syncthreads();
  if (threadIdx.x < ROWS) {
    float v = 0.f;
#pragma unroll
    for (int j = 0; j < PARTS; ++j) v += red[j * ROWS + threadIdx.x];
    keep += v;
    if (r == 0 && blockIdx.x == 0) out[threadIdx.x] = v;
  }
  __syncthreads();
}

// Every way's timing loop: `reps` times the share's sums (rep: this thread's part of them, into red), each rep's
// rows out (rows_out), the kept sums stored only where they cannot be (so that the work stays).
template <int ROWS, int PARTS, typename F>
__device__ __forceinline__ void timed_reps(int reps, const float* red, float* out, F rep) {
  __syncthreads();
  float keep = 0.f;
  for (int r = 0; r < reps; ++r) {
    rep();
    rows_out<ROWS, PARTS>(red, keep, out, r);
  }
  if (threadIdx.x < ROWS && keep == 12345.f) out[MAX_ROWS + threadIdx.x] = keep;  // (keeps the work)
}

// The tensor-core way: ROWS rows x K, tile-major (block (rb, s) holds rows 16 rb.. x elements 16 s.., row-major,
// 32 bytes a row). Warp w takes steps w, w + WARPS, ...; x's pieces for them are in registers (column 0 of B the
// hi pieces, column 1 the lo pieces, lanes 0-3 and 4-7; the other columns zero).
// SWIZZLED: the same steps, fragments and sums on row-major rows, row j's logical chunk c at chunk
// (j * K / 8 + (c ^ (j & 7))) % (BUF / 16) (the wrap as the FMA tile's; K / 8 a multiple of 8 keeps each row's groups
// of 8 chunks on 128-byte lines): only the ldmatrix addresses differ.
template <int K, int ROWS, bool SWIZZLED = false>
__global__ void __launch_bounds__(THREADS, 1) mma_rows(const __nv_bfloat16* w, float* out, int reps) {
  extern __shared__ __align__(128) char smem[];
  float* red = reinterpret_cast<float*>(smem + BUF);  // [WARPS][ROWS]
  constexpr int STEPS = K / 16, S = (STEPS + WARPS - 1) / WARPS, RB = ROWS / 16, ACC = S < 4 ? S : 4;
  constexpr int CH = K / 8, CHUNKS = BUF / 16;
  static_assert(K % 16 == 0 && ROWS % 16 == 0, "16 x 16 blocks");
  static_assert(!SWIZZLED || K % 64 == 0, "swizzled rows: whole 128-byte groups");
  fill_buffer(smem, w);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  unsigned b[S][2];
#pragma unroll
  for (int i = 0; i < S; ++i) {
    const int s = warp + i * WARPS, k = s * 16 + q * 2;
    b[i][0] = b[i][1] = 0u;
    if (s < STEPS && g < 2) {  // (g 1: the lo pieces)
      b[i][0] = x_pair(k, g == 1);
      b[i][1] = x_pair(k + 8, g == 1);
    }
  }
  // this lane's row and column in an ldmatrix.x4: matrices (rows 0-7 | 8-15) x (elements 0-7 | 8-15); swizzled, its
  // row's low bits (lane & 7) are its chunks' swizzle
  const int m = lane >> 3, row16 = (m & 1) * 8 + (lane & 7), half = m >> 1, sw = lane & 7;
  const unsigned base = shared_u32(smem) + (SWIZZLED ? 0 : row16 * 32 + half * 16);
  auto block = [&](int rb, int s) -> unsigned {
    if constexpr (SWIZZLED) return base + (((rb * 16 + row16) * CH + ((2 * s + half) ^ sw)) % CHUNKS) * 16;
    else return base + block_at(rb, s, STEPS) * BLOCK_BYTES;
  };
  timed_reps<ROWS, WARPS>(reps, red, out, [&] {
#pragma unroll 1
    for (int rb = 0; rb < RB; ++rb) {
      float d[ACC][4] = {};
#pragma unroll
      for (int i = 0; i < S; ++i) {
        const int s = warp + i * WARPS;
        if (STEPS % WARPS == 0 || s < STEPS) {
          unsigned a[4];
          kiec::ldsm_x4(block(rb, s), a);
          kiec::mma_16816<__nv_bfloat16>(d[i % ACC], a, b[i][0], b[i][1]);
        }
      }
#pragma unroll
      for (int j = 1; j < ACC; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) d[0][e] += d[j][e];
      if (q == 0) {  // columns 0 and 1: row g's hi and lo sums, then row g + 8's
        red[warp * ROWS + rb * 16 + g] = d[0][0] + d[0][1];
        red[warp * ROWS + rb * 16 + g + 8] = d[0][2] + d[0][3];
      }
    }
  });
}

// The tensor-core way with x as A and 8 weight rows as B: the swizzled rows (mma_rows's SWIZZLED layout), an
// mma.m16n8k16 a step of 16 elements of 8 rows (ldmatrix.x2: rows 8 rb.., chunks 2 s and 2 s + 1), A's row 0 x's hi
// pieces and row 1 its lo pieces (the other 14 rows zeros), so an mma reads 256 bytes of weights, half of
// mma_rows's, but the rows come 8 at a time: a share's last group wastes at most 7 rows' reads, not 15. Row n's sum
// is D[0][n] + D[1][n]: lanes q and q + 4 hold them (columns 2q, 2q + 1), one shuffle. XS (more than 32 steps a warp:
// K 8192's 64 held in registers spilled 200 B, ptxas): each step's pieces in shared memory (mma8_x_bytes), loaded
// at the step, as a kernel's long-K share would take x from its scratch.
template <int K>
__host__ __device__ constexpr int mma8_x_bytes() { return (K / 16 + WARPS - 1) / WARPS > 32 ? K / 16 * 8 * 8 : 0; }
template <int K, int ROWS>
__global__ void __launch_bounds__(THREADS, 1) mma8_rows(const __nv_bfloat16* w, float* out, int reps) {
  extern __shared__ __align__(128) char smem[];
  float* red = reinterpret_cast<float*>(smem + BUF);  // [WARPS][ROWS]
  uint2* xs = reinterpret_cast<uint2*>(smem + BUF + WARPS * MAX_ROWS * 4);  // (XS) [step][lane 0-7]
  constexpr int STEPS = K / 16, S = (STEPS + WARPS - 1) / WARPS, RB = ROWS / 8, ACC = S < 4 ? S : 4;
  constexpr int CH = K / 8, CHUNKS = BUF / 16;
  constexpr bool XS = mma8_x_bytes<K>() > 0;
  static_assert(K % 64 == 0 && ROWS % 8 == 0, "8-row groups of whole 128-byte chunk groups");
  fill_buffer(smem, w);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  unsigned a[XS ? 1 : S][2];  // A's a0 and a2 (a1, a3: rows 8-15, zeros)
#pragma unroll
  for (int i = 0; i < S; ++i) {
    const int s = warp + i * WARPS, k = s * 16 + q * 2;
    unsigned p0 = 0u, p1 = 0u;
    if (s < STEPS && g < 2) {  // (g 1: the lo pieces)
      p0 = x_pair(k, g == 1);
      p1 = x_pair(k + 8, g == 1);
    }
    if constexpr (XS) {
      if (s < STEPS && lane < 8) xs[s * 8 + lane] = make_uint2(p0, p1);
    } else {
      a[i][0] = p0;
      a[i][1] = p1;
    }
  }
  // lanes 0-7 address matrix 0 (a step's first chunk), lanes 8-15 matrix 1 (its second): row lane & 7 of the group,
  // whose swizzle it is (8 rb + n keeps n's low bits)
  const int n = lane & 7, half = (lane >> 3) & 1;
  const unsigned base = shared_u32(smem);
  timed_reps<ROWS, WARPS>(reps, red, out, [&] {
#pragma unroll 1
    for (int rb = 0; rb < RB; ++rb) {
      float d[ACC][4] = {};
      const int row_chunk = (rb * 8 + n) * CH;
#pragma unroll
      for (int i = 0; i < S; ++i) {
        const int s = warp + i * WARPS;
        if (STEPS % WARPS == 0 || s < STEPS) {
          unsigned b0, b1;
          ldmatrix_x2(base + ((row_chunk + ((2 * s + half) ^ n)) % CHUNKS) * 16, b0, b1);
          unsigned af[4] = {0u, 0u, 0u, 0u};
          if constexpr (XS) {
            const uint2 v = xs[s * 8 + (lane & 7)];
            af[0] = lane < 8 ? v.x : 0u;
            af[2] = lane < 8 ? v.y : 0u;
          } else {
            af[0] = a[i][0];
            af[2] = a[i][1];
          }
          kiec::mma_16816<__nv_bfloat16>(d[i % ACC], af, b0, b1);
        }
      }
#pragma unroll
      for (int j = 1; j < ACC; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) d[0][e] += d[j][e];
      const float lo0 = __shfl_down_sync(0xffffffffu, d[0][0], 4), lo1 = __shfl_down_sync(0xffffffffu, d[0][1], 4);
      if (g == 0) {  // rows 2q and 2q + 1: their hi sums here, their lo sums from lane q + 4
        red[warp * ROWS + rb * 8 + 2 * q] = d[0][0] + lo0;
        red[warp * ROWS + rb * 8 + 2 * q + 1] = d[0][1] + lo1;
      }
    }
  });
}

// The FMA tile's way: ROWS rows x K, row-major; row j's 16-byte chunk c at (j * K / 8 + c) % (BUF / 16) chunks.
// Each row cut into SEGS segments as codegen/persistent.py's row_segments cuts it (the fewest with at most 4 chunks
// a lane); warp w takes segment w % SEGS of rows w / SEGS, + WARPS / SEGS, ...; lane l its chunks l, l + 32, ...
// (x for them in registers), each (row, segment) summed over the warp, the segments' sums added in shared memory.
__host__ __device__ constexpr int segs_of(int chunks) {
  for (int s = 1; s < WARPS; s *= 2)
    if (chunks % s == 0 && (chunks / s + 31) / 32 <= 4) return s;
  return WARPS;
}
template <int K, int ROWS>
__global__ void __launch_bounds__(THREADS, 1) fma_rows(const __nv_bfloat16* w, float* out, int reps) {
  extern __shared__ __align__(128) char smem[];
  float* red = reinterpret_cast<float*>(smem + BUF);  // [SEGS][ROWS]
  constexpr int CH = K / 8, SEGS = segs_of(CH), SEGC = CH / SEGS, ROUNDS = (SEGC + 31) / 32;
  fill_buffer(smem, w);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, seg = warp % SEGS;
  float xr[ROUNDS][8];
#pragma unroll
  for (int v = 0; v < ROUNDS; ++v)
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int c = v * 32 + lane;
      xr[v][i] = c < SEGC ? made_x((seg * SEGC + c) * 8 + i) : 0.f;
    }
  const uint4* chunks = reinterpret_cast<const uint4*>(smem);
  timed_reps<ROWS, SEGS>(reps, red, out, [&] {
#pragma unroll 1
    for (int j = warp / SEGS; j < ROWS; j += WARPS / SEGS) {
      float p[ROUNDS];
#pragma unroll
      for (int v = 0; v < ROUNDS; ++v) {
        p[v] = 0.f;
        const int c = v * 32 + lane;
        if (SEGC % 32 == 0 || c < SEGC) {
          const uint4 raw = chunks[(j * CH + seg * SEGC + c) % (BUF / 16)];
          const unsigned u[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            p[v] = fmaf(__uint_as_float(u[i] << 16), xr[v][2 * i], p[v]);
            p[v] = fmaf(__uint_as_float(u[i] & 0xffff0000u), xr[v][2 * i + 1], p[v]);
          }
        }
      }
      float a = p[0];
#pragma unroll
      for (int v = 1; v < ROUNDS; ++v) a += p[v];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
      if (lane == 0) red[seg * ROWS + j] = a;
    }
  });
}

// The sixth way (fiftieth session): the kernel's own pages and items (16 KB pages, each row cut into SEGS segments as
// the FMA tile cuts it, item i = row i / SEGS's segment i % SEGS, PER_PAGE whole items a page), each item's 16-byte
// chunks XOR-swizzled in 128-byte groups by its slot in the page (chunk c at c ^ (slot & 7)), and the warps splitting
// every item's steps instead of taking items: warp w takes steps w, w + WARPS, ... of the page's items. An
// mma.m16n8k16 takes 8 of a page's items as B's columns x 16 elements at one step (ldmatrix.x4: two steps, lane l
// the address of item l & 7's chunk), with x's hi and lo pieces of segment g at that step as A's rows 2 g and 2 g + 1
// (SEGS <= 8), so D[2 seg(n)][n] + D[2 seg(n) + 1][n] is item n's part: 2 of each column's 16 products read, and no
// warp sum an item (its hi and lo rows meet in one shuffle; the warps' parts in shared memory at the page's end).
// The kernel's geometry (kiec::GemvShape: SEGC, ITEM, PER_PAGE) with the FMA tile's segments and 16 KB pages, and
// what page_rows adds to it.
template <int K, int SEGS_ = segs_of(K / 8), int PAGE_ = 16 << 10>
struct PagedShape : kiec::GemvShape<__nv_bfloat16, K, WARPS, kiec::EPI_STORE, SEGS_, PAGE_> {
  using G = kiec::GemvShape<__nv_bfloat16, K, WARPS, kiec::EPI_STORE, SEGS_, PAGE_>;
  static constexpr int SEGS = SEGS_, PAGE = PAGE_, STEPS = G::SEGC / 2, S = (STEPS + WARPS - 1) / WARPS,
                       TILES = (G::PER_PAGE + 7) / 8, WRAP = BUF / PAGE;
  static_assert(G::SEGC % 8 == 0 && 2 * SEGS <= 16, "whole 128-byte groups, 8 segments at most");
  // byte offset of item i's logical chunk c (the buffer goes round a page at a time)
  __host__ __device__ static constexpr int at(int i, int c) {
    return (i / G::PER_PAGE % WRAP) * PAGE + (i % G::PER_PAGE) * G::ITEM + (c ^ (i % G::PER_PAGE & 7)) * 16;
  }
};

// PU: a warp's units (a page's tile of 8 items) taken PU at a time, their ldmatrix and mma chains side by side (the
// kernel would take two landed pages at once); ACC: chains of dependent mmas a unit (KIEC_MMA_CHAINS).
template <int K, int ROWS, int PU = 1>
__global__ void __launch_bounds__(THREADS, 1) page_rows(const __nv_bfloat16* w, float* out, int reps) {
  extern __shared__ __align__(128) char smem[];
  using P = PagedShape<K>;
  constexpr int ITEMS = ROWS * P::SEGS, PAGES = (ITEMS + P::PER_PAGE - 1) / P::PER_PAGE, UNITS = PAGES * P::TILES,
                ACC = P::S < KIEC_MMA_CHAINS ? P::S : KIEC_MMA_CHAINS;
  float* red = reinterpret_cast<float*>(smem + BUF);  // [WARPS * SEGS][ROWS]: warp w's part of row j's segment g
  fill_buffer(smem, w);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  // A at this warp's steps s = warp + i WARPS: rows g and g + 8 are segment (row / 2)'s hi (even) or lo (odd) pieces
  unsigned a[P::S][4];
#pragma unroll
  for (int i = 0; i < P::S; ++i) {
    const int s = warp + i * WARPS;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int m = g + 8 * r, k = (m >> 1) * P::SEGC * 8 + s * 16 + 2 * q;
      const bool in = s < P::STEPS && m < 2 * P::SEGS;
      a[i][r] = in ? x_pair(k, m & 1) : 0u;          // (k 0-7 of the step)
      a[i][2 + r] = in ? x_pair(k + 8, m & 1) : 0u;  // (k 8-15)
    }
  }
  const unsigned base = shared_u32(smem);
  const int mat = lane >> 3, n = lane & 7;  // this lane's ldmatrix address: item n of the tile, matrix mat
  // unit u: page p's tile t, the page's first item and its items `here`
  auto unit_at = [](int u, int& t, int& first, int& here) {
    t = u % P::TILES;
    first = u / P::TILES * P::PER_PAGE;
    here = min(P::PER_PAGE, ITEMS - first);
  };
  timed_reps<ROWS, WARPS * P::SEGS>(reps, red, out, [&] {
#pragma unroll 1
    for (int u0 = 0; u0 < UNITS; u0 += PU) {
      float d[PU][ACC][4] = {};
#pragma unroll
      for (int i = 0; i < P::S; i += 2)
#pragma unroll
        for (int x = 0; x < PU; ++x) {
          if (UNITS % PU != 0 && u0 + x >= UNITS) continue;
          int t, first, here;
          unit_at(u0 + x, t, first, here);
          // (a column past the page's items reads slot n's if it has one, whose swizzle no other lane's has, else 0's)
          const int slot = 8 * t + n, item = first + (slot < here ? slot : n < here ? n : 0);
          const int s0 = warp + i * WARPS, s1 = warp + (i + 1) * WARPS;
          const bool two = i + 1 < P::S && (P::STEPS % WARPS == 0 || s1 < P::STEPS);
          if (P::STEPS % WARPS == 0 || s0 < P::STEPS) {  // (the warp's last steps may be past the item's)
            const int step = mat < 2 || !two ? s0 : s1;
            unsigned b[4];
            kiec::ldsm_x4(base + P::at(item, 2 * step + (mat & 1)), b);
            kiec::mma_16816<__nv_bfloat16>(d[x][i % ACC], a[i], b[0], b[1]);
            if (two) kiec::mma_16816<__nv_bfloat16>(d[x][(i + 1) % ACC], a[i + 1], b[2], b[3]);
          }
        }
#pragma unroll
      for (int x = 0; x < PU; ++x) {
        if (UNITS % PU != 0 && u0 + x >= UNITS) continue;
        int t, first, here;
        unit_at(u0 + x, t, first, here);
#pragma unroll
        for (int j = 1; j < ACC; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) d[x][0][e] += d[x][j][e];
        float v[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) v[e] = d[x][0][e] + __shfl_xor_sync(0xffffffffu, d[x][0][e], 4);  // (hi + lo)
        if ((g & 1) == 0) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int sl = 8 * t + 2 * q + e, i = first + sl;  // item 2 q + e of the tile: D's column
            if (sl < here) {
              const int seg = i % P::SEGS, row = i / P::SEGS;
              if (seg == g >> 1) red[(warp * P::SEGS + seg) * ROWS + row] = v[e];
              else if (seg == (g + 8) >> 1) red[(warp * P::SEGS + seg) * ROWS + row] = v[2 + e];
            }
          }
        }
      }
    }
  });
}

// The share's row j, element k, as each layout holds it (the host's reference reads the same bits).
static float weight_tile_major(const std::vector<__nv_bfloat16>& w, int j, int k, int K) {
  const int rb = j / 16, s = k / 16, steps = K / 16;
  const size_t at = (size_t)((rb * steps + s) % (BUF / BLOCK_BYTES)) * 256 + (j % 16) * 16 + k % 16;
  return __bfloat162float(w[at]);
}
static float weight_row_major(const std::vector<__nv_bfloat16>& w, int j, int k, int K) {
  const size_t chunk = ((size_t)j * (K / 8) + k / 8) % (BUF / 16);
  return __bfloat162float(w[chunk * 8 + k % 8]);
}
template <int K>
static float weight_paged(const std::vector<__nv_bfloat16>& w, int j, int k) {
  using P = PagedShape<K>;
  const int c = k / 8;
  return __bfloat162float(w[P::at(j * P::SEGS + c / P::SEGC, c % P::SEGC) / 2 + k % 8]);
}
static float weight_swizzled(const std::vector<__nv_bfloat16>& w, int j, int k, int K) {
  const size_t chunk = ((size_t)j * (K / 8) + ((k / 8) ^ (j & 7))) % (BUF / 16);
  return __bfloat162float(w[chunk * 8 + k % 8]);
}

// The weight layouts the ways read the same buffer as.
enum Layout { TILE_MAJOR, ROW_MAJOR, SWIZZLED, PAGED };

template <int K>
static float weight(Layout layout, const std::vector<__nv_bfloat16>& w, int j, int k) {
  switch (layout) {
    case TILE_MAJOR: return weight_tile_major(w, j, k, K);
    case ROW_MAJOR: return weight_row_major(w, j, k, K);
    case SWIZZLED: return weight_swizzled(w, j, k, K);
    default: return weight_paged<K>(w, j, k);
  }
}

// One way: its kernel, the dynamic shared memory it takes and the layout it reads the weights as.
struct Way {
  const char* name;
  void (*kernel)(const __nv_bfloat16*, float*, int);
  int shmem;
  Layout layout;
};

template <int K, int ROWS>
static void run(const char* what, int sms, const __nv_bfloat16* dw, const std::vector<__nv_bfloat16>& hw,
                float* dout) {
  const int shmem = BUF + WARPS * MAX_ROWS * 4, paged = BUF + WARPS * PagedShape<K>::SEGS * ROWS * 4;
  const Way ways[] = {  // the FMA tile first: every other way's rate is given against its
      {"fma", fma_rows<K, ROWS>, shmem, ROW_MAJOR},
      {"tile-major mma", mma_rows<K, ROWS>, shmem, TILE_MAJOR},
      {"swizzled mma", mma_rows<K, ROWS, true>, shmem, SWIZZLED},
      {"8 rows", mma8_rows<K, ROWS>, shmem + mma8_x_bytes<K>(), SWIZZLED},
      {"paged, steps split", page_rows<K, ROWS>, paged, PAGED},
      {"2 units", page_rows<K, ROWS, 2>, paged, PAGED},
  };
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  printf("%-26s K %5d rows %3d", what, K, ROWS);
  double fma = 0.0;
  for (const Way& way : ways) {
    CHECK(cudaFuncSetAttribute((const void*)way.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, way.shmem));
    auto launch = [&](int reps) { way.kernel<<<sms, THREADS, way.shmem>>>(dw, dout, reps); };
    launch(2);  // warm
    CHECK(cudaDeviceSynchronize());
    // the loading of 128 KB into shared memory timed apart: 2 reps against REPS + 2
    float best = 1e30f, base = 1e30f;
    for (int t = 0; t < 5; ++t) {
      float ms;
      CHECK(cudaEventRecord(e0));
      launch(2);
      CHECK(cudaEventRecord(e1));
      CHECK(cudaEventSynchronize(e1));
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      base = std::min(base, ms);
      CHECK(cudaEventRecord(e0));
      launch(REPS + 2);
      CHECK(cudaEventRecord(e1));
      CHECK(cudaEventSynchronize(e1));
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      best = std::min(best, ms);
    }
    const double gbs = (double)REPS * ROWS * K * 2 / ((best - base) * 1e-3) / 1e9;
    std::vector<float> out(ROWS);
    CHECK(cudaMemcpy(out.data(), dout, ROWS * 4, cudaMemcpyDeviceToHost));
    double err = 0.0;
    for (int j = 0; j < ROWS; ++j) {
      double ref = 0.0, mag = 0.0;
      for (int k = 0; k < K; ++k) {
        const double wv = weight<K>(way.layout, hw, j, k);
        ref += wv * made_x(k);
        mag += std::fabs(wv * made_x(k));
      }
      err = std::max(err, std::fabs(out[j] - ref) / mag);
    }
    if (way.kernel == ways[0].kernel) fma = gbs;
    printf(" | %s %7.1f GB/s an SM, err %.1e, %.2fx", way.name, gbs, err, gbs / fma);
  }
  printf(" (%d chains)\n", KIEC_MMA_CHAINS);
}

int main() {
  std::vector<__nv_bfloat16> hw(BUF / 2);
  unsigned s = 12345u;
  for (auto& v : hw) {
    s = s * 1664525u + 1013904223u;
    v = __float2bfloat16((float)((s >> 8) & 0xffff) / 65536.f - 0.5f);
  }
  __nv_bfloat16* dw;
  float* dout;
  CHECK(cudaMalloc(&dw, BUF));
  CHECK(cudaMalloc(&dout, 2 * MAX_ROWS * 4));
  CHECK(cudaMemcpy(dw, hw.data(), BUF, cudaMemcpyHostToDevice));
  int sms;  // a block an SM
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  run<2048, 16>("llama-1b O tile", sms, dw, hw, dout);
  run<2048, 32>("llama-1b QKV tile (24)", sms, dw, hw, dout);
  run<2048, 64>("llama-1b gate/up (62x2)", sms, dw, hw, dout);
  run<8192, 16>("llama-1b down (15.5)", sms, dw, hw, dout);
  run<576, 16>("smollm2 QKV (7.3) / O", sms, dw, hw, dout);
  run<4096, 32>("llama-8b QKV/O tile", sms, dw, hw, dout);
  return 0;
}
