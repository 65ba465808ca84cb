// What the device benchmarks (bench/*.cu) share: the CUDA error check, a made-up x for the GEMV tile's loop, a
// thread that keeps HBM streaming into a ring's pages. (The tensor cores' mma and its operand packing are kiec's:
// common.cuh's mma_16816, pack_pair, split_pair.)
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "kiec/mbarrier.cuh"

#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } \
  } while (0)

// This thread's slice of x for GemvShape G (finite, distinct values: the dot products' speed, not their result).
template <typename G>
__device__ __forceinline__ void made_up_x(float (&xr)[G::ROUNDS][8]) {
#pragma unroll
  for (int v = 0; v < G::ROUNDS; ++v)
#pragma unroll
    for (int i = 0; i < 8; ++i) xr[v][i] = 0.5f + 1e-3f * (threadIdx.x + v * 8 + i);
}

// Each block's region that stream_pages goes round: 16 MB (2 GB over 132 SMs, far more than L2 holds).
constexpr size_t STREAM_REGION_BYTES = 16ull << 20;

// One thread: page after page of its block's region `src` into the stages of `ring` (a kiec::Ring) until *done, as
// fast as they land (nobody reads them, so a page is free again once it landed), at most `inflight` pages in flight;
// adds the bytes it moved to *moved. The weight stream's load on HBM and on the block's shared memory, for a
// benchmark that times something else meanwhile.
template <typename R>
__device__ void stream_pages(const R& ring, const char* src, const volatile int* done, unsigned long long* moved,
                             int inflight) {
  const unsigned long long policy = kiec::evict_first_policy();
  unsigned seq = 0;
  size_t off = 0;
  for (; !*done; ++seq, off = (off + R::PAGE) % STREAM_REGION_BYTES)
    ring.copy_landed(seq, src + off, min(inflight, R::STAGES), policy);
  ring.drain(seq);
  atomicAdd(moved, (unsigned long long)seq * R::PAGE);
}
