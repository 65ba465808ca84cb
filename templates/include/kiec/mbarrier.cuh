// Shared-memory barriers (mbarrier), 16-byte shared loads, TMA bulk copies and how a ring page is cut into items:
// the persistent kernel's weight ring (ring.cuh), its tiles' waits (persistent_tile.cuh) and the device benchmarks
// (bench/) use them. No persistent ABI here.
#pragma once
#include "common.cuh"

namespace kiec {

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ bool mbar_test(unsigned long long* bar, unsigned parity) {
  unsigned ok;
  asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
               : "=r"(ok) : "r"(smem_addr(bar)), "r"(parity) : "memory");
  return ok;
}

// Whether the phase has completed, without waiting at all (try_wait above may suspend the thread for a while
// first: fine in a spin loop, not for a look).
__device__ __forceinline__ bool mbar_done(unsigned long long* bar, unsigned parity) {
  unsigned ok;
  asm volatile("{\n .reg .pred p;\n mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
               : "=r"(ok) : "r"(smem_addr(bar)), "r"(parity) : "memory");
  return ok;
}

__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
  while (!mbar_test(bar, parity)) {}
}

__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_expect(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

// One 16-byte shared-memory load: a plain dereference of a page's uint4 let nvcc split it into eight 2-byte loads
// (SASS; 2-byte loads at a 16-byte lane stride conflict 8 ways by the bank arithmetic). volatile keeps it after
// the page's mbarrier wait.
__device__ __forceinline__ uint4 lds128(const void* p) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(smem_addr(p)));
  return v;
}

// `bytes` (a multiple of 16) from global src to shared dst; bar's transaction count drops by them on arrival.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, unsigned long long* bar,
                                          unsigned long long policy) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
               " [%0], [%1], %2, [%3], %4;"
               ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(policy) : "memory");
}

// An L2 cache policy for data read once: first out of L2 (the bulk copies' hint).
__device__ __forceinline__ unsigned long long evict_first_policy() {
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// The same with the default priority (bench/stream_rate.cu compares the two; persist_evict_first picks).
__device__ __forceinline__ unsigned long long evict_normal_policy() {
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// How a page is cut into items: a GEMV share's items are (row, K segment) of item_bytes each, in memory order,
// so a run of them is one contiguous copy; paired (SiLU-mul's gate and up rows, attention's K and V rows), a page
// holds the items of the first kind and then as many of the second.
__host__ __device__ constexpr int items_per_page(int page_bytes, int item_bytes, bool paired) {
  return page_bytes / (item_bytes * (paired ? 2 : 1));
}

}  // namespace kiec
