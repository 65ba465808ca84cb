// Host harness for tests/cpu/test_item_share.py: item_share.cuh's arithmetic (what gemv_pages.cuh's ItemShare
// and store_item_sums compute on the device) run over a GEMV's shares as the schedule deals them. Reads, on stdin,
// "SEGS U RPO N TILES" and then each tile's "lo hi head tail" in tile order. For every tile, each warp of 8 takes
// its items (warp + m * 8) and puts each sum where item_place says, publishing a lead row's into the carry; a tile
// that ends mid-unit then takes the next tile's words into its acc as its warp 0's lanes would. Checks that every
// item is the one the weight stream brings (the share's items from lo * SEGS + head on), that each output row's
// acc holds each of its segments' sums (gate and up) once and no other, and that the tiles' written rows cover the
// N rows once. Prints "items <violations> <tiles>".
#include <cstdio>
#include <map>
#include <vector>

#include "kiec/item_share.cuh"

constexpr int WARPS = 8;

struct Sum {  // which sum a slot holds: its row (global), segment and r (gate 0, up 1); row -1: none
  int row = -1, seg = 0, r = 0;
  bool operator==(const Sum& o) const { return row == o.row && seg == o.seg && r == o.r; }
};

template <int SEGS, int U, int RPO>
int check(int n, const std::vector<std::vector<int>>& tiles) {
  constexpr int SLOT = U * SEGS * RPO;
  int bad = 0;
  std::vector<Sum> carry(tiles.size() * SLOT + SLOT);
  std::vector<std::map<int, Sum>> accs(tiles.size());
  std::vector<int> written(n, 0);
  for (size_t t = 0; t < tiles.size(); ++t) {  // the dot products, and the lead's words
    const int lo = tiles[t][0], hi = tiles[t][1], head = tiles[t][2], tail = tiles[t][3];
    const int items = kiec::item_count(lo, hi, head, tail, SEGS);
    const int lead = kiec::item_lead_rows<U>(lo, head);
    for (int v = 0; v < items; ++v) {
      int row, seg;
      kiec::item_place<SEGS, WARPS>(head, v % WARPS, v / WARPS, row, seg);
      const int g = lo * SEGS + head + v;  // the item the stream brings
      if (lo + row != g / SEGS || seg != g % SEGS) ++bad;
      for (int r = 0; r < RPO; ++r) {
        Sum& slot = accs[t][(RPO * row + r) * SEGS + seg];
        if (slot.row >= 0) ++bad;  // (an item summed twice)
        slot = Sum{lo + row, seg, r};
        if (row < lead) carry[t * SLOT + kiec::item_lead_word<SEGS, U, RPO>(lead, row, seg, r)] = slot;
      }
    }
  }
  for (size_t t = 0; t < tiles.size(); ++t) {  // the trailing unit's rest, and the rows written
    const int lo = tiles[t][0], hi = tiles[t][1], head = tiles[t][2], tail = tiles[t][3];
    const int at = kiec::item_end_at<SEGS, U>(hi, tail), unit_row = kiec::item_unit_row<U>(lo, hi);
    for (int lane = 0; lane < (U * SEGS - at) * RPO; ++lane) {
      if (lane >= 32 || t + 1 == tiles.size()) {
        ++bad;  // (more words than a warp's lanes, or the last tile ends mid-unit)
        continue;
      }
      const Sum w = carry[t * SLOT + kiec::item_next_word<SEGS, U, RPO>(at, lane)];
      Sum& slot = accs[t][kiec::item_settled_at<SEGS, RPO>(at, unit_row, lane)];
      if (w.row < 0 || slot.row >= 0) ++bad;  // (a word nobody published, or a sum the tile has)
      slot = w;
    }
    const int lead = kiec::item_lead_rows<U>(lo, head), end = unit_row + U;
    for (int row = lead; row < end; ++row) {
      if (lo + row >= n) {
        ++bad;
        continue;
      }
      ++written[lo + row];
      for (int seg = 0; seg < SEGS; ++seg)
        for (int r = 0; r < RPO; ++r)
          if (!(accs[t][(RPO * row + r) * SEGS + seg] == Sum{lo + row, seg, r})) ++bad;
    }
  }
  for (int row = 0; row < n; ++row) bad += written[row] != 1;
  return bad;
}

int main() {
  int segs, unit, rpo, n, count, bad = 0, cases = 0;
  while (scanf("%d %d %d %d %d", &segs, &unit, &rpo, &n, &count) == 5) {
    std::vector<std::vector<int>> tiles(count, std::vector<int>(4));
    for (auto& t : tiles) scanf("%d %d %d %d", &t[0], &t[1], &t[2], &t[3]);
    const int key = segs * 100 + unit * 10 + rpo;
    switch (key) {
      case 111: bad += check<1, 1, 1>(n, tiles); break;
      case 211: bad += check<2, 1, 1>(n, tiles); break;
      case 811: bad += check<8, 1, 1>(n, tiles); break;
      case 212: bad += check<2, 1, 2>(n, tiles); break;
      case 122: bad += check<1, 2, 2>(n, tiles); break;
      case 222: bad += check<2, 2, 2>(n, tiles); break;
      case 422: bad += check<4, 2, 2>(n, tiles); break;
      case 822: bad += check<8, 2, 2>(n, tiles); break;
      default: fprintf(stderr, "SEGS %d U %d RPO %d: add it to the switch\n", segs, unit, rpo); return 2;
    }
    cases += count;
  }
  printf("items %d %d\n", bad, cases);
  return 0;
}
