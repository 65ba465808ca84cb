// Host harness for tests/cpu/test_item_deal.py: runs half_warp_steps (item_deal.cuh) for every half-warp of 8 warps
// over shares of 1-80 items and pages of 1-16 items, with a stand-in ring that checks each thread's page order, and
// checks the deal: every item taken once, valid, by the half-warp its slot gives (item % 16 == 2 warp + half), from
// the page it lies on. Prints "deal <violations> <cases>". Then warp_item_steps, 2, 4 and 8 items a warp at once,
// over the same shares and pages, with rings of 2-16 stages where items_at_once allows the step: every item taken
// once by warp item % 8, as the warp's (step's m0 + i)-th, from its page; the thread never looks STAGES or more pages
// past the oldest it holds. Prints "steps <violations> <cases>".
#include <cstdio>
#include <type_traits>
#include <vector>

#include "kiec/item_deal.cuh"

constexpr int WARPS = 8;

// One compute thread's view of the ring: pages are numbered from the share's first; page_at(k) is the k-th past the
// released ones, a release lets go of the oldest, which must have been waited for.
struct CheckedRing {
  int released = 0, waited_upto = -1, pages = 0, *bad = nullptr, reach = 1;
  int page_at(int k) {
    if (k < 0 || k > reach || released + k >= pages) ++*bad;  // (half_warp_steps: the oldest or the one after)
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
  bad = cases = 0;
  for (int u : {2, 4, 8})
    for (int stages = 2; stages <= 16; ++stages)
      for (int items = 1; items <= 80; ++items)
        for (int per_page = 1; per_page <= 16; ++per_page) {
          if (kiec::items_at_once(u, per_page, WARPS, stages, 1, 1 << 20) != u) continue;  // (the kernel takes fewer)
          ++cases;
          const int pages = (items + per_page - 1) / per_page;
          std::vector<int> taken(items, 0);
          for (int warp = 0; warp < WARPS; ++warp) {
            CheckedRing ring{0, -1, pages, &bad, stages - 1};
            int next = 0;  // the warp's item the next step must start at
            auto step = [&](int m0, const int(&page)[8], const int(&at)[8], int n) {
              if (m0 != next || n < 1 || n > u) ++bad;
              for (int i = 0; i < u; ++i) {
                const int k = warp + (m0 + (i < n ? i : 0)) * WARPS;
                if (k >= items || page[i] != k / per_page || at[i] != k % per_page) ++bad;
                if (i < n) ++taken[k];
              }
              next = m0 + u;
            };
            auto run = [&](auto tag) {  // U as a template argument (its arrays' size); the step sees 8 slots
              constexpr int U = decltype(tag)::value;
              kiec::warp_item_steps<WARPS, U>(ring, items, per_page, warp,
                                              [&](int m0, const int(&page)[U], const int(&at)[U], int n) {
                                                int p8[8] = {}, a8[8] = {};
                                                for (int i = 0; i < U; ++i) p8[i] = page[i], a8[i] = at[i];
                                                step(m0, p8, a8, n);
                                              });
            };
            if (u == 2) run(std::integral_constant<int, 2>{});
            if (u == 4) run(std::integral_constant<int, 4>{});
            if (u == 8) run(std::integral_constant<int, 8>{});
            if (ring.released != pages) ++bad;
          }
          for (int t : taken) bad += t != 1;
        }
  printf("steps %d %d\n", bad, cases);
  return 0;
}
