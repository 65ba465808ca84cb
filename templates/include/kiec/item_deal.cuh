// How a persistent GEMV tile's items are dealt to half-warps (persistent_gemv.cuh: gemv_pages_half). Host code can run
// it too, with a stand-in ring (tests/cpu/item_deal.cu), so the page order it keeps is checked without a GPU.
#pragma once

namespace kiec {

// The half-warp deal of a share of `items` items, `per_page` a ring page: warp w's q-th step takes items k0 = 2 w +
// 2 WARPS q (lanes 0-15, half 0) and k0 + 1 (lanes 16-31, half 1), which may lie on two pages. Every compute thread
// goes through the share's pages in order, as the ring needs, each waited for before it is released (a release
// before the page has landed would let the stream copy the next use of its stage over a copy still in flight):
// before a step it releases the pages before k0's, then takes its item from the page it lies on (the oldest one
// not released, or the one after); after its last step it releases the rest. `ring.page_at(k)`: waits for the k-th
// page past the released ones (0 or 1) and returns it; `ring.release()`: lets the oldest go. `step(mine, valid,
// page, j)`: this half's item `mine`, at place j of `page`; where the half's own item is past the share it takes
// k0 again, valid false (its lanes still run the step: its sums are for the warp's shuffles, then dropped).
template <int WARPS, typename Ring, typename Step>
__host__ __device__ __forceinline__ void half_warp_steps(Ring& ring, int items, int per_page, int warp, int half,
                                                         Step&& step) {
  int released = 0;  // pages of the share this thread let go
  for (int k0 = 2 * warp; k0 < items; k0 += 2 * WARPS) {
    for (const int first = k0 / per_page; released < first; ++released) {
      ring.page_at(0);
      ring.release();
    }
    const bool valid = half == 0 || k0 + 1 < items;
    const int mine = valid ? k0 + half : k0;
    step(mine, valid, ring.page_at(mine / per_page - released), mine % per_page);
  }
  for (const int pages = (items + per_page - 1) / per_page; released < pages; ++released) {
    ring.page_at(0);
    ring.release();
  }
}

}  // namespace kiec
