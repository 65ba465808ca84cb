// What every persistent tile shares (persistent.cuh): waiting on the phase counters it depends on, signalling its
// own, and the in-kernel trace (kiec_trace).
#pragma once
#include "mbarrier.cuh"
#include "persistent_args.cuh"

namespace kiec {


// kiec_trace's recording (TRACE_SLOTS in persistent_abi.h) of one step: thread 0 of it writes it
__device__ __forceinline__ bool traced_step(const Turn& u) { return u.traced; }
__device__ __forceinline__ bool tracing(const Turn& u) { return traced_step(u) && threadIdx.x == 0; }

__device__ __forceinline__ unsigned long long* trace_row(const Turn& u) {
  return u.a->trace + u.index * TRACE_SLOTS;
}

// A timestamp (TR_START, TR_READY, TR_X_READY, TR_SUMS_DONE, TR_STORED, TR_DONE: thread 0's view); the SM cycles
// from start to done ride along, the start's kept in shared memory: read back from the recording (global memory) at
// each done, it put a load's round trip before the next tile's start in the traced step. On the SM that ended a GEMV
// phase, its next tile started 0.22-0.42 us after that end in e3615a3's traces and 0.10-0.13 us in f3ab310's
// (`python3 bench/results/2026-11-30g/start_gap.py`; bench/RESULTS.md, twelfth session).
__device__ __forceinline__ long long& trace_start_cycles() {
  __shared__ long long cycles;
  return cycles;
}
__device__ __forceinline__ void trace(const Turn& u, TraceSlot what) {
  if (!tracing(u)) return;
  unsigned long long* row = trace_row(u);
  row[what] = global_ns();
  if (what == TR_START) trace_start_cycles() = clock64();
  if (what == TR_DONE) row[TR_CYCLES] = clock64() - trace_start_cycles();
}

// Every thread calls it. Thread 0 spins until each counter the instruction waits on reaches this token's
// target (tiles * (t + 1), or tiles * t on the previous token's run); false when the generation ended first
// (looked at every KIEC_STOP_POLL_EVERY polls: each look is one more load in the spin).
#ifndef KIEC_STOP_POLL_EVERY
#define KIEC_STOP_POLL_EVERY 1
#endif
// KIEC_POLL_SLEEP_NS > 0: the spinning thread sleeps about that long between two polls of a counter it found short
// (every SM's thread 0 polls the same line while a phase's tiles add to it; one stop-flag load in 64 polls
// instead of every poll measured 0.829 vs 0.840 ms on llama-3.2-1b at 94a9075, bench/RESULTS.md;
// persist_poll_sleep_ns=100: 0.846 vs 0.852 ms there at a9dfdd7).
#ifndef KIEC_POLL_SLEEP_NS
#define KIEC_POLL_SLEEP_NS 0
#endif
#ifndef KIEC_TRACE_CODE  // 0: no step is ever traced (persistent.cuh: persistent_kernel), and none of the code is there
#define KIEC_TRACE_CODE 1
#endif
#ifndef KIEC_TRACE_ATTENTION  // 1: attention splits stamp two more moments of a traced step (persistent.cuh)
#define KIEC_TRACE_ATTENTION 0
#endif
#ifndef KIEC_TRACE_DOTS  // 1: GEMV tiles stamp four more moments of a traced step (persistent_gemv.cuh: gemv_tile)
#define KIEC_TRACE_DOTS 0
#endif
#ifndef KIEC_PROBE_RELAXED_SIGNAL
#define KIEC_PROBE_RELAXED_SIGNAL 0
#endif
#ifndef KIEC_PROBE_WARM_CODE  // 1: a GEMV tile's dry pass over its first page before its wait (persistent_gemv.cuh)
#define KIEC_PROBE_WARM_CODE 0
#endif
// KIEC_WAITS_TOGETHER (persist_waits_together): lane i of warp 0 polls wait i, all of them in one round trip a
// poll, instead of thread 0 polling them one after the other (a round trip each at least: the SM whose tile ended
// the producer's phase, which finds every wait met at once, still paid one round trip per wait before its next
// tile, and the next phase's end often waits on that SM). An acquire by any lane and the block's barrier after it
// order the tile's reads, as thread 0's did.
// `extra` (may be null): one more counter to reach `extra_target` (attention's arrivals with tagged words), polled
// first by thread 0, or with KIEC_WAITS_TOGETHER by the lane after the waits'.
#ifndef KIEC_WAITS_TOGETHER
#define KIEC_WAITS_TOGETHER 0
#endif
#ifndef KIEC_TAGGED  // 1: some values travel as tagged words (persist_tagged)
#define KIEC_TAGGED 0
#endif
// A wait's target this token: tiles * (t + 1), or tiles * t on the previous token's run. With tag waits
// (KIEC_TAG_WAITS) a Wait's `previous` field holds previous in bit 0, late in bit 1 (KIEC_TAG_WAITS 2: the wait
// guards only the tile's writes; wait_inputs leaves it to wait_writes) and its lead above (persistent_abi.py).
__device__ __forceinline__ unsigned wait_target(const Wait& w, int t) {
#if KIEC_TAG_WAITS
  return w.tiles * (unsigned)(t + 1 - (w.previous & 1)) - (w.previous >> 2);
#else
  return w.tiles * (unsigned)(t + 1 - w.previous);
#endif
}
__device__ __forceinline__ bool wait_late(const Wait& w) { return KIEC_TAG_WAITS >= 2 && (w.previous & 2); }

// Thread 0 spins until *counter reaches target: false when the generation ended first (its stop position looked at
// every KIEC_STOP_POLL_EVERY polls).
__device__ __forceinline__ bool spin_until(const unsigned* counter, unsigned target, const Turn& u) {
  for (unsigned spins = 1; ld_acquire(counter) < target; ++spins) {
    // a generation that ended may leave a wait unmet for good (its producer stopped first): every spin looks
    if (spins % KIEC_STOP_POLL_EVERY == 0 && stop_reached(u)) return false;
    if (KIEC_POLL_SLEEP_NS > 0) __nanosleep(KIEC_POLL_SLEEP_NS);
  }
  return true;
}

// A warp's lanes spin each on its counter (none, or met already: `met`) until every lane's has reached its target:
// false once the warp's vote on stopped(spins) says the generation ended first (every lane leaves at once).
// wait_writes' loop; wait_inputs writes the same loop out (a test reads it there).
template <typename Stopped>
__device__ __forceinline__ bool lanes_meet(const unsigned* counter, unsigned target, bool met, Stopped stopped) {
  for (unsigned spins = 1;; ++spins) {
    if (!met) met = ld_acquire(counter) >= target;
    if (__all_sync(0xffffffffu, met)) return true;
    if (__any_sync(0xffffffffu, stopped(spins))) return false;
    if (KIEC_POLL_SLEEP_NS > 0) __nanosleep(KIEC_POLL_SLEEP_NS);
  }
}

// Whether an attention tile of token t waits for the previous step's splits' arrivals on its KV head (`extra`:
// SPLITS x t of them, attention_tile): with tagged words its phase counters move relaxed and carry no cache rows.
__device__ __forceinline__ bool arrivals_waited(int t) { return KIEC_TAGGED && t > 0; }

// `late_seen` (KIEC_TAG_WAITS 2, waits polled together): lane i of warp 0 gets a relaxed load of late wait i's
// counter, issued here and first looked at by wait_writes, so that its round trip passes under the tile's work.
__device__ __forceinline__ bool wait_inputs(const Turn& u, const unsigned* extra = nullptr,
                                            unsigned extra_target = 0, unsigned* late_seen = nullptr) {
  __shared__ int go;
  static_assert(MAX_WAITS < 32, "a lane a wait, and one for `extra`");
  if (KIEC_WAITS_TOGETHER && threadIdx.x < 32) {
    const int n = u.ins->n_waits, lane = threadIdx.x;
    bool met = lane > n || (lane == n && !extra);  // counters only grow: a wait met stays met
    const unsigned* counter = extra;
    unsigned target = extra_target;
    if (lane < n) {
      const Wait w = u.ins->waits[lane];
      counter = u.a->counters + w.counter * u.a->counter_stride;
      target = wait_target(w, u.t);
      if (wait_late(w)) {  // wait_writes' (its load issued now, not waited for)
        met = true;
        if (late_seen) *late_seen = ld_relaxed(counter);
      }
    }
    int ok = 1;
    for (unsigned spins = 1;; ++spins) {
      if (!met) met = ld_acquire(counter) >= target;
      if (__all_sync(0xffffffffu, met)) break;
      if (spins % KIEC_STOP_POLL_EVERY == 0 && __any_sync(0xffffffffu, stop_reached(u))) {
        ok = 0;  // (every lane leaves at once: the warp's vote, not each lane's load)
        break;
      }
      if (KIEC_POLL_SLEEP_NS > 0) __nanosleep(KIEC_POLL_SLEEP_NS);
    }
    if (lane == 0) go = ok;
  } else if (!KIEC_WAITS_TOGETHER && threadIdx.x == 0) {
    int ok = 1;
    const int n = u.ins->n_waits;
    for (int i = extra ? -1 : 0; i < n && ok; ++i) {  // i = -1: `extra`
      const Wait w = i < 0 ? Wait{} : u.ins->waits[i];
      const unsigned* counter = i < 0 ? extra : u.a->counters + w.counter * u.a->counter_stride;
      if (i >= 0 && wait_late(w)) continue;  // (wait_writes')
      ok = spin_until(counter, i < 0 ? extra_target : wait_target(w, u.t), u);
    }
    go = ok;
  }
  trace(u, TR_READY);
  sync_block();
  return go;
}

#if KIEC_TAG_WAITS >= 2
// Every thread calls it before the tile's first write: the late waits (wait_late) met, looked at first in what
// wait_inputs loaded into `late_seen` (lane i of warp 0, late wait i, with KIEC_WAITS_TOGETHER), then polled as
// wait_inputs polls; false when the generation ended first.
__device__ __forceinline__ bool wait_writes(const Turn& u, unsigned late_seen) {
  __shared__ int go;
  if (threadIdx.x < 32) {
    const int n = u.ins->n_waits, lane = threadIdx.x;
    bool met = true;
    const unsigned* counter = nullptr;
    unsigned target = 0;
    if (lane < n && wait_late(u.ins->waits[lane])) {
      const Wait w = u.ins->waits[lane];
      counter = u.a->counters + w.counter * u.a->counter_stride;
      target = wait_target(w, u.t);
      met = KIEC_WAITS_TOGETHER && late_seen >= target;
    }
    const bool ok = lanes_meet(counter, target, met, [&](unsigned spins) {
      return spins % KIEC_STOP_POLL_EVERY == 0 && stop_reached(u);
    });
    if (lane == 0) go = ok;
  }
  sync_block();
  return go;
}
#endif

// ---- tagged words (common.cuh: st_tagged, ld_tagged, tagged_value; KIEC_TAGGED above)

// The full tag phase `phase` of this token writes (a word's upper half): never 0, none an earlier launch wrote.
__device__ __forceinline__ unsigned word_tag(const Turn& u, int phase) {
  return u.a->tag_base + (unsigned)u.t * (unsigned)u.a->phases + (unsigned)phase;
}

// The tag phase `phase` of this token writes.
__device__ __forceinline__ unsigned tag_of(const Turn& u, int phase) {
#if KIEC_TAG_PARITY  // the parity of the slot's write: ((t & W) ^ (k + 1)) & 1 (ir/passes/tags.py: tag_parity)
  const unsigned bits = kiec_tag_parity[phase];
  return (((unsigned)u.t & bits) ^ (bits >> 1)) & 1u;
#else
  return word_tag(u, phase);
#endif
}

// *p += N after every write this thread has seen: a release add, lighter than a full fence and a relaxed add.
template <unsigned N = 1>
__device__ __forceinline__ void red_release(unsigned* p) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "n"(N) : "memory");
}

// The tile is done: every thread's writes are ordered before the counter moves (the barrier orders them before
// thread 0's release). The release waits until the stores are acknowledged: 1.2-1.4 us a GEMV tile in the trace
// (3d07718), on every phase's critical path. KIEC_PROBE_RELAXED_SIGNAL 1 (persist_probe_relaxed_signal) times the
// counter moved without that wait: consumers may then read stale data, so it measures only what a tagged handover
// could win. Handing the release to a thread of the streaming warpgroup through a mailbox measured
// 0.818 vs 0.822 ms on llama-3.2-1b and 0.589 vs 0.572 on smollm2-135m (2026-11-30, bench/RESULTS.md): taken out.
// RELAXED (a tile that writes only tagged words): the counter moves without the wait, a hint that the words are
// worth reading; their tags say when they are there.
template <bool RELAXED = false>
__device__ __forceinline__ void signal_done(const Turn& u) {
  sync_block();
  if (threadIdx.x == 0) {
    unsigned* counter = u.a->counters + u.ins->counter * u.a->counter_stride;
    if (RELAXED || KIEC_PROBE_RELAXED_SIGNAL) {
      asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");  // ordered with nothing
    } else {
      red_release(counter);
    }
  }
  trace(u, TR_DONE);
}

}  // namespace kiec
