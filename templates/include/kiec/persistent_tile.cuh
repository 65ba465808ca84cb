// What every persistent tile shares (persistent.cuh): waiting on the phase counters it depends on, signalling its
// own, and the in-kernel trace (kiec_trace).
#pragma once
#include "mbarrier.cuh"
#include "persistent_args.cuh"

namespace kiec {

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// kiec_trace's recording (TRACE_SLOTS in persistent_abi.h) of one step: thread 0 of it writes it
__device__ __forceinline__ bool traced_step(const Turn& u) { return u.a->trace && u.pos == u.a->trace_pos; }
__device__ __forceinline__ bool tracing(const Turn& u) { return traced_step(u) && threadIdx.x == 0; }

__device__ __forceinline__ unsigned long long* trace_row(const Turn& u) {
  return u.a->trace + (u.ins - u.a->instrs) * TRACE_SLOTS;
}

// A timestamp (TR_START, TR_READY, TR_X_READY, TR_SUMS_DONE, TR_DONE); the SM cycles from start to done ride
// along.
__device__ __forceinline__ void trace(const Turn& u, TraceSlot what) {
  if (!tracing(u)) return;
  unsigned long long* row = trace_row(u);
  row[what] = global_ns();
  if (what == TR_START) row[TR_CYCLES] = clock64();
  if (what == TR_DONE) row[TR_CYCLES] = clock64() - row[TR_CYCLES];
}

// Every thread calls it. Thread 0 spins until each counter the instruction waits on reaches this token's
// target (tiles * (t + 1), or tiles * t on the previous token's run); false when the generation ended first
// (looked at every KIEC_STOP_POLL_EVERY polls: each look is one more load in the spin).
#ifndef KIEC_STOP_POLL_EVERY
#define KIEC_STOP_POLL_EVERY 1
#endif
__device__ __forceinline__ bool wait_inputs(const Turn& u) {
  __shared__ int go;
  if (threadIdx.x == 0) {
    int ok = 1;
    const int n = u.ins->n_waits;
    for (int i = 0; i < n && ok; ++i) {
      const Wait w = u.ins->waits[i];
      const unsigned target = w.tiles * (unsigned)(u.t + 1 - w.previous);
      for (unsigned spins = 1; ld_acquire(u.a->counters + w.counter * u.a->counter_stride) < target; ++spins)
        if (spins % KIEC_STOP_POLL_EVERY == 0 && *(volatile int*)u.a->stop_pos <= u.pos) { ok = 0; break; }
    }
    go = ok;
  }
  trace(u, TR_READY);
  sync_block();
  return go;
}

// *p += 1 after every write this thread has seen: a release add, lighter than a full fence and a relaxed add.
__device__ __forceinline__ void red_release(unsigned* p) {
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p) : "memory");
}

// KIEC_SIGNAL_SLOTS > 0: thread 0 hands a finished tile's counter to the signalling thread (signal_loop, in the
// streaming warpgroup) through a mailbox of that many slots and goes on to the next tile; the release add stalls
// that thread instead (a release waits until the block's writes are acknowledged: while every SM streams weights,
// microseconds; bench/hop_latency.cu). 0: thread 0 releases the counter itself. Measured 2026-11-30 with 8 slots:
// llama-3.2-1b 0.818 vs 0.822 ms, smollm2-135m 0.589 vs 0.572 (the hand-over lengthens every hop of the chain).
#ifndef KIEC_SIGNAL_SLOTS
#define KIEC_SIGNAL_SLOTS 0
#endif
#if KIEC_SIGNAL_SLOTS > 0
struct SignalBox {
  unsigned long long full[KIEC_SIGNAL_SLOTS];   // thread 0 put a counter in the slot (one arrival)
  unsigned long long empty[KIEC_SIGNAL_SLOTS];  // the signalling thread released it (one arrival)
  unsigned* counter[KIEC_SIGNAL_SLOTS];
  unsigned handed;  // thread 0's count of counters handed over
  // Thread 0, before the block's first barrier (ring.init's fence then covers these barriers too).
  __device__ __forceinline__ void init() {
    for (int s = 0; s < KIEC_SIGNAL_SLOTS; ++s) {
      mbar_init(full + s, 1);
      mbar_init(empty + s, 1);
    }
    handed = 0;
  }
};
__shared__ SignalBox signal_box;

// Thread 0: the counter into the mailbox's next slot, or, while the signalling thread has not released that slot
// yet, released here (the counters' order does not matter; a loop waiting for the slot made ptxas spill 76 B on
// llama-3.2-1b with persist_attn_early_kv).
__device__ __forceinline__ void hand_over(unsigned* counter) {
  SignalBox& box = signal_box;
  const unsigned k = box.handed, s = k % KIEC_SIGNAL_SLOTS;
  if (k >= KIEC_SIGNAL_SLOTS && !mbar_test(box.empty + s, (k / KIEC_SIGNAL_SLOTS - 1) & 1)) {
    red_release(counter);
    return;
  }
  box.handed = k + 1;
  box.counter[s] = counter;
  mbar_arrive(box.full + s);
}
#endif

// *p += 1, ordered with nothing: a count no data rides on.
__device__ __forceinline__ void red_relaxed(unsigned* p) {
  asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;" ::"l"(p) : "memory");
}

// The tile is done: every thread's writes are ordered before the counter moves (the barrier orders them before
// thread 0's release, or before its mbarrier arrival, a release in the block, that the signalling thread's
// acquire and then its own release at GPU scope carry on).
__device__ __forceinline__ void signal_done(const Turn& u) {
  sync_block();
  if (threadIdx.x == 0) {
    unsigned* counter = u.a->counters + u.ins->counter * u.a->counter_stride;
#if KIEC_SIGNAL_SLOTS > 0
    hand_over(counter);
#else
    red_release(counter);
#endif
  }
  trace(u, TR_DONE);
}

#if KIEC_SIGNAL_SLOTS > 0
// Thread 0, once the compute warps are done: no counter (the signalling thread's cue to return), waiting for a
// free slot.
__device__ __forceinline__ void hand_over_last() {
  SignalBox& box = signal_box;
  const unsigned k = box.handed, s = k % KIEC_SIGNAL_SLOTS;
  if (k >= KIEC_SIGNAL_SLOTS) mbar_wait(box.empty + s, (k / KIEC_SIGNAL_SLOTS - 1) & 1);
  box.counter[s] = nullptr;
  mbar_arrive(box.full + s);
}

// The signalling thread: the release adds thread 0 handed over, in order, until it hands over no counter.
__device__ void signal_loop() {
  SignalBox& box = signal_box;
  for (unsigned k = 0;; ++k) {
    const unsigned s = k % KIEC_SIGNAL_SLOTS;
    mbar_wait(box.full + s, (k / KIEC_SIGNAL_SLOTS) & 1);
    unsigned* counter = box.counter[s];
    if (!counter) return;
    red_release(counter);
    mbar_arrive(box.empty + s);
  }
}
#endif

}  // namespace kiec
