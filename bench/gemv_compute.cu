// How fast the persistent kernel's compute warps get through GEMV weight pages that are already in shared memory:
// the real tile loop (persistent.cuh's gemv_pages, its dot products and warp sums, the ring's mbarriers), with a
// producer that marks each page full at once (no TMA, no HBM). One block per SM, 8 compute warps and the kernel's
// 4-warp streaming warpgroup (one thread of it the producer; the same launch bounds, so the same register budget);
// each shape is a share of 64 output rows (or as few as a llama-3.2-1b QKV or O tile has) run back to back. Prints
// GB/s of weights an SM and over the GPU: to keep up with the memory, an SM must beat its share of the read ceiling
// (4.6 TB/s / 132 = 35 GB/s) by enough to catch up after every wait. `TMA busy`: the same while another thread of
// the streaming warpgroup copies HBM into the ring's pages with TMA bulk copies, 4 pages in flight, as the
// kernel's weight stream does while a tile computes on resident pages (they land in pages the warps are reading:
// the values are made up anyway, the shared memory's traffic is what counts); prints the TB/s the copies moved. At
// 5d40942, copies at 4.61-4.72 TB/s slowed the shares 2-4% (1B QKV 24 rows 57.3 vs 58.9 GB/s an SM).
// `code cold`: each share timed alone after the compute warps ran 256 KB of other code (a chain of FMAs), so the
// tile's own code comes from L2 again, as in the persistent kernel, where a layer's dispatch cases are ~130 KB
// (scripts/code_size.py); `code warm`: the same timing without the other code. The difference is what refetching
// a GEMV tile's loop costs a phase on an otherwise quiet GPU: at 236e4bf ~0.1 us a share (1B QKV 24 rows 1.80 vs
// 1.70 us, O 16 rows 1.27 vs 1.17, smollm2 8 rows 0.46 vs 0.36), and 0.9 us on a 1B gate/up share (8.89 vs 7.98).
// `timed (traced)`: code warm with gemv_pages' traced-step path (every thread reads clock64 around each page wait):
// whether a traced step's dots are slower than an untraced one's (the eighth session's trace gave llama-3.2-1b's
// QKV and O tiles 3.2 and 2.35 us of dots, where the tenth session's twice probe says a second copy of them adds
// 0.5 us a layer untraced). `globaltimer`: the trace's clock (%globaltimer) read back to back by one thread: the
// smallest and the median step between two reads that differ, and SM cycles a read. `barrier looks`: SM cycles an
// mbarrier look at a completed phase costs one thread (barrier_looks).
// smollm2-135m's 12-row gate/up tile warm and cold and timed: the share the traces call slowest for its bytes.
// KIEC_CODE_TABLE=1 (COMPUTE=code): only the code table: short shares (smollm2-135m's, llama-3.2-1b's QKV and output
// projection tiles) with their code warm and cold, each also while every SM's HBM stream copies meanwhile (`busy`, as
// `TMA busy` above), cold after 32 to 256 KB of other code. Why: the traces' tiles spend 0.5-0.8 us from x ready to
// their sums with at most one item a warp (smollm2-135m, sixty-ninth session), where this bench, with L2 idle, puts
// a cold share ~0.1 us behind a warm one (0.46 vs 0.36 us, smollm2's 8 rows). The kernel fetches each phase's code
// while its weight stream keeps L2 and HBM busy: if a refetch costs more then, `cold, busy` shows it, and the other
// code's size at which `cold` starts to cost says how much code an SM keeps (a layer's path is 79 KB on smollm2-135m,
// scripts/code_size.py).
// `U n` in a line: the items a warp takes at once there (persist_dot_items, -DKIEC_DOT_ITEMS; gemv_pages_items).
// Build (on the GPU machine; DIR holds persistent_abi.h, B the warp-sum batch, U the items at once):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I templates/include -I DIR -DKIEC_COMPUTE_THREADS=256
//        -DKIEC_REDUCE_BATCH=B -DKIEC_DOT_ITEMS=U bench/gemv_compute.cu -o /tmp/gemv_compute_B
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>

#include <algorithm>
#include <vector>

#include "persistent_abi.h"
#include "kiec/persistent.cuh"
#include "bench_common.cuh"

constexpr int WARPS = 8, STAGES = 12, PAGE = 16 << 10, REPS = 400;
using R = kiec::Ring<STAGES, PAGE>;
using T = __nv_bfloat16;

// What a page costs without parts of the tile's work, for comparison (the same pages, barriers and item deal as
// gemv_pages): LOADS reads each item's 16-byte chunks and folds the bits (no math), DOTS also widens and multiplies
// (dot_lanes) but keeps a running sum per lane instead of summing each item over the warp.
enum Variant { TILE = 0, LOADS = 1, DOTS = 2, TILE_BUSY = 3, TILE_WARM = 4, TILE_COLD = 5, TILE_TIMED = 6,
               TILE_WARM_BUSY = 7, TILE_COLD_BUSY = 8 };
// Whether a variant runs the kernel's tile loop (gemv_pages), not pages_without's parts of it.
__host__ __device__ constexpr bool runs_tile(int variant) {
  return variant == TILE || variant == TILE_BUSY || variant >= TILE_WARM;
}
// Whether a variant's SM streams HBM into its ring meanwhile (stream_pages), and whether it runs other code first.
__host__ __device__ constexpr bool streams(int variant) {
  return variant == TILE_BUSY || variant == TILE_WARM_BUSY || variant == TILE_COLD_BUSY;
}
__host__ __device__ constexpr bool cold(int variant) { return variant == TILE_COLD || variant == TILE_COLD_BUSY; }
constexpr int BUSY_INFLIGHT = 4;  // the busy copies' pages in flight (stream_pages, bench_common.cuh)

// KB x 64 dependent FMAs (KB KB of code: a SASS instruction is 16 bytes; 256, more than the SM's instruction caches
// hold): run before a `code cold` share, called through a pointer the compiler cannot follow (other_code_at), so that
// it stays a call. (Up to 20ec5fe it was inlined, so the share's code came right after it in the instruction
// stream, where the fetch may run ahead into it while the FMAs run: the kernel's phases start by a jump.)
#define KIEC_FMA1 "fma.rn.f32 %0, %0, %1, %0;\n"
#define KIEC_FMA4 KIEC_FMA1 KIEC_FMA1 KIEC_FMA1 KIEC_FMA1
#define KIEC_FMA16 KIEC_FMA4 KIEC_FMA4 KIEC_FMA4 KIEC_FMA4
#define KIEC_FMA64 KIEC_FMA16 KIEC_FMA16 KIEC_FMA16 KIEC_FMA16
template <int KB>
__device__ __noinline__ float other_code(float a) {
#pragma unroll
  for (int i = 0; i < KB; ++i) asm volatile(KIEC_FMA64 : "+f"(a) : "f"(0.999f));
  return a;
}
using OtherCode = float (*)(float);
// other_code<KB>'s address, hidden from the compiler (an asm that may change it), so that calling it is an indirect
// call it cannot inline
template <int KB>
__device__ __forceinline__ OtherCode other_code_at() {
  OtherCode f = other_code<KB>;
  asm volatile("" : "+l"(f));
  return f;
}

template <typename G, int SEGS, int VARIANT>
__device__ __forceinline__ float pages_without(R& ring, int items, const float (&xr)[G::ROUNDS][8]) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int pages = (items + G::PER_PAGE - 1) / G::PER_PAGE;
  float run = 0.f;
  unsigned bits = 0;
  for (int p = 0; p < pages; ++p) {
    const char* page = ring.next_page();
    const int first = p * G::PER_PAGE, n = min(G::PER_PAGE, items - first);
    for (int j = (warp - first % WARPS + WARPS) % WARPS; j < n; j += WARPS) {
      const char* w0 = page + j * G::ITEM;
      const char* w1 = page + (G::PER_PAGE + j) * G::ITEM;
      if (VARIANT == LOADS) {
#pragma unroll
        for (int v = 0; v < G::ROUNDS; ++v) {
          const int c = v * 32 + lane;
          if (G::SEGC % 32 == 0 || c < G::SEGC) {
            const uint4 a = kiec::lds128(w0 + c * 16);
            bits ^= a.x ^ a.y ^ a.z ^ a.w;
            if (G::SILU) {
              const uint4 b = kiec::lds128(w1 + c * 16);
              bits ^= b.x ^ b.y ^ b.z ^ b.w;
            }
          }
        }
      } else {
        float a0, a1;
        kiec::dot_lanes<T, G>(w0, w1, xr, lane, a0, a1);
        run += a0 + a1;
      }
    }
    ring.release();
  }
  return run + __uint_as_float(bits & 0x007fffffu);
}

template <typename G, int SEGS, int VARIANT, int CODE_KB>
__global__ void __launch_bounds__((WARPS + kiec::STREAM_WARPS) * 32, 1) consume(unsigned long long* ns, float* sink,
                                                                                int rows, const char* busy,
                                                                                unsigned long long* moved) {
  extern __shared__ __align__(128) char smem_raw[];
  __shared__ unsigned long long busy_bars[2 * STAGES];  // TILE_BUSY: the copies' ring, on the same pages
  __shared__ volatile int done;
  R ring;
  float* acc = reinterpret_cast<float*>(ring.carve(smem_raw));  // ROWS_PER_OUT x rows x SEGS
  T* w = reinterpret_cast<T*>(ring.pages);
  for (int i = threadIdx.x; i < STAGES * PAGE / 2; i += blockDim.x) w[i] = __float2bfloat16(1e-3f * (i % 97));
  R busy_ring = ring;
  busy_ring.full = busy_bars;
  busy_ring.empty = busy_bars + STAGES;  // unused: stream_pages reuses a page once it landed
  if (threadIdx.x == 0) {
    busy_ring.init(1);
    done = 0;
    ring.init(WARPS * 32);
  }
  __syncthreads();
  if (streams(VARIANT) && threadIdx.x == WARPS * 32 + 32) {
    stream_pages(busy_ring, busy + (size_t)blockIdx.x * STREAM_REGION_BYTES, &done, moved, BUSY_INFLIGHT);
    return;
  }
  const int items = rows * SEGS, pages = (items + G::PER_PAGE - 1) / G::PER_PAGE;
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
  made_up_x<G>(xr);
  kiec::sync_block();
  const unsigned long long t0 = kiec::global_ns();
  float keep = 0.f;
  unsigned long long spans = 0;  // TILE_WARM, TILE_COLD: the shares' own time
  for (int r = 0; r < REPS; ++r) {
    unsigned long long s0 = 0;
    if (cold(VARIANT)) keep += other_code_at<CODE_KB>()(keep);
    if (VARIANT >= TILE_WARM) {
      kiec::sync_block();
      s0 = kiec::global_ns();
    }
    if (runs_tile(VARIANT))  // TILE_TIMED: a traced step's page waits
      kiec::gemv_pages<T, G, WARPS, SEGS>(ring, items, xr, acc, VARIANT == TILE_TIMED);
    else
      keep += pages_without<G, SEGS, VARIANT>(ring, items, xr);
    kiec::sync_block();
    if (VARIANT >= TILE_WARM) spans += kiec::global_ns() - s0;
  }
  const unsigned long long t1 = kiec::global_ns();
  if (threadIdx.x == 0) {
    ns[blockIdx.x] = VARIANT >= TILE_WARM ? spans : t1 - t0;
    done = 1;
  }
  if (threadIdx.x == 0 || keep == 1.2345f) sink[blockIdx.x] = acc[0] + keep;  // nothing computed is dead
}

// The trace's clock: one thread reads %globaltimer N times back to back (out[i]), and the SM cycles it took.
__global__ void timer_reads(unsigned long long* out, int n, long long* cycles) {
  const long long c0 = clock64();
  for (int i = 0; i < n; ++i) out[i] = kiec::global_ns();
  *cycles = clock64() - c0;
}

[[maybe_unused]] static void globaltimer() {  // (run with the parts: batch 1)
  constexpr int N = 4096;
  unsigned long long* d;
  long long* c;
  CHECK(cudaMalloc(&d, N * sizeof *d));
  CHECK(cudaMalloc(&c, sizeof *c));
  timer_reads<<<1, 1>>>(d, N, c);  // warm-up
  timer_reads<<<1, 1>>>(d, N, c);
  std::vector<unsigned long long> h(N);
  long long cycles = 0;
  CHECK(cudaMemcpy(h.data(), d, N * sizeof *d, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&cycles, c, sizeof cycles, cudaMemcpyDeviceToHost));
  std::vector<unsigned long long> steps;
  for (int i = 1; i < N; ++i)
    if (h[i] != h[i - 1]) steps.push_back(h[i] - h[i - 1]);
  std::sort(steps.begin(), steps.end());
  printf("globaltimer: %d reads, %zu changes; step min %llu ns, median %llu ns; %.1f SM cycles a read (with its "
         "store)\n", N, steps.size(), steps.empty() ? 0ull : steps[0],
         steps.empty() ? 0ull : steps[steps.size() / 2], (double)cycles / N);
  CHECK(cudaFree(d));
  CHECK(cudaFree(c));
}

// What looking at a landed page's barrier costs a thread (the traces' ~0.12 us a page, thirty-first session): one
// warp, SM cycles a look, N looks one after another, each look's barrier picked by the previous one's answer (so
// they cannot overlap): mbarrier test_wait (the trace's landed count), try_wait (the GEMV's page wait), the ring's
// count landed_in_order over all its pages, all found complete; and the same chain with an integer test instead of
// a barrier.
// One thread's count of the ring's landed pages, a look after another (the trace's count before 6a42600; now
// Ring::landed_warp's).
__device__ int landed_in_order(const R& ring, int upto) {
  int n = 0;
  for (; n < upto && n < R::STAGES; ++n)
    if (!ring.landed_at(n)) break;
  return n;
}

__global__ void barrier_looks(long long* cycles, int n) {
  __shared__ unsigned long long bars[2];
  __shared__ __align__(128) char ring_head[R::HEAD];  // the ring's barriers: its pages are never read here
  R ring;
  ring.carve(ring_head);
  if (threadIdx.x == 0) {
    kiec::mbar_init(bars, 1);
    kiec::mbar_init(bars + 1, 1);
    ring.init(1);
  }
  __syncwarp();
  if (threadIdx.x == 0) {
    kiec::mbar_arrive(bars);  // bars[0]: phase 0 complete; bars[1] never
    for (int s = 0; s < STAGES; ++s) kiec::mbar_arrive(ring.full + s);
  }
  __syncwarp();
  int at = 0;
  long long c0 = clock64();
  for (int i = 0; i < n; ++i) at = kiec::mbar_done(bars + at, 0) ? 0 : 1;
  long long c1 = clock64();
  for (int i = 0; i < n; ++i) at = kiec::mbar_test(bars + at, 0) ? 0 : 1;
  long long c2 = clock64();
  int pages = 0;
  for (int i = 0; i < n / STAGES; ++i) pages += landed_in_order(ring, STAGES - (at & 1));
  long long c3 = clock64();
  volatile int flag = 1;
  for (int i = 0; i < n; ++i) at = (flag + at) & 1 ? 0 : 1;
  long long c4 = clock64();
  if (threadIdx.x == 0) {
    cycles[0] = c1 - c0;
    cycles[1] = c2 - c1;
    cycles[2] = c3 - c2;
    cycles[3] = c4 - c3;
    cycles[4] = at + pages;
  }
}

static void barrier_look_costs() {
  const int n = 4096;
  long long* d;
  CHECK(cudaMalloc(&d, 5 * sizeof *d));
  barrier_looks<<<1, 32>>>(d, n);  // warm-up
  barrier_looks<<<1, 32>>>(d, n);
  CHECK(cudaDeviceSynchronize());
  long long h[5];
  CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
  CHECK(cudaFree(d));
  printf("barrier looks, SM cycles a look (%d in a chain): test_wait %.1f, try_wait %.1f, landed_in_order %.1f a "
         "page, an integer test %.1f\n", n, (double)h[0] / n, (double)h[1] / n, (double)h[2] / (n / STAGES * STAGES),
         (double)h[3] / n);
}

// A share of `rows` outputs (64: a long share's rate; llama-3.2-1b's QKV tile has 24, its output projection's 16)
template <int K, int EPI, int SEGS, int VARIANT = TILE, int CODE_KB = 256>
static void run(const char* name, int sms, int rows = 64, const char* busy = nullptr,
                unsigned long long* moved = nullptr) {
  using G = kiec::GemvShape<T, K, WARPS, EPI, SEGS, PAGE>;
  const size_t smem = R::BYTES + (size_t)G::ROWS_PER_OUT * rows * SEGS * 4;
  CHECK(cudaFuncSetAttribute(consume<G, SEGS, VARIANT, CODE_KB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem));
  unsigned long long* ns;
  float* sink;
  CHECK(cudaMalloc(&ns, sms * sizeof *ns));
  CHECK(cudaMalloc(&sink, sms * sizeof *sink));
  constexpr int threads = (WARPS + kiec::STREAM_WARPS) * 32;
  consume<G, SEGS, VARIANT, CODE_KB><<<sms, threads, smem>>>(ns, sink, rows, busy, moved);  // warm-up
  if (moved) CHECK(cudaMemset(moved, 0, sizeof *moved));
  cudaEvent_t a, e;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&e));
  CHECK(cudaEventRecord(a));
  consume<G, SEGS, VARIANT, CODE_KB><<<sms, threads, smem>>>(ns, sink, rows, busy, moved);
  CHECK(cudaEventRecord(e));
  CHECK(cudaDeviceSynchronize());
  float ms;
  CHECK(cudaEventElapsedTime(&ms, a, e));
  unsigned long long copied = 0;
  if (moved) CHECK(cudaMemcpy(&copied, moved, sizeof copied, cudaMemcpyDeviceToHost));
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(e));
  std::vector<unsigned long long> h(sms);
  CHECK(cudaMemcpy(h.data(), ns, sms * sizeof *ns, cudaMemcpyDeviceToHost));
  std::sort(h.begin(), h.end());
  const double bytes = (double)REPS * rows * G::ROWS_PER_OUT * K * sizeof(T);
  const double med = bytes / h[sms / 2], slow = bytes / h[sms - 1];  // bytes per ns = GB/s
  const char* what[] = {"tile", "loads only", "dots, no sums", "tile, TMA busy", "code warm", "code cold",
                        "timed (traced)", "code warm, busy", "code cold, busy"};
  constexpr int U = kiec::items_at_once(KIEC_DOT_ITEMS, G::PER_PAGE, WARPS, STAGES, G::ROUNDS, KIEC_DOT_ITEM_CHUNKS);
  printf("%-26s %-14s K %5d  segs %d  rounds %d  rows %2d  B %2d  U %d  %7.1f GB/s an SM (slowest %6.1f)  %6.2f "
         "TB/s over %d SMs", name, what[VARIANT], K, SEGS, G::ROUNDS, rows, KIEC_REDUCE_BATCH,
         runs_tile(VARIANT) ? U : 1, med, slow, slow * sms / 1e3, sms);
  if (VARIANT >= TILE_WARM) printf("; %.2f us a share (median SM)", h[sms / 2] / 1e3 / REPS);
  if (cold(VARIANT)) printf(", after %d KB of other code", CODE_KB);
  if (moved) printf("; the copies %.2f TB/s", copied / (ms * 1e-3) / 1e12);  // (over the launch, a bound from below)
  printf("\n");
  CHECK(cudaFree(ns));
  CHECK(cudaFree(sink));
}

// The busy variants' HBM: each SM's region that stream_pages goes round (bf16 0x3c3c: 0.0115, finite) and the count
// of bytes it moved; freed when it goes out of scope.
struct BusyRegion {
  char* busy = nullptr;
  unsigned long long* moved = nullptr;
  explicit BusyRegion(int sms) {
    CHECK(cudaMalloc(&busy, (size_t)sms * STREAM_REGION_BYTES));
    CHECK(cudaMemset(busy, 0x3c, (size_t)sms * STREAM_REGION_BYTES));
    CHECK(cudaMalloc(&moved, sizeof *moved));
  }
  ~BusyRegion() {
    CHECK(cudaFree(busy));
    CHECK(cudaFree(moved));
  }
};

#ifndef KIEC_CODE_TABLE
#define KIEC_CODE_TABLE 0
#endif
// A short share (K, EPI, SEGS, `rows`) warm and cold, alone and with every SM's HBM stream busy (the code table).
template <int K, int EPI, int SEGS>
static void code_rows(const char* name, int sms, int rows, const char* busy, unsigned long long* moved) {
  run<K, EPI, SEGS, TILE_WARM>(name, sms, rows);
  run<K, EPI, SEGS, TILE_COLD, 256>(name, sms, rows);
  run<K, EPI, SEGS, TILE_WARM_BUSY>(name, sms, rows, busy, moved);
  run<K, EPI, SEGS, TILE_COLD_BUSY, 32>(name, sms, rows, busy, moved);
  run<K, EPI, SEGS, TILE_COLD_BUSY, 64>(name, sms, rows, busy, moved);
  run<K, EPI, SEGS, TILE_COLD_BUSY, 128>(name, sms, rows, busy, moved);
  run<K, EPI, SEGS, TILE_COLD_BUSY, 256>(name, sms, rows, busy, moved);
}

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
#if KIEC_CODE_TABLE
  {
    const BusyRegion b(sms);
    code_rows<576, kiec::EPI_STORE, 1>("smollm2 QKV/O (8 rows)", sms, 8, b.busy, b.moved);
    code_rows<576, kiec::EPI_SILU_MUL, 1>("smollm2 gate/up (12 rows)", sms, 12, b.busy, b.moved);
    code_rows<2048, kiec::EPI_STORE, 2>("llama-1b QKV tile (24 rows)", sms, 24, b.busy, b.moved);
    code_rows<2048, kiec::EPI_STORE, 2>("llama-1b O tile (16 rows)", sms, 16, b.busy, b.moved);
  }
  return 0;
#endif
#if KIEC_REDUCE_BATCH == 1  // the parts, once
  run<2048, kiec::EPI_STORE, 2, LOADS>("llama-1b QKV/O (K 2048)", sms);
  run<2048, kiec::EPI_STORE, 2, DOTS>("llama-1b QKV/O (K 2048)", sms);
  run<2048, kiec::EPI_SILU_MUL, 2, LOADS>("llama-1b gate/up", sms);
  run<2048, kiec::EPI_SILU_MUL, 2, DOTS>("llama-1b gate/up", sms);
#endif
  run<576, kiec::EPI_STORE, 1>("smollm2 QKV/O (K 576)", sms);
  run<576, kiec::EPI_SILU_MUL, 1>("smollm2 gate/up", sms);
  run<2048, kiec::EPI_STORE, 2>("llama-1b QKV/O (K 2048)", sms);
  run<2048, kiec::EPI_STORE, 2>("llama-1b QKV tile (24 rows)", sms, 24);  // a share as short as the kernel's
  run<2048, kiec::EPI_STORE, 2>("llama-1b O tile (16 rows)", sms, 16);
  run<2048, kiec::EPI_SILU_MUL, 2>("llama-1b gate/up", sms);
  run<8192, kiec::EPI_STORE, 8>("llama-1b down (K 8192)", sms);
  run<14336, kiec::EPI_STORE, 8>("llama-8b down (K 14336)", sms);
#if KIEC_REDUCE_BATCH == 1  // the kernel's tiles while its weight stream copies meanwhile
  {
    const BusyRegion b(sms);
    run<576, kiec::EPI_STORE, 1, TILE_BUSY>("smollm2 QKV/O (K 576)", sms, 64, b.busy, b.moved);
    run<2048, kiec::EPI_STORE, 2, TILE_BUSY>("llama-1b QKV/O (K 2048)", sms, 64, b.busy, b.moved);
    run<2048, kiec::EPI_STORE, 2, TILE_BUSY>("llama-1b QKV tile (24 rows)", sms, 24, b.busy, b.moved);
    run<2048, kiec::EPI_STORE, 2, TILE_BUSY>("llama-1b O tile (16 rows)", sms, 16, b.busy, b.moved);
    run<2048, kiec::EPI_SILU_MUL, 2, TILE_BUSY>("llama-1b gate/up", sms, 64, b.busy, b.moved);
  }
  // a share's code fetched again before each (the persistent kernel's phases) against kept hot
  run<2048, kiec::EPI_STORE, 2, TILE_WARM>("llama-1b QKV tile (24 rows)", sms, 24);
  run<2048, kiec::EPI_STORE, 2, TILE_COLD>("llama-1b QKV tile (24 rows)", sms, 24);
  run<2048, kiec::EPI_STORE, 2, TILE_WARM>("llama-1b O tile (16 rows)", sms, 16);
  run<2048, kiec::EPI_STORE, 2, TILE_COLD>("llama-1b O tile (16 rows)", sms, 16);
  run<576, kiec::EPI_STORE, 1, TILE_WARM>("smollm2 QKV/O (K 576)", sms, 8);
  run<576, kiec::EPI_STORE, 1, TILE_COLD>("smollm2 QKV/O (K 576)", sms, 8);
  run<2048, kiec::EPI_SILU_MUL, 2, TILE_WARM>("llama-1b gate/up", sms, 62);
  run<2048, kiec::EPI_SILU_MUL, 2, TILE_COLD>("llama-1b gate/up", sms, 62);
  // smollm2-135m's gate/up tile (1536 outputs over 132 SMs: 12 rows, 2 pages of 7 items), whose dots the traces put
  // at 2.66-2.69 us from x ready to its sums (2026-12-01, seventeenth and nineteenth sessions) against 0.74 for QKV
  run<576, kiec::EPI_SILU_MUL, 1, TILE_WARM>("smollm2 gate/up tile (12 rows)", sms, 12);
  run<576, kiec::EPI_SILU_MUL, 1, TILE_COLD>("smollm2 gate/up tile (12 rows)", sms, 12);
  // the traced step's path against code warm above
  run<2048, kiec::EPI_STORE, 2, TILE_TIMED>("llama-1b QKV tile (24 rows)", sms, 24);
  run<2048, kiec::EPI_STORE, 2, TILE_TIMED>("llama-1b O tile (16 rows)", sms, 16);
  run<576, kiec::EPI_STORE, 1, TILE_TIMED>("smollm2 QKV/O (K 576)", sms, 8);
  run<576, kiec::EPI_SILU_MUL, 1, TILE_TIMED>("smollm2 gate/up tile (12 rows)", sms, 12);
  run<2048, kiec::EPI_SILU_MUL, 2, TILE_TIMED>("llama-1b gate/up", sms, 62);
  globaltimer();
  barrier_look_costs();
#endif
  return 0;
}
