// The small kernels at the ends of a decode step: embedding lookup (step start) and advance (step end).
#pragma once
#include "common.cuh"

namespace kiec {

template <typename T>
__global__ void embed_kernel(const T* __restrict__ table, int dim, int vocab, const int* tokens, float* x,
                             StepState* st) {
  pdl_launch_dependents();
  pdl_wait();
  const int token = min(max(tokens[st->pos], 0), vocab - 1);
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < dim; i += gridDim.x * blockDim.x)
    x[i] = to_float<T>(table[(size_t)token * dim + i]);
  if (blockIdx.x == 0 && threadIdx.x == 0) st->argmax = 0ull;
}

// One thread: record the step's token, feed it back as the next input once the prompt is consumed,
// publish it to the host through mapped pinned memory, and move to the next position.
__global__ void advance_kernel(StepState* st, int* tokens, volatile int* host_tokens) {
  pdl_wait();
  const int p = st->pos, next = argmax_index(st->argmax);
  if (p + 1 >= st->n_prompt) tokens[p + 1] = next;
  host_tokens[p] = next;
  __threadfence_system();
  st->pos = p + 1;
}

}  // namespace kiec
