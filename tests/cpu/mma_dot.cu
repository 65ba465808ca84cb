// Host harness for tests/cpu/test_mma_dot.py: runs MmaX (mma_dot.cuh), the persistent GEMV's tensor-core dot
// products, with 32 threads standing in for a warp's lanes and ldmatrix.x4, mma.m16n8k16 (bf16, fp32 sums) and
// x's hi / lo split emulated by PTX's fragment rules ("Matrix fragments for mma.m16n8k16", "ldmatrix"), for segments
// of 8 to 224 chunks, with and without SiLU-mul's up row. Checks, per case and trial, against a double-precision dot
// of the same weights with x as its two bf16 pieces: the lanes' parts add up to it (to 1e-6 of the sum of |w x|),
// only the 8 diagonal lanes hold anything, and nothing past the item or outside the warp's segment of x is read
// (both poisoned with NaN). Prints "SEGC SILU <bad> <trials>" a case.
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "kiec/mma_dot.cuh"

static float bf16_float(unsigned short b) {
  const unsigned u = (unsigned)b << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
static unsigned short bf16_round(float f) {  // to nearest, ties to even (finite values)
  unsigned u;
  std::memcpy(&u, &f, 4);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// A warp's meeting point: each lane publishes its operands, all 32 meet, each computes its own result from all of
// them, all meet again.
struct HostWarp {
  std::barrier<> meet{32};
  const char* addr[32];
  unsigned a[32][4], b[32][2];
};

// TensorCores' operations on a HostWarp.
struct HostCore {
  HostWarp* w;
  int lane;
  void ldsm4(const char* p, unsigned (&m)[4]) const {  // lane 8 i + r: row r of matrix i; lane l: row l / 4's pair
    w->addr[lane] = p;
    w->meet.arrive_and_wait();
    for (int i = 0; i < 4; ++i) {
      unsigned short e[2];
      std::memcpy(e, w->addr[8 * i + lane / 4] + 4 * (lane % 4), 4);
      m[i] = e[0] | (unsigned)e[1] << 16;
    }
    w->meet.arrive_and_wait();
  }
  void mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) const {
    for (int r = 0; r < 4; ++r) w->a[lane][r] = a[r];
    w->b[lane][0] = b0;
    w->b[lane][1] = b1;
    w->meet.arrive_and_wait();
    float A[16][16], B[16][8];
    for (int t = 0; t < 32; ++t) {  // lane t = 4 g + q
      const int g = t / 4, q = t % 4;
      const int at[4][2] = {{g, 2 * q}, {g + 8, 2 * q}, {g, 2 * q + 8}, {g + 8, 2 * q + 8}};
      for (int r = 0; r < 4; ++r) {
        A[at[r][0]][at[r][1]] = bf16_float(w->a[t][r] & 0xffffu);
        A[at[r][0]][at[r][1] + 1] = bf16_float(w->a[t][r] >> 16);
      }
      for (int h = 0; h < 2; ++h) {
        B[2 * q + 8 * h][g] = bf16_float(w->b[t][h] & 0xffffu);
        B[2 * q + 8 * h + 1][g] = bf16_float(w->b[t][h] >> 16);
      }
    }
    const int g = lane / 4, q = lane % 4;
    const int at[4][2] = {{g, 2 * q}, {g, 2 * q + 1}, {g + 8, 2 * q}, {g + 8, 2 * q + 1}};
    for (int r = 0; r < 4; ++r)
      for (int k = 0; k < 16; ++k) d[r] += A[at[r][0]][k] * B[k][at[r][1]];
    w->meet.arrive_and_wait();
  }
  void split(float x, float y, unsigned& hi, unsigned& lo) const {
    const unsigned short hx = bf16_round(x), hy = bf16_round(y);
    hi = hx | (unsigned)hy << 16;
    lo = bf16_round(x - bf16_float(hx)) | (unsigned)bf16_round(y - bf16_float(hy)) << 16;
  }
};

template <int SEGC_, bool SILU_>
struct Shape {  // GemvShape's fields MmaX reads
  static constexpr int SEGC = SEGC_, ROUNDS = (SEGC + 31) / 32;
  static constexpr bool SILU = SILU_;
};

template <int SEGC, bool SILU>
static int failures(std::mt19937& rng, int trials) {
  constexpr int SEGS = 3, SEG = 1, SPAN = 32 * ((SEGC + 31) / 32) + 32;  // chunks read at most, and a margin
  constexpr unsigned short NAN_BF16 = 0x7fc0;
  std::normal_distribution<float> val(0.f, 1.f);
  int bad = 0;
  for (int trial = 0; trial < trials; ++trial) {
    std::vector<unsigned short> w[2];  // the gate (or only) row's segment and the up row's, NaN past the item
    for (auto& row : w) {
      row.assign(SPAN * 8, NAN_BF16);
      for (int e = 0; e < SEGC * 8; ++e) row[e] = bf16_round(val(rng));
    }
    std::vector<float> xs(SEGS * SEGC * 8, NAN);  // x: NaN but the warp's segment
    for (int e = 0; e < SEGC * 8; ++e) xs[SEG * SEGC * 8 + e] = std::ldexp(val(rng), (int)(rng() % 7) - 3);
    double ref[2] = {0.0, 0.0}, mag[2] = {0.0, 0.0};
    for (int r = 0; r < 2; ++r)
      for (int e = 0; e < SEGC * 8; ++e) {  // x as the tensor cores take it: hi + lo
        const float x = xs[SEG * SEGC * 8 + e], hi = bf16_float(bf16_round(x)), lo = bf16_float(bf16_round(x - hi));
        const double p = (double)bf16_float(w[r][e]) * ((double)hi + (double)lo);
        ref[r] += p;
        mag[r] += std::fabs(p);
      }
    float part[2][32];
    HostWarp hw;
    std::vector<std::thread> lanes;
    for (int l = 0; l < 32; ++l)
      lanes.emplace_back([&, l] {
        kiec::MmaX<Shape<SEGC, SILU>, HostCore> m{HostCore{&hw, l}};
        m.load(xs.data(), SEG, l);
        m.dot(reinterpret_cast<const char*>(w[0].data()), reinterpret_cast<const char*>(w[1].data()), l,
              part[0][l], part[1][l]);
      });
    for (auto& th : lanes) th.join();
    for (int r = 0; r < (SILU ? 2 : 1); ++r) {
      double sum = 0.0;
      for (int l = 0; l < 32; ++l) {
        const bool diag = l % 4 == (l / 4) / 2;  // lane 4 n + n / 2
        if (!diag && part[r][l] != 0.f) ++bad;
        sum += part[r][l];
      }
      if (!(std::fabs(sum - ref[r]) <= 1e-6 * mag[r])) ++bad;  // (NaN fails)
    }
    if (!SILU)
      for (int l = 0; l < 32; ++l) bad += part[1][l] != 0.f;
  }
  return bad;
}

template <int SEGC, bool SILU>
static void report(std::mt19937& rng) {
  constexpr int TRIALS = 20;
  printf("%d %d %d %d\n", SEGC, SILU ? 1 : 0, failures<SEGC, SILU>(rng, TRIALS), TRIALS);
}

int main() {
  std::mt19937 rng(11);
  report<8, false>(rng);     // one step, half of it past the segment
  report<16, false>(rng);    // one step, the round's second past it
  report<32, true>(rng);     // one round
  report<72, false>(rng);    // smollm2-135m's K 576, one segment: 3 rounds, the last 8 chunks of 32
  report<72, true>(rng);
  report<96, true>(rng);     // smollm2-135m's down (K 1536, 2 segments)
  report<128, false>(rng);   // llama-3.2-1b's K 2048 (2 segments), its down (K 8192, 8)
  report<128, true>(rng);
  report<224, false>(rng);   // llama-3.1-8b's down (K 14336, 8 segments): 7 rounds
  return 0;
}
