// The persistent kernel's GEMV tile (persistent.cuh): a norm or copy prologue (gemv_x.cuh), the dot products over
// weight pages the ring (ring.cuh) streamed in (gemv_pages.cuh; gemv_mma.cuh on the tensor cores), and the epilogue;
// each tile is one SM's share of a GEMV's rows.
#pragma once

#include "attention_merge.cuh"
#include "gemv.cuh"
#include "gemv_mma.cuh"
#include "gemv_pages.cuh"
#include "gemv_x.cuh"
#include "item_share.cuh"
#include "persistent_tile.cuh"
#include "ring.cuh"

namespace kiec {

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
// With SK (persist_mma_item_shares) the share is dealt by the page of a block instead (MmaShare: a lead block's sums
// published at `carry`, a trailing block completed with the next tile's).
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
  static_assert(!MMA || (STAGED && !HALF && !MG::ON && TWICE == 0 && ITEMS == 1 && !SUMS && !KIEC_PROBE_WARM_CODE),
                "tensor-core dots: x staged in the scratch, one item at a time, no consumer merge or probe");
  using M = MmaShape<MMA, K, G::SILU, WARPS>;
  constexpr int PARTS = MMA ? 1 : SEGS;  // sums a row in acc: a segment's, or the row's
  const int merge_active = MG::in_use(u.pos, u.desc->window);  // (MG::ON: the attention's splits in use)
  constexpr int UNIT = PY ? 2 : 1;  // (SK: the rows completed together)
  const int lo = u.ins->lo, outs = u.ins->hi - lo;  // the rows the share touches
  constexpr bool ISK = SK && !MMA, MSK = SK && MMA;  // (dealt to the row segment: ItemShare; by the page: MmaShare)
  ItemShare<ISK, SEGS, UNIT, G::ROWS_PER_OUT> share;
  if constexpr (ISK) share = ItemShare<ISK, SEGS, UNIT, G::ROWS_PER_OUT>(*u.ins, word_tag(u, u.ins->counter), carry);
  MmaShare<MSK, M::RPO> mshare;
  if constexpr (MSK) mshare = MmaShare<MSK, M::RPO>(*u.ins, word_tag(u, u.ins->counter), carry);
  // it writes rows [lo + lead_rows(), lo + end_rows()) (the end read from the instruction where used: registers)
  auto lead_rows = [&] { return MSK ? mshare.lead_rows() : share.lead_rows(); };
  auto end_rows = [&] { return share.end_rows(*u.ins, outs); };  // (MmaShare: whole blocks, to the share's end)
  float* xs = smem;  // K: the prologue's output (STAGED), or WARP_COPY_FLOATS a warp (WCOPY: a round of its segment)
  float* acc = smem + (STAGED ? K : WCOPY ? WARPS * WARP_COPY_FLOATS : 0);  // [ROWS_PER_OUT * rows][PARTS]: row sums
  float* red = acc + G::ROWS_PER_OUT * (ISK ? outs + UNIT - 1 : outs) * PARTS;  // WARPS (past a trailing unit's rows)
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
            load_chunk8(w + lane * 8, lane, G::SEGC % 32 == 0 || v * 32 + lane < G::SEGC, xr[v]);
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
        const int items = ISK ? share_items(*u.ins, SEGS) : outs * SEGS;
        const int landed = ring.landed_warp(MMA ? block_pages(*u.ins, M::PPB) : (items + G::PER_PAGE - 1) / G::PER_PAGE,
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
      waited = gemv_pages_mma<T, K, WARPS, G::SILU>(ring, outs, xs, acc, stage, traced_step(u), mshare,
                                                    [&] { return stop_reached(u); });
#if KIEC_TRACE_DOTS
      if (traced_step(u) && (threadIdx.x & 31) == 0) dot_stamps()[1][threadIdx.x >> 5] = global_ns();
#endif
    } else if constexpr (HALF) waited = gemv_pages_half<T, G, WARPS, SEGS>(ring, outs * SEGS, xr, acc, traced_step(u));
    else if constexpr (ISK) waited = gemv_pages<T, G, WARPS, SEGS, TWICE, BATCH, ITEMS>(
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
  if constexpr (ISK) share.settle(acc, u, threadIdx.x >> 5, threadIdx.x & 31);  // (the trailing unit's rest)
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
