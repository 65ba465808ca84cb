// Host harness for tests/cpu/test_x_spread.py: gemv_x.cuh's load_chunk8 with KIEC_X_SPREAD (persist_x_spread) on,
// over chunks n of a made-up x, each in and out of range: whether it left chunk n's 8 floats (zeros out of range) in
// their slots, and the half it loads first (chunk_first_half), whose address the test turns into bank groups.
//   out: n in same first_half
#define KIEC_X_SPREAD 1
#include <cstdio>

#include "kiec/gemv_x.cuh"

int main() {
  constexpr int CHUNKS = 1024;
  alignas(16) static float x[8 * CHUNKS];
  for (int i = 0; i < 8 * CHUNKS; ++i) x[i] = 0.25f * (float)i + 1.f;
  for (int n = 0; n < CHUNKS; ++n)
    for (int in = 0; in < 2; ++in) {
      float r[8];
      kiec::load_chunk8(x + 8 * n, n, in != 0, r);
      bool same = true;
      for (int i = 0; i < 8; ++i) same = same && r[i] == (in ? x[8 * n + i] : 0.f);
      printf("%d %d %d %d\n", n, in, same ? 1 : 0, kiec::chunk_first_half(n));
    }
  return 0;
}
