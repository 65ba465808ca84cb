// How fast the persistent kernel's weight stream delivers when nothing stops it: the LM head's case, and a big
// GEMV's. In the kernel the LM head of llama-3.2-1b (525 MB, 4 MB an SM, no dependency in the way) spans 124.2 us:
// 4.23 TB/s, 92% of the 4.62 read ceiling, while graph mode's LM-head kernel reads it at 4.43 (2026-11-30, 5f1b610:
// the trace's span and kiec bench's per-kernel table, bench/results/2026-11-30/5f1b610_*). This asks where the 8%
// goes, every block (one per SM, all at once) streaming its own share of HBM through the kernel's ring (ring.cuh:
// TMA bulk copies, evict-first, mbarriers) five ways:
//   ceiling   no ring: every thread of 4 blocks an SM reads 16-byte vectors of the whole buffer (kiec bench's kind)
//   landed    the ring, each page released as soon as it lands (nobody reads it)
//   tile      the ring feeding the real GEMV tile loop (gemv_pages.cuh's gemv_pages, K 2048 like the LM head)
//   normal    tile, the copies with L2's evict-normal policy instead of evict-first
//   pages     tile with other ring shapes: 24 x 8 KB, 6 x 32 KB, 10 x 16 KB (llama-3.1-8b's ring), 13 x 16 KB
//   polled    tile while a lane of the streaming warpgroup's second warp polls a counter nobody moves: acquire loads
//             back to back (every block on one line, as the kernel's SMs poll a phase counter, or each on its own),
//             relaxed loads back to back, or acquire loads ~1 us apart. The twelfth session inferred from a poller's
//             three paces that each acquire poll costs the SM's stream ~0.2 us (bench/RESULTS.md); this times it.
// for a share of 4 MB an SM (the LM head's) and of 512 KB (a big GEMV's share on llama-3.2-1b: a phase starting
// with an empty ring). Prints, per way: TB/s over the GPU (all bytes over the first start to the last end: what a
// phase costs), and GB/s an SM (median SM, slowest SM), median of 5 runs; each run reads bytes no earlier run of it
// left in L2. At 3d07718 (bench/RESULTS.md, fifth session): the tile 4.58 TB/s on 4 MB shares and 4.17 on 512 KB,
// evict-normal 3.82, the other rings 4.58-4.61, against kiec bench's 4.61 ceiling in the next call; this file's own
// ceiling row read 3.89 (its plain loads, not the ring, fall short of what kiec bench's reach).
// Build and run (on the GPU machine; DIR holds persistent_abi.h, which the kernel's headers include):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I templates/include -I DIR -DKIEC_COMPUTE_THREADS=256
//        bench/stream_rate.cu -o /tmp/stream_rate && /tmp/stream_rate
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>

#include <algorithm>
#include <vector>

#include "persistent_abi.h"
#include "kiec/persistent.cuh"
#include "bench_common.cuh"

using T = __nv_bfloat16;
constexpr int WARPS = 8, K = 2048, SEGS = 2, RUNS = 5;
constexpr size_t MAX_SHARE = 4 << 20;  // bytes a block streams at most
enum Way { LANDED = 0, TILE = 1, NORMAL = 2, POLL_ACQUIRE = 3, POLL_ACQUIRE_OWN = 4, POLL_RELAXED = 5,
           POLL_ACQUIRE_1US = 6 };

// Block b streams [src + b * share, + share) through ring R; stamps[2b], stamps[2b + 1]: its start and end (ns).
template <typename R>
__global__ void __launch_bounds__((WARPS + kiec::STREAM_WARPS) * 32, 1)
stream(const char* src, size_t share, int way, unsigned long long* stamps, float* sink, const unsigned* counters) {
  using G = kiec::GemvShape<T, K, WARPS, kiec::EPI_STORE, SEGS, R::PAGE>;
  extern __shared__ __align__(128) char smem_raw[];
  __shared__ volatile int done;  // the compute warps are through the share: the poller stops
  R ring;
  float* acc = reinterpret_cast<float*>(ring.carve(smem_raw));  // a row's segment sums, the rows of one share
  if (threadIdx.x == 0) {
    ring.init(WARPS * 32);
    done = 0;
  }
  __syncthreads();
  const char* mine = src + (size_t)blockIdx.x * share;
  const int items = (int)(share / G::ITEM), pages = (items + G::PER_PAGE - 1) / G::PER_PAGE;
  const unsigned long long t0 = kiec::global_ns();
  if (threadIdx.x >= WARPS * 32) {  // the producer: the kernel's copies, minus the page walk
    if (threadIdx.x == WARPS * 32) {
      const unsigned long long policy = way == NORMAL ? kiec::evict_normal_policy() : kiec::evict_first_policy();
      for (unsigned seq = 0; seq < (unsigned)pages; ++seq) {
        const unsigned stage = seq % R::STAGES;
        if (seq >= R::STAGES) kiec::mbar_wait(ring.empty + stage, (seq / R::STAGES - 1) & 1);
        const int first = seq * G::PER_PAGE;
        const unsigned bytes = (unsigned)min(G::PER_PAGE, items - first) * G::ITEM;
        kiec::mbar_expect(ring.full + stage, bytes);
        kiec::bulk_copy(ring.page(seq), mine + (size_t)first * G::ITEM, bytes, ring.full + stage, policy);
      }
      ring.drain(pages);
    } else if (way >= POLL_ACQUIRE && threadIdx.x == (WARPS + 1) * 32) {  // the poller (a counter never met)
      const unsigned* c = counters + (way == POLL_ACQUIRE_OWN ? blockIdx.x * 32 : 0);  // (own: a 128-byte line each)
      unsigned seen = 0;
      while (!done) {
        seen += way == POLL_RELAXED ? kiec::ld_relaxed(c) : kiec::ld_acquire(c);
        if (way == POLL_ACQUIRE_1US) __nanosleep(1000);
      }
      if (seen == 0x12345678u) sink[blockIdx.x] = 1.f;  // (never: the counters stay 0)
    }
    return;
  }
  float xr[G::ROUNDS][8];
  made_up_x<G>(xr);
  if (way == LANDED) {
    for (int p = 0; p < pages; ++p) {
      ring.next_page();
      ring.release();
    }
  } else {
    kiec::gemv_pages<T, G, WARPS, SEGS>(ring, items, xr, acc, false);
  }
  kiec::sync_block();
  if (threadIdx.x == 0) {
    stamps[2 * blockIdx.x] = t0;
    stamps[2 * blockIdx.x + 1] = kiec::global_ns();
    sink[blockIdx.x] = acc[0];  // nothing computed is dead
    done = 1;
  }
}

// kiec bench's kind of read: 16-byte vectors, grid-stride, every thread of many blocks.
__global__ void read_all(const uint4* p, size_t n, unsigned* sink) {
  unsigned x = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const uint4 v = __ldcs(p + i);
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (x == 0x12345678u) *sink = x;
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Buffers {
  char* w;
  size_t bytes;  // RUNS + 1 regions of sms * MAX_SHARE: each run its own
  unsigned long long* stamps;
  float* sink;
  unsigned* counters;  // 32 a block (a line each), all 0: polled, never met
};

template <int STAGES, int PAGE>
static void way(const char* name, const Buffers& b, int sms, size_t share, int w) {
  using R = kiec::Ring<STAGES, PAGE>;
  using G = kiec::GemvShape<T, K, WARPS, kiec::EPI_STORE, SEGS, PAGE>;
  const size_t smem = R::BYTES + (size_t)G::ROWS_PER_OUT * (share / G::ITEM) * 4;
  CHECK(cudaFuncSetAttribute(stream<R>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  constexpr int threads = (WARPS + kiec::STREAM_WARPS) * 32;
  const size_t region = (size_t)sms * MAX_SHARE;
  std::vector<double> total, med, slow;
  for (int r = 0; r <= RUNS; ++r) {  // run 0 warms up
    stream<R><<<sms, threads, smem>>>(b.w + (size_t)r * region, share, w, b.stamps, b.sink, b.counters);
    CHECK(cudaDeviceSynchronize());
    std::vector<unsigned long long> h(2 * sms);
    CHECK(cudaMemcpy(h.data(), b.stamps, h.size() * sizeof h[0], cudaMemcpyDeviceToHost));
    unsigned long long first = ~0ull, last = 0;
    std::vector<double> rate(sms);
    for (int s = 0; s < sms; ++s) {
      first = std::min(first, h[2 * s]);
      last = std::max(last, h[2 * s + 1]);
      rate[s] = (double)share / (h[2 * s + 1] - h[2 * s]);  // bytes per ns = GB/s
    }
    std::sort(rate.begin(), rate.end());
    if (r == 0) continue;
    total.push_back((double)share * sms / (last - first) / 1e3);
    med.push_back(rate[sms / 2]);
    slow.push_back(rate[0]);
  }
  printf("%-34s %5zu KB an SM  %5.2f TB/s  %5.1f GB/s an SM (slowest %5.1f)\n", name, share >> 10, median(total),
         median(med), median(slow));
}

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  Buffers b;
  b.bytes = (size_t)(RUNS + 1) * sms * MAX_SHARE;
  CHECK(cudaMalloc(&b.w, b.bytes));
  CHECK(cudaMemset(b.w, 0, b.bytes));
  CHECK(cudaMalloc(&b.stamps, 2 * sms * sizeof *b.stamps));
  CHECK(cudaMalloc(&b.sink, sms * sizeof *b.sink));
  CHECK(cudaMalloc(&b.counters, 32 * sms * sizeof *b.counters));
  CHECK(cudaMemset(b.counters, 0, 32 * sms * sizeof *b.counters));
  unsigned* usink;
  CHECK(cudaMalloc(&usink, sizeof *usink));
  // the ceiling over one run's region at a time, like the runs below (cudaEvent timed)
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  const size_t region = (size_t)sms * MAX_SHARE;
  std::vector<double> ceil;
  for (int r = 0; r <= RUNS; ++r) {
    CHECK(cudaEventRecord(e0));
    read_all<<<sms * 4, 512>>>(reinterpret_cast<const uint4*>(b.w + (size_t)r * region), region / 16, usink);
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float ms = 0.f;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (r > 0) ceil.push_back(region / (ms * 1e9));
  }
  printf("stream rate, %d blocks at once, each its own share through the ring (TB/s: all bytes over first start to "
         "last end; median of %d runs)\n", sms, RUNS);
  printf("%-34s %5zu KB an SM  %5.2f TB/s\n", "ceiling (16-byte loads, 4 blocks an SM)", MAX_SHARE >> 10, median(ceil));
  for (size_t share : {MAX_SHARE, (size_t)512 << 10}) {
    way<12, 16 << 10>("landed, 12 x 16 KB", b, sms, share, LANDED);
    way<12, 16 << 10>("tile, 12 x 16 KB (the kernel's)", b, sms, share, TILE);
    way<12, 16 << 10>("tile, evict-normal", b, sms, share, NORMAL);
    way<24, 8 << 10>("tile, 24 x 8 KB", b, sms, share, TILE);
    way<6, 32 << 10>("tile, 6 x 32 KB", b, sms, share, TILE);
    way<10, 16 << 10>("tile, 10 x 16 KB (llama-3.1-8b's)", b, sms, share, TILE);
    way<13, 16 << 10>("tile, 13 x 16 KB", b, sms, share, TILE);
    way<12, 16 << 10>("tile + acquire polls, one line", b, sms, share, POLL_ACQUIRE);
    way<12, 16 << 10>("tile + acquire polls, own lines", b, sms, share, POLL_ACQUIRE_OWN);
    way<12, 16 << 10>("tile + relaxed polls, one line", b, sms, share, POLL_RELAXED);
    way<12, 16 << 10>("tile + acquire polls 1 us apart", b, sms, share, POLL_ACQUIRE_1US);
  }
  return 0;
}
