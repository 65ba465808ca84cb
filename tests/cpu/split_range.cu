// Host harness for tests/cpu/test_split_range.py: common.cuh's split_range_of over every (pos, window, splits,
// min_keys, solo) case the test lists on stdin, one per line, each answered with its splits in use and their rows:
//   in:  pos window splits min_keys solo
//   out: active lo hi lo hi ...   (the splits in use, in order)
#include <cstdio>

#include "kiec/common.cuh"

int main() {
  int pos, window, splits, min_keys, solo;
  while (scanf("%d %d %d %d %d", &pos, &window, &splits, &min_keys, &solo) == 5) {
    int lo, hi, active;
    kiec::split_range_of(pos, window, 0, splits, min_keys, lo, hi, active, solo);
    printf("%d", active);
    for (int s = 0; s < active; ++s) {
      kiec::split_range_of(pos, window, s, splits, min_keys, lo, hi, active, solo);
      printf(" %d %d", lo, hi);
    }
    printf("\n");
  }
  return 0;
}
