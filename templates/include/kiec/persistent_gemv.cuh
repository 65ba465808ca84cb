// The persistent kernel's GEMV tile (persistent.cuh): a norm or copy prologue (gemv_x.cuh), the dot products over
// weight pages the ring (ring.cuh) streamed in, and the epilogue; each tile is one SM's share of a GEMV's rows.
#pragma once

#include "attention_merge.cuh"
#include "gemv.cuh"
#include "gemv_mma.cuh"
#include "gemv_x.cuh"
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
// gemv_compute.cu's shares slower (thirty-second session; codegen/targets.py). The lane that saw a page land
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
// slower on every model, 1-4% with only the long shares (thirty-third session, codegen/targets.py): a short share's
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

// Outputs [lo, hi) from the segment sums (added in segment order, so a run's result does not depend on which
// warp finished first): SiLU-mul, store, residual add, or store and the packed argmax.
// y_mine: with EPI_RESIDUAL, y[lo + threadIdx.x] as loaded before the dot products (residual_first).
// TY: y is tagged words (common.cuh): written with tag `mine`, the residual read carrying `res`. PY (SiLU-mul, TY):
// y is tagged pairs (common.cuh: st_tagged_pair), lo and outs even (the schedule deals such a GEMV's rows in pairs).
// scale: each row's sum times it before the bias (the norm's with persist_norm_late_scale, Prologue::LATE; else 1).
template <typename T, int SEGS, int EPI, bool BIAS, int THREADS, bool TY = false, bool PY = false>
__device__ __forceinline__ void gemv_epilogue(const Turn& u, const float* acc, const T* bias, float* y, int lo,
                                              int outs, int n_out, float y_mine, unsigned mine = 0,
                                              unsigned res = 0, float scale = 1.f) {
  static_assert(!PY || (TY && EPI == EPI_SILU_MUL && !KIEC_TAG_PARITY), "tagged pairs: a SiLU-mul's tagged output");
  auto dot = [&](int r) {  // row r's sum (SiLU: 2 rows per output, gate then up)
    float v = 0.f;
#pragma unroll
    for (int s = 0; s < SEGS; ++s) v += acc[r * SEGS + s];
    return v * scale;
  };
  auto silu_mul = [&](int j) {  // output lo + j
    const int o = lo + j;
    const float g = dot(2 * j) + (BIAS ? to_float<T>(bias[o]) : 0.f);
    const float up = dot(2 * j + 1) + (BIAS ? to_float<T>(bias[o + n_out]) : 0.f);
    return g / (1.f + expf(-g)) * up;
  };
  if constexpr (PY) {
    for (int p = threadIdx.x; p < outs / 2; p += THREADS) st_tagged_pair(y, lo / 2 + p, silu_mul(2 * p),
                                                                         silu_mul(2 * p + 1), mine);
    return;
  }
  unsigned long long best = 0ull;
  for (int j = threadIdx.x; j < outs; j += THREADS) {
    const int o = lo + j;
    if (EPI == EPI_SILU_MUL) {
      store_value<TY>(y, o, silu_mul(j), mine);
    } else {
      const float v = dot(j) + (BIAS ? to_float<T>(bias[o]) : 0.f);
      if (EPI == EPI_STORE || EPI == EPI_ARGMAX) store_value<TY>(y, o, v, mine);
      if (EPI == EPI_RESIDUAL) {
        const float r = j == (int)threadIdx.x ? y_mine : TY ? tagged_value(ld_tagged(y, o), y, o, res) : y[o];
        store_value<TY>(y, o, r + v, mine);
      }
      if (EPI == EPI_ARGMAX) {
        const unsigned long long key = argmax_key(v, o);
        best = key > best ? key : best;
      }
    }
  }
  if (EPI == EPI_ARGMAX) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const unsigned long long other = __shfl_xor_sync(0xffffffffu, best, o);
      best = other > best ? other : best;
    }
    if ((threadIdx.x & 31) == 0 && best) atomicMax(u.a->argmax + u.pos, best);
  }
}

// Outputs [lo, hi) of y = epilogue(W . prologue(x)), the weights read from the ring (GemvShape).
// DIRECT (persist_x_direct, a GEMV without a norm): each warp loads its slice of x straight from memory, and the
// tile takes no shared memory for x (a deeper ring where the longest such x set the scratch: llama-3.1-8b's down
// projection, K 14336, 57 KB); with TX it checks the words' tags itself (load_x_slice_tagged).
// TX, TY (persist_tagged): x, y as tagged words (common.cuh), x's and the residual's tags from the
// descriptor's tag_x and tag_res, y's this phase's; with TY the counter moves relaxed (signal_done).
// TWICE (persist_probe_twice, a timing probe; the emitter picks the GEMVs): bit 1: the dot products run twice, bit
// 2: the prologue (the same tokens).
// WNORM (persist_norm_in_warps, a GEMV with a norm, one segment, 8 warps, untagged x): each warp normalizes x in its
// own registers (WarpNorm: the same bits), none of it staged in shared memory. BATCH > 0: its items' warp sums in
// batches of BATCH (gemv_pages; the same bits), not KIEC_REDUCE_BATCH. HALF (persist_dot_half_warps, untagged x):
// an item a half-warp (gemv_pages_half; other bits: the dots' and, with WNORM, the norm's sums go another order).
// SUMS (persist_probe_mlp_local 2, a timing probe): after its epilogue the tile adds 1 to each of the n_out int64
// words at `sums` (relaxed adds in L2, before its signal), the adds a down projection cut by its K would make.
// ITEMS (persist_dot_items): a warp's items up to this many at once (gemv_pages_items; the same bits).
// WCOPY (persist_x_warp_copy_min_k, a GEMV without a norm whose warps each hold a segment of their own): each warp
// copies its segment of x for itself through 1 KB of the scratch (load_x_slice_warp_copy; the same bits).
// PX, PY (persist_tagged_pairs): x (copied into the scratch or a warp's, TX), y (a SiLU-mul's, TY) as tagged pairs
// (common.cuh).
// SK (persist_item_shares): the tile's share is dealt to the item (ItemShare: rows completed a unit at a time, a pair
// with PY; a lead unit's sums published as tagged words at `carry` for the tile before, a trailing unit completed
// with the next tile's); it writes rows [lo + its lead rows, the end of its last unit).
// MG (persist_attn_consumer_merges: ConsumerMerge, an output projection whose x is attention's tagged output, copied
// into the scratch): where the attention's splits in use at this position leave their merge to this GEMV
// (consumer_merges), x is made from their partials at part_o and part_ml (merge_partials), words carrying the
// attention phase's full tag (its counter: the descriptor's tag_x), instead of copied.
// MMA (persist_mma_rows; x staged in the scratch, one item at a time, no probe): the dot products on the tensor cores
// over the weights' 16-row blocks (gemv_mma.cuh), the share whole blocks; x's pieces made in the scratch after the
// prologue, one sum a row in acc (other bits than the FMA tile's: x to 16 significant bits, the tensor cores' order).
template <typename T, int K, int WARPS, bool NORM, int EPI, bool BIAS, int SEGS, bool DIRECT = false, bool TX = false,
          bool TY = false, int TWICE = 0, bool WNORM = false, int BATCH = 0, bool HALF = false, bool SUMS = false,
          int ITEMS = 1, bool WCOPY = false, bool PX = false, bool PY = false, bool SK = false,
          typename MG = NoConsumerMerge, bool MMA = false, typename R>
__device__ __forceinline__ bool gemv_tile(Turn u, R& ring, const T* bias, float* x, const T* norm_w, float eps,
                                          float* y, int n_out, float* smem, unsigned long long* sums = nullptr,
                                          float* carry = nullptr, const float* part_o = nullptr,
                                          const float* part_ml = nullptr) {
  static_assert(!(DIRECT && NORM), "a normed x is staged in shared memory (the norm needs all of it first)");
  static_assert(!WNORM || (NORM && SEGS == 1 && !TX), "a norm in the warps: a GEMV with a norm, one segment, plain x");

  static_assert(!HALF || (!TX && TWICE == 0 && BATCH == 0), "half-warp items: plain x, their own sums, no probe");
  static_assert(!WCOPY || (!NORM && !DIRECT && !HALF && SEGS == WARPS), "a warp's own copy: a segment a warp, no norm");
  using G = GemvShape<T, K, WARPS, EPI, SEGS, R::PAGE, HALF ? 16 : 32>;
  constexpr bool STAGED = !DIRECT && !WNORM && !WCOPY;  // x goes through the scratch, all of it at once
  static_assert(!PX || (TX && (STAGED || WCOPY) && !NORM && !KIEC_TAG_WAITS && !KIEC_TAG_PARITY && TWICE == 0),
                "tagged pairs in x: a copy of it into the scratch, without tag waits, parity tags or the probe");
  static_assert(!SK || (KIEC_ITEM_SHARES && !HALF && ITEMS == 1 && TWICE == 0 && !SUMS && !KIEC_PROBE_WARM_CODE
                         && !KIEC_TAG_PARITY),
                "a share dealt to the item: one item at a time, 8-byte tags, no probe");
  static_assert(!MG::ON || (TX && STAGED && !NORM && !PX && !SK && !SUMS && TWICE == 0 && !KIEC_TAG_WAITS),
                "x merged from attention's partials: tagged, copied into the scratch, no norm, pairs, share, probe "
                "or tag waits");
  static_assert(!MMA || (STAGED && !HALF && !SK && !MG::ON && TWICE == 0 && ITEMS == 1 && !SUMS
                         && !KIEC_PROBE_WARM_CODE),
                "tensor-core dots: x staged in the scratch, one item at a time, no consumer merge, share or probe");
  using M = MmaShape<MMA, K, G::SILU, WARPS>;
  constexpr int PARTS = MMA ? 1 : SEGS;  // sums a row in acc: a segment's, or the row's
  const int merge_active = MG::in_use(u.pos, u.desc->window);  // (MG::ON: the attention's splits in use)
  constexpr int UNIT = PY ? 2 : 1;  // (SK: the rows completed together)
  const int lo = u.ins->lo, outs = u.ins->hi - lo;  // the rows the share touches
  ItemShare<SK, SEGS, UNIT, G::ROWS_PER_OUT> share;
  if constexpr (SK) share = ItemShare<SK, SEGS, UNIT, G::ROWS_PER_OUT>(*u.ins, word_tag(u, u.ins->counter), carry);
  // it writes rows [lo + lead_rows(), lo + end_rows()) (the end read from the instruction where used: registers)
  auto lead_rows = [&] { return share.lead_rows(); };
  auto end_rows = [&] { return share.end_rows(*u.ins, outs); };
  float* xs = smem;  // K: the prologue's output (STAGED), or WARP_COPY_FLOATS a warp (WCOPY: a round of its segment)
  float* acc = smem + (STAGED ? K : WCOPY ? WARPS * WARP_COPY_FLOATS : 0);  // [ROWS_PER_OUT * rows][PARTS]: row sums
  float* red = acc + G::ROWS_PER_OUT * (SK ? outs + UNIT - 1 : outs) * PARTS;  // WARPS (past a trailing unit's rows)
  float* stage = red + WARPS;  // (MMA: the block sums' slots)

  Prologue<T, K, NORM && !WNORM, WARPS * 32, PX> prologue;
  WarpNorm<T, G, K, WARPS * 32> wnorm;
  if constexpr (WNORM) wnorm.prefetch(norm_w, threadIdx.x & 31);
  else prologue.prefetch(norm_w);
#if KIEC_TAG_WAITS
  if (TX && STAGED) prologue.preload(x);
#endif
  unsigned late_seen = 0u;  // (KIEC_TAG_WAITS 2: wait_writes')
  const bool res_mine = EPI == EPI_RESIDUAL && (int)threadIdx.x < end_rows() - lead_rows();
  float y_mine = 0.f;
  unsigned long long y_word = 0ull;
  float xr[G::ROUNDS][8];  // this warp's segment of x
  long long waited;
  // The tile from its wait to its sums: false if the generation ended first. `dry` (persist_probe_warm_code, a
  // timing probe; the same tokens): instead, the dot products over the tile's first page, if landed, with x zeros
  // (their sums overwritten after, the ring untouched), run before the wait so that their code is fetched before x
  // is ready: what a tile's first item costs without its code to fetch. Both passes run this one inlined copy.
  auto pass = [&](bool dry) {
    if (dry) {
      if (!ring.landed_at(0)) return true;
#pragma unroll
      for (int v = 0; v < G::ROUNDS; ++v)
#pragma unroll
        for (int e = 0; e < 8; ++e) xr[v][e] = 0.f;
    } else {
      if (!wait_inputs(u, nullptr, 0, &late_seen)) return false;
      // the residual this tile adds to, asked for now: its load's latency passes under the prologue and the pages
      if (TY) {
        if (res_mine) y_word = ld_tagged(y, lo + lead_rows() + threadIdx.x);
      } else if (res_mine) {
        y_mine = y[lo + lead_rows() + threadIdx.x];
      }
      auto stage_x = [&] {
        if constexpr (WNORM) wnorm.run(x, eps, threadIdx.x & 31, xr);
        else if constexpr (WCOPY)
          load_x_slice_warp_copy<G, TX, PX>(x, TX ? tag_of(u, u.desc->tag_x) : 0u,
                                            (share.first_seg() + (threadIdx.x >> 5)) % SEGS, threadIdx.x & 31,
                                            xs + (threadIdx.x >> 5) * WARP_COPY_FLOATS, [&](int v, const float* w) {
            const int lane = threadIdx.x & 31;
            load_chunk8(w + lane * 8, G::SEGC % 32 == 0 || v * 32 + lane < G::SEGC, xr[v]);
          });
        else if constexpr (MG::ON) {  // (TX, STAGED)
          if (consumer_merges<MG::MAX>(merge_active)) {
            merge_partials<MG, K, WARPS>(part_o, part_ml, merge_active, word_tag(u, u.desc->tag_x), xs,
                                         [&] { return stop_reached(u); });
            sync_block();
          } else {
            prologue.run_tagged(x, tag_of(u, u.desc->tag_x), norm_w, eps, xs, red);
          }
        } else if (TX && !DIRECT) prologue.run_tagged(x, tag_of(u, u.desc->tag_x), norm_w, eps, xs, red);
        else if (!DIRECT) prologue.run(x, norm_w, eps, xs, red);
      };
      if constexpr ((TWICE & 2) != 0) stage_x();  // the probe: the same x written once more before
      stage_x();
      if constexpr (MMA) mma_x_pieces<T, K, WARPS, M::STEPS>(xs);
      trace(u, TR_X_READY);
#if KIEC_PAGE_PACE_AHEAD_NS
      ring.consuming(u);  // (the weight stream's pace: ring.cuh)
#endif
      // (the traced step's count of the share's pages landed, by warp 0 at once: thread 0 counting alone, a look a
      // page, held its warp's dots back ~0.13 us a page, thirty-second session)
      if (traced_step(u) && threadIdx.x < 32) {
        const int items = SK ? share_items(*u.ins, SEGS) : outs * SEGS;
        const int landed = ring.landed_warp(MMA ? outs / 16 * M::PPB : (items + G::PER_PAGE - 1) / G::PER_PAGE,
                                            threadIdx.x);
        if (threadIdx.x == 0) trace_row(u)[TR_PAGES_READY] = landed;
      }
      if constexpr (TX && DIRECT)
        load_x_slice_tagged<G>(x, tag_of(u, u.desc->tag_x), (share.first_seg() + (threadIdx.x >> 5)) % SEGS,
                               threadIdx.x & 31, xr);
      else if (!WNORM && !WCOPY && !MMA)
        load_x_slice<G>(DIRECT ? x : xs, (HALF ? 2 * (threadIdx.x >> 5) + ((threadIdx.x >> 4) & 1)
                                               : share.first_seg() + (threadIdx.x >> 5)) % SEGS, threadIdx.x & 31, xr);
#if KIEC_TRACE_DOTS
      trace(u, TR_X_SLICED);
#endif
    }
    // every thread times its page waits in the traced step: with a branch only thread 0 took, the traced step of
    // llama-3.2-1b ran 1609 us against 859 untraced, its GEMVs about twice as long (93b2612, 2026-11-30)
    if constexpr (MMA) {
#if KIEC_TRACE_DOTS
      if (traced_step(u) && (threadIdx.x & 31) == 0) dot_stamps()[0][threadIdx.x >> 5] = global_ns();
#endif
      waited = gemv_pages_mma<T, K, WARPS, G::SILU>(ring, outs, xs, acc, stage, traced_step(u));
#if KIEC_TRACE_DOTS
      if (traced_step(u) && (threadIdx.x & 31) == 0) dot_stamps()[1][threadIdx.x >> 5] = global_ns();
#endif
    } else if constexpr (HALF) waited = gemv_pages_half<T, G, WARPS, SEGS>(ring, outs * SEGS, xr, acc, traced_step(u));
    else if constexpr (SK) waited = gemv_pages<T, G, WARPS, SEGS, TWICE, BATCH, ITEMS>(
        ring, share_items(*u.ins, SEGS), xr, acc, traced_step(u), false, &share, u.ins);  // (publishes, asks)
    else waited = gemv_pages<T, G, WARPS, SEGS, TWICE, BATCH, ITEMS>(ring, dry ? min(outs * SEGS, G::PER_PAGE)
                                                                           : outs * SEGS, xr, acc,
                                                                    traced_step(u) && !dry, dry);
    return true;
  };
  if constexpr (KIEC_PROBE_WARM_CODE && !HALF) {
#pragma unroll 1
    for (int p = 0; p < 2; ++p)
      if (!pass(p == 0)) return false;
  } else if (!pass(false)) {
    return false;
  }
  if (tracing(u)) trace_row(u)[TR_PAGE_WAIT_CYCLES] = waited;
  if constexpr (SK) share.settle(acc, u, threadIdx.x >> 5, threadIdx.x & 31);  // (the trailing unit's rest)
  prologue.publish_late(red);
  sync_block();
  trace(u, TR_SUMS_DONE);
#if KIEC_TRACE_DOTS
  if (!HALF && tracing(u)) {  // (gemv_pages_half stamps none)
    unsigned long long first = 0ull, lo_first = ~0ull, lo_done = ~0ull, hi_done = 0ull;
    int late = 0;
    for (int w = 0; w < WARPS; ++w) {
      if (dot_stamps()[0][w] > first) {
        first = dot_stamps()[0][w];
        late = w;
      }
      lo_first = min(lo_first, dot_stamps()[0][w]);
      lo_done = min(lo_done, dot_stamps()[1][w]);
      hi_done = max(hi_done, dot_stamps()[1][w]);
    }
    unsigned long long* row = trace_row(u);
    row[TR_FIRST_ITEM] = first;
    row[TR_WARP_DONE_MIN] = lo_done;
    row[TR_WARP_DONE_MAX] = hi_done;
    row[TR_FIRST_ITEM_MIN] = lo_first;
    row[TR_FIRST_ITEM_WARP] = late;
  }
#endif
#if KIEC_TAG_WAITS >= 2
  if (!wait_writes(u, late_seen)) return false;  // the waits that guard only this tile's writes
#endif
  const unsigned res_tag = TY && EPI == EPI_RESIDUAL ? tag_of(u, u.desc->tag_res) : 0u;
  const int lead = lead_rows();
  if (TY && res_mine) y_mine = tagged_value(y_word, y, lo + lead + threadIdx.x, res_tag);
  gemv_epilogue<T, PARTS, EPI, BIAS, WARPS * 32, TY, PY>(u, acc + lead * G::ROWS_PER_OUT * PARTS, bias, y, lo + lead,
                                                        end_rows() - lead, n_out, y_mine,
                                                        TY ? tag_of(u, u.ins->counter) : 0u, res_tag,
                                                        WNORM ? wnorm.late
                                                        : decltype(prologue)::LATE ? prologue.late_scale(red, eps)
                                                                                   : 1.f);
  if constexpr (SUMS) {
    for (int j = threadIdx.x; j < n_out; j += WARPS * 32)
      asm volatile("red.relaxed.gpu.global.add.u64 [%0], 1;" ::"l"(sums + j) : "memory");
  }
  trace(u, TR_STORED);
  signal_done<TY>(u);
  return true;
}

}  // namespace kiec
