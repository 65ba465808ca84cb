// A fused layer's output-projection tile (persist_attn_o_below; ir/passes/attn_o.py): KV head h's attention output,
// then the tile's rows of the projection over that head's columns, written as the head's part of the projection.
#pragma once
#include "attention_merge.cuh"
#include "persistent_gemv.cuh"
#include "persistent_tile.cuh"

namespace kiec {

// Rows [ins.lo, ins.hi) of KV head h = ins.tile's part of the output projection: W's columns of the head (packed
// [head][row], streamed through the ring as a GEMV share of K = GROUP x HEAD_DIM) times the head's attention output.
// Below KIEC_ATTN_O_BELOW that output is the attention tile's just before this one on this SM (the same head: the
// schedule pairs them), which took the head's whole context and left its warps' states in shared memory
// (attention_tile's FUSED): merged here in attention_store's order, the same bits as its output. At or past it, the
// attention phase ran, and the tile copies the head's columns of its output (att_out). Head 0's part adds the
// residual and goes into the stream in place (y); head h > 0's into parts + (h - 1) n_out. Plain floats only.
template <typename T, int HEAD_DIM, int GROUP, int WARPS, int SEGS, typename R>
__device__ __forceinline__ bool attn_o_tile(Turn u, R& ring, const float* att_out, float* y, float* parts, int n_out,
                                            float* smem) {
  constexpr int K = GROUP * HEAD_DIM, THREADS = WARPS * 32;
  using G = GemvShape<T, K, WARPS, EPI_STORE, SEGS, R::PAGE>;
  using Smem = AttentionSmem<HEAD_DIM, GROUP, WARPS>;
  static_assert(sizeof(Smem) % 16 == 0, "x follows the attention's shared state 16-byte aligned");
  const auto& sm = *reinterpret_cast<const Smem*>(smem);
  float* xs = smem + sizeof(Smem) / 4;  // K: the head's attention output
  float* acc = xs + K;                  // [outs][SEGS]: each row's segment sums
  const int h = u.ins->tile, lo = u.ins->lo, outs = u.ins->hi - lo;
  if (!wait_inputs(u)) return false;
  if (u.pos < KIEC_ATTN_O_BELOW) {
    for (int i = threadIdx.x; i < K; i += THREADS) {
      float mx, lsum, o;
      slice_state(sm, i / HEAD_DIM, i % HEAD_DIM, mx, lsum, o);
      xs[i] = o / lsum;
    }
  } else {
    for (int i = threadIdx.x; i < K; i += THREADS) xs[i] = att_out[h * K + i];
  }
  // head 0's residual, asked for now: its load's latency passes under the pages
  const bool res_mine = h == 0 && (int)threadIdx.x < outs;
  const float y_mine = res_mine ? y[lo + threadIdx.x] : 0.f;
  sync_block();
  trace(u, TR_X_READY);
  if (tracing(u)) trace_row(u)[TR_PAGES_READY] = ring.landed((outs * SEGS + G::PER_PAGE - 1) / G::PER_PAGE);
  float xr[G::ROUNDS][8];  // this warp's segment of x
  load_x_slice<G>(xs, (threadIdx.x >> 5) % SEGS, threadIdx.x & 31, xr);
  const long long waited = gemv_pages<T, G, WARPS, SEGS>(ring, outs * SEGS, xr, acc, traced_step(u));
  if (tracing(u)) trace_row(u)[TR_PAGE_WAIT_CYCLES] = waited;
  sync_block();
  trace(u, TR_SUMS_DONE);
  if (h == 0)
    gemv_epilogue<T, SEGS, EPI_RESIDUAL, false, THREADS>(u, acc, nullptr, y, lo, outs, n_out, y_mine);
  else
    gemv_epilogue<T, SEGS, EPI_STORE, false, THREADS>(u, acc, nullptr, parts + (size_t)(h - 1) * n_out, lo, outs,
                                                      n_out, 0.f);
  trace(u, TR_STORED);
  signal_done(u);
  return true;
}

}  // namespace kiec
