// The persistent GEMV tile's dot products on the tensor cores (persist_mma_rows): 16 weight rows an
// mma.m16n8k16, where the FMA tile (gemv_pages.cuh: dot_lanes) takes one row a warp. bench/mma_rows.cu timed
// this way (its "swizzled 16 rows") at 1.9-2.7x the FMA tile's rate on the same SMs (fiftieth session, H100).
//
// Layout (codegen/emit.py: mma_blocked, weights.bin): such a GEMV's weights are stored in blocks of 16 rows x BW
// elements, row block after row block and, within one, K block after K block; inside a block row r's 16-byte chunk
// c sits at chunk c ^ (r & 7) (a permutation within each 128 bytes), so that the 8 rows an ldmatrix matrix reads lie
// on 8 different bank groups. A block is 16 KB (BW 512) and fills a ring page; a SiLU-mul's blocks are 8 KB (BW 256),
// a gate block and its up block a page. The schedule deals such a GEMV in whole 16-row blocks (its n a multiple of
// 16), so a tile's share is a run of whole blocks, and the ring streams it as it streams items: a block is an item.
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

// A tensor-core GEMV's geometry: K blocks of BW elements, PPB pages a 16-row block, STEPS mma steps a page's block
// (ON false: a GEMV on the FMA tile, which names it but uses none of it).
template <bool ON, int K, bool SILU, int WARPS>
struct MmaShape {
  static constexpr int BW = SILU ? 256 : 512;
  static_assert(!ON || K % BW == 0, "a tensor-core GEMV's K is a multiple of its blocks' width");
  static constexpr int PPB = ON ? K / BW : 1, STEPS = BW / 16, RPO = SILU ? 2 : 1;
  static_assert(!ON || STEPS % WARPS == 0, "a page's steps divide among the warps");
  static constexpr int BLOCK_BYTES = 16 * BW * 2;  // (2-byte weights)
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

// persist_mma_item_shares: a tensor-core share dealt by the page of a block (ir/passes/persistent.py: block_items),
// from K block `head` of its first block to K block `tail` - 1 of its last (0: the whole block at either end). A
// share that starts inside a block leads it: its sums of the block's 16 rows (gate and up: RPO) over its pages go to
// its slot of `carry` as tagged words (8 bytes, the phase's word tag), none into acc; the tile before, whose share
// ends inside that block, trails it: the block's summing warp asks for the next tile's words (the slot after its own)
// before the block's pages, and after them adds them to its own sums (its pages' first, then the next tile's: other
// bits than a whole block's, the same bits every run). The tile writes rows [lo + lead_rows(), hi). A generation that
// ended may never publish them: settle looks at its stop every 1024 loads and then leaves a NaN (the stopped position
// is not used). Off: whole blocks, nothing published or asked.
template <bool ON, int RPO>
struct MmaShare {
  static constexpr bool DEALT = ON;
  static constexpr int SLOT = 16 * RPO;  // words a tile's slot (the next tile's follows)
  int head = 0, tail = 0;
  unsigned tag = 0u;
  float* carry = nullptr;  // this tile's slot
  unsigned long long word = 0ull;  // (the trailing block's summing warp, lane < SLOT: the next tile's word `lane`)
  MmaShare() = default;  // (a defaulted constructor takes no __device__: nvcc warns it ignores one)
  template <typename I>  // (persistent_abi.h's Instr)
  __device__ __forceinline__ MmaShare(const I& ins, unsigned tag_, float* carry_)
      : head(ins.head), tail(ins.tail), tag(tag_), carry(carry_ + 2 * (size_t)ins.tile * SLOT) {}
  __device__ __forceinline__ int lead_rows() const { return ON && head ? 16 : 0; }
  __device__ __forceinline__ bool leads(int b) const { return ON && b == 0 && head; }
  __device__ __forceinline__ bool trails(int b, int blocks) const { return ON && b == blocks - 1 && tail; }
  // block b's first page and the page past its last (of PPB)
  __device__ __forceinline__ int first_page(int b) const { return ON && b == 0 ? head : 0; }
  template <int PPB>
  __device__ __forceinline__ int end_page(int b, int blocks) const { return trails(b, blocks) ? tail : PPB; }
  __device__ __forceinline__ void publish(int lane, float v) const {
    if (ON) st_tagged(carry, lane, v, tag);
  }
  __device__ __forceinline__ void ask(int i) {
    if (ON) word = ld_tagged(carry, SLOT + i);
  }
  // the trailing block's row sum `mine` (its slot word i) completed with the next tile's word i
  template <typename Stop>
  __device__ __forceinline__ float settle(int i, float mine, Stop stopped) {
    for (unsigned spins = 1; !carries(word, tag); ++spins) {
      if (spins % 1024 == 0 && stopped()) break;
      word = ld_tagged(carry, SLOT + i);
    }
    return mine + settled_value(word, tag);
  }
};

// Every page of a share of `outs` rows (whole 16-row blocks) of a tensor-core GEMV: row j's sum (RPO: gate, up) into
// acc[j * RPO + r]. xq: mma_x_pieces' fragments; stage: WARPS x 16 x RPO floats (a slot) for each of the share's first
// two blocks (codegen/persistent.py sizes it). `timed`: the SM cycles this thread waited for pages (else 0). Every
// compute thread calls it with the same `outs` (a barrier a block). `share` (persist_mma_item_shares, an MmaShare that
// is ON): the first block from its head page, the last to its tail; a lead block's sums published, a trailing
// block's completed with the next tile's (`stopped`: whether the generation ended, for that wait).
template <typename T, int K, int WARPS, bool SILU, typename R, typename S = MmaShare<false, 1>,
          typename Stop = bool (*)()>
__device__ __forceinline__ long long gemv_pages_mma(R& ring, int outs, const float* xq, float* acc, float* stage,
                                                    bool timed, S share = S(), Stop stopped = nullptr) {
  using M = MmaShape<true, K, SILU, WARPS>;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const uint2* xf = reinterpret_cast<const uint2*>(xq);
  // this lane's ldmatrix row (matrices 0 and 2: rows 0-7, 1 and 3: rows 8-15) and its step's half of K (matrices 0
  // and 1: k 0-7, 2 and 3: k 8-15)
  const int row = (lane & 7) + (lane & 8), khalf = lane >> 4;
  const unsigned row_at = (unsigned)row * M::BW * 2;
  long long waited = 0;
  const int blocks = outs / 16;
  for (int b = 0; b < blocks; ++b) {
    if (share.trails(b, blocks) && warp == b % WARPS && lane < 16 * M::RPO)
      share.ask((lane & 15) * M::RPO + (lane >> 4));  // (the word its block sum below needs; settle waits for it)
    float d[M::RPO][2][4];  // two chains of mmas a row set
#pragma unroll
    for (int r = 0; r < M::RPO; ++r)
#pragma unroll
      for (int c = 0; c < 2; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) d[r][c][e] = 0.f;
    for (int p = share.first_page(b); p < share.template end_page<M::PPB>(b, blocks); ++p) {
      const long long c0 = timed ? clock64() : 0;
      const unsigned page = smem_addr(ring.next_page());
      if (timed) waited += clock64() - c0;
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
    if (warp == b % WARPS && lane < 16 * M::RPO) {
      const int r = lane >> 4, g = lane & 15;
      float v = 0.f;
#pragma unroll
      for (int w = 0; w < WARPS; ++w) v += st[(w * M::RPO + r) * 16 + g];
      if constexpr (S::DEALT) {
        if (share.leads(b)) {
          share.publish(g * M::RPO + r, v);  // (the slot's word of row g: gate, up)
          continue;
        }
        if (share.trails(b, blocks)) v = share.settle(g * M::RPO + r, v, stopped);
      }
      acc[(b * 16 + g) * M::RPO + r] = v;
    }
  }
  return waited;
}

}  // namespace kiec
