// Would thread-block clusters make the GEMV prologue cheaper? The ninth session's probe (persist_probe_twice,
// bench/RESULTS.md) put a second copy of every prologue at +63 us on a llama-3.2-1b token: each phase every SM reads
// all of x (tagged words: 16 KB at K 2048, 64 KB for the down projection's K 8192, 8.4 MB from L2 over the GPU a
// layer). With the GEMV's K cut over a cluster of C blocks (split-K inside the cluster), a block reads only its
// 1/C of x, and the cluster adds its partial sums through distributed shared memory: the norm's sum of squares
// before the dots, the rows' partial dot products after them.
// This times that prologue alone, phase after phase (the same x each phase, its tags already this phase's: the
// read and the exchanges, not the wait for a producer), us a phase, median block:
//   C 1      today's: a block reads all K words (16-byte loads, 8 in flight a thread, tags checked), stores the
//            values in shared memory, sums their squares over the block
//   C 2, 4   a block reads K / C words the same way, then writes its sum of squares into every cluster peer's
//            shared memory, cluster barrier, adds them; then (the dots' partials) writes ROWS floats into the
//            cluster's first block, cluster barrier
// `loaded`: the same while one more warp a block streams HBM through a ring (bench_common.cuh: stream_pages),
// as the persistent kernel's weight stream does. Prints the clusters of C that fit the GPU at once with the
// persistent kernel's shared memory (a persistent kernel needs every block resident): with fewer than the SMs,
// a cluster launch would leave SMs idle.
// Build and run (on the GPU machine; DIR holds persistent_abi.h, which ring.cuh's header chain includes):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I templates/include -I DIR bench/cluster_x.cu
//        -o /tmp/cluster_x && /tmp/cluster_x
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <stdio.h>

#include <algorithm>
#include <vector>

#define KIEC_COMPUTE_THREADS 256  // the prologue's threads meet on a named barrier; the streaming warp never joins
#include "persistent_abi.h"
#include "kiec/persistent_tile.cuh"
#include "kiec/ring.cuh"
#include "bench_common.cuh"

namespace cg = cooperative_groups;

constexpr int THREADS = KIEC_COMPUTE_THREADS, MAX_K = 8192, ROWS = 64, PHASES = 1000, BATCH = 8;
using R = kiec::Ring<8, 16 << 10>;  // the loaded runs' ring (8 pages: room for C 1's 32 KB of x at K 8192)

// One phase's prologue over this block's words [lo, hi) of x (tagged words, tag 1): their values into xs, the
// block's sum of their squares returned (every thread).
__device__ __forceinline__ float read_part(const float* x2, int lo, int hi, float* xs, float* red) {
  float ss = 0.f;
  for (int j0 = lo / 2 + threadIdx.x; j0 < hi / 2; j0 += BATCH * THREADS) {  // pairs of words a 16-byte load
    unsigned long long a[BATCH], b[BATCH];
#pragma unroll
    for (int e = 0; e < BATCH; ++e)
      if (j0 + e * THREADS < hi / 2) kiec::ld_tagged2(x2, j0 + e * THREADS, a[e], b[e]);
#pragma unroll
    for (int e = 0; e < BATCH; ++e) {
      const int j = j0 + e * THREADS;
      if (j < hi / 2) {
        const float v0 = kiec::tagged_value(a[e], x2, 2 * j, 1u), v1 = kiec::tagged_value(b[e], x2, 2 * j + 1, 1u);
        xs[2 * j - lo] = v0;
        xs[2 * j + 1 - lo] = v1;
        ss += v0 * v0 + v1 * v1;
      }
    }
  }
  return kiec::block_sum(ss, red);
}

// Distributed shared memory, as the split-K exchange would use it: a peer's address of a local shared variable,
// a store there, and an arrival on a peer's mbarrier that releases the stores before it to that peer (the waiter
// acquires at cluster scope).
__device__ __forceinline__ unsigned peer_addr(const void* local, int rank) {
  unsigned a;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(kiec::smem_addr(local)), "r"(rank));
  return a;
}
__device__ __forceinline__ void st_peer(unsigned addr, float v) {
  asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(addr), "f"(v) : "memory");
}
__device__ __forceinline__ void arrive_peer(unsigned bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void wait_cluster(unsigned long long* bar, unsigned parity) {
  unsigned ok = 0;
  while (!ok)
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                 " selp.u32 %0, 1, 0, p;\n}" : "=r"(ok) : "r"(kiec::smem_addr(bar)), "r"(parity) : "memory");
}

// The exchanges go through each block's mbarriers (count C - 1: one arrival a peer and phase), not cluster
// barriers, which every thread of the cluster would have to reach (the streaming warp never does). A peer runs at
// most one phase ahead of this block (its next phase waits on this block's arrival), but one peer's next-phase
// arrival may come before another's this-phase one: the sums' slots and their barriers are double-buffered by the
// phase's parity (each barrier completes every other phase). The rows go to the first block only, which every
// peer's next phase waits on: one barrier.
template <int C, bool LOADED>
__global__ void __launch_bounds__(THREADS + 32, 1)
prologue(const float* x2, int K, unsigned long long* ns, float* sink, const char* load, unsigned long long* moved) {
  extern __shared__ __align__(128) char smem[];
  __shared__ float red[THREADS / 32], peers[2][C], rows[2][C][ROWS];
  __shared__ __align__(8) unsigned long long ss_bar[2], rows_bar;
  __shared__ volatile int done;
  float* xs = reinterpret_cast<float*>(smem);  // K / C floats
  R ring;
  if (LOADED) ring.carve(smem + (size_t)MAX_K * 4);
  if (threadIdx.x == 0) {
    if (LOADED) ring.init(1);  // its empty barriers go unused
    done = 0;
    kiec::mbar_init(&ss_bar[0], C > 1 ? C - 1 : 1);
    kiec::mbar_init(&ss_bar[1], C > 1 ? C - 1 : 1);
    kiec::mbar_init(&rows_bar, C > 1 ? C - 1 : 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  cg::this_cluster().sync();  // every block's barriers made before any peer arrives on them (all threads here)
  if (LOADED && threadIdx.x >= THREADS) {
    if (threadIdx.x == THREADS)
      stream_pages(ring, load + (size_t)blockIdx.x * STREAM_REGION_BYTES, &done, moved, R::STAGES);
    return;
  }
  if (threadIdx.x >= THREADS) return;
  const int rank = C > 1 ? (int)cg::this_cluster().block_rank() : 0, lo = K / C * rank, hi = lo + K / C;
  float keep = 0.f;
  kiec::sync_block();
  const unsigned long long t0 = kiec::global_ns();
  for (int p = 0; p < PHASES; ++p) {
    const float ss = read_part(x2, lo, hi, xs, red);
    if (C == 1) {
      keep += ss;
      continue;
    }
    const int b = p & 1;
    // the sum of squares to every peer (thread r < C, r != rank: peer r's slot `rank`), then the cluster's total
    if ((int)threadIdx.x < C && (int)threadIdx.x != rank) {
      st_peer(peer_addr(&peers[b][rank], threadIdx.x), ss);
      arrive_peer(peer_addr(&ss_bar[b], threadIdx.x));
    }
    wait_cluster(&ss_bar[b], (p >> 1) & 1);
    float total = ss;
#pragma unroll
    for (int r = 0; r < C; ++r)
      if (r != rank) total += peers[b][r];
    // the rows' partial dot products (made up: a value of x each) into the cluster's first block
    if (rank > 0) {
      if (threadIdx.x < ROWS) st_peer(peer_addr(&rows[b][rank][threadIdx.x], 0), xs[threadIdx.x] * total);
      kiec::sync_block();  // the block's row stores, then one arrival that releases them
      if (threadIdx.x == 0) arrive_peer(peer_addr(&rows_bar, 0));
    } else {
      wait_cluster(&rows_bar, b);
      if (threadIdx.x < ROWS) {
        float y = xs[threadIdx.x] * total;
#pragma unroll
        for (int r = 1; r < C; ++r) y += rows[b][r][threadIdx.x];
        keep += y;
      }
    }
    kiec::sync_block();  // peers[b] and rows[b] read before this block's next arrivals let a peer reuse them
  }
  kiec::sync_block();
  if (threadIdx.x == 0) {
    ns[blockIdx.x] = kiec::global_ns() - t0;
    if (LOADED) done = 1;
  }
  if (keep == 1.2345f) sink[blockIdx.x] = keep;  // nothing computed is dead
}

template <int C, bool LOADED>
static void run(int sms, int K, const float* x2, const char* load, unsigned long long* moved) {
  const size_t smem = (size_t)MAX_K * 4 + (LOADED ? R::BYTES : 0);
  auto kernel = prologue<C, LOADED>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  if (C > 1) CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = C;
  attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
  cfg.blockDim = dim3(THREADS + (LOADED ? 32 : 0));
  cfg.dynamicSmemBytes = smem;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  cfg.gridDim = dim3(C);
  CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg));
  const int blocks = std::min(sms, clusters * C) / C * C;
  cfg.gridDim = dim3(blocks);
  unsigned long long* ns;
  float* sink;
  CHECK(cudaMalloc(&ns, blocks * sizeof *ns));
  CHECK(cudaMalloc(&sink, blocks * sizeof *sink));
  std::vector<double> us;
  double tbps = 0.0;
  for (int r = 0; r < 6; ++r) {
    if (moved) CHECK(cudaMemset(moved, 0, sizeof *moved));
    cudaEvent_t a, e;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&e));
    CHECK(cudaEventRecord(a));
    CHECK(cudaLaunchKernelEx(&cfg, kernel, x2, K, ns, sink, load, moved));
    CHECK(cudaEventRecord(e));
    CHECK(cudaEventSynchronize(e));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, e));
    std::vector<unsigned long long> h(blocks);
    CHECK(cudaMemcpy(h.data(), ns, blocks * sizeof *ns, cudaMemcpyDeviceToHost));
    std::sort(h.begin(), h.end());
    if (r > 0) us.push_back(h[blocks / 2] / 1e3 / PHASES);  // the first is a warm-up
    if (moved && r > 0) {
      unsigned long long bytes;
      CHECK(cudaMemcpy(&bytes, moved, sizeof bytes, cudaMemcpyDeviceToHost));
      tbps = bytes / (ms * 1e-3) / 1e12;
    }
    CHECK(cudaEventDestroy(a));
    CHECK(cudaEventDestroy(e));
  }
  std::sort(us.begin(), us.end());
  printf("K %5d  C %d  %s  %3d blocks (%3d clusters fit)  %6.2f us a phase (%5.1f KB of x a block)", K, C,
         LOADED ? "loaded  " : "unloaded", blocks, clusters, us[us.size() / 2], K / C * 8 / 1024.0);
  if (LOADED) printf("  stream %.2f TB/s", tbps);
  printf("\n");
  CHECK(cudaFree(ns));
  CHECK(cudaFree(sink));
}

__global__ void __launch_bounds__(384, 1) resident() {}

// How many clusters of C blocks of the persistent kernel's shape (384 threads, ~220 KB of shared memory, one a
// block an SM) fit the GPU at once: with fewer than the SMs / C, a cluster launch leaves SMs idle.
static void fit(int sms, int C) {
  const int smem = 220 << 10;
  CHECK(cudaFuncSetAttribute(resident, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CHECK(cudaFuncSetAttribute(resident, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = C;
  attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
  cfg.gridDim = dim3(C);
  cfg.blockDim = dim3(384);
  cfg.dynamicSmemBytes = smem;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  CHECK(cudaOccupancyMaxActiveClusters(&clusters, resident, &cfg));
  printf("persistent kernel's shape, clusters of %d: %d fit at once (%d of %d SMs)\n", C, clusters, clusters * C, sms);
}

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  for (int C : {1, 2, 4, 8}) fit(sms, C);
  // x as tagged words (value, tag 1), the same every phase
  std::vector<unsigned long long> words(MAX_K);
  for (int i = 0; i < MAX_K; ++i) {
    const float v = 0.5f + 1e-3f * (i % 97);
    words[i] = (1ull << 32) | *reinterpret_cast<const unsigned*>(&v);
  }
  float* x2;
  CHECK(cudaMalloc(&x2, MAX_K * 8));
  CHECK(cudaMemcpy(x2, words.data(), MAX_K * 8, cudaMemcpyHostToDevice));
  char* load;
  unsigned long long* moved;
  CHECK(cudaMalloc(&load, (size_t)sms * STREAM_REGION_BYTES));
  CHECK(cudaMemset(load, 0x3c, (size_t)sms * STREAM_REGION_BYTES));
  CHECK(cudaMalloc(&moved, sizeof *moved));
  for (int K : {2048, 8192}) {
    run<1, false>(sms, K, x2, nullptr, nullptr);
    run<2, false>(sms, K, x2, nullptr, nullptr);
    run<4, false>(sms, K, x2, nullptr, nullptr);
    run<1, true>(sms, K, x2, load, moved);
    run<2, true>(sms, K, x2, load, moved);
    run<4, true>(sms, K, x2, load, moved);
  }
  CHECK(cudaFree(x2));
  CHECK(cudaFree(load));
  CHECK(cudaFree(moved));
  return 0;
}
