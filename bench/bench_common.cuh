// What the device benchmarks (bench/*.cu) share: the CUDA error check, and a made-up x for the GEMV tile's loop.
#pragma once
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

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
