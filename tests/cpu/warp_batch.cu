// Host harness for tests/cpu/test_warp_batch.py: runs warp_sum_batch (warp_batch.cuh) with 32 threads standing in
// for a warp's lanes and compares each sum with warp_sum's butterfly, bit for bit, on random values of mixed
// magnitude. Prints "B mismatches" per batch size. Then block_order_sum_squares against the staged norm's sum (a
// thread's own sum over its elements, warp_sum's butterfly a warp, block_sum's warps in order, 256 threads) for rows
// of K floats: prints "norm K mismatches".
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "kiec/warp_batch.cuh"

// A shuffle: every lane publishes its value, all 32 meet, each reads lane src's (__shfl_sync), all meet again.
struct HostWarp {
  std::barrier<> meet{32};
  float slot[32];
  float from(int lane, float x, int src) {
    slot[lane] = x;
    meet.arrive_and_wait();
    const float y = slot[src];
    meet.arrive_and_wait();
    return y;
  }
  float exchange(int lane, float x, int off) { return from(lane, x, lane ^ off); }  // __shfl_xor_sync's
};

// block_order_sum_squares' shuffles on a HostWarp.
struct HostShfl {
  HostWarp& w;
  int lane;
  float xor_(float x, int off) const { return w.exchange(lane, x, off); }
  float idx(float x, int src) const { return w.from(lane, x, src); }
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

// The staged norm's sum of squares of x[0..K): Prologue's thread t adds its elements t + 256 e in order (zero past
// K), block_sum's warp_sum over each warp's 32 threads, then the 8 warps' in order.
static float staged_sum_squares(const std::vector<float>& x, int K) {
  constexpr int THREADS = 256;
  const int per = (K + THREADS - 1) / THREADS;
  float total = 0.f;
  for (int w = 0; w < THREADS / 32; ++w) {
    std::vector<float> lanes(32);
    for (int l = 0; l < 32; ++l) {
      float ss = 0.f;
      for (int e = 0; e < per; ++e) {
        const int i = 32 * w + l + e * THREADS;
        const float v = i < K ? x[i] : 0.f;
        ss += v * v;
      }
      lanes[l] = ss;
    }
    total += butterfly(lanes);
  }
  return total;
}

// block_order_sum_squares with each lane's chunks of x (load_x_slice's layout: xr[v][i] = x[(32 v + lane) * 8 + i],
// zero past K) against staged_sum_squares, in every lane.
template <int K>
static int norm_mismatches(std::mt19937& rng, int trials) {
  constexpr int ROUNDS = (K / 8 + 31) / 32;
  std::normal_distribution<float> val(0.f, 1.f);
  std::uniform_int_distribution<int> scale(-6, 6);
  int bad = 0;
  for (int t = 0; t < trials; ++t) {
    std::vector<float> x(K);
    for (float& v : x) v = std::ldexp(val(rng), scale(rng));
    float out[32];
    HostWarp w;
    std::vector<std::thread> lanes;
    for (int l = 0; l < 32; ++l)
      lanes.emplace_back([&, l] {
        float xr[ROUNDS][8];
        for (int v = 0; v < ROUNDS; ++v)
          for (int i = 0; i < 8; ++i) {
            const int at = (32 * v + l) * 8 + i;
            xr[v][i] = at < K ? x[at] : 0.f;
          }
        out[l] = kiec::block_order_sum_squares<ROUNDS>(xr, HostShfl{w, l});
      });
    for (auto& th : lanes) th.join();
    const float want = staged_sum_squares(x, K);
    for (int l = 0; l < 32; ++l) bad += std::memcmp(&out[l], &want, sizeof want) != 0;
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
  printf("norm 576 %d\n", norm_mismatches<576>(rng, 50));   // smollm2-135m: 3 rounds, the last 8 lanes of 32
  printf("norm 256 %d\n", norm_mismatches<256>(rng, 50));   // one full round
  printf("norm 128 %d\n", norm_mismatches<128>(rng, 50));   // half a round: lanes 16-31 hold zeros
  printf("norm 1024 %d\n", norm_mismatches<1024>(rng, 50));  // 4 rounds, the most a segment takes
  return 0;
}
