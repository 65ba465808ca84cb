// The random draw of kiec's sampling (kiec/sampling.py defines it): Philox-4x32-10 keyed by the seed and
// counted by the position of the step that predicts the token, 24 bits as a float in [0, 1). Host and device
// compile the same code, so a test on the host pins it to the Python definition bit for bit.
#pragma once
#include <stdint.h>

#if defined(__CUDACC__)
#define KIEC_HD __host__ __device__ __forceinline__
#else
#define KIEC_HD inline
#endif

namespace kiec {

struct Philox4 {
  uint32_t x[4];
};

KIEC_HD uint32_t mulhi32(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
}

KIEC_HD Philox4 philox4x32_10(Philox4 c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    if (r) {
      k0 += W0;
      k1 += W1;
    }
    const uint32_t hi0 = mulhi32(M0, c.x[0]), lo0 = M0 * c.x[0];
    const uint32_t hi1 = mulhi32(M1, c.x[2]), lo1 = M1 * c.x[2];
    c = Philox4{{hi1 ^ c.x[1] ^ k0, lo1, hi0 ^ c.x[3] ^ k1, lo0}};
  }
  return c;
}

// The draw for the token predicted at `position` under `seed`.
KIEC_HD float sample_uniform(uint64_t seed, uint64_t position) {
  const Philox4 r = philox4x32_10(Philox4{{static_cast<uint32_t>(position), static_cast<uint32_t>(position >> 32), 0u, 0u}},
                                  static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return static_cast<float>(r.x[0] >> 8) * (1.0f / 16777216.0f);
}

}  // namespace kiec
