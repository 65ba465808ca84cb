// Host harness for tests/cpu/test_persistent_stream.py: the weight stream's pace on GPUs of other memory bandwidths
// (page_pace in ring.cuh, KIEC_PACE_REF_GBPS set by the test's -D), one line per case:
//   mem_khz bus_bits peak_gbps pace_ns
// Usage: pace MEM_KHZ BUS_BITS [MEM_KHZ BUS_BITS ...]   (the pace: the test's -DKIEC_PAGE_PACE_NS)
#include <cstdio>
#include <cstdlib>

#include "persistent_abi.h"
#include "kiec/ring.cuh"

int main(int argc, char** argv) {
  if (argc < 3 || argc % 2 != 1) { fprintf(stderr, "usage: %s MEM_KHZ BUS_BITS ...\n", argv[0]); return 2; }
  for (int i = 1; i + 1 < argc; i += 2) {
    kiec::PersistentArgs a = {};
    const long long khz = atoll(argv[i]);
    const int bits = atoi(argv[i + 1]);
    a.mem_gbps = kiec::memory_peak_gbps(khz, bits);
    printf("%lld %d %u %u\n", khz, bits, a.mem_gbps, kiec::page_pace(a, KIEC_PAGE_PACE_NS, kiec::pace_power_scale(a)));
  }
  return 0;
}
