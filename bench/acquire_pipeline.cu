// Whether a thread can keep several acquire loads of counters in flight, and what a fence after relaxed loads
// costs: the question before polling a counter with staggered loads (bench/RESULTS.md, eleventh session: waiting SMs
// see a phase's last signal spread over ~0.5 us, the phase of their serial polls). ptxas turns ld.acquire.gpu into
// LDG.STRONG.GPU + CCTL.IVALL and fence.acq_rel.gpu into MEMBAR.ALL.GPU + CCTL.IVALL: if the invalidation waits for
// its load, k acquire loads take k round trips. One block per SM, lane 0 of each measures, the others idle; every
// counter is already past its target (no waiting on a producer: the loads' own latency). Each batch's addresses
// depend on the previous batch's values, so batches do not overlap. Prints ns per batch, median over the SMs:
//   acquire k   k ld.acquire.gpu of k counters (one 128-byte line each), back to back, then their sum
//   relaxed k   the same with ld.relaxed.gpu (no invalidation)
//   relaxed+fence    one relaxed load, then fence.acq_rel.gpu (the acquire pattern without an acquire load)
//   release+acquire  red.release.gpu.add on this block's line, then an acquire load of a counter (a tile's signal,
//                    then the next tile's poll)
//   release+fence    red.release.gpu.add, then fence.acq_rel.gpu (does the fence wait for the add?)
// Build and run (on the GPU machine; DIR holds persistent_abi.h, which the kernel's headers include):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I templates/include -I DIR bench/acquire_pipeline.cu
//        -o /tmp/acq && /tmp/acq
#include <cuda_runtime.h>
#include <stdio.h>

#include <algorithm>
#include <vector>

#include "persistent_abi.h"
#include "kiec/persistent_tile.cuh"
#include "bench_common.cuh"

using kiec::ld_acquire;
using kiec::ld_relaxed;

constexpr int LINE = 32;  // unsigned ints a 128-byte line
constexpr int BATCHES = 2000;

enum Test { ACQUIRE, RELAXED, RELAXED_FENCE, RELEASE_ACQUIRE, RELEASE_FENCE };

// counters: 8 lines of small values (all past any target); mine: this block's line for its adds; out[block]: ns a
// batch over BATCHES
template <Test TEST, int K>
__global__ void measure(const unsigned* counters, unsigned* mine, float* out) {
  if (threadIdx.x != 0) return;
  unsigned sum = 0;
  unsigned* line = mine + blockIdx.x * LINE;
  const unsigned long long t0 = kiec::global_ns();
  for (int b = 0; b < BATCHES; ++b) {
    const unsigned* base = counters + (sum >> 31);  // (0: the values are small; a dependence on the last batch)
    if (TEST == ACQUIRE || TEST == RELAXED) {
      unsigned v[K];
#pragma unroll
      for (int k = 0; k < K; ++k) v[k] = TEST == ACQUIRE ? ld_acquire(base + k * LINE) : ld_relaxed(base + k * LINE);
#pragma unroll
      for (int k = 0; k < K; ++k) sum += v[k];
    } else if (TEST == RELAXED_FENCE) {
      sum += ld_relaxed(base);
      asm volatile("fence.acq_rel.gpu;" ::: "memory");
    } else {
      asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(line + (sum >> 31)), "r"(1u) : "memory");
      if (TEST == RELEASE_ACQUIRE) sum += ld_acquire(base);
      else asm volatile("fence.acq_rel.gpu;" ::: "memory");  // (the next batch waits for it)
    }
  }
  out[blockIdx.x] = (float)(kiec::global_ns() - t0) / BATCHES + (sum == 0xffffffffu ? 1.f : 0.f);
}

template <Test TEST, int K>
void run(const char* name, int sms, const unsigned* counters, unsigned* mine, float* out) {
  measure<TEST, K><<<sms, 32>>>(counters, mine, out);  // (a warm-up launch, then the measured one)
  CHECK(cudaGetLastError());
  measure<TEST, K><<<sms, 32>>>(counters, mine, out);
  CHECK(cudaDeviceSynchronize());
  std::vector<float> ns(sms);
  CHECK(cudaMemcpy(ns.data(), out, sms * sizeof(float), cudaMemcpyDeviceToHost));
  std::sort(ns.begin(), ns.end());
  printf("%-18s %2d %9.1f %9.1f %9.1f\n", name, K, ns[0], ns[sms / 2], ns[sms - 1]);
}

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  unsigned *counters, *mine;
  float* out;
  CHECK(cudaMalloc(&counters, 8 * LINE * sizeof(unsigned)));
  CHECK(cudaMemset(counters, 0, 8 * LINE * sizeof(unsigned)));
  CHECK(cudaMalloc(&mine, (size_t)sms * LINE * sizeof(unsigned)));
  CHECK(cudaMemset(mine, 0, (size_t)sms * LINE * sizeof(unsigned)));
  CHECK(cudaMalloc(&out, sms * sizeof(float)));
  printf("ns a batch, %d blocks (lane 0 each), %d batches: min, median, max over the blocks\n", sms, BATCHES);
  printf("%-18s %2s %9s %9s %9s\n", "test", "k", "min", "median", "max");
  run<ACQUIRE, 1>("acquire", sms, counters, mine, out);
  run<ACQUIRE, 2>("acquire", sms, counters, mine, out);
  run<ACQUIRE, 4>("acquire", sms, counters, mine, out);
  run<ACQUIRE, 8>("acquire", sms, counters, mine, out);
  run<RELAXED, 1>("relaxed", sms, counters, mine, out);
  run<RELAXED, 4>("relaxed", sms, counters, mine, out);
  run<RELAXED, 8>("relaxed", sms, counters, mine, out);
  run<RELAXED_FENCE, 1>("relaxed+fence", sms, counters, mine, out);
  run<RELEASE_ACQUIRE, 1>("release+acquire", sms, counters, mine, out);
  run<RELEASE_FENCE, 1>("release+fence", sms, counters, mine, out);
  return 0;
}
