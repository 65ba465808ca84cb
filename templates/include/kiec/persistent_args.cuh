// What one launch of the persistent kernel gets (persistent.cuh) and what a tile gets per instruction. The
// instruction and kernel-descriptor formats (Instr, KernelDesc) come from the generated persistent_abi.h.
#pragma once
#include "common.cuh"
#include "device_info.cuh"
#include "item_share.cuh"

namespace kiec {

// Everything a generation needs, passed by value at launch.
struct PersistentArgs {
  const Instr* instrs;        // every SM's list, back to back
  const int* starts;          // SM i runs instrs[starts[i] .. starts[i + 1])
  const KernelDesc* kernels;  // per fused kernel: which tile function, its operands
  unsigned int* counters;     // one per phase, counter_stride apart, zero at launch
  unsigned int* arrivals;     // attention: one per (layer, KV head), its splits' arrivals; zero at launch
  int counter_stride;         // 32: each phase's counter on its own 128-byte line
  const char* weights;
  float* arena;
  char* kv;
  int* tokens;                // prompt, then each chosen token (device)
  int* host_tokens;           // mapped pinned: the token chosen at each position; -2 after the last when stopped
  const volatile int* host_stop;  // mapped pinned: the host sets it to end the generation early
  unsigned long long* argmax; // per position: packed (ordered logit, ~index) of the LM head's maximum, zero at launch
  int* stop_pos;              // positions from here on are not run (EOS or the host's stop)
  int p0, p_end, n_prompt;    // run positions [p0, p_end); tokens[0 .. n_prompt) are the prompt
  Generation gen;             // argmax or the draw; the EOS ids
  unsigned long long* trace;  // null, or TRACE_SLOTS values per instruction (persistent_abi.h) at position
  int trace_pos;              // trace_pos
  unsigned tag_base;          // tagged words (persist_tagged): phase c of token t of this launch writes tag
  int phases;                 // tag_base + t * phases + c; never 0, and no earlier launch's (the host's count)
  unsigned mem_gbps;          // this GPU's peak memory bandwidth, GB/s (memory_peak_gbps; 0: unknown)
};

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// %globaltimer: ns (the trace's clock and the weight stream's pace)
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ unsigned ld_relaxed(const unsigned* p) {  // (no L1 invalidation, no ordering)
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

// One instruction on one token.
struct Turn {
  const Instr* ins;         // the instruction (a->instrs[index], or its copy in shared memory: persist_stage_instrs)
  int t, pos;  // token index in this launch, and its position
  const PersistentArgs* a;
  bool traced;  // the step kiec_trace records: read from `a` once a step, not again after a tile's stores (which
                // may alias it); neutral on the GPU: a9dfdd7, which added it, 0.849 ms on llama-3.2-1b like the
                // 0.848-0.850 of the commits before it in the same bisect (bench/RESULTS.md)
  int index;                // the instruction's place in a->instrs (the trace's row)
  const KernelDesc* desc;   // its kernel's descriptor (a->kernels[ins->kernel], or a copy like ins's)
};

// The place in a->instrs of the instruction `ahead` tiles after instruction i of an SM's list begin .. end, which
// repeats every step: begin + (i - begin + ahead) % (end - begin), by subtraction, not a runtime division (a loop for
// lists shorter than `ahead`; persistent.cuh's InstrStage, tests/cpu/instr_ahead.cu).
__host__ __device__ __forceinline__ int instr_ahead(int begin, int end, int i, int ahead) {
  int at = i + ahead;
  while (at >= end) at -= end - begin;
  return at;
}

// persist_item_shares (KIEC_ITEM_SHARES): a GEMV's shares are dealt to the item (row segment), from segment ins.head of
// row ins.lo to segment ins.tail - 1 of row ins.hi - 1 (0: whole rows at either end; ir/passes/persistent.py:
// gemv_item_shares). Without it every share is whole rows.
#ifndef KIEC_ITEM_SHARES
#define KIEC_ITEM_SHARES 0
#endif
// The items of a GEMV instruction whose rows are `segs` items each (item_share.cuh: item_count).
__host__ __device__ __forceinline__ int share_items(const Instr& ins, int segs) {
  return KIEC_ITEM_SHARES ? item_count(ins.lo, ins.hi, ins.head, ins.tail, segs) : (ins.hi - ins.lo) * segs;
}
// The pages of a tensor-core GEMV instruction (whole 16-row blocks of `ppb` pages; persist_mma_item_shares: from page
// ins.head of its first block to page ins.tail - 1 of its last, 0 whole).
__host__ __device__ __forceinline__ int block_pages(const Instr& ins, int ppb) {
  return (ins.hi - ins.lo) / 16 * ppb - (KIEC_ITEM_SHARES ? ins.head + (ins.tail ? ppb - ins.tail : 0) : 0);
}

// Whether the generation has passed this turn's position: the host's stop, or the end the select tile set, at or
// before it (a volatile load: the host writes it through mapped memory, the select tile from another SM).
__device__ __forceinline__ bool stop_reached(const Turn& u) { return *(volatile const int*)u.a->stop_pos <= u.pos; }

}  // namespace kiec
