// Would the persistent GEMV tile's dot products run faster on the tensor cores with 16 weight rows a step instead of
// one row a warp on the FMA pipe? The ninth session's persist_dot_mma (05ab278, taken out) put one row's elements on
// the diagonal of an mma.m16n8k16 and used 1/16 of its products: slower than the FMA tile. Here an mma takes 16 rows
// x 16 elements of K (ldmatrix from a tile-major layout: 512 contiguous bytes a 16 x 16 block) against x as two
// bf16 columns (hi and lo pieces: 16 significant bits of x; fp32 sums), 512 useful products of its 2048; each warp
// takes every WARPS-th step of K for all of the share's row blocks, and the warps' sums meet in shared memory.
// Baseline in the same run, the same shares: the FMA tile's way (rows cut into segments as row_segments cuts them,
// a segment a warp, 16 bytes a lane a round, x in registers, widened bf16, a warp sum a segment). Pages already in
// shared memory (no HBM), one block of 8 warps on every SM. Prints GB/s of weights an SM (one SM's share of a
// 4.6 TB/s read ceiling is 35 GB/s) and each way's largest error against a double-precision dot of the same bf16
// weights and fp32 x, relative to the sum of |w x|.
// The third way (forty-eighth session): the same mmas on the FMA tile's row-major rows, each row's 16-byte chunks
// stored XOR-swizzled in groups of 8 (chunk c at c ^ (row & 7): a permutation inside each 128 bytes, so a ring page
// would still hold the same bytes of the same rows and the kernel's page walk would stay as it is). Without the
// swizzle an ldmatrix of 8 rows K x 2 bytes apart reads one bank group 8 times over; with it, 8 different ones.
// Build (GPU machine): nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I templates/include
//   bench/mma_rows.cu -o /tmp/mma_rows   (scripts/gpu_run.sh: MMA=1)
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "bench_common.cuh"

constexpr int WARPS = 8, THREADS = WARPS * 32, BUF = 128 << 10, BLOCK_BYTES = 512, REPS = 400;
constexpr int MAX_ROWS = 64;

__device__ __forceinline__ unsigned shared_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void ldmatrix_x4(unsigned addr, unsigned (&a)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"(addr));
}

// x[k] for the benchmark (finite, varied, some negative)
__host__ __device__ __forceinline__ float made_x(int k) { return 0.5f + 0.37f * sinf(0.1f * k) - 1e-4f * k; }

// The 16 x 16 block (row block rb, step s) of a share with `steps` steps a row: where it sits in the buffer (the
// buffer goes round: shares past 128 KB read its blocks again).
__device__ __forceinline__ int block_at(int rb, int s, int steps) { return (rb * steps + s) % (BUF / BLOCK_BYTES); }

// The share's 128 KB of weights into the block's shared memory (each way's layout reads them as its own).
__device__ __forceinline__ void fill_buffer(char* smem, const __nv_bfloat16* w) {
  for (int i = threadIdx.x; i < BUF / 16; i += THREADS)
    reinterpret_cast<uint4*>(smem)[i] = reinterpret_cast<const uint4*>(w)[i];
}

// A rep's end: each row's PARTS sums (red[part * ROWS + row]: one a warp, or one a segment) added and kept in
// `keep` (so that the work stays), block 0's first rep written to out for the error check.
template <int ROWS, int PARTS>
__device__ __forceinline__ void rows_out(const float* red, float& keep, float* out, int r) {
  __syncthreads();
  if (threadIdx.x < ROWS) {
    float v = 0.f;
#pragma unroll
    for (int j = 0; j < PARTS; ++j) v += red[j * ROWS + threadIdx.x];
    keep += v;
    if (r == 0 && blockIdx.x == 0) out[threadIdx.x] = v;
  }
  __syncthreads();
}

// The tensor-core way: ROWS rows x K, tile-major (block (rb, s) holds rows 16 rb.. x elements 16 s.., row-major,
// 32 bytes a row). Warp w takes steps w, w + WARPS, ...; x's pieces for them are in registers (column 0 of B the
// hi pieces, column 1 the lo pieces, lanes 0-3 and 4-7; the other columns zero).
// SWIZZLED: the same steps, fragments and sums on row-major rows, row j's logical chunk c at chunk
// (j * K / 8 + (c ^ (j & 7))) % (BUF / 16) (the wrap as the FMA tile's; K / 8 a multiple of 8 keeps each row's groups
// of 8 chunks on 128-byte lines): only the ldmatrix addresses differ.
template <int K, int ROWS, bool SWIZZLED = false>
__global__ void __launch_bounds__(THREADS, 1) mma_rows(const __nv_bfloat16* w, float* out, int reps) {
  extern __shared__ __align__(128) char smem[];
  float* red = reinterpret_cast<float*>(smem + BUF);  // [WARPS][ROWS]
  constexpr int STEPS = K / 16, S = (STEPS + WARPS - 1) / WARPS, RB = ROWS / 16, ACC = S < 4 ? S : 4;
  constexpr int CH = K / 8, CHUNKS = BUF / 16;
  static_assert(K % 16 == 0 && ROWS % 16 == 0, "16 x 16 blocks");
  static_assert(!SWIZZLED || K % 64 == 0, "swizzled rows: whole 128-byte groups");
  fill_buffer(smem, w);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  unsigned b[S][2];
#pragma unroll
  for (int i = 0; i < S; ++i) {
    const int s = warp + i * WARPS, k = s * 16 + q * 2;
    b[i][0] = b[i][1] = 0u;
    if (s < STEPS && g < 2) {
      float v[4] = {made_x(k), made_x(k + 1), made_x(k + 8), made_x(k + 9)};
      if (g == 1)  // the lo pieces: x less its bf16 rounding
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] -= __bfloat162float(__float2bfloat16_rn(v[j]));
      b[i][0] = kiec::pack_pair<__nv_bfloat16>(v[0], v[1]);
      b[i][1] = kiec::pack_pair<__nv_bfloat16>(v[2], v[3]);
    }
  }
  // this lane's row and column in an ldmatrix.x4: matrices (rows 0-7 | 8-15) x (elements 0-7 | 8-15); swizzled, its
  // row's low bits (lane & 7) are its chunks' swizzle
  const int m = lane >> 3, row16 = (m & 1) * 8 + (lane & 7), half = m >> 1, sw = lane & 7;
  const unsigned base = shared_u32(smem) + (SWIZZLED ? 0 : row16 * 32 + half * 16);
  auto block = [&](int rb, int s) -> unsigned {
    if constexpr (SWIZZLED) return base + (((rb * 16 + row16) * CH + ((2 * s + half) ^ sw)) % CHUNKS) * 16;
    else return base + block_at(rb, s, STEPS) * BLOCK_BYTES;
  };
  __syncthreads();
  float keep = 0.f;
  for (int r = 0; r < reps; ++r) {
#pragma unroll 1
    for (int rb = 0; rb < RB; ++rb) {
      float d[ACC][4] = {};
#pragma unroll
      for (int i = 0; i < S; ++i) {
        const int s = warp + i * WARPS;
        if (STEPS % WARPS == 0 || s < STEPS) {
          unsigned a[4];
          ldmatrix_x4(block(rb, s), a);
          kiec::mma_16816<__nv_bfloat16>(d[i % ACC], a, b[i][0], b[i][1]);
        }
      }
#pragma unroll
      for (int j = 1; j < ACC; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) d[0][e] += d[j][e];
      if (q == 0) {  // columns 0 and 1: row g's hi and lo sums, then row g + 8's
        red[warp * ROWS + rb * 16 + g] = d[0][0] + d[0][1];
        red[warp * ROWS + rb * 16 + g + 8] = d[0][2] + d[0][3];
      }
    }
    rows_out<ROWS, WARPS>(red, keep, out, r);
  }
  if (threadIdx.x < ROWS && keep == 12345.f) out[MAX_ROWS + threadIdx.x] = keep;  // (keeps the work)
}

// The FMA tile's way: ROWS rows x K, row-major; row j's 16-byte chunk c at (j * K / 8 + c) % (BUF / 16) chunks.
// Each row cut into SEGS segments as codegen/persistent.py's row_segments cuts it (the fewest with at most 4 chunks
// a lane); warp w takes segment w % SEGS of rows w / SEGS, + WARPS / SEGS, ...; lane l its chunks l, l + 32, ...
// (x for them in registers), each (row, segment) summed over the warp, the segments' sums added in shared memory.
__host__ __device__ constexpr int segs_of(int chunks) {
  for (int s = 1; s < WARPS; s *= 2)
    if (chunks % s == 0 && (chunks / s + 31) / 32 <= 4) return s;
  return WARPS;
}
template <int K, int ROWS>
__global__ void __launch_bounds__(THREADS, 1) fma_rows(const __nv_bfloat16* w, float* out, int reps) {
  extern __shared__ __align__(128) char smem[];
  float* red = reinterpret_cast<float*>(smem + BUF);  // [SEGS][ROWS]
  constexpr int CH = K / 8, SEGS = segs_of(CH), SEGC = CH / SEGS, ROUNDS = (SEGC + 31) / 32;
  fill_buffer(smem, w);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, seg = warp % SEGS;
  float xr[ROUNDS][8];
#pragma unroll
  for (int v = 0; v < ROUNDS; ++v)
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int c = v * 32 + lane;
      xr[v][i] = c < SEGC ? made_x((seg * SEGC + c) * 8 + i) : 0.f;
    }
  __syncthreads();
  float keep = 0.f;
  const uint4* chunks = reinterpret_cast<const uint4*>(smem);
  for (int r = 0; r < reps; ++r) {
#pragma unroll 1
    for (int j = warp / SEGS; j < ROWS; j += WARPS / SEGS) {
      float p[ROUNDS];
#pragma unroll
      for (int v = 0; v < ROUNDS; ++v) {
        p[v] = 0.f;
        const int c = v * 32 + lane;
        if (SEGC % 32 == 0 || c < SEGC) {
          const uint4 raw = chunks[(j * CH + seg * SEGC + c) % (BUF / 16)];
          const unsigned u[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            p[v] = fmaf(__uint_as_float(u[i] << 16), xr[v][2 * i], p[v]);
            p[v] = fmaf(__uint_as_float(u[i] & 0xffff0000u), xr[v][2 * i + 1], p[v]);
          }
        }
      }
      float a = p[0];
#pragma unroll
      for (int v = 1; v < ROUNDS; ++v) a += p[v];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
      if (lane == 0) red[seg * ROWS + j] = a;
    }
    rows_out<ROWS, SEGS>(red, keep, out, r);
  }
  if (threadIdx.x < ROWS && keep == 12345.f) out[MAX_ROWS + threadIdx.x] = keep;  // (keeps the work)
}

// The share's row j, element k, as each layout holds it (the host's reference reads the same bits).
static float weight_tile_major(const std::vector<__nv_bfloat16>& w, int j, int k, int K) {
  const int rb = j / 16, s = k / 16, steps = K / 16;
  const size_t at = (size_t)((rb * steps + s) % (BUF / BLOCK_BYTES)) * 256 + (j % 16) * 16 + k % 16;
  return __bfloat162float(w[at]);
}
static float weight_row_major(const std::vector<__nv_bfloat16>& w, int j, int k, int K) {
  const size_t chunk = ((size_t)j * (K / 8) + k / 8) % (BUF / 16);
  return __bfloat162float(w[chunk * 8 + k % 8]);
}
static float weight_swizzled(const std::vector<__nv_bfloat16>& w, int j, int k, int K) {
  const size_t chunk = ((size_t)j * (K / 8) + ((k / 8) ^ (j & 7))) % (BUF / 16);
  return __bfloat162float(w[chunk * 8 + k % 8]);
}

template <int K, int ROWS>
static void run(const char* what, int sms, const __nv_bfloat16* dw, const std::vector<__nv_bfloat16>& hw,
                float* dout) {
  const int shmem = BUF + WARPS * MAX_ROWS * 4;
  CHECK(cudaFuncSetAttribute(mma_rows<K, ROWS>, cudaFuncAttributeMaxDynamicSharedMemorySize, shmem));
  CHECK(cudaFuncSetAttribute(fma_rows<K, ROWS>, cudaFuncAttributeMaxDynamicSharedMemorySize, shmem));
  CHECK(cudaFuncSetAttribute(mma_rows<K, ROWS, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, shmem));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  double gbs[3], err[3];  // tile-major mma, FMA, swizzled mma
  for (int way = 0; way < 3; ++way) {
    auto launch = [&](int reps) {
      if (way == 0) mma_rows<K, ROWS><<<sms, THREADS, shmem>>>(dw, dout, reps);
      else if (way == 1) fma_rows<K, ROWS><<<sms, THREADS, shmem>>>(dw, dout, reps);
      else mma_rows<K, ROWS, true><<<sms, THREADS, shmem>>>(dw, dout, reps);
    };
    launch(2);  // warm
    CHECK(cudaDeviceSynchronize());
    // the loading of 128 KB into shared memory timed apart: 2 reps against REPS + 2
    float best = 1e30f, base = 1e30f;
    for (int t = 0; t < 5; ++t) {
      float ms;
      CHECK(cudaEventRecord(e0));
      launch(2);
      CHECK(cudaEventRecord(e1));
      CHECK(cudaEventSynchronize(e1));
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      base = std::min(base, ms);
      CHECK(cudaEventRecord(e0));
      launch(REPS + 2);
      CHECK(cudaEventRecord(e1));
      CHECK(cudaEventSynchronize(e1));
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      best = std::min(best, ms);
    }
    gbs[way] = (double)REPS * ROWS * K * 2 / ((best - base) * 1e-3) / 1e9;
    std::vector<float> out(ROWS);
    CHECK(cudaMemcpy(out.data(), dout, ROWS * 4, cudaMemcpyDeviceToHost));
    err[way] = 0.0;
    for (int j = 0; j < ROWS; ++j) {
      double ref = 0.0, mag = 0.0;
      for (int k = 0; k < K; ++k) {
        const double wv = way == 0 ? weight_tile_major(hw, j, k, K)
                          : way == 1 ? weight_row_major(hw, j, k, K) : weight_swizzled(hw, j, k, K);
        ref += wv * made_x(k);
        mag += std::fabs(wv * made_x(k));
      }
      err[way] = std::max(err[way], std::fabs(out[j] - ref) / mag);
    }
  }
  printf("%-26s K %5d rows %3d | mma %7.1f GB/s an SM, err %.1e | fma %7.1f GB/s an SM, err %.1e | mma/fma %.2fx"
         " | swizzled mma %7.1f, err %.1e, %.2fx\n", what, K, ROWS, gbs[0], err[0], gbs[1], err[1], gbs[0] / gbs[1],
         gbs[2], err[2], gbs[2] / gbs[1]);
}

int main() {
  std::vector<__nv_bfloat16> hw(BUF / 2);
  unsigned s = 12345u;
  for (auto& v : hw) {
    s = s * 1664525u + 1013904223u;
    v = __float2bfloat16((float)((s >> 8) & 0xffff) / 65536.f - 0.5f);
  }
  __nv_bfloat16* dw;
  float* dout;
  CHECK(cudaMalloc(&dw, BUF));
  CHECK(cudaMalloc(&dout, 2 * MAX_ROWS * 4));
  CHECK(cudaMemcpy(dw, hw.data(), BUF, cudaMemcpyHostToDevice));
  int sms;  // a block an SM
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  run<2048, 16>("llama-1b O tile", sms, dw, hw, dout);
  run<2048, 32>("llama-1b QKV tile (24)", sms, dw, hw, dout);
  run<2048, 64>("llama-1b gate/up (62x2)", sms, dw, hw, dout);
  run<8192, 16>("llama-1b down (15.5)", sms, dw, hw, dout);
  run<576, 16>("smollm2 QKV (7.3) / O", sms, dw, hw, dout);
  run<4096, 32>("llama-8b QKV/O tile", sms, dw, hw, dout);
  return 0;
}
