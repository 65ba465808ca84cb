// The persistent kernel's weight stream (persistent.cuh): shared-memory pages, their mbarriers, and the thread
// that fills them with TMA bulk copies ahead of the GEMV tiles.
#pragma once
#include "mbarrier.cuh"
#include "persistent_args.cuh"

#ifndef KIEC_WEIGHT_EVICT_FIRST
#define KIEC_WEIGHT_EVICT_FIRST 1
#endif
#ifndef KIEC_WALK_KEPT
#define KIEC_WALK_KEPT 0  // 1: PageWalk keeps a share's walk from the page that entered it (persist_walk_kept)
#endif
#ifndef KIEC_PAGE_PACE_NS
#define KIEC_PAGE_PACE_NS 0  // > 0: the weight stream issues a full page at most this often, ns (persist_page_pace_ns)
#endif
#ifndef KIEC_PACE_REF_GBPS
#define KIEC_PACE_REF_GBPS 0  // > 0: the peak bandwidth the paces were tuned at (persist_pace_ref_gbps)
#endif
#ifndef KIEC_PACE_REF_POWER_PCT
#define KIEC_PACE_REF_POWER_PCT 100  // the peaks' ratio to this power / 100 (persist_pace_ref_power_pct)
#endif
#ifndef KIEC_L2_AHEAD_PACED
#define KIEC_L2_AHEAD_PACED 0  // 1: pages asked of L2 past a full ring take the pace too (persist_l2_ahead_paced)
#endif
#ifndef KIEC_L2_AHEAD_BURST
#define KIEC_L2_AHEAD_BURST 0  // 1: a page already asked of L2 is copied into the ring off the pace (persist_l2_ahead_burst)
#endif
#ifndef KIEC_PAGE_PACE_KINDS
#define KIEC_PAGE_PACE_KINDS 0  // 1: a GEMV's pages take its descriptor's pace, if any (persist_page_pace_kinds)
#endif
#ifndef KIEC_PAGE_PACE_AHEAD_NS
#define KIEC_PAGE_PACE_AHEAD_NS 0  // > 0: its pace 2+ instructions past the compute warps (persist_page_pace_ahead_ns)
#endif
#ifndef KIEC_PAGE_PACE_AHEAD_FROM
#define KIEC_PAGE_PACE_AHEAD_FROM 0  // > 0: the ahead pace from this position on (persist_page_pace_ahead_from_pos)
#endif
#ifndef KIEC_ATTN_L2_HINT
#define KIEC_ATTN_L2_HINT 0  // 2: the weight stream asks L2 for attention's cache rows (PageWalk::next)
#endif

namespace kiec {

// Weights never depend on activations, so one thread (the producer) walks the SM's instruction list ahead of the
// compute warps and copies each GEMV share, page by page, into the ring: it is stopped only by a full ring, never
// by a dependency. A page's `full` barrier completes when its bytes have landed; its `empty` barrier when every
// compute thread is done with it. Both sides count pages the same way (seq), so page seq sits in stage
// seq % STAGES and is that stage's (seq / STAGES)-th use.

template <int STAGES_, int PAGE_>
struct Ring {
  static constexpr int STAGES = STAGES_, PAGE = PAGE_;
  static constexpr int HEAD = 128 * ((2 * STAGES * 8 + 127) / 128);  // the barriers' bytes before the pages
  static constexpr int BYTES = HEAD + STAGES * PAGE;                 // (codegen/persistent.py: ring_head)
  char* pages;                 // STAGES x PAGE bytes, 128-byte aligned
  unsigned long long* full;    // STAGES: the page's bytes landed (one arrival and the transaction count)
  unsigned long long* empty;   // STAGES: every compute thread released the page (one arrival each)
  unsigned seq;                // pages this thread has gone through
#if KIEC_PAGE_PACE_AHEAD_NS
  // (shared) the GEMV whose pages the compute warps consume, as t * span + its index in a.instrs (consuming()); span:
  // the SM's instructions a position
  volatile int* at;
  int span;
  __device__ __forceinline__ void consuming(const Turn& u) const {
    if (threadIdx.x == 0) *at = u.t * span + u.index;
  }
  // How many instructions the page at (pos, i) is past the one the compute warps consume.
  __device__ __forceinline__ int ahead(const PersistentArgs& a, int pos, int i) const {
    return (pos - a.p0) * span + i - *at;
  }
#endif
  __device__ __forceinline__ char* page(unsigned s) const { return pages + (size_t)(s % STAGES) * PAGE; }
  // The ring at the start of `smem` (128-byte aligned, BYTES long); returns what follows it.
  __device__ __forceinline__ char* carve(char* smem) {
    full = reinterpret_cast<unsigned long long*>(smem);
    empty = full + STAGES;
    pages = smem + HEAD;
    seq = 0;
    return pages + (size_t)STAGES * PAGE;
  }
  // Thread 0, before the block's first barrier: each page released by `threads` consumer threads.
  // (One release a warp, lane 0 after __syncwarp, was measured and taken out: bench/RESULTS.md, 2026-11-30 sixth
  // session; git log -S persist_warp_release.)
  __device__ __forceinline__ void init(unsigned threads) const {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full + s, 1);
      mbar_init(empty + s, threads);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  // A consumer (every compute thread, in the same order): the next page, once it has landed; release() when this
  // thread is done reading it.
  __device__ __forceinline__ const char* next_page() const { return page_ahead(0); }
  __device__ __forceinline__ void release() {
    mbar_arrive(empty + seq % STAGES);  // an arrive releases only this thread's reads
    ++seq;
  }
  // The page k past the next one (k < STAGES), once it has landed (gemv_pages_half holds two at once).
  __device__ __forceinline__ const char* page_ahead(unsigned k) const {
    mbar_wait(full + (seq + k) % STAGES, ((seq + k) / STAGES) & 1);
    return page(seq + k);
  }
  // Whether the page k past the next one (k < STAGES) has landed, without waiting (test_wait: no acquire for the
  // other threads that read it; gemv_pages.cuh's page look orders their reads after it through the warp).
  __device__ __forceinline__ bool landed_at(unsigned k) const {
    return mbar_done(full + (seq + k) % STAGES, ((seq + k) / STAGES) & 1);
  }
  // How many of this consumer's next `upto` pages (at most STAGES) have landed, counted in order, by a whole warp,
  // every lane getting it (kiec_trace): lane k looks at page k, all at once. (One thread looking one page after
  // another, ~120 SM cycles a look by bench/gemv_compute.cu's barrier looks, held its warp back.)
  __device__ __forceinline__ int landed_warp(int upto, int lane) const {
    static_assert(STAGES <= 32, "a lane a page");
    const unsigned seen = __ballot_sync(0xffffffffu, lane < upto && lane < STAGES && landed_at(lane));
    return ~seen ? __ffs(~seen) - 1 : 32;  // the pages before the first one not landed
  }
  // A benchmark's stream that nobody reads (bench/): page `s` from src into its stage once the page `depth`
  // before it has landed, so that at most depth <= STAGES pages are in flight.
  __device__ __forceinline__ void copy_landed(unsigned s, const char* src, unsigned depth,
                                              unsigned long long policy) const {
    if (s >= depth) mbar_wait(full + (s - depth) % STAGES, ((s - depth) / STAGES) & 1);
    mbar_expect(full + s % STAGES, PAGE);
    bulk_copy(page(s), src, PAGE, full + s % STAGES, policy);
  }
  // The producer, before its block may end: waits for the copies it issued (the last `issued` pages at most).
  __device__ __forceinline__ void drain(unsigned issued) const {
    for (unsigned s = issued > STAGES ? issued - STAGES : 0; s < issued; ++s)
      mbar_wait(full + s % STAGES, (s / STAGES) & 1);
  }
};

// The pages of an SM's GEMV shares, position after position, in the order the compute warps use them. After
// next(), gate (and for SiLU-mul up) hold the current page's sources, `bytes` each, and up_at where its up half
// goes in the page. next(true) also asks L2 for the cache rows of earlier steps of each attention split it walks
// past (attn_l2_prefetch 2: the split loads them a phase or so later).
// KEPT (persist_walk_kept, the default): the walk of a share (its first byte, item count and size, items a page) is
// kept from the page that entered it, and its other pages cost a few multiply-adds. Without it each page reads its
// instruction and descriptor again (two loads, two integer divisions: ~1,130 SM cycles a page of the streaming
// thread in ncu's samples on llama-3.2-1b, fourteenth session). Kept but unpaced, a freed ring's pages go out in a
// burst and the token ran slower (0.803 vs 0.767 ms); paced (KIEC_PAGE_PACE_NS, about a page's share of the read
// ceiling), faster (0.740-0.744; bench/RESULTS.md, 2026-12-01 fifteenth session).
template <int PAGE, bool KEPT = KIEC_WALK_KEPT != 0>
struct PageWalk {
  const PersistentArgs* a;
  int begin, end, pos, i, first;  // the next page: position, instruction, first item
  int items, per_page;            // the current share's (KEPT: valid while first > 0)
  int pace;                       // its GEMV's own pace, ns (the descriptor's; 0: the stream's)
  unsigned item_bytes;
  const char* share;              // its first item's first byte
  size_t up_off;                  // from a gate item to its up item (0: not SiLU-mul)
  const char* gate;
  const char* up;
  unsigned bytes, up_at;
  __host__ __device__ __forceinline__ PageWalk(const PersistentArgs* a_, int begin_, int end_)
      : a(a_), begin(begin_), end(end_), pos(a_->p0), i(begin_), first(0) {}
  __host__ __device__ __forceinline__ bool next(bool hint_kv = false) {  // host too: tests/cpu/page_walk.cu
    if constexpr (KEPT) {
      if (first > 0 && first < items) {  // the share's next page
        page();
        return true;
      }
    }
    for (; pos < a->p_end; ++pos, i = begin) {
      for (; i < end; ++i, first = 0) {
        const Instr& ins = a->instrs[i];
        if (ins.opcode != OP_GEMV) {
          if (hint_kv && ins.opcode == OP_ATTENTION) ask_l2_for_rows(ins);
          continue;
        }
        const KernelDesc& d = a->kernels[ins.kernel];
        if (KEPT && first > 0) continue;  // (its pages are done: the test above walked them)
        per_page = items_per_page(PAGE, d.item_bytes, d.flags & FLAG_SILU);
        items = d.flags & FLAG_BLOCKS ? block_pages(ins, 16 * d.row_bytes / d.item_bytes)  // (gemv_mma.cuh)
                                      : share_items(ins, d.row_bytes / d.item_bytes);
        if (items <= (KEPT ? 0 : first)) continue;  // (KEPT: first is 0 here)
        item_bytes = d.item_bytes;
        pace = d.pace;
        share = a->weights + d.w[0] + (size_t)ins.lo * d.row_bytes + (KIEC_ITEM_SHARES ? ins.head * d.item_bytes : 0);
        up_off = d.flags & FLAG_SILU ? (size_t)d.n * d.row_bytes : 0;
        page();
        return true;
      }
    }
    return false;
  }
  // The current share's page from item `first` on; first moves past it.
  __host__ __device__ __forceinline__ void page() {
    gate = share + (size_t)first * item_bytes;
    up = up_off ? gate + up_off : nullptr;
    bytes = (unsigned)min(per_page, items - first) * item_bytes;
    up_at = per_page * item_bytes;
    first += per_page;
  }
  // Attention split ins.tile % splits of KV head ins.lo at `pos`: its rows of earlier steps are [lo, lo + the
  // count returned) (split_range_of with the descriptor's splits and min_keys; 0 rows: none).
  __host__ __device__ __forceinline__ int kv_rows(const Instr& ins, int& lo) const {
    const KernelDesc& d = a->kernels[ins.kernel];
    int hi, active;
    const int split = ins.tile % d.splits;
    split_range_of(pos, d.window, split, d.splits, d.min_keys, lo, hi, active);
    return split < active ? max(0, min(hi, pos) - lo) : 0;
  }
  // Those rows of K and of V, asked of L2 (d.n KV heads of d.m rows).
  __host__ __device__ __forceinline__ void ask_l2_for_rows(const Instr& ins) const {
#ifdef __CUDA_ARCH__
    int lo;
    const int rows = kv_rows(ins, lo);
    const KernelDesc& d = a->kernels[ins.kernel];
    prefetch_kv_rows_l2(a->kv + d.w[0], d.n, d.m, d.row_bytes, ins.lo, lo, rows);
#endif
  }
};

// With KIEC_PACE_REF_POWER_PCT (persist_pace_ref_power_pct) other than 100, the factor page_pace scales the paces
// by: KIEC_PACE_REF_GBPS over this GPU's peak to the power of it over 100 (the reference GPU's exactly 1: 1 to any
// power is 1); 1 elsewhere. Once a stream (a powf), not a page.
__host__ __device__ __forceinline__ float pace_power_scale(const PersistentArgs& a) {
  if constexpr (KIEC_PACE_REF_GBPS > 0 && KIEC_PACE_REF_POWER_PCT != 100)
    return a.mem_gbps > 0 ? powf((float)KIEC_PACE_REF_GBPS / (float)a.mem_gbps, KIEC_PACE_REF_POWER_PCT / 100.f) : 1.f;
  else
    return 1.f;
}

// A pace of `ns` ns a full page on this GPU (the stream's paces, and a GEMV's own with KIEC_PAGE_PACE_KINDS): with
// KIEC_PACE_REF_GBPS (the peak bandwidth where the pace was measured best, persist_pace_ref_gbps) scaled by that over
// this GPU's peak (a.mem_gbps; unknown: unscaled), so that each SM still takes its share of the memory's rate, or with
// KIEC_PACE_REF_POWER_PCT by `power_scale` (pace_power_scale's); without, `ns` as given.
__host__ __device__ __forceinline__ unsigned page_pace(const PersistentArgs& a, unsigned ns, float power_scale) {
  if constexpr (KIEC_PACE_REF_GBPS > 0 && KIEC_PACE_REF_POWER_PCT != 100)
    return (unsigned)(ns * power_scale);
  else if constexpr (KIEC_PACE_REF_GBPS > 0)
    return a.mem_gbps > 0 ? (unsigned)((unsigned long long)ns * KIEC_PACE_REF_GBPS / a.mem_gbps) : ns;
  else
    return ns;
}

// When the next copy may go out after one of `bytes` at `now`: a full page waits the whole pace, a shorter one its
// bytes' part of it.
template <int PAGE>
__device__ __forceinline__ unsigned long long paced_after(unsigned long long now, unsigned pace, unsigned bytes) {
  return now + (unsigned long long)pace * bytes / PAGE;
}

#if KIEC_TRACE_STREAM
// (persist_trace_stream) a page of the traced step's GEMV share `row` (its recording's row): the stream came to it at
// `came`, found a free page of the ring at `freed`, and issues its copy now, after the pace. The share's first page
// starts the row's sums over again (a recording may be made several times: Engine.trace's warm launches).
__device__ __forceinline__ void stamp_stream(unsigned long long* row, bool first_page, unsigned long long came,
                                             unsigned long long freed) {
  const unsigned long long now = global_ns();
  if (first_page) {
    row[TR_STREAM_FIRST] = came;
    row[TR_STREAM_FULL_NS] = row[TR_STREAM_PACE_NS] = 0;
  }
  row[TR_STREAM_FULL_NS] += freed - came;
  row[TR_STREAM_PACE_NS] += now - freed;
  row[TR_STREAM_LAST] = now;
}
#endif

// The producer: thread 0 of the streaming warpgroup. Copies every GEMV share of positions [p0, p_end) into the ring
// in instruction order, until the compute warps set `quit` (the generation ended early). Every SM's bytes in flight
// are a queue that all other loads and the counters' round trips wait behind (bench/hop_latency.cu: a hop of 1.7 us
// took 18-22 us with 12 x 16 KB in flight from every SM), yet bounding the pages in flight to 2, 4 or 6 measured
// 0.858, 0.854, 0.854 ms against 0.822 on llama-3.2-1b (2026-11-30: SMs still streaming need the depth while others
// wait with full rings), so the whole ring may be in flight; instead a page goes out at most every KIEC_PAGE_PACE_NS
// (about the SM's share of the read ceiling), so that a freed ring's pages do not all queue at once (llama-3.2-1b
// 0.740-0.744 vs 0.767 ms, 2026-12-01). While the ring is full it asks L2 for up to AHEAD pages
// beyond it (a second walk over the same pages), so that the memory keeps streaming through waits longer than the
// ring covers (noise on llama-3.2-1b at 94a9075 and 9cd28d0; bench/l2_prefetch.cu: a region waiting in L2 copies
// only 15-35% faster than one from HBM). Before returning it waits for its copies in flight, so that none lands
// after the block is gone. In the default build nothing in its page loop depends on the traced step: one test a page
// there (48f2904, timing its stalls) cost every step 3.5% on llama-3.2-1b; persist_trace_stream's (KIEC_TRACE_STREAM)
// stamps cost none seen (thirty-fourth session: 0.696 ms with and without, bench/RESULTS.md).
template <typename R, int AHEAD>
__device__ void stream_weights(const PersistentArgs& a, R ring, int begin, int end, const volatile int* quit) {
  // weights are read once a token: first out of L2 (KIEC_WEIGHT_EVICT_FIRST 0: L2's default; bench/stream_rate.cu)
  const unsigned long long policy = KIEC_WEIGHT_EVICT_FIRST ? evict_first_policy() : evict_normal_policy();
  PageWalk<R::PAGE> copy(&a, begin, end), ahead(&a, begin, end);
  unsigned seq = 0, asked = 0;  // pages copied into the ring; pages asked of L2 (the walk `ahead` is past them)
  unsigned long long next_at = 0;  // (KIEC_PAGE_PACE_NS: the next page's copy not before, %globaltimer ns)
  const float power_scale = pace_power_scale(a);  // (persist_pace_ref_power_pct's factor: 1 unless it scales)
  const unsigned pace = page_pace(a, KIEC_PAGE_PACE_NS, power_scale);
  const unsigned pace_ahead = page_pace(a, KIEC_PAGE_PACE_AHEAD_NS, power_scale);
  for (; copy.next(KIEC_ATTN_L2_HINT == 2); ++seq) {
    const unsigned stage = seq % R::STAGES, use = seq / R::STAGES;
#if KIEC_TRACE_STREAM
    const bool rec = a.trace != nullptr && copy.pos == a.trace_pos;  // (a page of the traced step)
    const unsigned long long came = rec ? global_ns() : 0ull;
#endif
    if (use > 0) {
      while (!mbar_test(ring.empty + stage, (use - 1) & 1)) {
        if (*quit) goto drain;
        if (AHEAD > 0 && asked < seq + AHEAD) {
          unsigned long long now = 0;
          if constexpr (KIEC_L2_AHEAD_PACED && KIEC_PAGE_PACE_NS > 0)
            if ((now = global_ns()) < next_at) continue;
          if (asked <= seq) {  // start from this page
            ahead = copy;
            asked = seq + 1;
          } else if (ahead.next()) {
            ++asked;
          } else {
            continue;
          }
          prefetch_bulk_l2(ahead.gate, ahead.bytes);
          if (ahead.up) prefetch_bulk_l2(ahead.up, ahead.bytes);
          if constexpr (KIEC_L2_AHEAD_PACED && KIEC_PAGE_PACE_NS > 0)  // (one clock: the SM's share of the memory)
            next_at = paced_after<R::PAGE>(now, pace, (ahead.up ? 2 : 1) * ahead.bytes);
        }
      }
    }
    const unsigned bytes = copy.up ? 2 * copy.bytes : copy.bytes;
#if KIEC_TRACE_STREAM
    const unsigned long long freed = rec ? global_ns() : 0ull;
#endif
    // (KIEC_L2_AHEAD_BURST: page seq was asked of L2 at the pace while the ring was full, so its copy is not paced
    // again and the asks keep the memory's clock; measured no faster, off: codegen/TUNING.md)
    if (KIEC_PAGE_PACE_NS > 0 && !(KIEC_L2_AHEAD_BURST && AHEAD > 0 && seq < asked)) {
      unsigned long long now;
      while ((now = global_ns()) < next_at) {}
#if KIEC_PAGE_PACE_AHEAD_NS
      const bool ahead_paced = copy.pos >= KIEC_PAGE_PACE_AHEAD_FROM && ring.ahead(a, copy.pos, copy.i) >= 2;
      next_at = paced_after<R::PAGE>(now, ahead_paced ? pace_ahead : pace, bytes);
#elif KIEC_PAGE_PACE_KINDS
      // (persist_page_pace_kinds: the call 7 trace of the thirty-sixth session, 460 -> 430 ns for every page, made the
      // LM head and gate/up faster and the down projection 0.3 us a layer slower on both models traced)
      next_at = paced_after<R::PAGE>(now, copy.pace > 0 ? page_pace(a, copy.pace, power_scale) : pace, bytes);
#else
      next_at = paced_after<R::PAGE>(now, pace, bytes);
#endif
    }
#if KIEC_TRACE_STREAM
    if (rec) stamp_stream(a.trace + (size_t)copy.i * TRACE_SLOTS, copy.first == copy.per_page, came, freed);
#endif
    mbar_expect(ring.full + stage, bytes);
    char* dst = ring.page(seq);
    bulk_copy(dst, copy.gate, copy.bytes, ring.full + stage, policy);
    if (copy.up) bulk_copy(dst + copy.up_at, copy.up, copy.bytes, ring.full + stage, policy);
  }
drain:
  ring.drain(seq);
}

}  // namespace kiec
