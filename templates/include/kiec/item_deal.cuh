// How a persistent GEMV tile's items are dealt to half-warps (gemv_pages.cuh: gemv_pages_half) and to warps a
// few at a time (gemv_pages_items). Host code can run it too, with a stand-in ring (tests/cpu/item_deal.cu), so the
// page order it keeps is checked without a GPU.
#pragma once

namespace kiec {

// Pages [released, upto) of a share let go, each waited for first (a release before the page has landed would let
// the stream copy the next use of its stage over a copy still in flight); `released` ends at upto.
template <typename Ring>
__host__ __device__ __forceinline__ void release_upto(Ring& ring, int& released, int upto) {
  for (; released < upto; ++released) {
    ring.page_at(0);
    ring.release();
  }
}

// The half-warp deal of a share of `items` items, `per_page` a ring page: warp w's q-th step takes items k0 = 2 w +
// 2 WARPS q (lanes 0-15, half 0) and k0 + 1 (lanes 16-31, half 1), which may lie on two pages. Every compute thread
// goes through the share's pages in order, as the ring needs, each waited for before it is released (release_upto):
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
    release_upto(ring, released, k0 / per_page);
    const bool valid = half == 0 || k0 + 1 < items;
    const int mine = valid ? k0 + half : k0;
    step(mine, valid, ring.page_at(mine / per_page - released), mine % per_page);
  }
  release_upto(ring, released, (items + per_page - 1) / per_page);
}

// How far past the oldest page it holds a warp looks when it takes U of its items at once (warp_item_steps), items
// `per_page` a page dealt round-robin over WARPS warps: its step's items k0, k0 + WARPS, .. k0 + (U - 1) WARPS lie on
// at most this many pages after k0's.
__host__ __device__ constexpr int item_steps_reach(int u, int per_page, int warps) {
  return ((u - 1) * warps + per_page - 1) / per_page;
}

// The largest power of two up to `want` items a warp may take at once over a ring of `stages` pages (a step must
// never wait for a page the ring cannot hold while the step keeps an older one: reach below stages) with `rounds`
// 16-byte chunks a lane an item, all of a step's in flight together: rounds x items at most `chunk_budget`
// (registers; a budget chosen, not measured against others).
__host__ __device__ constexpr int items_at_once(int want, int per_page, int warps, int stages, int rounds,
                                                int chunk_budget) {
  int u = 1;
  while (2 * u <= want && item_steps_reach(2 * u, per_page, warps) < stages && 2 * u * rounds <= chunk_budget) u *= 2;
  return u;
}

// The warp's own deal of a share of `items` items, `per_page` a ring page (gemv_pages': warp w's items w, w + WARPS,
// ...), taken U at a time (persist_dot_items): step m0 takes the warp's items m0 .. m0 + U - 1, k0 = w + m0 WARPS and
// the U - 1 after it WARPS apart, which may lie on several pages (item_steps_reach past k0's). Every compute thread
// goes through the share's pages in order, each waited for before it is released (release_upto): before a step it
// releases the pages before k0's, then waits for each of its items' pages (`ring.page_at(k)`: the k-th past the
// released ones) and calls `step(m0, page, at, n)`: item m0 + i of the warp at place at[i] of page[i], for i < n;
// past the share (i >= n) page[i] and at[i] repeat item m0's (its lanes run the step anyway, the sums are dropped).
// After its last step it releases the rest.
template <int WARPS, int U, typename Ring, typename Step>
__host__ __device__ __forceinline__ void warp_item_steps(Ring& ring, int items, int per_page, int warp, Step&& step) {
  using Page = decltype(ring.page_at(0));
  int released = 0;  // pages of the share this thread let go
  for (int m0 = 0; warp + m0 * WARPS < items; m0 += U) {
    const int k0 = warp + m0 * WARPS;
    release_upto(ring, released, k0 / per_page);
    Page page[U];
    int at[U], n = 0;
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int k = k0 + i * WARPS < items ? k0 + i * WARPS : k0;
      n += k0 + i * WARPS < items;
      page[i] = ring.page_at(k / per_page - released);
      at[i] = k % per_page;
    }
    step(m0, page, at, n);
  }
  release_upto(ring, released, (items + per_page - 1) / per_page);
}

}  // namespace kiec
