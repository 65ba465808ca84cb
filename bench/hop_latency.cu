// How long one dependency hop between phases of a persistent kernel takes, with no weights to stream: every SM
// reads the whole K-vector the previous phase wrote (as a GEMV prologue does), reduces it (the norm's statistic),
// writes its slice of the next vector and hands over, these ways:
//   counter   one counter a phase; thread 0 of each block adds to it with a release, consumers spin with acquire
//             loads (the persistent kernel's way); `counter+stop` also reads a stop flag at every poll, as the kernel
//             does while waiting; `relaxed` spins with relaxed loads and fences once it sees the target
//   grid      cooperative groups' grid.sync() between phases (for scale)
//   flags     one flag per block and phase; thread j of a consumer spins on block j's flag (no atomics)
//   tagged    no flags: every element is a 64-bit word (value, phase), and consumers spin on the words themselves
//             (each thread loads all its words at once and again until every tag is this phase's; the 2026-11-30
//             version spun on one word at a time, a round trip each, and lost at K = 2048 and 4096: that is the
//             likely reason, not a measured one)
//   hinted    tagged words, read once the phase's counter says every block wrote them: the counter moves with a
//             relaxed add (no release, so no wait for the stores' acknowledgement) and is only a hint; a word read
//             before its store landed is read again (the data's tag, not the counter, says it is there). Consumers
//             spin on one word instead of whole vectors (what the kernel would do with tags). At 3d07718: 1.61-2.01
//             us unloaded (the counter's 1.68-1.76), 10.5-15.8 loaded against the counter's 20.4-21.3
//   accum     the counter's hop, but every block adds a whole K-vector into the next vector (red.add of 4 floats
//             at once; `accum1`: one float at a time) instead of writing its slice, and zeroes its slice of the
//             vector after (the vectors go round three): what a down projection cut by its K (the MLP's hidden
//             units, each SM's own gate/up rows) costs at its hand-over, every SM's partial of every output added
//             in L2, against the counter's slice stores. At 1f46107: 2.77 / 3.62 / 4.03 us at K 576 / 2048 / 4096
//             against the counter's 1.74 / 1.68 / 1.77 (accum1 within 3% of accum), loaded 23.3-25.5 vs 21.1-22.7
// Prints microseconds per phase for each (the GEMV's own work and weights excluded: this is the floor a phase
// costs in latency). `loaded`: the same with one more warp a block streaming HBM into a shared-memory ring the way
// the persistent kernel's weight stream does (ring.cuh's bulk copies, 12 x 16 KB pages), so the hops and the
// vectors' loads and stores meet a memory system as busy as in a decode step; it prints the TB/s streamed.
// Build and run (on the GPU machine; DIR holds persistent_abi.h, which ring.cuh's header chain includes):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I templates/include -I DIR bench/hop_latency.cu
//        -o /tmp/hop && /tmp/hop [accum]   (accum: the accumulating hop's table alone)
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <vector>

#define KIEC_COMPUTE_THREADS 256  // the hop's threads: kiec::sync_block meets them on a named barrier (the
                                  // streaming warp, when there is one, never joins)
#include "persistent_abi.h"
#include "kiec/persistent_tile.cuh"
#include "kiec/ring.cuh"
#include "bench_common.cuh"

constexpr int THREADS = KIEC_COMPUTE_THREADS, MAX_K = 4096;  // K: the vectors' length, at most MAX_K
using R = kiec::Ring<12, 16 << 10>;           // the loaded runs' ring: the persistent kernel's 12 x 16 KB
using kiec::ld_acquire;
using kiec::red_release;

__device__ __forceinline__ void st_release(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned long long ld_relaxed64(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_relaxed64(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

enum Mode { COUNTER = 0, COUNTER_STOP = 1, FLAGS = 2, TAGGED = 3, RELAXED = 4, GRID = 5, HINTED = 6, ACCUM = 7,
            ACCUM1 = 8 };
__host__ __device__ constexpr bool accumulates(int mode) { return mode == ACCUM || mode == ACCUM1; }

__device__ __forceinline__ void red_relaxed(unsigned* p) {
  asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;" ::"l"(p) : "memory");
}

__device__ __forceinline__ void red_add4(float* p, float v) {
  asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %1, %1, %1};" ::"l"(p), "f"(v) : "memory");
}
__device__ __forceinline__ void red_add1(float* p, float v) {
  asm volatile("red.relaxed.gpu.global.add.f32 [%0], %1;" ::"l"(p), "f"(v) : "memory");
}

__device__ __forceinline__ unsigned ld_relaxed(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// buf: two K-vectors of floats (three when accumulating; TAGGED: tbuf, of 64-bit words); sync: counters [phases]
// or flags [phases][blocks].
// LOADED: the block's last warp streams `load` (STREAM_REGION_BYTES a block; bench_common.cuh) meanwhile.
template <int MODE, bool LOADED>
__global__ void __launch_bounds__(THREADS + 32, 1)
hops(float* buf, unsigned long long* tbuf, unsigned* sync, const volatile int* stop, int K, int phases,
     const char* load, unsigned long long* moved, int inflight) {
  const int nb = gridDim.x, b = blockIdx.x;
  const int lo = (int)((long long)K * b / nb), hi = (int)((long long)K * (b + 1) / nb);
  __shared__ float scale, part[THREADS / 32];
  __shared__ volatile int done;
  if (LOADED) {
    extern __shared__ __align__(128) char smem[];
    R ring;
    ring.carve(smem);
    if (threadIdx.x == 0) {
      ring.init(1);  // its empty barriers go unused
      done = 0;
    }
    __syncthreads();
    if (threadIdx.x >= THREADS) {
      if (threadIdx.x == THREADS) stream_pages(ring, load + (size_t)b * STREAM_REGION_BYTES, &done, moved, inflight);
      return;
    }
  }
  for (int p = 1; p <= phases; ++p) {
    const float* x = buf + (size_t)(accumulates(MODE) ? (p - 1) % 3 : (p + 1) & 1) * K;
    float* y = buf + (size_t)(accumulates(MODE) ? p % 3 : p & 1) * K;
    const unsigned long long* tx = tbuf + (size_t)((p + 1) & 1) * K;
    unsigned long long* ty = tbuf + (size_t)(p & 1) * K;
    float ss = 0.f;
    if (MODE == HINTED && p > 1) {  // the hint first: then the words are (almost always) there
      if (threadIdx.x == 0)
        while (ld_relaxed(sync + p - 1) < (unsigned)nb) {}
      kiec::sync_block();
    }
    if (MODE == TAGGED || MODE == HINTED) {  // all of a thread's words in flight at once, again until every tag is
      unsigned long long w[MAX_K / THREADS];  // this phase's
      bool stale;
      do {
        stale = false;
#pragma unroll
        for (int e = 0; e < MAX_K / THREADS; ++e) {
          const int i = threadIdx.x + e * THREADS;
          if (i < K) {
            w[e] = ld_relaxed64(tx + i);
            stale |= (unsigned)(w[e] >> 32) != (unsigned)(p - 1);
          }
        }
      } while (stale);
#pragma unroll
      for (int e = 0; e < MAX_K / THREADS; ++e) {
        const float v = threadIdx.x + e * THREADS < K ? __uint_as_float((unsigned)w[e]) : 0.f;
        ss += v * v;
      }
    } else {
      if (p > 1) {
        if (MODE == GRID) {
          cooperative_groups::this_grid().sync();
        } else if (MODE == FLAGS) {
          if (threadIdx.x < nb)
            while (ld_acquire(sync + (size_t)(p - 1) * nb + threadIdx.x) < 1u) {}
        } else if (MODE == RELAXED) {
          if (threadIdx.x == 0) {
            while (ld_relaxed(sync + p - 1) < (unsigned)nb) {}
            asm volatile("fence.acq_rel.gpu;" ::: "memory");
          }
        } else if (threadIdx.x == 0) {
          while (ld_acquire(sync + p - 1) < (unsigned)nb)
            if (MODE == COUNTER_STOP && *stop) break;
        }
      }
      kiec::sync_block();
      for (int i = threadIdx.x; i < K; i += THREADS) {
        const float v = __ldcg(x + i);
        ss += v * v;
      }
    }
    const float s = kiec::block_sum(ss, part);
    if (threadIdx.x == 0) scale = rsqrtf(s / K + 1e-6f);
    kiec::sync_block();
    if (accumulates(MODE)) {  // this block's part of every output, then its slice of the vector after zeroed
      const float v = (0.5f + 1e-3f * scale) / nb;
      if (MODE == ACCUM)
        for (int i = 4 * threadIdx.x; i < K; i += 4 * THREADS) red_add4(y + i, v);
      else
        for (int i = threadIdx.x; i < K; i += THREADS) red_add1(y + i, v);
      float* z = buf + (size_t)((p + 1) % 3) * K;
      for (int i = lo + threadIdx.x; i < hi; i += THREADS) z[i] = 0.f;
    }
    for (int i = lo + threadIdx.x; i < hi && !accumulates(MODE); i += THREADS) {
      const float v = 0.5f + 1e-3f * scale;  // stands in for the GEMV's output
      if (MODE == TAGGED || MODE == HINTED)
        st_relaxed64(ty + i, ((unsigned long long)(unsigned)p << 32) | __float_as_uint(v));
      else
        y[i] = v;
    }
    if (MODE == HINTED) {
      kiec::sync_block();
      if (threadIdx.x == 0) red_relaxed(sync + p);
    }
    if (MODE != TAGGED && MODE != HINTED && MODE != GRID) {
      kiec::sync_block();
      if (threadIdx.x == 0) {
        if (MODE == FLAGS) st_release(sync + (size_t)p * nb + b, 1u);
        else red_release(sync + p);
      }
    }
  }
  if (LOADED && threadIdx.x == 0) done = 1;
}

struct Load {  // what a loaded run streams, how many pages a block keeps in flight, and what it moved
  const char* src;
  unsigned long long* moved;
  int inflight;
  double tbps;
};

template <int MODE, bool LOADED = false>
static double run(int sms, int K, int phases, float* buf, unsigned long long* tbuf, unsigned* sync, int* stop,
                  Load* load = nullptr) {
  std::vector<float> ms;
  std::vector<double> tbps;
  cudaEvent_t a, e;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&e));
  const int threads = THREADS + (LOADED ? 32 : 0);
  const size_t smem = LOADED ? R::BYTES : 0;
  if (LOADED) CHECK(cudaFuncSetAttribute(hops<MODE, LOADED>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const char* src = load ? load->src : nullptr;
  unsigned long long* moved = load ? load->moved : nullptr;
  int inflight = load ? load->inflight : 0;
  for (int r = 0; r < 6; ++r) {
    CHECK(cudaMemset(sync, 0, (size_t)(phases + 1) * sms * sizeof(unsigned)));
    CHECK(cudaMemset(buf, 0, 3 * (size_t)K * sizeof(float)));
    // tagged: the vector phase 1 reads carries tag 0 (what a memset of zero writes)
    CHECK(cudaMemset(tbuf, 0, 2 * (size_t)K * sizeof(unsigned long long)));
    if (moved) CHECK(cudaMemset(moved, 0, sizeof *moved));
    void* args[] = {&buf, &tbuf, &sync, &stop, &K, &phases, &src, &moved, &inflight};
    CHECK(cudaEventRecord(a));
    CHECK(cudaLaunchCooperativeKernel((const void*)hops<MODE, LOADED>, dim3(sms), dim3(threads), args, smem, 0));
    CHECK(cudaEventRecord(e));
    CHECK(cudaEventSynchronize(e));
    float t;
    CHECK(cudaEventElapsedTime(&t, a, e));
    if (r > 0) {  // the first is a warm-up
      ms.push_back(t);
      if (moved) {
        unsigned long long bytes;
        CHECK(cudaMemcpy(&bytes, moved, sizeof bytes, cudaMemcpyDeviceToHost));
        tbps.push_back(bytes / (t * 1e-3) / 1e12);
      }
    }
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(e));
  if (accumulates(MODE)) {  // the last phase's vector: every element the sum of every block's part, all alike
    std::vector<float> y(K);
    CHECK(cudaMemcpy(y.data(), buf + (size_t)(phases % 3) * K, K * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < K; ++i)
      if (!(fabsf(y[i] - y[0]) <= 1e-5f * fabsf(y[0]) && y[0] > 0.5f && y[0] < 0.51f)) {
        fprintf(stderr, "accumulated vector wrong at %d: %g (element 0: %g)\n", i, y[i], y[0]);
        exit(1);
      }
  }
  std::sort(ms.begin(), ms.end());
  if (load) {
    std::sort(tbps.begin(), tbps.end());
    load->tbps = tbps[tbps.size() / 2];
  }
  return ms[ms.size() / 2] * 1e3 / phases;
}

int main(int argc, char** argv) {
  const bool accum_only = argc > 1 && strcmp(argv[1], "accum") == 0;  // `hop accum`: the accumulating table alone
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int phases = 4000;
  float* buf;
  unsigned long long* tbuf;
  unsigned* sync;
  int* stop;
  CHECK(cudaMalloc(&buf, 2 * 16384 * sizeof(float)));
  CHECK(cudaMalloc(&tbuf, 2 * 16384 * sizeof(unsigned long long)));
  CHECK(cudaMalloc(&sync, (size_t)(phases + 1) * sms * sizeof(unsigned)));
  CHECK(cudaMalloc(&stop, sizeof(int)));
  CHECK(cudaMemset(stop, 0, sizeof(int)));
  char* load_src;
  Load load{};
  CHECK(cudaMalloc(&load_src, (size_t)sms * STREAM_REGION_BYTES));
  CHECK(cudaMemset(load_src, 1, (size_t)sms * STREAM_REGION_BYTES));
  CHECK(cudaMalloc(&load.moved, sizeof *load.moved));
  load.src = load_src;
  load.inflight = R::STAGES;
  printf("hop latency, %d blocks x %d threads, %d phases (us per phase, median of 5 runs)\n", sms, THREADS, phases);
  printf("%6s %9s %13s %9s %9s %9s %9s %9s | loaded: %9s %9s %9s %10s\n", "K", "counter", "counter+stop", "relaxed",
         "flags", "tagged", "hinted", "grid", "counter", "tagged", "hinted", "streamed");
  for (int K : {576, 2048, 4096}) {
    if (accum_only) break;
    printf("%6d %9.2f %13.2f %9.2f %9.2f %9.2f %9.2f %9.2f |", K, run<COUNTER>(sms, K, phases, buf, tbuf, sync, stop),
           run<COUNTER_STOP>(sms, K, phases, buf, tbuf, sync, stop), run<RELAXED>(sms, K, phases, buf, tbuf, sync, stop),
           run<FLAGS>(sms, K, phases, buf, tbuf, sync, stop), run<TAGGED>(sms, K, phases, buf, tbuf, sync, stop),
           run<HINTED>(sms, K, phases, buf, tbuf, sync, stop), run<GRID>(sms, K, phases, buf, tbuf, sync, stop));
    const double counter = run<COUNTER, true>(sms, K, phases, buf, tbuf, sync, stop, &load);
    const double streamed = load.tbps;
    const double tagged = run<TAGGED, true>(sms, K, phases, buf, tbuf, sync, stop, &load);
    printf("         %9.2f %9.2f %9.2f %6.2f TB/s\n", counter, tagged,
           run<HINTED, true>(sms, K, phases, buf, tbuf, sync, stop, &load), streamed);
  }
  // The hop that adds every block's part of every output (a down projection cut by its K) against the counter's
  printf("\naccumulating hop: every block adds its part of all K outputs (us per phase)\n%6s %9s %9s %9s | loaded: "
         "%9s %9s %10s\n", "K", "counter", "accum", "accum1", "counter", "accum", "streamed");
  load.inflight = R::STAGES;
  for (int K : {576, 2048, 4096}) {
    printf("%6d %9.2f %9.2f %9.2f |", K, run<COUNTER>(sms, K, phases, buf, tbuf, sync, stop),
           run<ACCUM>(sms, K, phases, buf, tbuf, sync, stop), run<ACCUM1>(sms, K, phases, buf, tbuf, sync, stop));
    const double counter = run<COUNTER, true>(sms, K, phases, buf, tbuf, sync, stop, &load);
    const double streamed = load.tbps;
    printf("         %9.2f %9.2f %6.2f TB/s\n", counter, run<ACCUM, true>(sms, K, phases, buf, tbuf, sync, stop, &load),
           streamed);
  }
  if (accum_only) return 0;
  // The loaded hop against the stream's depth: every block's pages in flight bound the queue its hop meets
  printf("\nloaded counter hop (K 2048) by pages in flight a block (%d KB each)\n%9s %9s %10s\n", R::PAGE >> 10,
         "in flight", "us/hop", "streamed");
  for (int inflight : {1, 2, 3, 4, 6, 8, 12}) {
    load.inflight = inflight;
    const double hop = run<COUNTER, true>(sms, 2048, phases, buf, tbuf, sync, stop, &load);
    printf("%9d %9.2f %5.2f TB/s\n", inflight, hop, load.tbps);
  }
  return 0;
}
