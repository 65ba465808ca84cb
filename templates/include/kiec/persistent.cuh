// The persistent kernel (the monokernel): one block per SM runs its instruction list (ir/passes/persistent.py)
// for every token of a generation, without returning to the host.
//
// An instruction waits until the phase counters it depends on reach their targets for this token (thread 0
// spins on an acquire load), runs one tile, and bumps its own phase's counter (release). Counters only grow, so
// nothing is reset between tokens. Weights never depend on activations: one thread of the block's last
// warpgroup copies every GEMV share into a ring of shared-memory pages ahead of the compute warps (TMA bulk
// copies, mbarriers; ring.cuh), so the memory keeps streaming while they wait on their inputs.
//
// The generated model source defines the instruction and kernel-descriptor formats (persistent_abi.h, from
// codegen/persistent_abi.py) and a Model::run(Turn, ring, smem) that dispatches an instruction to the tile
// functions below and in persistent_gemv.cuh (waiting and signalling: persistent_tile.cuh; the top-p draw:
// device_sampler.cuh). They are inlined into the kernel: separately compiled (noinline) tile functions made
// ptxas spill (1,192 B in attention, ptxas -v, llama-3.2-1b).
#pragma once
#include "attention.cuh"
#include "common.cuh"
#include "device_sampler.cuh"
#include "persistent_args.cuh"
#include "persistent_gemv.cuh"
#include "persistent_tile.cuh"
#include "ring.cuh"

#ifndef KIEC_COMBINE_BATCH
// persist_combine_batch: splits' partials the last arrival loads at once (0: unrolled by 8)
#define KIEC_COMBINE_BATCH 0
#endif

namespace kiec {

// ---- tiles: each waits, computes rows [ins.lo, ins.hi) of its kernel, and signals; false when stopped

// TAGGED: x is tagged words (persist_tagged), this phase's tag; the counter moves relaxed.
template <typename T, bool TAGGED = false>
__device__ __forceinline__ bool embed_tile(Turn u, const T* table, int dim, int vocab, float* x) {
  if (!wait_inputs(u)) return false;
  const int token = min(max(*(volatile int*)(u.a->tokens + u.pos), 0), vocab - 1);
  const unsigned tag = TAGGED ? tag_of(u, u.ins->counter) : 0u;
  for (int i = u.ins->lo + threadIdx.x; i < u.ins->hi; i += block_threads())
    store_value<TAGGED>(x, i, to_float<T>(table[(size_t)token * dim + i]), tag);
  signal_done<TAGGED>(u);
  return true;
}

// Split (ins.tile % SPLITS) of KV head ins.lo: its slice of the context, written as a partial (or, with one split
// in use, as the output), then an arrival on the head's counter in `arrive` (splits the context is too short for
// only arrive). The split that arrives last (SPLITS x (t + 1) arrivals: the counter only grows) merges the
// partials and bumps the phase counter, so that the output projection waits on one hop, not a combine phase.
// Measured and taken out (bench/RESULTS.md, 2026-11-30): the first K/V rows loaded before the wait, the one split
// in use signalling without the arrival, every split signalling with the output projection merging, cache rows
// through the weight ring.
// TAGGED (persist_tagged 2): qkv and the output as tagged words (qkv's tag from the descriptor's tag_x), and the
// phase counter moved relaxed. PIPE (persist_attn_pipeline): attention_slice's next K/V pass loaded under this one.
// SOFTCAP false: a model without a logit softcap (attention_slice leaves its code out). U_SHORT: attention_slice's
// one short pass for a slice that fits it. EARLY_ROPE (persist_attn_early_rope): the rotation's coefficients made
// before the wait (RopeCoeffs; the same bits). KV_FIRST (persist_attn_kv_first): attention_slice's short pass loads
// its earlier rows before q (the same bits). OWNER_MAX > 0 (persist_attn_owner_merges): while at most OWNER_MAX
// splits are in use, the one that holds row pos (the last in use) merges as the others' partials come
// (attention_owner_merge: their tags, not an arrival, say so) and alone moves the phase counter, then (with TAGGED,
// or MIXES below) adds SPLITS to the head's arrivals for all (a release: the row it wrote, for the next step's wait
// on them); the others store their partials and go on. With more in use (a longer context: later in the launch)
// the last to arrive merges.
// NEWEST_FIRST (persist_attn_newest_first): tile split s in use takes chunk (active - 1 - s) and writes that chunk's
// partial slot, so tile split 0 holds row pos (the owner, on the SM spare splits spare) and the merge's order
// is the chunks' (the same bits).
// IDLE (persist_probe_attention_idle, a timing probe: tokens wrong): once its inputs are ready, tile split 0 of each
// head stores zeros as the head's output (tagged where the output is), signals and adds the head's arrivals for all
// splits; the other splits return. What attention's work costs the chain, its hops kept.
// STAGED (persist_combine_staged): the last to arrive combines through shared memory after AttentionSmem
// (attention_combine's `stage`: all the partials in one round trip).
// EARLY_PASS (persist_attn_early_pass): the split's first K/V pass, its rows before pos - 1 (early_rows_end), loaded
// before the wait, so that their round trip passes under it (attention_slice's `early`; the same bits).
// LEAN (persist_attn_lean): attention_slice's LEAN, fewer instructions a key (the same bits).
// MMA_KEYS (persist_attn_mma): attention_slice's passes on the tensor cores, MMA_KEYS rows a warp a pass.
// MMA_AHEAD (persist_attn_mma_ahead): those passes' rows in flight while one computes (the same bits).
// MMA_FIRST (persist_attn_mma_first): 1: those passes' first rows loaded beside q's words (attention_slice; the same
// bits); 2: their rows before pos - 1 loaded here before the wait (early_rows_end: the same SM's wait of the previous
// step acquired them, as EARLY_PASS's), row pos - 1 beside q's words (the same bits).
// PAIRED (persist_tagged_pairs 2, TAGGED, no owner merges): the output as tagged pairs (attention_merge.cuh's
// store_out).
// CONSUMER (persist_attn_consumer_merges, TAGGED): while 2 to CONSUMER splits are in use, every split stores its
// partial as words carrying the phase's full tag, as the owner's others do, and none merges: the output projection's
// tiles do (attention_merge.cuh: merge_partials). The owner (the split holding row pos) signals once its partial is
// stored and arrives for all the splits, as an owner that merges does.
// Q_PAIRS (persist_attn_q_pairs, TAGGED, no head norm, every dim rotated): each thread takes whole rotation pairs of
// q and of the new k (QkvPairs), rotates them in its registers with the coefficients made before the wait
// (as EARLY_ROPE's) and writes the new row to the cache from there: one block barrier between q's words and the
// keys instead of three (attention_slice; the same bits). 2: the coefficients made after the wait, from frequencies
// loaded before it (RopeCoeffs::load_freqs, finish): the tile starts its wait without the frequencies' round trip.
// 3: the coefficients read after the wait from the table its SM made at the step's start (RopeTable).
// With QK_NORM (persist_attn_q_pairs_normed) a warp takes a whole head (attention_slice), and the coefficients are
// those of the dims a lane holds (HeadPairsRope); no words are loaded before the wait (no tag waits).
// SOLO (persist_attn_solo_keys): a context of at most SOLO rows in one split (split_range_of's solo).
template <typename T, int HEAD_DIM, int GROUP, int ROTARY, bool INTERLEAVED, bool QK_NORM, int WARPS, int SPLITS, int U,
          int MIN_KEYS, bool TAGGED = false, bool PIPE = false, bool SOFTCAP = true, int U_SHORT = 0,
          bool EARLY_ROPE = false, bool KV_FIRST = false, int OWNER_MAX = 0, bool NEWEST_FIRST = false,
          bool IDLE = false, bool STAGED = false, bool EARLY_PASS = false, bool LEAN = false,
          int MMA_KEYS = 0, int MMA_AHEAD = 1, int MMA_FIRST = 0, bool PAIRED = false, int CONSUMER = 0,
          int Q_PAIRS = 0, int SOLO = 0>
__device__ __forceinline__ bool attention_tile(Turn u, const float* qkv, T* cache, int kv_heads, int max_seq,
                                            const float* inv_freq, const T* q_norm_w, const T* k_norm_w, float norm_eps,
                                            float scale, float softcap, int window, float* part_o, float* part_ml,
                                            float* out, unsigned* arrive, float* smem) {
  static_assert(!PAIRED || (TAGGED && OWNER_MAX == 0), "attention's output in tagged pairs: tagged, no owner merges");
  static_assert(CONSUMER == 0 || (TAGGED && OWNER_MAX == 0 && !PAIRED && !NEWEST_FIRST && !IDLE),
                "partials merged by the output projection: tagged, no owner merges, pairs, newest first or probe");
  const int g = u.ins->lo, tile_split = u.ins->tile % SPLITS;
  // OWNER_MAX (or CONSUMER) below SPLITS: the owner merges (or signals) early in a launch, the last to arrive later
  // (MIXES); the latter counts on every earlier step's arrivals, so then the owner arrives and every tile waits for
  // them, as with tags
  constexpr int OWNS = OWNER_MAX > 0 ? OWNER_MAX : CONSUMER;
  constexpr bool MIXES = OWNS > 0 && OWNS < SPLITS, OWNER_ARRIVES = OWNS > 0 && (TAGGED || MIXES);
  int lo, hi, active;
  split_range<SPLITS, MIN_KEYS, SOLO>(u.pos, window, tile_split, lo, hi, active);  // the position's alone
  // `split` from here on: the chunk of the context this tile takes and its partial's slot. NEWEST_FIRST
  // (persist_attn_newest_first): the splits in use take the chunks from the last, so tile split 0 holds row pos
  const int split = NEWEST_FIRST && tile_split < active ? active - 1 - tile_split : tile_split;
  if (NEWEST_FIRST && split != tile_split) split_range<SPLITS, MIN_KEYS, SOLO>(u.pos, window, split, lo, hi, active);
  if (KIEC_ATTN_L2_HINT == 1 && split < active)  // its rows of earlier steps, asked of L2 before the wait
    prefetch_split_l2<T, HEAD_DIM>(cache, kv_heads, max_seq, g, lo, hi, u.pos);
  using Pass = KvPass<T, HEAD_DIM, WARPS, U>;
  Pass early;  // (only with EARLY_PASS: unused registers otherwise)
  if (EARLY_PASS && !IDLE && split < active)
    early.load(k_rows<T, HEAD_DIM>(cache, max_seq, g), v_rows<T, HEAD_DIM>(cache, kv_heads, max_seq, g),
               lo + (int)(threadIdx.x >> 5) * Pass::KPW, early_rows_end(hi, u.pos));
  constexpr int FIRST = FirstPassCount<MMA_KEYS, MMA_FIRST, MMA_AHEAD>::value;  // (attention_slice's)
  FirstPasses<T, HEAD_DIM, MMA_KEYS, FIRST> mearly[FIRST > 0 ? FIRST : 1];  // (only with MMA_FIRST 2)
  if constexpr (FIRST > 0 && MMA_FIRST == 2) {
    if (!IDLE && split < active) {
#pragma unroll
      for (int a = 0; a < FIRST; ++a) {
        const int j0 = first_pass_row<WARPS, MMA_KEYS>(lo, (int)(threadIdx.x >> 5), a);
        if (j0 < hi)
          mearly[a].load(k_rows<T, HEAD_DIM>(cache, max_seq, g), v_rows<T, HEAD_DIM>(cache, kv_heads, max_seq, g),
                         j0, early_rows_end(hi, u.pos));
      }
    }
  }
  constexpr bool ROPE_AHEAD = (EARLY_ROPE || Q_PAIRS == 1) && Q_PAIRS < 2;  // (Q_PAIRS 2 and 3: after the wait)
  constexpr bool HEAD_PAIRS = QK_NORM && Q_PAIRS > 0;  // (a warp a head: attention_slice)
  using Rope = std::conditional_t<HEAD_PAIRS, HeadPairsRope<HEAD_DIM>, RopeCoeffs<ROTARY, GROUP, WARPS * 32>>;
  Rope rope;  // (only with EARLY_ROPE or Q_PAIRS: unused registers otherwise)
  if (ROPE_AHEAD && split < active) rope.compute(inv_freq, u.pos);
  if (Q_PAIRS == 2 && split < active) rope.load_freqs(inv_freq);  // (the coefficients after the wait)
  // With tagged words (KIEC_TAGGED) the counters this tile waits through no longer carry the cache rows the
  // previous steps' splits wrote (a relaxed count releases nothing): acquire them from the head's arrivals, which
  // every split of the previous step made with acq_rel (wait_inputs' `extra`: polled before the waits, or beside
  // them with KIEC_WAITS_TOGETHER). The count is there already where this SM ran a tile of this token's chain
  // first (the previous step's phase ended before the chain began); else it waits for the previous step's splits,
  // which wait on nothing this SM has yet to run.
#if KIEC_TAG_WAITS
  static_assert(!HEAD_PAIRS, "persist_attn_q_pairs with head norms loads no words before the wait (no tag waits)");
  QkvWordsOf<HEAD_DIM, GROUP, WARPS, (Q_PAIRS > 0), INTERLEAVED> pre;  // (its words before the wait: their tags are
  // checked after it)
  if (TAGGED && split < active) pre.load(qkv, g, kv_heads, hi == u.pos + 1);
#endif
  if (!wait_inputs(u, arrivals_waited(u.t) || (MIXES && u.t > 0) ? arrive + g : nullptr,
                   (unsigned)SPLITS * (unsigned)u.t))
    return false;
  if constexpr (IDLE) {
    if (tile_split == 0) {
      const unsigned tag = TAGGED ? tag_of(u, u.ins->counter) : 0u;
      for (int i = threadIdx.x; i < GROUP * HEAD_DIM; i += WARPS * 32)
        store_out<TAGGED, PAIRED>(out, g * GROUP * HEAD_DIM + i, 0.f, tag);
      signal_done<TAGGED>(u);
      if (threadIdx.x == 0) red_release<SPLITS>(arrive + g);
    }
    return true;
  }
#ifdef KIEC_SCRATCH_BYTES
  static_assert(sizeof(AttentionSmem<HEAD_DIM, GROUP, WARPS>) <= KIEC_SCRATCH_BYTES,
                "codegen/persistent.py sized the tiles' scratch below AttentionSmem");
#endif
  const unsigned mine = TAGGED ? tag_of(u, u.ins->counter) : 0u;
  // (the rule the output projection takes too; CONSUMER >= 2 first: the call alone, though it folds to false,
  // moved 876 lines of llama-3.2-1b's default SASS)
  const bool by_consumer = CONSUMER >= 2 && consumer_merges<CONSUMER>(active);  // (no split merges)
  const bool by_owner = (OWNER_MAX > 0 && active <= OWNER_MAX) || by_consumer;
  const bool merges = by_owner && split == active - 1;  // (with by_consumer: the owner, which signals)
  const bool merges_others = merges && active > 1 && !by_consumer;  // (alone in use, the owner writes the output)
  bool ok = true;
  if (split < active) {
    auto& sm = *reinterpret_cast<AttentionSmem<HEAD_DIM, GROUP, WARPS>*>(smem);
#if KIEC_TRACE_ATTENTION  // (a lambda that does nothing still changed the default kernel's SASS)
    auto marks = [&](int k) { trace(u, k ? TR_STORED : TR_SUMS_DONE); };
#else
    NoMarks marks;
#endif
    if (Q_PAIRS == 2) rope.finish(u.pos);
#ifdef KIEC_ROPE_TABLE
    if constexpr (Q_PAIRS == 3) rope.from_table(RopeTable<KIEC_ROPE_TABLE>::get());
#else
    static_assert(Q_PAIRS != 3, "persist_attn_q_pairs 3 reads the kernel's rope table (KIEC_ROPE_TABLE)");
#endif
    attention_slice<T, HEAD_DIM, GROUP, ROTARY, INTERLEAVED, QK_NORM, WARPS, U, TAGGED, PIPE, SOFTCAP, U_SHORT,
                    KV_FIRST, EARLY_PASS, LEAN, MMA_KEYS, MMA_AHEAD, MMA_FIRST, (Q_PAIRS > 0)>(
        sm, qkv, cache, kv_heads, max_seq, inv_freq, q_norm_w, k_norm_w, norm_eps, scale, softcap, g, u.pos, lo, hi,
        TAGGED ? tag_of(u, u.desc->tag_x) : 0u, ROPE_AHEAD || Q_PAIRS ? &rope : nullptr, marks,
#if KIEC_TAG_WAITS
        TAGGED ? &pre : nullptr,
#else
        nullptr,
#endif
        EARLY_PASS ? &early : nullptr, MMA_FIRST == 2 ? mearly : nullptr);
    if (merges_others) {
      trace(u, TR_X_READY);  // (its slice done: what follows, the wait for the others' partials and the merge, is
      // the tail trace_summary.py's attention views time, as the last arrival's merge without the owner)
      ok = attention_owner_merge<HEAD_DIM, GROUP, WARPS, SPLITS, TAGGED>(
          sm, g, active, part_o, part_ml, out, word_tag(u, u.ins->counter), mine,
          [&] { return stop_reached(u); });
    } else {
      attention_store<HEAD_DIM, GROUP, WARPS, SPLITS, TAGGED, PAIRED>(
          sm, g, split, active, part_o, part_ml, out, mine, by_owner ? word_tag(u, u.ins->counter) : 0u);
    }
  }
  if (!merges_others) trace(u, TR_X_READY);
  if (by_owner) {
    if (!ok) return false;  // (the generation ended: block-uniform, attention_owner_merge's vote)
    if (!merges) {
      sync_block();  // (the block's reads of its shared memory done before the next tile's writes)
      trace(u, TR_DONE);
      return true;
    }
    signal_done<TAGGED>(u);
    if (OWNER_ARRIVES && threadIdx.x == 0) red_release<SPLITS>(arrive + g);  // after the signal: off the chain
    return true;
  }
  __shared__ int last;
  sync_block();
  if (threadIdx.x == 0) {  // releases this block's partial, acquires the others' when it is the last
    unsigned before;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(arrive + g) : "memory");
    last = before + 1 == (unsigned)SPLITS * (unsigned)(u.t + 1);
  }
  sync_block();
  if (!last) {
    trace(u, TR_DONE);
    return true;
  }
  using Stage = CombineStage<HEAD_DIM, GROUP, SPLITS>;
  constexpr size_t STAGE_AT = (sizeof(AttentionSmem<HEAD_DIM, GROUP, WARPS>) + 15) / 16 * 16;
#ifdef KIEC_SCRATCH_BYTES
  static_assert(!STAGED || STAGE_AT + sizeof(Stage) <= KIEC_SCRATCH_BYTES,
                "codegen/persistent.py sized the tiles' scratch below AttentionSmem and the combine's stage");
#endif
  Stage* stage = STAGED ? reinterpret_cast<Stage*>(reinterpret_cast<char*>(smem) + STAGE_AT) : nullptr;
  if (active > 1)
    attention_combine<HEAD_DIM, GROUP, SPLITS, TAGGED, KIEC_COMBINE_BATCH, PAIRED>(g, active, part_o, part_ml, out,
                                                                                  mine, stage);
  signal_done<TAGGED>(u);
  return true;
}

// ---- select: the token after this step

#ifndef KIEC_SELECT_HOST_LATE
#define KIEC_SELECT_HOST_LATE 0
#endif
// The token after the step at `pos`: the prompt's next token, or the argmax / the draw; EOS and the host's stop
// end the generation. Publishes the token to the host.
// KIEC_SELECT_HOST_LATE (persist_select_host_late): the host's stop flag is read before the wait (a stop the host asks
// for is seen at some step either way), and the host's copy of the token is written after the signal, with no system
// fence but the stop's (the host reads the tokens in order as they arrive: the EOS and host-stop GPU test passed so,
// thirty-sixth session calls 1, 2 and 9; no fence's cost was timed alone); without it both
// round trips over the host's bus, and the fence after the write, come before the signal that the next token's
// embedding waits on. Thread 32 (warp 1), not thread 0, reads the flag and publishes: with thread 0 reading it, the
// flag's load in flight held warp 0's polls back (the wait's hop 0.54 -> 1.38 us on llama-3.2-1b, 0.35 -> 0.96 on
// smollm2-135m, 2026-12-04 thirty-sixth session's trace at position 64); the barrier before thread 0's release orders
// thread 32's device writes before the signal, as every tile's.
__device__ __forceinline__ bool select_tile(Turn u, const float* logits, int vocab, float* smem) {
  const PersistentArgs& a = *u.a;
  constexpr int PUBLISHER = KIEC_SELECT_HOST_LATE ? 32 : 0;  // the thread that decides and publishes
  static_assert(PUBLISHER < KIEC_COMPUTE_THREADS, "select's publisher is a compute thread");
  int host_stop = 0;
  if (KIEC_SELECT_HOST_LATE && threadIdx.x == PUBLISHER) host_stop = *a.host_stop;  // (its round trip under the wait)
  if (!wait_inputs(u)) return false;
  const unsigned long long key = *(volatile unsigned long long*)(a.argmax + u.pos);
  int chosen = argmax_index(key);
  if (a.gen.temperature > 0.f && u.pos + 1 >= a.n_prompt)
    chosen = sample_block(logits, vocab, argmax_value(key), a.gen, u.pos, smem);
  const int next = u.pos + 1;
  bool ends = false;  // (the publisher's) the generation ends after this token, before its last position
  if (threadIdx.x == PUBLISHER) {
    if (!KIEC_SELECT_HOST_LATE) a.host_tokens[u.pos] = chosen;
    if (next >= a.n_prompt) {
      a.tokens[next] = chosen;
      bool stop = (KIEC_SELECT_HOST_LATE ? host_stop : *a.host_stop) != 0;
      for (int i = 0; i < a.gen.n_eos; ++i) stop |= chosen == a.gen.eos[i];
      if (stop && next < a.p_end) {
        *(volatile int*)a.stop_pos = next;
        ends = true;
        if (!KIEC_SELECT_HOST_LATE) {
          __threadfence_system();
          a.host_tokens[next] = -2;
        }
      }
    }
    if (!KIEC_SELECT_HOST_LATE) __threadfence_system();
  }
  signal_done(u);
  if (KIEC_SELECT_HOST_LATE && threadIdx.x == PUBLISHER) {
    a.host_tokens[u.pos] = chosen;
    if (ends) {  // (the stop position before the end mark, as by default)
      __threadfence_system();
      a.host_tokens[next] = -2;
    }
  }
  return true;
}

// One block per SM: warps [0, COMPUTE_WARPS) run its list token after token (Model::run dispatches an
// instruction); one more warpgroup streams the weights (stream_weights: one thread of it works). Registers move
// from the streaming warpgroup to the compute warps (setmaxnreg): the launch bounds alone give every thread 168
// (a 12-warp block; at that ptxas spilled 132 B for llama-3.2-1b before setmaxnreg, ptxas -v). Shared memory: the
// ring's barriers, its pages, then the tiles' scratch.
constexpr int STREAM_WARPS = 4, STREAM_REGS = 40;
template <int COMPUTE_WARPS>
struct ComputeRegs {  // what the register file leaves the compute warps, in steps of 8, at most 248
  static constexpr int free = (65536 / 32 - STREAM_WARPS * STREAM_REGS) / COMPUTE_WARPS / 8 * 8;
  static constexpr int value = free > 248 ? 248 : free;
};

#ifndef KIEC_STAGE_INSTRS
#define KIEC_STAGE_INSTRS 0
#endif
// KIEC_STAGE_INSTRS (persist_stage_instrs): each tile's instruction and kernel descriptor are copied into shared
// memory tiles ahead (cp.async by warp 1), so that a tile's first reads are on chip. Why: every wait's acquire poll
// invalidates the SM's L1 (CCTL.IVALL in the SASS), so a tile's instruction fields, its descriptor (which the
// instruction names) and then its waits came from L2 one dependent round trip after another before its first poll.
// The SM whose tile ended a phase last started its next tile 0.13-0.16 us later and saw its inputs 0.8-1.6 us after
// that phase's end, where the next phase's median tile saw them at 0.45-0.64 (llama-3.2-1b, position 64, the
// thirty-second session's trace: bench/results/2026-12-04/s33_last_sm_ready.py), and it was often the next phase's
// last too.
// Tile k reads instruction slot k % 5 and descriptor slot k % 4. At tile k's start warp 1 waits for the copies it
// issued at tile k - 1's (instruction k + 2, descriptor k + 1: long landed), then issues instruction k + 3 and the
// descriptor of instruction k + 2 (whose copy it just waited for); the block barriers of tile k (every tile waits on
// its inputs behind one) publish them before tile k + 1 reads them. Tile k - 1's slots are left alone (a thread may
// still read them after that tile's last barrier, e.g. thread 0 its counter). The first tiles are staged before the
// loop.
struct InstrStage {
  static constexpr int INS = 5, DESC = 4;
  __device__ __forceinline__ static Instr* ins() {
    __shared__ __align__(16) Instr slots[INS];
    return slots;
  }
  __device__ __forceinline__ static KernelDesc* desc() {
    __shared__ __align__(16) KernelDesc slots[DESC];
    return slots;
  }
  // warp 1's lanes: tile k's instruction (a->instrs[at], at = begin + k % n) into its slot, 11 copies of 8 bytes
  __device__ __forceinline__ static void copy_instr(const PersistentArgs& a, int at, int k, int lane) {
    static_assert(sizeof(Instr) % 8 == 0 && sizeof(Instr) / 8 <= 32, "an instruction in 8-byte copies, a lane each");
    if (lane < (int)(sizeof(Instr) / 8))
      asm volatile("cp.async.ca.shared.global [%0], [%1], 8;"
                   ::"r"(smem_addr(reinterpret_cast<char*>(ins() + k % INS) + 8 * lane)),
                   "l"(reinterpret_cast<const char*>(a.instrs + at) + 8 * lane) : "memory");
  }
  // the descriptor of tile k's instruction (its slot landed), 8 copies of 16 bytes
  __device__ __forceinline__ static void copy_desc(const PersistentArgs& a, int k, int lane) {
    static_assert(sizeof(KernelDesc) % 16 == 0 && sizeof(KernelDesc) / 16 <= 32, "a descriptor in 16-byte copies");
    if (lane < (int)(sizeof(KernelDesc) / 16))
      asm volatile("cp.async.ca.shared.global [%0], [%1], 16;"
                   ::"r"(smem_addr(reinterpret_cast<char*>(desc() + k % DESC) + 16 * lane)),
                   "l"(reinterpret_cast<const char*>(a.kernels + ins()[k % INS].kernel) + 16 * lane) : "memory");
  }
  __device__ __forceinline__ static void landed() { asm volatile("cp.async.wait_all;" ::: "memory"); }
  // Before the loop, warp 1 (the block's barrier after it publishes): instructions 0 .. 2, descriptors 0 and 1.
  __device__ __forceinline__ static void first(const PersistentArgs& a, int begin, int n, int lane) {
    for (int k = 0; k < 3; ++k) copy_instr(a, begin + k % n, k, lane);
    landed();
    __syncwarp();
    for (int k = 0; k < 2; ++k) copy_desc(a, k, lane);
    landed();
  }
  // At tile k's start (instruction i of the block's begin .. end), warp 1. Instruction k + 3's place follows i
  // (instr_ahead: a wrap into the next step's list, not a division each tile).
  __device__ __forceinline__ static void ahead(const PersistentArgs& a, int begin, int end, int i, int k, int lane) {
    landed();
    __syncwarp();  // (instruction k + 2, copied by other lanes, read below)
    copy_instr(a, instr_ahead(begin, end, i, 3), k + 3, lane);
    copy_desc(a, k + 2, lane);
  }
};

template <typename Model, typename R, int COMPUTE_WARPS, int L2_AHEAD>
__global__ void __launch_bounds__((COMPUTE_WARPS + STREAM_WARPS) * 32, 1) persistent_kernel(PersistentArgs a) {
  static_assert(COMPUTE_WARPS % 4 == 0, "the compute warps are whole warpgroups (setmaxnreg)");
  extern __shared__ __align__(128) char smem_raw[];
  __shared__ int stopped;
  __shared__ volatile int quit;
  R ring;
  float* smem = reinterpret_cast<float*>(ring.carve(smem_raw));
  const int begin = a.starts[blockIdx.x], end = a.starts[blockIdx.x + 1];
#if KIEC_PAGE_PACE_AHEAD_NS
  __shared__ volatile int consumed_at;
  ring.at = &consumed_at;
  ring.span = end - begin;
#endif
  if (threadIdx.x == 0) {
    ring.init(COMPUTE_WARPS * 32);
    quit = 0;
#if KIEC_PAGE_PACE_AHEAD_NS
    consumed_at = begin;  // (t 0, the first instruction)
#endif
  }
  __syncthreads();  // the last one with the streaming warps
  if (threadIdx.x >= COMPUTE_WARPS * 32) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(STREAM_REGS));
    if (threadIdx.x == COMPUTE_WARPS * 32) stream_weights<R, L2_AHEAD>(a, ring, begin, end, &quit);
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(ComputeRegs<COMPUTE_WARPS>::value));
#ifdef KIEC_ROPE_TABLE  // (persist_attn_q_pairs 3: the frequencies kept, the coefficients made at each step's start)
  RopeTable<KIEC_ROPE_TABLE>::get().keep(reinterpret_cast<const float*>(a.weights + KIEC_ROPE_FREQS));
#endif
#if KIEC_STAGE_INSTRS
  const bool stager = (threadIdx.x >> 5) == 1 && end > begin;
  if (stager) InstrStage::first(a, begin, end - begin, threadIdx.x & 31);
  int k = 0;  // the tiles run so far (a launch runs fewer than 2^31)
#endif
  for (int pos = a.p0, t = 0; pos < a.p_end; ++pos, ++t) {
    if (threadIdx.x == 0) stopped = *(volatile int*)a.stop_pos <= pos;
#ifdef KIEC_ROPE_TABLE  // (the last step's readers read it before a barrier of their tile: none is still at it)
    RopeTable<KIEC_ROPE_TABLE>::get().make(pos);
#endif
#if KIEC_TAG_WAITS
    if (threadIdx.x == 0) stop_view() = StopView{a.stop_pos, pos};  // (tag spins look at it: common.cuh)
#endif
    sync_block();
    if (stopped) break;
    const bool traced = KIEC_TRACE_CODE && a.trace && pos == a.trace_pos;  // (0: every traced branch compiled out)
    int i = begin;
    for (; i < end; ++i) {
#if KIEC_STAGE_INSTRS
      if (stager) InstrStage::ahead(a, begin, end, i, k, threadIdx.x & 31);
      const Turn u{InstrStage::ins() + k % InstrStage::INS, t, pos, &a, traced, i,
                   InstrStage::desc() + k % InstrStage::DESC};
      ++k;
#else
      const Turn u{a.instrs + i, t, pos, &a, traced, i, a.kernels + a.instrs[i].kernel};
#endif
      trace(u, TR_START);
      if (!Model::run(u, ring, smem)) break;
    }
    if (i < end) break;
  }
#if KIEC_STAGE_INSTRS
  if (stager) InstrStage::landed();  // (no copy still in flight when the block ends)
#endif
  if (threadIdx.x == 0) quit = 1;
}

}  // namespace kiec
