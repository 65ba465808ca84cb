// The persistent GEMV tile's dot products on the tensor cores (persist_mma_rows): 16 weight rows an
// mma.m16n8k16, where the FMA tile (persistent_gemv.cuh: dot_lanes) takes one row a warp. bench/mma_rows.cu timed
// this way (its "swizzled 16 rows") at 1.9-2.7x the FMA tile's rate on the same SMs (fiftieth session, H100).
//
// Layout (codegen/emit.py: mma_blocked, weights.bin): such a GEMV's weights are stored in blocks of 16 rows x BW
// elements, row block after row block and, within one, K block after K block; inside a block row r's 16-byte chunk
// c sits at chunk c ^ (r & 7) (a permutation within each 128 bytes), so that the 8 rows an ldmatrix matrix reads lie
// on 8 different bank groups. A block is 16 KB (BW 512) and fills a ring page; a SiLU-mul's blocks are 8 KB (BW 256),
// a gate block and its up block a page. The schedule deals such a GEMV in whole 16-row blocks (its n a multiple of
// 16), so a tile's share is a run of whole blocks, and the ring streams it as it streams items: a block is an item.
// Blocks of 8 rows x 2 BW (persist_mma_block8, gemv_pages_mma8: the weights as the mma's B) are laid out the same way
// with 8 for 16: a page still, but dealt 8 rows at a time, where 16 would give some SMs a third more rows.
//
// x: after the prologue, each 16 elements of the scratch (an mma's step of K) are rewritten in place as the 8 lanes'
// B fragments (mma_x_pieces): column 0 x's bf16 rounding (hi), column 1 what the rounding left (lo), so that the
// fp32 sums see 16 significant bits of x (kiec::split_pair; the other 6 columns zero). Each warp takes a run of
// STEPS / WARPS of each page's steps, over the block's pages in two chains of mmas; at a block's end the warps' sums
// of each of its 16 rows meet in shared memory (`stage`, two slots in turn), and after the compute warps' barrier one
// warp adds them in warp order into acc: one sum a row (RPO: gate and up). Only barriers order the slots, which
// compute-sanitizer's racecheck follows: the fifty-second session's handoff (the warp that arrived last, counted by a
// shared atomic, added the sums; a slot for each block the ring let a warp run ahead) showed racecheck hazards on
// every block, which it cannot tell from races (fifty-third session).
#pragma once

#include "common.cuh"
#include "mbarrier.cuh"

namespace kiec {

// A tensor-core GEMV's geometry: K blocks of BW elements, PPB pages a block of ROWS (16 or 8) rows, STEPS mma steps
// a page's block (ON false: a GEMV on the FMA tile, which names it but uses none of it). A block fills a page (a
// SiLU-mul's gate block and up block together): 16 rows of 512 elements or 8 of 1024, a SiLU-mul's half as wide.
template <bool ON, int K, bool SILU, int WARPS, int ROWS = 16>
struct MmaShape {
  static_assert(ROWS == 16 || ROWS == 8, "blocks of 16 rows (the weights as the mma's A) or 8 (as its B)");
  static constexpr int BW = (SILU ? 256 : 512) * 16 / ROWS;
  static_assert(!ON || K % BW == 0, "a tensor-core GEMV's K is a multiple of its blocks' width");
  static constexpr int PPB = ON ? K / BW : 1, STEPS = BW / 16, RPO = SILU ? 2 : 1;
  static_assert(!ON || (STEPS % WARPS == 0 && (ROWS == 16 || STEPS / WARPS % 2 == 0)),
                "a page's steps divide among the warps (8 rows: in pairs, an ldmatrix.x4 two steps)");
  static constexpr int BLOCK_BYTES = ROWS * BW * 2;  // (2-byte weights)
};

// One ldmatrix.x4: four 8 x 8 matrices of 2-byte elements, lane l giving row l & 7 of matrix l >> 3.
__device__ __forceinline__ void ldsm_x4(unsigned addr, unsigned (&a)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"(addr));
}

// xs (K floats, the prologue's output, after its block barrier) rewritten as the mma's B fragments: step s's 64
// bytes become 8 uint2, lane l's (l < 8: column l >> 2, hi or lo; k pairs 2 (l & 3) and 2 (l & 3) + 8 of the step).
// Each warp takes the steps it alone reads (gemv_pages_mma: a run of R of each page's), two lanes a step, each
// reading the two 16-byte quarters it writes back (lane 2j: quarters 0 and 2, pairs 0, 1, 4, 5; lane 2j + 1: 1 and
// 3), so the lanes never touch each other's words and a warp barrier after is enough. (One lane a step, the steps
// a warp's own 512 bytes apart, put every lane's loads on one bank group, 16-way conflicts by the bank arithmetic;
// that build ran +0.5% against the FMA tile on llama-3.2-1b on one H100 where the block's threads taking
// consecutive steps had run -0.9% on another: two machines, not a same-run A/B; fifty-second session.)
template <typename T, int K, int WARPS, int STEPS>
__device__ __forceinline__ void mma_x_pieces(float* xs) {
  constexpr int R = STEPS / WARPS, OWN = K / 16 / WARPS;  // a warp's run of a page's steps; its steps in all
  static_assert(K % (16 * STEPS) == 0 && STEPS % WARPS == 0, "x's steps of 16, as many for each warp");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, half = lane & 1;
  for (int n = lane >> 1; n < OWN; n += 16) {
    const int s = n / R * STEPS + warp * R + n % R;  // the warp's n-th step
    float4* q = reinterpret_cast<float4*>(xs + 16 * s) + half;
    const float4 a = q[0], b = q[2];  // pairs 2 half, 2 half + 1; 4 + 2 half, 5 + 2 half
    unsigned h[4], l[4];
    split_pair<T>(a.x, a.y, h[0], l[0]);
    split_pair<T>(a.z, a.w, h[1], l[1]);
    split_pair<T>(b.x, b.y, h[2], l[2]);
    split_pair<T>(b.z, b.w, h[3], l[3]);
    uint4* o = reinterpret_cast<uint4*>(q);
    o[0] = make_uint4(h[0], h[2], h[1], h[3]);  // lanes 2 half, 2 half + 1 (hi; pairs t and t + 4)
    o[2] = make_uint4(l[0], l[2], l[1], l[3]);  // lanes 4 + 2 half, 5 + 2 half (lo)
  }
  __syncwarp();
}

// A block's chains of mma sums, zeroed.
template <int RPO>
__device__ __forceinline__ void zero_chains(float (&d)[RPO][2][4]) {
#pragma unroll
  for (int r = 0; r < RPO; ++r)
#pragma unroll
    for (int c = 0; c < 2; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) d[r][c][e] = 0.f;
}

// The ring's next page (its shared-memory address), the SM cycles waited for it added to `waited` where `timed`.
template <typename R>
__device__ __forceinline__ unsigned next_page_timed(R& ring, bool timed, long long& waited) {
  const long long c0 = timed ? clock64() : 0;
  const unsigned page = smem_addr(ring.next_page());
  if (timed) waited += clock64() - c0;
  return page;
}

// After the compute warps' barrier, by warp b % WARPS: the warps' sums of block b's ROWS rows (slot `st`, each warp's
// RPO x ROWS floats) added in warp order into acc, one sum a row (RPO: gate, up).
template <int WARPS, int ROWS, int RPO>
__device__ __forceinline__ void add_block_sums(const float* st, float* acc, int b, int lane) {
  if (lane < ROWS * RPO) {
    const int r = lane >> (ROWS == 16 ? 4 : 3), g = lane & (ROWS - 1);
    float v = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) v += st[(w * RPO + r) * ROWS + g];
    acc[(b * ROWS + g) * RPO + r] = v;
  }
}

// gemv_pages_mma over blocks of 8 rows (persist_mma_block8): the block's rows are the mma's B (8 columns, a row's
// 16 elements of a step down each), x's hi and lo pieces the first two rows of its A (rows 2-15 zero: the same
// registers as B's pieces in gemv_pages_mma, lanes 0-7), so D's row 0 holds each weight row's dot with x's hi piece
// and row 1 with its lo piece. An ldmatrix.x4 gives two steps: matrices 0 and 1 step s's k 0-7 and 8-15 of the 8
// rows, 2 and 3 step s + 1's, lane l addressing row l & 7 at chunk 2 s + (l >> 3), swizzled as in the 16-row blocks
// (8 rows on 8 bank groups). A warp takes its run of a page's steps in pairs, the two steps in two chains. Lanes 0-3
// hold row 0's columns 2 (l & 3) and + 1, lanes 4-7 row 1's: one shuffle adds the pieces, and the warps' sums meet
// in the slots as gemv_pages_mma's (WARPS x 8 x RPO floats a slot).
template <typename T, int K, int WARPS, bool SILU, typename R>
__device__ __forceinline__ long long gemv_pages_mma8(R& ring, int outs, const float* xq, float* acc, float* stage,
                                                     bool timed) {
  using M = MmaShape<true, K, SILU, WARPS, 8>;
  constexpr int RUN = M::STEPS / WARPS;  // a warp's run of a page's steps (mma_x_pieces), taken in pairs
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const uint2* xf = reinterpret_cast<const uint2*>(xq);
  const int row = lane & 7, mat = lane >> 3;  // this lane's ldmatrix row and matrix
  const unsigned row_at = (unsigned)row * M::BW * 2;
  long long waited = 0;
  for (int b = 0; b < outs / 8; ++b) {
    float d[M::RPO][2][4];  // two chains of mmas (a pair's steps)
    zero_chains(d);
    for (int p = 0; p < M::PPB; ++p) {
      const unsigned page = next_page_timed(ring, timed, waited);
#pragma unroll
      for (int j = 0; j < RUN; j += 2) {
        const int s = warp * RUN + j;  // the pair's first step of the page (a warp's run: mma_x_pieces)
        const uint2 x0 = lane < 8 ? xf[(p * M::STEPS + s) * 8 + lane] : make_uint2(0u, 0u);
        const uint2 x1 = lane < 8 ? xf[(p * M::STEPS + s + 1) * 8 + lane] : make_uint2(0u, 0u);
        const unsigned a0[4] = {x0.x, 0u, x0.y, 0u}, a1[4] = {x1.x, 0u, x1.y, 0u};  // (A rows g and g + 8)
        const unsigned at = page + row_at + (unsigned)(((2 * s + mat) ^ row) * 16);
#pragma unroll
        for (int r = 0; r < M::RPO; ++r) {
          unsigned w[4];
          ldsm_x4(at + r * M::BLOCK_BYTES, w);
          mma_16816<T>(d[r][0], a0, w[0], w[1]);
          mma_16816<T>(d[r][1], a1, w[2], w[3]);
        }
      }
      ring.release();
    }
    // the block's sums: lane t < 4 holds rows 2t and 2t + 1 of the hi piece (d 0, 1), lane 4 + t of the lo piece
    float* st = stage + (b & 1) * (WARPS * 8 * M::RPO);
#pragma unroll
    for (int r = 0; r < M::RPO; ++r) {
      float v0 = d[r][0][0] + d[r][1][0], v1 = d[r][0][1] + d[r][1][1];
      v0 += __shfl_down_sync(0xffffffffu, v0, 4);
      v1 += __shfl_down_sync(0xffffffffu, v1, 4);
      if (lane < 4) {
        st[(warp * M::RPO + r) * 8 + 2 * lane] = v0;
        st[(warp * M::RPO + r) * 8 + 2 * lane + 1] = v1;
      }
    }
    sync_block();
    if (warp == b % WARPS) add_block_sums<WARPS, 8, M::RPO>(st, acc, b, lane);
  }
  return waited;
}

// Every page of a share of `outs` rows (whole 16-row blocks) of a tensor-core GEMV: row j's sum (RPO: gate, up) into
// acc[j * RPO + r]. xq: mma_x_pieces' fragments; stage: WARPS x 16 x RPO floats (a slot) for each of the share's first
// two blocks (codegen/persistent.py sizes it). `timed`: the SM cycles this thread waited for pages (else 0). Every
// compute thread calls it with the same `outs` (a barrier a block).
template <typename T, int K, int WARPS, bool SILU, typename R>
__device__ __forceinline__ long long gemv_pages_mma(R& ring, int outs, const float* xq, float* acc, float* stage,
                                                    bool timed) {
  using M = MmaShape<true, K, SILU, WARPS>;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const uint2* xf = reinterpret_cast<const uint2*>(xq);
  // this lane's ldmatrix row (matrices 0 and 2: rows 0-7, 1 and 3: rows 8-15) and its step's half of K (matrices 0
  // and 1: k 0-7, 2 and 3: k 8-15)
  const int row = (lane & 7) + (lane & 8), khalf = lane >> 4;
  const unsigned row_at = (unsigned)row * M::BW * 2;
  long long waited = 0;
  for (int b = 0; b < outs / 16; ++b) {
    float d[M::RPO][2][4];  // two chains of mmas a row set
    zero_chains(d);
    for (int p = 0; p < M::PPB; ++p) {
      const unsigned page = next_page_timed(ring, timed, waited);
#pragma unroll
      for (int j = 0; j < M::STEPS / WARPS; ++j) {
        const int s = warp * (M::STEPS / WARPS) + j;  // the page's step (a warp's run: mma_x_pieces)
        const uint2 xb = lane < 8 ? xf[(p * M::STEPS + s) * 8 + lane] : make_uint2(0u, 0u);
        const unsigned at = page + row_at + (unsigned)(((2 * s + khalf) ^ (row & 7)) * 16);
#pragma unroll
        for (int r = 0; r < M::RPO; ++r) {
          unsigned a[4];
          ldsm_x4(at + r * M::BLOCK_BYTES, a);
          mma_16816<T>(d[r][j & 1], a, xb.x, xb.y);
        }
      }
      ring.release();
    }
    // the block's sums: lane 4 g holds rows g (d 0: hi, 1: lo) and g + 8 (2, 3) of each chain; the warps' sums meet
    // in slot b % 2, and after the compute warps' barrier warp b % WARPS adds them in warp order into acc. The slot is
    // written again for block b + 2, after the barrier of block b + 1, which that warp reaches only once it has read.
    float* st = stage + (b & 1) * (WARPS * 16 * M::RPO);
    if ((lane & 3) == 0) {
      const int g = lane >> 2;
#pragma unroll
      for (int r = 0; r < M::RPO; ++r) {
        st[(warp * M::RPO + r) * 16 + g] = (d[r][0][0] + d[r][0][1]) + (d[r][1][0] + d[r][1][1]);
        st[(warp * M::RPO + r) * 16 + g + 8] = (d[r][0][2] + d[r][0][3]) + (d[r][1][2] + d[r][1][3]);
      }
    }
    sync_block();
    if (warp == b % WARPS) add_block_sums<WARPS, 16, M::RPO>(st, acc, b, lane);
  }
  return waited;
}

}  // namespace kiec
