// Does asking L2 for weights ahead (cp.async.bulk.prefetch.L2) make their later copy into shared memory faster?
// The persistent kernel's weight stream stops while an SM waits with a full ring; asking L2 for the pages past the
// ring meanwhile (persist_l2_ahead_bytes, 94a9075) measured no effect on llama-3.2-1b although the trace and the
// time model say the next big GEMV streams most of its weights after the wait (bench/RESULTS.md, 2026-11-30).
// This isolates the mechanism: every block (one per SM, all at once) copies `bytes` of its own region through the
// kernel's ring (ring.cuh: 12 x 16 KB pages, TMA bulk copies with the evict-first policy, a page released as soon
// as it lands), timed from its first copy to its last page landed, three ways:
//   cold        nothing asked of L2 before
//   prefetched  the region asked of L2 first, then a pause of PAUSE_US (time for it to land), then the copies
//   at once     the region asked of L2 and copied right away
// L2 is swept (a 256 MB memset) before every run, and every run reads a region it has not read before. Prints GB/s
// an SM (median over SMs; the slowest SM) for each, median of 7 runs. One SM's share of the read ceiling is about
// 35 GB/s (4.6 TB/s / 132); whether pages out of L2 come faster than that is what this measures. At 9cd28d0: 32-40
// GB/s an SM prefetched against 18-29 cold (bench/RESULTS.md, 2026-11-30 fourth session).
// Build and run (on the GPU machine; DIR holds persistent_abi.h, which ring.cuh's header chain includes):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I templates/include -I DIR bench/l2_prefetch.cu
//        -o /tmp/l2_prefetch && /tmp/l2_prefetch
#include <cuda_runtime.h>
#include <stdio.h>

#include <algorithm>
#include <vector>

#include "persistent_abi.h"
#include "kiec/persistent_tile.cuh"
#include "kiec/ring.cuh"
#include "bench_common.cuh"

using R = kiec::Ring<12, 16 << 10>;          // the persistent kernel's ring
constexpr size_t REGION = 1 << 20;           // a block's region in one run: the largest `bytes` below
constexpr int RUNS = 7, PAUSE_US = 30;
constexpr size_t SWEEP = 256ull << 20;       // more than L2 (50 MB on H100/H200)
enum Mode { COLD = 0, PREFETCHED = 1, AT_ONCE = 2 };

// One thread a block: its region [src + block * REGION, + bytes) into the ring; ns[block]: first copy to last
// landing.
__global__ void __launch_bounds__(32, 1) copy_region(const char* src, unsigned bytes, int mode,
                                                     unsigned long long* ns) {
  extern __shared__ __align__(128) char smem[];
  if (threadIdx.x != 0) return;
  R ring;
  ring.carve(smem);
  ring.init(1);  // its empty barriers go unused: a page is free once it landed
  const char* mine = src + (size_t)blockIdx.x * REGION;
  if (mode != COLD)
    for (unsigned off = 0; off < bytes; off += R::PAGE) kiec::prefetch_bulk_l2(mine + off, R::PAGE);
  if (mode == PREFETCHED)
    for (const unsigned long long t = kiec::global_ns(); kiec::global_ns() - t < PAUSE_US * 1000ull;) {}
  const unsigned long long policy = kiec::evict_first_policy();  // as the kernel's stream
  const unsigned long long t0 = kiec::global_ns();
  const unsigned pages = bytes / R::PAGE;
  for (unsigned seq = 0; seq < pages; ++seq) ring.copy_landed(seq, mine + (size_t)seq * R::PAGE, R::STAGES, policy);
  ring.drain(pages);
  ns[blockIdx.x] = kiec::global_ns() - t0;
}

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int uses = 3 * 5 * RUNS;  // a fresh region for every run of every mode and size
  char *src, *sweep;
  unsigned long long* ns;
  CHECK(cudaMalloc(&src, (size_t)uses * sms * REGION));
  CHECK(cudaMemset(src, 1, (size_t)uses * sms * REGION));
  CHECK(cudaMalloc(&sweep, SWEEP));
  CHECK(cudaMalloc(&ns, sms * sizeof(unsigned long long)));
  CHECK(cudaFuncSetAttribute(copy_region, cudaFuncAttributeMaxDynamicSharedMemorySize, R::BYTES));
  printf("L2 prefetch, %d blocks at once, each its own region through a %d x %d KB ring (GB/s an SM: median SM, "
         "slowest SM; median of %d runs; pause %d us)\n", sms, R::STAGES, R::PAGE >> 10, RUNS, PAUSE_US);
  printf("%9s | %17s | %17s | %17s\n", "KB an SM", "cold", "prefetched", "at once");
  int use = 0;
  for (unsigned kb : {64u, 192u, 256u, 512u, 1024u}) {
    printf("%9u |", kb);
    for (int mode : {COLD, PREFETCHED, AT_ONCE}) {
      std::vector<double> med, slow;
      for (int r = 0; r < RUNS; ++r, ++use) {
        CHECK(cudaMemset(sweep, r, SWEEP));  // evict what L2 holds
        copy_region<<<sms, 32, R::BYTES>>>(src + (size_t)use * sms * REGION, kb << 10, mode, ns);
        CHECK(cudaGetLastError());
        std::vector<unsigned long long> t(sms);
        CHECK(cudaMemcpy(t.data(), ns, sms * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
        std::sort(t.begin(), t.end());
        med.push_back((kb << 10) / (double)t[sms / 2]);  // bytes per ns = GB/s
        slow.push_back((kb << 10) / (double)t[sms - 1]);
      }
      std::sort(med.begin(), med.end());
      std::sort(slow.begin(), slow.end());
      printf(" %7.1f  %7.1f |", med[RUNS / 2], slow[RUNS / 2]);
    }
    printf("\n");
  }
  return 0;
}
