// Host harness for tests/cpu/test_item_deal.py: runs half_warp_steps (item_deal.cuh) for every half-warp of 8 warps
// over shares of 1-80 items and pages of 1-16 items, with a stand-in ring that checks each thread's page order, and
// checks the deal: every item taken once, valid, by the half-warp its slot gives (item % 16 == 2 warp + half), from
// the page it lies on. Prints "deal <violations> <cases>".
#include <cstdio>
#include <vector>

#include "kiec/item_deal.cuh"

constexpr int WARPS = 8;

// One compute thread's view of the ring: pages are numbered from the share's first; page_at(k) is the k-th past the
// released ones, a release lets go of the oldest, which must have been waited for.
struct CheckedRing {
  int released = 0, waited_upto = -1, pages = 0, *bad = nullptr;
  int page_at(int k) {
    if (k < 0 || k > 1 || released + k >= pages) ++*bad;  // only the oldest page or the one after, inside the share
    if (released + k > waited_upto) waited_upto = released + k;
    return released + k;
  }
  void release() {
    if (waited_upto < released) ++*bad;  // released before it was waited for
    ++released;
  }
};

int main() {
  int bad = 0, cases = 0;
  for (int items = 1; items <= 80; ++items)
    for (int per_page = 1; per_page <= 16; ++per_page, ++cases) {
      const int pages = (items + per_page - 1) / per_page;
      std::vector<int> taken(items, 0);
      for (int warp = 0; warp < WARPS; ++warp)
        for (int half = 0; half < 2; ++half) {
          CheckedRing ring{0, -1, pages, &bad};
          kiec::half_warp_steps<WARPS>(ring, items, per_page, warp, half, [&](int mine, bool valid, int page, int j) {
            if (mine < 0 || mine >= items || page != mine / per_page || j != mine % per_page) ++bad;
            if (valid) {
              if (mine % (2 * WARPS) != 2 * warp + half) ++bad;
              ++taken[mine];
            }
          });
          if (ring.released != pages) ++bad;  // every page of the share let go, each once
        }
      for (int t : taken) bad += t != 1;
    }
  printf("deal %d %d\n", bad, cases);
  return 0;
}
