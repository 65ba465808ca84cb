// How fast the persistent kernel's compute warps get through GEMV weight pages that are already in shared memory:
// the real tile loop (persistent.cuh's gemv_pages, its dot products and warp sums, the ring's mbarriers), with a
// producer that marks each page full at once (no TMA, no HBM). One block per SM, 8 compute warps and the kernel's
// 4-warp streaming warpgroup (one thread of it the producer; the same launch bounds, so the same register budget); each shape is a share of 64 output rows run back to back. Prints GB/s of weights an SM and over the GPU:
// to keep up with the memory, an SM must beat its share of the read ceiling (4.6 TB/s / 132 = 35 GB/s) by enough
// to catch up after every wait. Build (on the GPU machine; DIR holds persistent_abi.h, B the warp-sum batch):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I templates/include -I DIR -DKIEC_COMPUTE_THREADS=256
//        -DKIEC_REDUCE_BATCH=B bench/gemv_compute.cu -o /tmp/gemv_compute_B && /tmp/gemv_compute_B
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>

#include <algorithm>
#include <vector>

#include "persistent_abi.h"
#include "kiec/persistent.cuh"

#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } \
  } while (0)

constexpr int WARPS = 8, STAGES = 12, PAGE = 16 << 10, ROWS = 64, REPS = 400;
using R = kiec::Ring<STAGES, PAGE>;
using T = __nv_bfloat16;

template <typename G, int SEGS>
__global__ void __launch_bounds__((WARPS + kiec::STREAM_WARPS) * 32, 1) consume(unsigned long long* ns, float* sink) {
  extern __shared__ __align__(128) char smem_raw[];
  R ring;
  ring.full = reinterpret_cast<unsigned long long*>(smem_raw);
  ring.empty = ring.full + STAGES;
  ring.pages = smem_raw + 256;
  ring.seq = 0;
  float* acc = reinterpret_cast<float*>(ring.pages + (size_t)STAGES * PAGE);  // ROWS_PER_OUT x ROWS x SEGS
  T* w = reinterpret_cast<T*>(ring.pages);
  for (int i = threadIdx.x; i < STAGES * PAGE / 2; i += blockDim.x) w[i] = __float2bfloat16(1e-3f * (i % 97));
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      kiec::mbar_init(ring.full + s, 1);
      kiec::mbar_init(ring.empty + s, WARPS * 32);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const int items = ROWS * SEGS, pages = (items + G::PER_PAGE - 1) / G::PER_PAGE;
  if (threadIdx.x >= WARPS * 32) {  // the producer: every page is full as soon as it is free
    if (threadIdx.x == WARPS * 32)
      for (unsigned seq = 0; seq < (unsigned)(REPS * pages); ++seq) {
        const unsigned stage = seq % STAGES;
        if (seq >= STAGES) kiec::mbar_wait(ring.empty + stage, (seq / STAGES - 1) & 1);
        kiec::mbar_arrive(ring.full + stage);
      }
    return;
  }
  float xr[G::ROUNDS][8];
#pragma unroll
  for (int v = 0; v < G::ROUNDS; ++v)
#pragma unroll
    for (int i = 0; i < 8; ++i) xr[v][i] = 0.5f + 1e-3f * (threadIdx.x + v * 8 + i);
  kiec::sync_block();
  const unsigned long long t0 = kiec::global_ns();
  for (int r = 0; r < REPS; ++r) {
    kiec::gemv_pages<T, G, WARPS, SEGS>(ring, items, xr, acc, false);
    kiec::sync_block();
  }
  const unsigned long long t1 = kiec::global_ns();
  if (threadIdx.x == 0) {
    ns[blockIdx.x] = t1 - t0;
    sink[blockIdx.x] = acc[0];
  }
}

template <int K, int EPI, int SEGS>
static void run(const char* name, int sms) {
  using G = kiec::GemvShape<T, K, WARPS, EPI, SEGS, PAGE>;
  const size_t smem = 256 + (size_t)STAGES * PAGE + (size_t)G::ROWS_PER_OUT * ROWS * SEGS * 4;
  CHECK(cudaFuncSetAttribute(consume<G, SEGS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  unsigned long long* ns;
  float* sink;
  CHECK(cudaMalloc(&ns, sms * sizeof *ns));
  CHECK(cudaMalloc(&sink, sms * sizeof *sink));
  constexpr int threads = (WARPS + kiec::STREAM_WARPS) * 32;
  consume<G, SEGS><<<sms, threads, smem>>>(ns, sink);  // warm-up
  consume<G, SEGS><<<sms, threads, smem>>>(ns, sink);
  CHECK(cudaDeviceSynchronize());
  std::vector<unsigned long long> h(sms);
  CHECK(cudaMemcpy(h.data(), ns, sms * sizeof *ns, cudaMemcpyDeviceToHost));
  std::sort(h.begin(), h.end());
  const double bytes = (double)REPS * ROWS * G::ROWS_PER_OUT * K * sizeof(T);
  const double med = bytes / h[sms / 2], slow = bytes / h[sms - 1];  // bytes per ns = GB/s
  printf("%-26s K %5d  segs %d  rounds %d  B %2d  %7.1f GB/s an SM (slowest %6.1f)  %6.2f TB/s over %d SMs\n", name, K,
         SEGS, G::ROUNDS, KIEC_REDUCE_BATCH, med, slow, slow * sms / 1e3, sms);
  CHECK(cudaFree(ns));
  CHECK(cudaFree(sink));
}

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  run<576, kiec::EPI_STORE, 1>("smollm2 QKV/O (K 576)", sms);
  run<576, kiec::EPI_SILU_MUL, 1>("smollm2 gate/up", sms);
  run<2048, kiec::EPI_STORE, 2>("llama-1b QKV/O (K 2048)", sms);
  run<2048, kiec::EPI_SILU_MUL, 2>("llama-1b gate/up", sms);
  run<8192, kiec::EPI_STORE, 8>("llama-1b down (K 8192)", sms);
  run<14336, kiec::EPI_STORE, 8>("llama-8b down (K 14336)", sms);
  return 0;
}
