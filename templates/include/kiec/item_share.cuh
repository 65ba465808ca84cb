// Where a GEMV share dealt to the item (persist_item_shares) puts each sum: the index arithmetic of ItemShare and
// store_item_sums (gemv_pages.cuh), for the host too (tests/cpu/item_share.cu checks it against the schedule's
// shares). A share holds items (row segments) from segment `head` of row lo to segment `tail` - 1 of row hi - 1 (0:
// whole rows at either end); its rows are completed a unit of U rows at a time (ir/passes/phases.py: lead_rows,
// share_end_rows). Rows are counted from lo; a sum's place in the acc is (RPO * row + r) * SEGS + seg (r: gate, up).
#pragma once

namespace kiec {

// The items of a share (ir/passes/persistent.py: share_items).
__host__ __device__ __forceinline__ int item_count(int lo, int hi, int head, int tail, int segs) {
  return (hi - lo) * segs - head - (tail ? segs - tail : 0);
}

// The m-th item of warp `warp` (the share's item warp + m * WARPS): its row and segment.
template <int SEGS, int WARPS>
__host__ __device__ __forceinline__ void item_place(int head, int warp, int m, int& row, int& seg) {
  row = (head + warp + m * WARPS) / SEGS;
  seg = (head + warp) % SEGS;
}

// The rows at the share's start the tile before completes (its first unit's, when it starts mid-unit).
template <int U>
__host__ __device__ __forceinline__ int item_lead_rows(int lo, int head) {
  return head || lo % U ? U - lo % U : 0;
}

// The share's end in its last unit, in items (U * SEGS: the unit is whole).
template <int SEGS, int U>
__host__ __device__ __forceinline__ int item_end_at(int hi, int tail) {
  return (hi - 1) % U * SEGS + (tail ? tail : SEGS);
}

// The last unit's first row.
template <int U>
__host__ __device__ __forceinline__ int item_unit_row(int lo, int hi) {
  return hi - 1 - (hi - 1) % U - lo;
}

// In a tile's slot of SLOT = U * SEGS * RPO words: the word of its lead row `row`'s segment `seg` (r: gate, up).
template <int SEGS, int U, int RPO>
__host__ __device__ __forceinline__ int item_lead_word(int lead, int row, int seg, int r) {
  return ((U - lead + row) * SEGS + seg) * RPO + r;
}

// From a tile's slot: the word `lane` of the next tile's that a share ending `at` items into its unit lacks (the
// next slot's words from item `at` of the unit on).
template <int SEGS, int U, int RPO>
__host__ __device__ __forceinline__ int item_next_word(int at, int lane) {
  return U * SEGS * RPO + at * RPO + lane;
}

// Where that word goes in the acc (unit_row: item_unit_row).
template <int SEGS, int RPO>
__host__ __device__ __forceinline__ int item_settled_at(int at, int unit_row, int lane) {
  const int item = at + lane / RPO, row = unit_row + item / SEGS;  // (item: in the unit)
  return (RPO * row + lane % RPO) * SEGS + item % SEGS;
}

}  // namespace kiec
