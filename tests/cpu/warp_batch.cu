// Host harness for tests/cpu/test_warp_batch.py: runs warp_sum_batch (warp_batch.cuh) with 32 threads standing in
// for a warp's lanes and compares each sum with warp_sum's butterfly, bit for bit, on random values of mixed
// magnitude. Prints "B mismatches" per batch size.
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "kiec/warp_batch.cuh"

// A shuffle: every lane publishes its value, all 32 meet, each reads its partner's, all meet again.
struct HostWarp {
  std::barrier<> meet{32};
  float slot[32];
  float exchange(int lane, float x, int off) {
    slot[lane] = x;
    meet.arrive_and_wait();
    const float y = slot[lane ^ off];
    meet.arrive_and_wait();
    return y;
  }
};

// warp_sum (common.cuh) over all lanes at once: v += partner's v at offsets 16, 8, 4, 2, 1
static float butterfly(std::vector<float> v) {
  for (int off = 16; off > 0; off >>= 1) {
    std::vector<float> next(32);
    for (int l = 0; l < 32; ++l) next[l] = v[l] + v[l ^ off];
    v = next;
  }
  return v[0];
}

template <int B>
static int mismatches(std::mt19937& rng, int trials) {
  std::normal_distribution<float> val(0.f, 1.f);
  std::uniform_int_distribution<int> scale(-6, 6);
  int bad = 0;
  for (int t = 0; t < trials; ++t) {
    float in[32][B], out[32];
    for (auto& lane : in)
      for (float& x : lane) x = std::ldexp(val(rng), scale(rng));
    HostWarp w;
    std::vector<std::thread> lanes;
    for (int l = 0; l < 32; ++l)
      lanes.emplace_back([&, l] {
        float v[B];
        for (int k = 0; k < B; ++k) v[k] = in[l][k];
        out[l] = kiec::warp_sum_batch<B>(v, l, [&](float x, int off) { return w.exchange(l, x, off); });
      });
    for (auto& th : lanes) th.join();
    for (int k = 0; k < B; ++k) {
      std::vector<float> col(32);
      for (int l = 0; l < 32; ++l) col[l] = in[l][k];
      const float want = butterfly(col);
      for (int l = k * (32 / B); l < (k + 1) * (32 / B); ++l)  // every lane that holds value k
        bad += std::memcmp(&out[l], &want, sizeof want) != 0;
    }
  }
  return bad;
}

int main() {
  std::mt19937 rng(7);
  printf("1 %d\n", mismatches<1>(rng, 50));
  printf("2 %d\n", mismatches<2>(rng, 50));
  printf("4 %d\n", mismatches<4>(rng, 50));
  printf("8 %d\n", mismatches<8>(rng, 50));
  printf("16 %d\n", mismatches<16>(rng, 50));
  printf("32 %d\n", mismatches<32>(rng, 50));
  return 0;
}
