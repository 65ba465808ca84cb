// A persistent GEMV tile's dot products over the weight pages in the ring (persistent_gemv.cuh's gemv_tile runs
// them): one item's part of each lane (dot_lanes), a warp's items one at a time (gemv_pages), several at once
// (gemv_pages_items) or a half-warp each (gemv_pages_half), their sums over the warp into the tile's acc
// (store_item_sums), and a share dealt to the item (ItemShare).
#pragma once

#include "gemv.cuh"
#include "item_deal.cuh"
#include "item_share.cuh"
#include "persistent_tile.cuh"
#include "ring.cuh"
#include "warp_batch.cuh"

namespace kiec {

// One item's dot products (w0: the row segment in the page; w1: its up row's, SiLU only): this lane's part.
template <typename T, typename G>
__device__ __forceinline__ void dot_lanes(const char* w0, const char* w1, const float (&xr)[G::ROUNDS][8], int lane,
                                          float& a0, float& a1) {
  float p0[G::ROUNDS], p1[G::ROUNDS];  // one sum a round: short dependency chains, added in a fixed order
#pragma unroll
  for (int v = 0; v < G::ROUNDS; ++v) {
    const int c = v * G::LANES + lane % G::LANES;
    p0[v] = p1[v] = 0.f;
    if (G::SEGC % G::LANES == 0 || c < G::SEGC) {
      float w[8];
      widen8<T>(lds128(w0 + c * 16), w);
#pragma unroll
      for (int i = 0; i < 8; ++i) p0[v] = fmaf(w[i], xr[v][i], p0[v]);
      if (G::SILU) {
        widen8<T>(lds128(w1 + c * 16), w);
#pragma unroll
        for (int i = 0; i < 8; ++i) p1[v] = fmaf(w[i], xr[v][i], p1[v]);
      }
    }
  }
  a0 = p0[0], a1 = p1[0];
#pragma unroll
  for (int v = 1; v < G::ROUNDS; ++v) {
    a0 += p0[v];
    a1 += p1[v];
  }
}

// Every page of a share of `items` items: this warp's items' segment sums into acc[(row * ROWS_PER_OUT + r) *
// SEGS + seg]; each thread releases each page when done with it. Items are dealt round-robin, so a warp's k-th item
// is warp + k * WARPS; its lane parts wait in a batch of KIEC_REDUCE_BATCH (a shift register: static indices) to be
// summed over the warp together (warp_batch.cuh). `timed`: returns the SM cycles this thread waited for pages to
// arrive (else 0). (The batch as a struct with member functions spilled 144 B on llama-3.1-8b at 8 where these
// lambdas spill none, ptxas -v.)
#ifndef KIEC_REDUCE_BATCH
#define KIEC_REDUCE_BATCH 1
#endif
// KIEC_PAGE_LOOK (persist_page_look): a warp looks at the share's first pages once, lane k at page k (up to 32 and
// the ring's), and takes the pages it found landed without waiting on each. Why: the traced step's ready-page count
// (Ring::landed, a test_wait a page in order) grew the traced tile 0.126 us a page counted (thirty-first session,
// bench/RESULTS.md); if the page wait before each page's items costs as much, the look saves it on resident pages.
// It does not: a barrier look is ~45 SM cycles, and the look left llama-3.2-1b's token as it was and made
// gemv_compute.cu's shares slower (thirty-second session; codegen/TUNING.md). The lane that saw a page land
// acquired it; __syncwarp orders the other lanes' reads after that. The same bits.
#ifndef KIEC_PAGE_LOOK
#define KIEC_PAGE_LOOK 0
#endif
// KIEC_DOT_ITEMS: gemv_pages' ITEMS unless given (bench/gemv_compute.cu sets it; the kernel passes each GEMV's own,
// persist_dot_items): a warp takes up to this many of its items at once (gemv_pages_items; 1: one after another),
// the most its ring and registers allow (item_deal.cuh: items_at_once, at most KIEC_DOT_ITEM_CHUNKS 16-byte chunks a
// lane a step).
#ifndef KIEC_DOT_ITEMS
#define KIEC_DOT_ITEMS 1
#endif
#ifndef KIEC_DOT_ITEM_CHUNKS
#define KIEC_DOT_ITEM_CHUNKS 16
#endif
#if KIEC_TRACE_DOTS
// (a traced step with persist_trace_dots) per warp, the moment its first item was summed and its last: gemv_tile
// writes the earliest and latest first (and the latest's warp) and the earliest and latest last to its recording.
// With batches of B items the first item is summed with its batch.
__device__ __forceinline__ unsigned long long (&dot_stamps())[2][32] {
  __shared__ unsigned long long stamps[2][32];
  return stamps;
}
#endif
// A tile's share dealt to the item (persist_item_shares, ON; Instr's head and tail): its items counted from segment
// `head` of its first row, so warp w's items are the segment (head + w) % SEGS of their rows (SEGS divides WARPS).
// Rows are completed a unit of U at a time (2: the outputs are tagged pairs), by the tile holding the unit's last
// item (ir/passes/phases.py: lead_rows, share_end_rows). A share that starts mid-unit leaves its first `lead`
// rows to the tile before: each of their sums (RPO a row's segment: gate and up for a SiLU-mul) is stored as a tagged
// word at carry[((slot * U * SEGS + item in the unit) * RPO + r] (slot: this tile's index in its phase) as soon as it
// is summed (store_item_sums, in the share's first pages). A share that ends mid-unit (its end `at` items into its
// last unit) completes that unit with the next tile's words: warp 0's lanes, one a word, ask for them halfway through
// the pages (ask) and wait for their tags after (settle), into the acc's rows of that unit; the tile's barrier after
// the dot products orders them before the epilogue. A row's segments are then added in segment order, as a whole
// row's: the same bits. A generation that ended may never publish them: settle looks at its stop every 1024 loads and
// then leaves a NaN (the stopped position is not used). Off: head 0, nothing published or asked.
template <bool ON, int SEGS, int U = 1, int RPO = 1>
struct ItemShare {
  static_assert(!ON || (U * SEGS - 1) * RPO <= 32, "a trailing unit's missing words, a lane each of one warp");
  static constexpr bool DEALT = ON;
  static constexpr int SLOT = U * SEGS * RPO;  // words a tile's slot (the next tile's follows)
  int head = 0;
  int lead = 0;  // the rows at the start the tile before completes
  unsigned tag = 0u;
  float* carry = nullptr;  // this tile's slot
  unsigned long long word = 0ull;  // (warp 0's lanes below missing * RPO: word `lane` of the next tile's)
  ItemShare() = default;  // (a defaulted constructor takes no __device__: nvcc warns it ignores one)
  __device__ __forceinline__ ItemShare(const Instr& ins, unsigned tag_, float* carry_)
      : head(ins.head), lead(item_lead_rows<U>(ins.lo, ins.head)), tag(tag_),
        carry(carry_ + 2 * (size_t)ins.tile * SLOT) {}
  // the share's end in its last unit and that unit's first row (item_share.cuh): read from the instruction when used
  // (fewer registers held across the dot products)
  __device__ __forceinline__ static int at(const Instr& ins) { return item_end_at<SEGS, U>(ins.hi, ins.tail); }
  __device__ __forceinline__ int first_seg() const { return ON ? head : 0; }
  __device__ __forceinline__ int lead_rows() const { return ON ? lead : 0; }
  __device__ __forceinline__ static int end_rows(const Instr& ins, int rows) {
    return ON ? item_unit_row<U>(ins.lo, ins.hi) + U : rows;
  }
  __device__ __forceinline__ void publish(int row, int seg, float s0, float s1) const {
    if (ON && row < lead) {
      st_tagged(carry, item_lead_word<SEGS, U, RPO>(lead, row, seg, 0), s0, tag);
      if (RPO == 2) st_tagged(carry, item_lead_word<SEGS, U, RPO>(lead, row, seg, 1), s1, tag);
    }
  }
  __device__ __forceinline__ static bool asks(const Instr& ins, int warp, int lane) {
    return ON && warp == 0 && lane < (U * SEGS - at(ins)) * RPO;
  }
  __device__ __forceinline__ void ask(const Instr& ins, int warp, int lane) {
    if (asks(ins, warp, lane)) word = ld_tagged(carry, item_next_word<SEGS, U, RPO>(at(ins), lane));
  }
  __device__ __forceinline__ void settle(float* acc, const Turn& u, int warp, int lane) {
    const Instr& ins = *u.ins;
    if (!asks(ins, warp, lane)) return;
    for (unsigned spins = 1; !carries(word, tag); ++spins) {
      if (spins % 1024 == 0 && stop_reached(u)) break;
      word = ld_tagged(carry, item_next_word<SEGS, U, RPO>(at(ins), lane));
    }
    acc[item_settled_at<SEGS, RPO>(at(ins), item_unit_row<U>(ins.lo, ins.hi), lane)] = settled_value(word, tag);
  }
};

// A warp's batch of B items summed over its lanes (warp_sum_batch; b0: gate (or the only) rows' parts, b1: up rows')
// into acc[(row * ROWS_PER_OUT + r) * SEGS + seg]: slot k < have is the warp's item first + k (its items are warp,
// warp + WARPS, ...), the lane holding its sum stores it (and publishes it where it is a head's: ItemShare).
template <typename G, int WARPS, int SEGS, int B, typename Share = ItemShare<false, SEGS>>
__device__ __forceinline__ void store_item_sums(float (&b0)[B], float (&b1)[B], float* acc, int warp, int lane,
                                                int first, int have, const Share& share = {}) {
  const float s0 = warp_sum_batch<B>(b0, lane, WarpXor());
  const float s1 = G::SILU ? warp_sum_batch<B>(b1, lane, WarpXor()) : 0.f;
  const int k = lane / (32 / B);
  int row, seg;
  item_place<SEGS, WARPS>(share.first_seg(), warp, first + k, row, seg);
  if (lane % (32 / B) == 0 && k < have) {
    acc[(G::ROWS_PER_OUT * row) * SEGS + seg] = s0;
    if (G::SILU) acc[(2 * row + 1) * SEGS + seg] = s1;
    share.publish(row, seg, s0, s1);
  }
}

template <typename R>
struct TimedPages {  // half_warp_steps' and warp_item_steps' ring: the tile's, its waits timed in the traced step
  R& ring;
  bool timed;
  long long waited;
  __device__ __forceinline__ const char* page_at(int k) {
    const long long c0 = timed ? clock64() : 0;
    const char* p = ring.page_ahead(k);
    if (timed) waited += clock64() - c0;
    return p;
  }
  __device__ __forceinline__ void release() { ring.release(); }
};

// gemv_pages with U of a warp's items at once (persist_dot_items): the same deal (warp w's items w, w + WARPS, ...),
// taken U at a time (item_deal.cuh: warp_item_steps): their pages waited for first, then their loads and
// multiply-adds side by side (dot_lanes, each item's own), their sums over the warp together (warp_sum_batch:
// warp_sum's bits). So the same bits as one at a time. Why: on pages already landed a warp's items one after another
// are a chain of latencies (a page wait, the loads, the FMA chain, 5 shuffles, the store, the release:
// bench/gemv_compute.cu's 24-row QKV tile, 6 items a warp, takes 1.70 us), which side by side overlap. Measured 3-10%
// slower on every model, 1-4% with only the long shares (thirty-third session, codegen/TUNING.md): a short share's
// step code, fetched again each phase, costs more than the overlap wins, and a stream-bound share waits for U pages
// before each step. Off.
template <typename T, typename G, int WARPS, int SEGS, int U, typename R>
__device__ __forceinline__ long long gemv_pages_items(R& ring, int items, const float (&xr)[G::ROUNDS][8], float* acc,
                                                      bool timed) {
  static_assert(G::LANES == 32 && U >= 2 && (U & (U - 1)) == 0, "a warp an item, a power of two of them at once");
  static_assert(item_steps_reach(U, G::PER_PAGE, WARPS) < R::STAGES, "a step's pages fit the ring beside the oldest");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  TimedPages<R> pages{ring, timed, 0};
  warp_item_steps<WARPS, U>(pages, items, G::PER_PAGE, warp,
                            [&](int m0, const char* const (&page)[U], const int (&at)[U], int n) {
    float s0[U], s1[U];
#pragma unroll
    for (int i = 0; i < U; ++i)
      dot_lanes<T, G>(page[i] + at[i] * G::ITEM, page[i] + (G::PER_PAGE + at[i]) * G::ITEM, xr, lane, s0[i], s1[i]);
    store_item_sums<G, WARPS, SEGS, U>(s0, s1, acc, warp, lane, m0, n);
#if KIEC_TRACE_DOTS
    if (timed && m0 == 0 && lane == 0) dot_stamps()[0][warp] = global_ns();  // (its first step's)
#endif
  });
#if KIEC_TRACE_DOTS
  if (timed && lane == 0) {
    dot_stamps()[1][warp] = global_ns();
    if (warp >= items) dot_stamps()[0][warp] = dot_stamps()[1][warp];  // (a warp without items)
  }
#endif
  return pages.waited;
}

// TWICE (persist_probe_twice, a timing probe): bit 1: every item's dot products run twice. BATCH > 0: this GEMV's
// batch instead of KIEC_REDUCE_BATCH (persist_reduce_batch_head: the LM head's). With ITEMS above 1 (and neither
// the probe nor a dry pass) the items go several at once (gemv_pages_items), their sums in their own batch.
// `share` (persist_item_shares, an ItemShare that is ON): the share's items from its head on, its lead rows' sums
// published and its trailing unit's words asked for halfway; one item at a time.
template <typename T, typename G, int WARPS, int SEGS, int TWICE = 0, int BATCH = 0, int ITEMS = KIEC_DOT_ITEMS,
          typename R, typename Share = ItemShare<false, SEGS>>
__device__ __forceinline__ long long gemv_pages(R& ring, int items, const float (&xr)[G::ROUNDS][8], float* acc,
                                                bool timed, bool dry = false, Share* share = nullptr,
                                                const Instr* ins = nullptr) {
  constexpr bool SK = Share::DEALT;
  constexpr int U = items_at_once(ITEMS, G::PER_PAGE, WARPS, R::STAGES, G::ROUNDS, KIEC_DOT_ITEM_CHUNKS);
  static_assert(!SK || U == 1, "a share dealt to the item: one item at a time");
  if constexpr (U > 1 && TWICE == 0 && G::LANES == 32)
    if (!dry) return gemv_pages_items<T, G, WARPS, SEGS, U>(ring, items, xr, acc, timed);
  constexpr int B = BATCH > 0 ? BATCH : KIEC_REDUCE_BATCH;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int pages = (items + G::PER_PAGE - 1) / G::PER_PAGE;
  float b0[B], b1[B];  // the batch: gate (or the only) rows' parts, up rows'
  int mine = 0;        // this warp's items so far
  auto shift_in = [&](float a0, float a1) {
#pragma unroll
    for (int k = 0; k + 1 < B; ++k) {
      b0[k] = b0[k + 1];
      b1[k] = b1[k + 1];
    }
    b0[B - 1] = a0;
    b1[B - 1] = a1;
  };
  auto sums_out = [&](int have) {  // slot k < have: this warp's item mine - have + k
    if constexpr (SK) store_item_sums<G, WARPS, SEGS, B>(b0, b1, acc, warp, lane, mine - have, have, *share);
    else store_item_sums<G, WARPS, SEGS, B>(b0, b1, acc, warp, lane, mine - have, have);
  };
  long long waited = 0;
  unsigned looked = 0u;  // (KIEC_PAGE_LOOK) bit p: page p of the share had landed when the warp looked
  if (KIEC_PAGE_LOOK && !dry) {
    looked = __ballot_sync(0xffffffffu, lane < pages && lane < R::STAGES && ring.landed_at(lane));
    __syncwarp();
  }
  for (int p = 0; p < pages; ++p) {
    const long long c0 = timed ? clock64() : 0;
    const char* page = dry || (p < 32 && (looked >> p & 1u)) ? ring.page(ring.seq) : ring.next_page();
    if (timed) waited += clock64() - c0;
    const int first = p * G::PER_PAGE, n = min(G::PER_PAGE, items - first);
    for (int j = (warp - first % WARPS + WARPS) % WARPS; j < n; j += WARPS) {
      float a0, a1;
      dot_lanes<T, G>(page + j * G::ITEM, page + (G::PER_PAGE + j) * G::ITEM, xr, lane, a0, a1);
      if (TWICE & 1) {  // the same loads again, their sums kept alive times 0; the address moved by
        // gridDim.y - 1, 0 at run time but not known to ptxas, which merges identical shared loads (PTX has both)
        const int again = j * G::ITEM + (int)gridDim.y - 1;
        float b0, b1;
        dot_lanes<T, G>(page + again, page + G::PER_PAGE * G::ITEM + again, xr, lane, b0, b1);
        a0 = fmaf(b0, 0.f, a0);
        a1 = fmaf(b1, 0.f, a1);
      }
      shift_in(a0, a1);
      if (++mine % B == 0) sums_out(B);
#if KIEC_TRACE_DOTS
      if (timed && mine == B && lane == 0) dot_stamps()[0][warp] = global_ns();
#endif
    }
    if (!dry) ring.release();
    if constexpr (SK)
      if (p == pages / 2) share->ask(*ins, warp, lane);
  }
  if (const int have = mine % B) {  // the last, short batch: zeros shifted in behind its items
    for (int k = have; k < B; ++k) shift_in(0.f, 0.f);
    sums_out(have);
  }
#if KIEC_TRACE_DOTS
  if (timed && lane == 0) {  // (a warp without items, or fewer than a batch: its first is its last)
    dot_stamps()[1][warp] = global_ns();
    if (mine < B) dot_stamps()[0][warp] = dot_stamps()[1][warp];
  }
#endif
  return waited;
}

// gemv_pages with half-warp items (G::LANES 16, persist_dot_half_warps): each half-warp takes an item, so a warp takes
// two at once (half_warp_steps: items 2 w + 2 WARPS q and the one after, a pair that may straddle two pages), and
// each item's sum is a 16-lane butterfly, both halves' in the same shuffles. Where a warp would take several items
// one after another, it takes half as many steps (each of ROUNDS rounds over 16 lanes instead of a warp's over 32:
// K 576 is 72 chunks, 5 rounds of 16 against 3 of 32 with 8 lanes working in the third). Half h of warp w holds
// segment (2 w + h) % SEGS of x. `timed`: as gemv_pages.
template <typename T, typename G, int WARPS, int SEGS, typename R>
__device__ __forceinline__ long long gemv_pages_half(R& ring, int items, const float (&xr)[G::ROUNDS][8], float* acc,
                                                     bool timed) {
  static_assert(G::LANES == 16 && R::STAGES >= 2, "half-warp items, a pair of them over two pages at most");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  TimedPages<R> pages{ring, timed, 0};
  auto step = [&](int mine, bool valid, const char* page, int j) {
    float a0, a1;
    dot_lanes<T, G>(page + j * G::ITEM, page + (G::PER_PAGE + j) * G::ITEM, xr, lane, a0, a1);
    a0 = lanes_sum<G::LANES>(a0);
    if (G::SILU) a1 = lanes_sum<G::LANES>(a1);
    if ((lane & 15) == 0 && valid) {
      const int row = mine / SEGS, seg = mine % SEGS;
      acc[(G::ROWS_PER_OUT * row) * SEGS + seg] = a0;
      if (G::SILU) acc[(2 * row + 1) * SEGS + seg] = a1;
    }
  };
  half_warp_steps<WARPS>(pages, items, G::PER_PAGE, warp, lane >> 4, step);
  return pages.waited;
}

}  // namespace kiec
