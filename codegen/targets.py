"""TargetParams: every tile and launch constant of one GPU, in one table (the rules hold none)."""
from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass


@dataclass(frozen=True)
class TargetParams:
    arch: str  # nvcc's sm_XX / gfx...
    sms: int  # multiprocessors
    gemv_warps: int  # warps per GEMV block
    gemv_rows: int  # outputs per warp pass
    gemv_blocks_per_sm: int  # grid cap for GEMVs (a block recomputes its prologue; more blocks = more L2 reads)
    gemv_min_blocks: int  # __launch_bounds__ minimum blocks per SM: sets the register budget ptxas schedules for
    gemv_early_loads: int  # 1: a GEMV's first weight batch loads into registers before waiting on the previous kernel
    attn_warps: int
    attn_blocks: int  # target blocks per attention launch: splits = attn_blocks // kv_heads
    attn_keys: int  # keys each lane group loads before the first use (halved per doubling of the group above 4)
    attn_min_keys: int  # rows per split at least: a short context uses one block per KV head and no combine
    attn_l2_prefetch: int  # 1: each attention split asks L2 for its cache rows of earlier steps before its wait;
    # 2 (persistent): the weight stream asks as it walks past the split, a phase or so earlier
    gencode: str
    prefetch_bytes: int  # weights a GEMV pulls into L2 (beyond its register batch) before waiting on the previous one
    persist_warps: int  # persistent mode: compute warps of the one block per SM (one more streams the weights)
    persist_page_bytes: int  # persistent: bytes of one page of the shared-memory weight ring (one TMA copy)
    persist_stages: int  # persistent: pages in the ring at most (fewer where the tiles' scratch needs the room)
    persist_l2_ahead_bytes: int  # persistent: bytes past a full ring the streaming thread asks L2 for (per SM)
    persist_l2_ahead_max_width: int  # persistent: a model wider than this (its embedding's row) asks L2 for none
    persist_stop_poll_every: int  # persistent: counter polls between two looks at the stop position (1: each)
    persist_poll_sleep_ns: int  # persistent: > 0: a waiting thread sleeps about this long between counter polls
    persist_counter_stride: int  # unsigned ints between two phases' counters (32: one 128-byte line each)
    persist_reduce_batch: int  # persistent GEMV: items a warp sums over its lanes together (1: each on its own)
    persist_reduce_batch_head: int  # persistent: > 0: the LM head's batch instead (its long shares; 0: the above)
    persist_copy_batch: int  # persistent GEMV: 16-byte loads in flight a thread when it copies a tagged x (no norm)
    persist_norm_batch: int  # persistent GEMV: words of a tagged x a thread loads at once for a norm
    # persistent, with persist_attn_consumer_merges: the output projection's 16-byte loads of partials' o words a lane
    # at once (attention_merge.cuh: merge_partials; a head's at least)
    persist_merge_loads: int
    persist_warp_copy_rounds: int  # persistent GEMV: rounds of a warp's own copy of tagged pairs loaded at once
    persist_evict_first: int  # persistent: 1: weight copies are first out of L2; 0: L2's default policy
    persist_walk_kept: int  # persistent: 1: the weight stream keeps a share's page walk (ring.cuh: PageWalk's KEPT)
    persist_page_pace_ns: int  # persistent: > 0: the weight stream copies a page at most every this many ns
    # persistent: > 0: that pace instead of a nonzero persist_page_pace_ns where some attention keeps its FMA passes
    # (no tensor-core passes: codegen/persistent.py's mma_keys 0): a stand-in that tells qwen3-1.7b from the llama
    # models, not a cause (the table's comment says what was measured)
    persist_page_pace_fma_ns: int
    # persistent: paces of their own for some kinds of GEMV's pages, "kind:ns+kind:ns..." (no "=" or ",": a field's
    # value in scripts/variants.py's lists) with kinds qkv, o (the output projection), gate_up, down and head (the LM
    # head); "" (or a kind left out): the paced stream's pace
    persist_page_pace_kinds: str
    # persistent: a model narrower than this (its embedding's row) streams with neither (the walk read each page,
    # unpaced), whatever persist_walk_kept and persist_page_pace_ns say
    persist_paced_min_width: int
    # persistent, with a pace: > 0: the peak memory bandwidth (GB/s, memory clock x bus width) the paces were measured
    # best at; the runtime scales them by it over the GPU's own, so that each SM keeps its share of the memory's rate
    # on another GPU of the arch (0: the paces as compiled)
    persist_pace_ref_gbps: int
    # persistent, with a pace and L2 lookahead: 1: the pages asked of L2 past a full ring are paced too, on the ring
    # copies' clock (unpaced, they go out in a burst each time the ring fills)
    persist_l2_ahead_paced: int
    # persistent, with a pace and L2 lookahead: 1: the ring's copy of a page already asked of L2 goes out at once, not
    # on the pace (the pace is the memory's rate; a page waiting in L2 does not take its share of it again)
    persist_l2_ahead_burst: int
    # persistent, with a pace: > 0: the pace while the stream's page is 2 or more instructions past the GEMV whose
    # pages the compute warps are on (the ring's refill during QKV, attention and the output projection)
    persist_page_pace_ahead_ns: int
    # persistent, with the ahead pace: > 0: it paces only the pages of positions from this one on (attention's slices
    # grow with the context: at short context there are no K/V loads for the refill to queue ahead of); 0: all
    persist_page_pace_ahead_from_pos: int
    persist_x_direct: int  # persistent: 1: a GEMV without a norm loads its x slices from memory (no x scratch);
    # 2: only those whose warps hold a segment each (the down projection, K 8192, on llama-3.2-1b)
    # persistent: > 0: a GEMV without a norm whose warps hold a segment each, K at least this, x not loaded straight
    # from memory, has each warp copy its own segment through 1 KB of the scratch (gemv_x.cuh:
    # load_x_slice_warp_copy; the same bits): no block barrier after the copy, and its scratch 8 KB, not K floats (a
    # deeper ring where the down projection's x set the scratch, which gained nothing measured); 0: never
    persist_x_warp_copy_min_k: int
    persist_waits_previous_first: int  # persistent: 1: an instruction polls the previous token's waits first
    persist_waits_together: int  # persistent: 1: warp 0's lanes poll an instruction's waits at once, a lane each
    persist_attn_pipeline: int  # persistent: 1: attention loads its next K/V pass while it computes this one
    persist_attn_keys: int  # persistent: keys a pass per lane group (attention's unrolled step); 0: graph mode's
    persist_attn_short_keys: int  # persistent: > 0: a split one pass of this many keys covers runs that pass
    persist_attn_early_rope: int  # persistent: 1: attention's RoPE coefficients made before it waits for its inputs
    persist_attn_kv_first: int  # persistent: 1: a short attention pass loads its earlier rows before q (short keys on)
    # persistent: 1: where attention's q and k are tagged, have no head norm and every dim rotated, a thread takes whole
    # rotation pairs, rotates them in its registers and writes the new row to the cache itself: one block barrier
    # between q's words and the keys instead of three (attention.cuh: attention_slice's Q_PAIRS; the same bits); 2:
    # the rotation's coefficients made after the tile's wait, from frequencies loaded before it (1: before it); 3:
    # read after the wait from a table of the step's coefficients each SM makes at the step's start, where the
    # attentions it applies to share one rope (attention_rows.cuh: RopeTable; else 2)
    persist_attn_q_pairs: int
    # persistent: 1: persist_attn_q_pairs where q and k have head norms too (qwen3), not interleaved, heads a
    # multiple of 64 wide, fewer query heads a KV head than warps and no tag waits: a warp takes a whole head (warp h
    # query head h, warp GROUP the new key and value), norms and rotates it in its registers: one block barrier
    # between q's words and the keys instead of four (attention.cuh: attention_slice's Q_PAIRS with QK_NORM; the same
    # bits)
    persist_attn_q_pairs_normed: int
    # persistent: > 0: while at most this many splits of a KV head are in use, the one holding the position's row
    # (the last) merges them, their partials read as tagged words and its own kept on chip; the others only store
    # theirs (persistent.cuh: attention_tile's OWNER_MAX). 0: the split that arrives last merges, always
    persist_attn_owner_merges: int
    # persistent: >= 2: while 2 to this many splits of a KV head are in use, none merges them: each stores its partial
    # as tagged words and the output projection's tiles merge them as they make their x (attention_merge.cuh:
    # merge_partials; the same bits); the owner signals and arrives for all. 0: off. Tagged words, no owner merges
    persist_attn_consumer_merges: int
    # persistent: > 0: the output projection gives no rows to the SMs of each KV head's first N attention splits (the
    # ones in use at short context), the others sharing their rows (ir/passes/persistent.py: schedule's spare_splits)
    persist_attn_spare_splits: int
    # persistent: 1: a KV head's split s in use takes the context's chunk (in use - 1 - s), so split 0 holds the
    # position's row: the owner (persist_attn_owner_merges) is always split 0, the one spare splits spare. Partials
    # keep their chunk's slot, so the merge's order and bits are the default's (persistent.cuh: attention_tile)
    persist_attn_newest_first: int
    # persistent: > 0: the last split to arrive loads this many splits' partials at once, then folds them in order
    # (the same bits; attention_merge.cuh: attention_combine's BATCH); 0: its loop unrolled by 8
    persist_combine_batch: int
    # persistent: 1: a GEMV with a norm whose every warp holds all of x (one segment, 8 warps, x untagged) normalizes
    # it in each warp's registers, loaded straight from memory: no x in the scratch, no block barrier before the dots
    # (gemv_x.cuh: WarpNorm; the same bits)
    persist_norm_in_warps: int
    # persistent: 1: a GEMV whose tiles give some warp more than one item, with x untagged and rows of up to 96 chunks
    # a segment, takes an item a half-warp, two a warp at once (gemv_pages.cuh: gemv_pages_half; other bits)
    persist_dot_half_warps: int
    # persistent: a GEMV warp takes up to this many of its items at once (a power of two; 1: one after another): their
    # pages waited for first, their loads and FMAs side by side, their sums over the warp together (gemv_pages.cuh:
    # gemv_pages_items; the same bits). Each GEMV takes the most its ring's depth and persist_dot_item_chunks allow
    persist_dot_items: int
    # persistent: with persist_dot_items, a step's 16-byte chunks a lane at most (items x the item's rounds: registers)
    persist_dot_item_chunks: int
    # persistent: persist_dot_items only for the GEMVs where a warp of a tile has at least this many items (1: all)
    persist_dot_items_min_share: int
    # persistent: 1: each tile's instruction and kernel descriptor copied into shared memory tiles ahead (cp.async), so
    # that its first reads before its wait are on chip, not L2 round trips one after another (persistent.cuh:
    # InstrStage; the same bits)
    persist_stage_instrs: int
    # persistent: 1: a GEMV's norm weights, loaded before its wait, stay bf16 until the norm, so that their conversion
    # does not hold the polling warp back for their round trip (gemv_x.cuh: Prologue; the same bits)
    persist_norm_w_raw: int
    # persistent: 1: a GEMV's norm (held weights) writes x times its weights, not yet times the norm's scale; the
    # warps' sums of squares are added after the dot products and the scale multiplies each row's sum in the
    # epilogue (gemv_x.cuh: Prologue::normalize), so that two block barriers and the sum's shuffles leave the
    # chain from x to the dot products (other bits: the scale applied after the sums)
    persist_norm_late_scale: int
    # persistent: 1: select reads the host's stop flag before its wait and writes the host's copy of the token after its
    # signal, so that neither round trip over the host's bus (a mapped pinned read, a write and its system fence) is
    # on the chain from the LM head to the next token's embedding (persistent.cuh: select_tile; the same tokens)
    persist_select_host_late: int
    persist_tagged: int  # persistent: 1: GEMV-to-GEMV values as tagged words, their writers' counters relaxed;
    # 2: attention's input (QKV's output) and output too
    persist_tagged_min_width: int  # persistent: a model narrower than this (its embedding's row) gets no tags
    # persistent: a model narrower than persist_narrow_width (its embedding's row) runs persist_x_direct,
    # persist_attn_owner_merges, persist_attn_newest_first, persist_combine_batch, persist_stages,
    # persist_attn_mma_ahead, persist_attn_mma_first, persist_tag_waits and (persistent mode only) attn_min_keys with
    # these values instead (codegen/persistent_rules.py: for_model); 0: every model the fields above
    persist_narrow_width: int
    persist_x_direct_narrow: int
    persist_attn_owner_merges_narrow: int
    persist_attn_newest_first_narrow: int
    persist_combine_batch_narrow: int
    persist_stages_narrow: int
    persist_attn_mma_ahead_narrow: int
    persist_attn_mma_first_narrow: int
    persist_tag_waits_narrow: int
    persist_attn_min_keys_narrow: int
    # persistent: 1: a tagged value takes 4 bytes an element instead of 8, its tag the parity of its write in the
    # lowest mantissa bit (values to 23 bits); its slot its own, zeroed before each launch (ir/passes/tags.py:
    # tag_parity)
    persist_tag_parity: int
    # persistent: 1 (with tags): a tile reading tagged values skips the wait on their writer's counter where nothing
    # else needs it (ir/passes/tags.py: tag_covered) and loads the words until every one carries its tag,
    # stale ones again together (common.cuh: settle_tags), looking at the stop position as it spins; GEMV prologues
    # and attention splits load their first words before the waits they keep. 2: also a GEMV's waits that guard only
    # its writes are polled before its epilogue (ir/passes/tags.py: late_waits; persistent_tile.cuh: wait_writes).
    # Off: slower on every model measured (bench/RESULTS.md, 2026-11-30 eleventh session: llama-3.2-1b 0.778 / 0.798
    # ms at 1 / 2 vs 0.761 in f330442's call 5; smollm2-135m with tags 0.544 vs 0.519 at 1 in e3615a3's call 6): the
    # median tile sees its x sooner, the slowest one later, and a phase ends with its slowest tile. On for narrow
    # models since the forty-eighth session (persist_tag_waits_narrow)
    persist_tag_waits: int
    # persistent, with tag waits: below 100, such a tile still waits for all but this percentage (rounded up) of its
    # writer's tiles, then spins on the words over the last ones only (fewer loads again); 100: no wait at all
    persist_tag_lead: int
    # persistent, a timing probe, never for use: 1: a tile moves its counter with a relaxed add, without waiting for
    # its stores' acknowledgement, so a consumer may read stale data (tokens may be wrong). It times the handover a
    # tagged design would have (consumers checking their data's tags instead of the counter's release)
    persist_probe_relaxed_signal: int
    # persistent, a timing probe (the same tokens): 1: before a GEMV tile waits on its inputs, its compute warps run
    # the dot products' code dry over the tile's first page if it has landed (x zeros, the sums overwritten after),
    # so that the code is fetched before x is ready. What it times: whether a tile's first item waits on its code
    # (0.65-0.72 us on llama-3.2-1b, persist_trace_dots, thirty-first session, where bench/gemv_compute.cu's 24-row
    # QKV tile takes 1.70 us for 6 items a warp, ~0.3 an item). Timed on smollm2-135m (thirty-second session): the
    # token 7.3% slower (0.503 vs 0.469 ms), so the dry pass costs more than any wait on code it saves; and that
    # traced first item was mostly warp 0's, held back by thread 0's count of the landed pages (Ring::landed_warp)
    persist_probe_warm_code: int
    # persistent: 1: a GEMV warp looks at its share's first pages at once (lane k at page k) and takes those landed
    # without a wait each (gemv_pages.cuh: KIEC_PAGE_LOOK; the same bits)
    persist_page_look: int
    # persistent, a timing probe: bit 1: every GEMV tile's dot products run twice (the second's sums added times 0:
    # the same tokens), bit 2: its prologue (norm or x copy) twice; bit 4: the dots of the GEMVs beside an attention
    # only (QKV, the output projection), bit 8: the other GEMVs' dots only. An untraced token's time with it, less
    # without, is what that part costs the chain (the traced step runs 1-6% longer than the others since 6a42600)
    persist_probe_twice: int
    # persistent: 1: the kernel carries the code of kiec_trace's recording (Engine.trace, scripts/trace_summary.py,
    # variants.py's --trace): a step at the armed position stamps each instruction's moments, and every tile tests
    # for it. 0: none of that code (7.1% fewer instructions on llama-3.2-1b, 8208 -> 7624, 6.4% on smollm2-135m,
    # 8168 -> 7648; llama-3.1-8b 6.3%, qwen3-1.7b 6.1%; scripts/sass.py at 0265e3c; the same 168 registers, no
    # spills on llama-3.2-1b) and Engine.trace refused. persist_trace_attention, _dots and _stream bring it with
    # them (they stamp more of a traced step)
    persist_trace_code: int
    # persistent, a timing aid: 1: in a traced step (Engine.trace) each attention split also stamps the moment its q
    # is rotated and its new row written (sums_done) and the moment its keys are done (stored); trace_summary.py
    # splits attention's time at them. The kernel runs those two stamps' branches in every step
    persist_trace_attention: int
    # persistent, a timing aid: 1: in a traced step each GEMV tile also stamps its slice of x loaded, the earliest
    # and latest warp's first item summed (and the latest's warp) and the earliest and latest warp's last
    # (persistent_abi.py's TRACE_DOT_SLOTS); trace_summary.py cuts the dot products' span at them. Off, the kernel
    # has none of their code
    persist_trace_dots: int
    # persistent, a timing aid: 1: in a traced step the weight stream also stamps, per GEMV instruction, when it came
    # to its first page and issued its last, and the ns it waited for a free page of the ring (full: the compute
    # warps behind) and on the pace (persistent_abi.py's TRACE_STREAM_SLOTS); trace_summary.py's stream view. The
    # stream's page loop then tests the traced position each page: no cost seen (thirty-fourth session, llama-3.2-1b
    # 0.696 ms with and without; bench/RESULTS.md). Off, the kernel has none of its code
    persist_trace_stream: int
    # persistent, a timing probe, never for use (tokens wrong): what a down projection cut by its K would cost and
    # save. Cut so, each SM would multiply its own gate/up tile's SiLU-mul outputs by those columns of the down
    # weights and add its part of every output into the residual stream (int64 fixed-point adds in L2, so that the
    # sum does not depend on their order), and the hand-over between gate/up and down would go. 1: the down
    # projection (a GEMV whose x a SiLU-mul GEMV writes) waits for none of its gate/up phase's tiles: each SM's
    # down tile starts once its own gate/up tile is done, and reads an x partly stale. 2: also each such tile adds 1
    # to every one of its GEMV's outputs in a scratch vector of int64 (red.add) before its signal, as the cut
    # projection's tiles would add their parts
    persist_probe_mlp_local: int
    # persistent, a timing probe, never for use (tokens wrong): what fusing attention with the output projection by KV
    # head would save at most. Fused so, each of a KV head's split SMs would merge its head's partials itself and
    # multiply them by its slice of the projection's columns for that head, adding into the residual stream, and the
    # hand-over between attention and the output projection would go. 1: the output projection (a GEMV whose x an
    # attention kernel writes) waits for none of attention's tiles: each SM's output-projection tile starts once its
    # own attention tile is done, and reads an x partly stale. Its x must be untagged (persist_tagged 0 or 1: tagged
    # words would hold the tile until they are written, whatever it waits for)
    persist_probe_o_local: int
    # persistent, tagged: 1: the SiLU-mul's output (the down projection's x) as tagged pairs, two elements rounded to
    # bf16 in a tagged word's float (common.cuh: st_tagged_pair), where every reader copies it into the scratch:
    # half the bytes, and one 16-byte load four elements; the SiLU-mul's shares whole pairs of rows. 2: attention's
    # output too (the output projection's x; tags 2, no owner merges). The rounding is what a bf16 model's own
    # activations get (torch's reference rounds them so too)
    persist_tagged_pairs: int
    # persistent, a timing probe, never for use (tokens wrong): 1: attention does no work. Once its inputs are ready,
    # each head's first split stores zeros as the head's output and signals (persistent.cuh: attention_tile's IDLE);
    # the hops before and after attention stay. An untraced token's time without it, less with it, is what
    # attention's work costs the chain: the most any faster attention could win
    persist_probe_attention_idle: int
    # persistent: 1: the last split to arrive copies all its head's partials into shared memory at once (cp.async)
    # and combines them from there (attention_merge.cuh: attention_combine's stage; the same bits), one round trip
    # for any number of splits; only where they fit beside a full ring (codegen/persistent.py: combine_staged)
    persist_combine_staged: int
    # persistent: 1: an attention tile loads its split's first K/V pass, the rows before the previous step's, before
    # it waits for its inputs (persistent.cuh: attention_tile's EARLY_PASS; the same bits), so that their round trip
    # passes under the wait; the previous step's row and the new one are taken after it
    persist_attn_early_pass: int
    # persistent: 1: attention's slice in fewer instructions a key, the same bits (attention.cuh: attention_slice's
    # LEAN: the rows widened with widen8, each score's weight taken without a test of the score)
    persist_attn_lean: int
    # persistent: attention's passes on the tensor cores, this many rows a warp a pass (16 or 32; 0: the FMA passes).
    # m16n8k16 mmas with q and the weights split in two halves of the cache's type (attention_mma.cuh: mma_passes): not
    # the FMA passes' bits. Only where the slice allows it (codegen/persistent.py: mma_keys): head_dim 64, at most
    # 8 query heads a KV head, the short pass's rows and the early pass not loaded ahead (persist_attn_kv_first,
    # persist_attn_early_pass). 32 spills 140 bytes in llama-3.2-1b's kernel with one pass in flight, 380 with two
    # (persist_attn_mma_ahead 2), 16 none (scripts/ptxas.py, 2026-12-04)
    persist_attn_mma: int
    # persistent: the same for heads 128 wide (qwen3-1.7b, llama-3.1-8b), whose passes load one pass's rows at a
    # time (two passes' spilled); 0: the FMA passes there
    persist_attn_mma_wide: int
    # persistent: heads 128 wide take persist_attn_mma_wide only where at least this many query heads share a KV
    # head (the FMA passes' work a key grows with them; an mma's 16 rows take up to 8 heads at the same cost)
    persist_attn_mma_wide_min_group: int
    # persistent: the passes on the tensor cores' rows in flight while a pass computes, where heads are 64 wide (1:
    # the next pass's; 2 or 3: more, each pass's registers again). The same bits
    persist_attn_mma_ahead: int
    # persistent: 1: where the tensor cores take heads 64 wide, a split loads its first passes' rows (those in
    # flight, persist_attn_mma_ahead) beside q's words, not after q is rotated and the new row written; the new row
    # put in from shared memory (attention.cuh: attention_slice's MMA_FIRST); 2: those rows but row pos - 1 loaded by
    # the tile before it waits for its inputs (persistent.cuh: attention_tile), row pos - 1 beside q's. The same bits
    persist_attn_mma_first: int
    # persistent: 1: the residual GEMVs without a norm (the output and down projections) are dealt to the row segment
    # (item), not the row: shares differ by a segment (2 KB on llama-3.2-1b's down projection) where whole rows differ
    # by a row (16 KB). A share that starts mid-row publishes that row's first segments' sums as tagged words; the
    # tile before completes the row with them (gemv_pages.cuh: ItemShare; the same bits). 2: the SiLU-muls
    # (gate/up) too, tagged pairs completed a pair at a time; 3: every GEMV (QKV, the LM head). Not with parity tags.
    # 2 and 3 spill 8 bytes in llama-3.2-1b's kernel (scripts/ptxas.py), none in qwen3-1.7b's, llama-3.1-8b's or
    # smollm2-135m's
    persist_item_shares: int
    # persistent: the kinds of GEMV (qkv, o, gate_up, down, head, joined by +) whose dot products run on the tensor
    # cores, 16 weight rows an mma.m16n8k16 (gemv_mma.cuh), where the FMA tile takes a row a warp: their weights laid
    # out in weights.bin as 16-row blocks of 512 elements (256 for a SiLU-mul, a gate and an up block a page),
    # XOR-swizzled, and their shares dealt in whole 16-row blocks. Only where the GEMV's n is a multiple of 16, its K
    # of the block width, the page 16 KB, x staged in the scratch (not x direct, a warp's own copy or the norm in the
    # warps), bf16 weights (fp16 pieces of x would overflow past 65504) and neither item shares, consumer merges
    # nor a probe on it; the others keep the FMA tile. Other bits (x to 16 significant bits as a bf16 pair, the
    # tensor cores' order). A tied LM head gets its own copy of the table (the embedding reads rows). "": none. The
    # share rule (persist_mma_share_excess) takes every kind down to o, gate_up, down and head on llama-3.2-1b; all
    # five on qwen3-1.7b; qkv, o, gate_up and head on llama-3.1-8b (its down projection copies x a warp at a time);
    # none on smollm2-135m. Same-run A/B against the FMA tile
    # (scripts/variants.py; H100s only, no H200 lent; bench/RESULTS.md): fifty-second session at fbcb390
    # llama-3.2-1b -1.5% (0.829 vs 0.843 / 0.840 ms), qwen3-1.7b -1.4%, llama-3.2-1b at 8192 -1.1%; fifty-third
    # llama-3.2-1b -0.1% and +0.0%, qwen3-1.7b -1.0% and -1.4%, at 8192 -1.2% and -1.4%, llama-3.1-8b +0.1% and -0.1%
    # (and +0.1% at 6a46f2b); earlier builds: llama-3.2-1b's QKV on it +1.0% (192 blocks over 132 SMs: 32 rows
    # against 24), smollm2-135m's down projection (36 blocks) +2.9%, hence the share rule. The logits within
    # the budget against the interpreter and the FMA build, graph mode's greedy tokens (tests/gpu/test_persistent.py:
    # shares of 16 blocks too) and compute-sanitizer clean (memcheck, racecheck, synccheck: scripts/tiny_model.py
    # mma=1) since the fifty-third session's block sums meet at a barrier (8c4be8f). Default since then
    persist_mma_rows: str = "qkv+o+gate_up+down+head"
    # persistent: persist_mma_rows only for the GEMVs whose largest share in whole 16-row blocks is at most this many
    # percent above their largest share dealt by the row (llama-3.2-1b's QKV: 32 rows against 24, +33%; its other
    # GEMVs and qwen3-1.7b's, llama-3.1-8b's: 0-2%). llama-3.2-1b's QKV on the tensor cores anyway (40) measured
    # +2.1% on an H100 (traced builds; its slowest tiles, with 32 rows, end 1.1 us later), and in 8-row blocks dealt
    # evenly +0.8-1.0% (b56073e, taken out): fifty-fourth session, bench/RESULTS.md
    persist_mma_share_excess: int = 5

    def gemv_prefetch_iters(self, n_out: int, k: int, rows_per_output: int = 1) -> int:
        """16-byte chunks per lane per weight row to pull into L2 before the wait, after the batch each lane loads
        into registers: up to `prefetch_bytes` of the first pass."""
        per_pass = min(n_out, self.gemv_grid(n_out) * self.gemv_warps * self.gemv_rows) * rows_per_output
        iters = (k // 8 + 31) // 32
        return max(0, min(iters, self.prefetch_bytes // max(1, per_pass * 512)))

    def gemv_grid(self, n_out: int) -> int:
        per_block = self.gemv_warps * self.gemv_rows
        return max(1, min((n_out + per_block - 1) // per_block, self.sms * self.gemv_blocks_per_sm))

    def attn_splits(self, kv_heads: int) -> int:
        return max(1, min(64, self.attn_blocks // kv_heads))

    def attn_unroll(self, group: int) -> int:
        """Keys in flight per lane group: q and the accumulators take 16 registers per query head, so larger
        groups load fewer keys at once (keeps one block of attn_warps under the register file without spills)."""
        u = self.attn_keys
        while group > 4 and u > 2:
            group, u = group // 2, u // 2
        return u


TARGETS: dict[str, TargetParams] = {
    # H100/H200: 132 SMs; 4 warps x 2 rows per pass, 16 16-byte loads per lane in flight (gemv.cuh)
    # 8 MB of prefetch covers ~2 us of launch gap at 4.6 TB/s and fits the 50 MB L2 with room to spare
    "sm_90": TargetParams(arch="sm_90", sms=132, gemv_warps=4, gemv_rows=2, gemv_blocks_per_sm=8, gemv_min_blocks=4,
                          gemv_early_loads=1,
                          # attn_min_keys (persistent, with the tensor-core passes; thirty-first session at 12a969c,
                          # ms, two rounds, bench/RESULTS.md): 256 smollm2-135m 0.466-0.468 vs 0.469-0.471, llama-3.2-1b
                          # 0.722-0.726 vs 0.726-0.728, llama-3.1-8b 3.856 vs 3.865-3.869, but qwen3-1.7b (FMA passes)
                          # 1.142 vs 1.112-1.115; 512 smollm2-135m 0.466, 1B 0.723-0.724; 128 at noise. Means over
                          # the bench's positions 32-288 only, each with a higher p90 (smollm2 0.486-0.489 vs 0.473:
                          # one split walking 250+ keys is slower than five and their merge), and at 1024-4096 keys
                          # 256 would halve the splits in use (not timed); llama-3.2-1b at 8192: 256 0.790 / 0.790 vs
                          # 0.789 / 0.790 (forty-third session). So 64
                          attn_warps=8, attn_blocks=132, attn_keys=8, attn_min_keys=64,
                          # graph mode's attention at 8192: 16.8 MB in the 10.9 us more than at 32, 1.5 TB/s (a
                          # latency-bound pass or two a split); asking L2 ahead: graph mode not yet run. Persistent,
                          # llama-3.2-1b at 8192 (2026-12-01 seventeenth session, ms, two rounds, bench/RESULTS.md):
                          # 1 (each split before its wait) 0.935 / 0.937, 2 (the weight stream) 0.904 / 0.904 vs
                          # 0.899 / 0.900. Off
                          attn_l2_prefetch=0,
                          gencode="-gencode=arch=compute_90a,code=sm_90a",
                          prefetch_bytes=8 << 20,
                          # persistent: a ring of up to 12 x 16 KB pages per SM in flight (arithmetic: at a 4.6 TB/s
                          # ceiling, 35 GB/s an SM, 192 KB is 5.6 us of it, 25 MB over the GPU)
                          # A/B on llama-3.2-1b, 2026-11-30 at 94a9075 (bench/RESULTS.md): asking L2 for 128 or
                          # 256 KB past the ring 0.839 / 0.838 ms vs 0.840 (noise: off; bench/l2_prefetch.cu asks
                          # why); looking at the stop position every 64 polls, not each, 0.829 vs 0.840 ms
                          # A/B, 2026-11-30 third session (bench/RESULTS.md), llama-3.2-1b 0.822 ms by default: at
                          # most 2 / 4 / 6 pages in flight 0.858 / 0.854 / 0.854; 8 warp sums batched 0.833; early
                          # K/V 0.816-0.820; counters released by a signalling thread 0.818 (smollm2-135m: 0.589 vs
                          # 0.572, slower); so all off. Fourth session at 9cd28d0: one split signalling alone 0.824-
                          # 0.828 vs 0.822; the output projection merging the splits 0.887 (smollm2 0.605 vs 0.570,
                          # 1B at 8192 1.19 vs 1.03); cache rows through the ring 1.050 vs 1.034 at 8192. Early
                          # K/V, these three, the in-flight bound and the signalling thread were taken out (their
                          # code: git log -S persist_attn_ / -S persist_signal_slots / -S persist_inflight_pages);
                          # batched warp sums stay a knob (gemv_compute.cu measures with it). 12 compute warps on
                          # smollm2-135m (no spills there): 0.539 / 0.540 vs 0.507 ms (tenth session, 38a3854)
                          # 8 KB x 24 pages: 1.247 vs 0.766 ms on llama-3.2-1b, 4 KB x 48: 2.294 (fourteenth
                          # session, bench/RESULTS.md): a cost a page, it seems; a cheaper page walk was slower too.
                          # 11 pages on the paced stream: 0.746 / 0.748 vs 0.739 / 0.741 on llama-3.2-1b (seventeenth)
                          persist_warps=8, persist_page_bytes=16 << 10, persist_stages=12,
                          # L2 asked for 128 / 256 / 512 KB an SM past the ring (twelfth session, 030681b, ms, two
                          # rounds): smollm2-135m 0.500 all three vs 0.508-0.509; llama-3.2-1b 128 / 256 / 384 KB
                          # 0.766-0.768 vs 0.765-0.768; qwen3-1.7b 256 KB 1.134-1.135 vs 1.122-1.126 (second session,
                          # 94a9075: llama-3.2-1b 256 KB 0.819-0.824 vs 0.822-0.823). So on below a width of 1024
                          # only (smollm2-135m's 576; no model between 576 and 2048 timed)
                          persist_l2_ahead_bytes=256 << 10, persist_l2_ahead_max_width=1023,
                          # sleeping 100 ns between polls: 0.846 vs 0.852 ms on llama-3.2-1b at a9dfdd7 (a kernel
                          # carrying 48f2904's 3.5%), 0.742 vs 0.741 at a307823; smollm2-135m 100 / 300 ns 0.490 /
                          # 0.509 vs 0.488-0.489 (nineteenth session)
                          persist_stop_poll_every=64, persist_poll_sleep_ns=0,
                          persist_counter_stride=1, persist_reduce_batch=1,
                          # the LM head's shares are long (smollm2-135m: 372-373 rows an SM, 27 pages, ~46 items a
                          # warp) and at K 576 its dots, not the stream, set their pace: bench/gemv_compute.cu's
                          # 64-row smollm2 share ran 33.8 GB/s an SM with its warp sums one at a time, 37.7 in
                          # batches of 8, against a 35 GB/s share of the read ceiling (2026-11-30). The LM head
                          # alone batched 8: 0.488 / 0.488 vs 0.488 / 0.489 (2026-12-02, two rounds). Off
                          persist_reduce_batch_head=0,
                          # the down projection's prologue (x copied as tagged words, 64 KB an SM on llama-3.2-1b)
                          # took 2.4 us a layer in the eighth session's trace: at 8 loads in flight a thread its K
                          # 8192 is two round trips (llama-3.1-8b's 14336: four, qwen3-1.7b's 6144: two). 16 makes
                          # qwen3-1.7b's one without spills; on llama-3.2-1b and llama-3.1-8b ptxas spills (232 and
                          # 424 bytes; 32: 896 on 8B; `scripts/ptxas.py MODEL persistent persist_copy_batch=16` at
                          # fdf50be). qwen3-1.7b at 16, 2026-11-30 ninth session (42964fe, ms, two rounds): 1.121 /
                          # 1.125 vs 1.121 / 1.118 (no change); llama-3.2-1b at 16 on the paced stream (seventeenth
                          # session, 30ad11b): 0.755 / 0.755 vs 0.739 / 0.741. So 8
                          persist_copy_batch=8,
                          # a norm's tagged x: 8 words a thread at once, so llama-3.1-8b's K 4096 (16 a thread) takes
                          # two round trips (its norm prologues 2.8-3.4 us a tile in the forty-second session's call 2
                          # recording at position 64, llama-3.2-1b's 0.8-1.2). 16 spills 36 B there
                          # (scripts/ptxas.py), reloaded after the waits' polls (L1 invalidated: from L2). Forty-fourth
                          # session (75cbe05, H100, ms, two rounds): 5.317 / 5.313 vs 5.284 / 5.279 (+0.6%; traced,
                          # gate/up's prologue 5.32 -> 2.27 us a tile but the output projection's epilogue and release
                          # 0.26 -> 1.16). So 8. Forty-fifth session (69cefce): the spills came from each word's index
                          # kept in a register for an `i < K` test that 256 threads dividing K makes always true; the
                          # test now drops at compile time and 16 spills nothing (tests/cpu/test_code_size.py).
                          # Spill-free 16 on H200 (05b90fb, ms, two rounds): 3.682 / 3.682 vs 3.681 / 3.685; with
                          # the norm's weights copied into shared memory (persist_norm_w_smem, so that their registers
                          # went to the words) 3.680 / 3.678, taken out in the forty-sixth session. So 8
                          persist_norm_batch=8,
                          # a warp's own copy of tagged pairs (llama-3.1-8b's down projection, 7 rounds): 4 rounds at
                          # once, two round trips; 7 (one, no spills): 5.278 / 5.278 vs 5.284 / 5.279 (same call). 4
                          persist_warp_copy_rounds=4,
                          # (the dots on the tensor cores, persist_dot_mma at 05ab278, an mma.m16n8k16 a 128-element
                          # step read on its diagonal: 10-30% slower than the FMA tile in gemv_compute.cu, ninth
                          # session; taken out, `git show 05ab278`)
                          # evict-normal instead: 0.868-0.872 vs 0.852 ms on llama-3.2-1b at a9dfdd7, and the ring
                          # with the tile consuming 3.82 vs 4.58 TB/s in bench/stream_rate.cu (3d07718)
                          persist_evict_first=1,
                          # the streaming thread spends ~1,130 SM cycles a 16 KB page walking the instruction list
                          # (ncu's samples, fourteenth session), which spaces its copies out; a page's share of the
                          # read ceiling is 470 ns (16 KB x 132 SMs / 4.6 TB/s). The kept walk (a few multiply-adds a
                          # page) alone issues a freed ring's pages in a burst: llama-3.2-1b 0.803 vs 0.767 ms. Paced
                          # (a full page at most every N ns; 2026-12-01 fifteenth session, ms, two rounds each,
                          # bench/RESULTS.md): 1B 0.788 (350), 0.762 (400), 0.751-0.753 (430), 0.740 (450),
                          # 0.741-0.742 (470), 0.751 (500) vs 0.767; the pace alone, without the kept walk, 0.775-0.782.
                          # With 460: llama-3.1-8b 3.922 vs 4.084, llama-3.2-1b at 8192 0.904-0.905 vs 0.911, 1B
                          # 0.743-0.744 vs 0.766, but smollm2-135m 0.502 vs 0.498-0.499 and qwen3-1.7b (450 and 470)
                          # 1.129-1.135 vs 1.126-1.128 (a later call: 1.130-1.131 vs the old walk's 1.134-1.137; 550:
                          # 1.162). The pace is a page's share of H200's bandwidth (an H100 would want ~661 ns:
                          # persist_pace_ref_gbps below; not measured)
                          # 2026-12-04 thirty-sixth session (8e33fc2, ms, two rounds, scripts/variants.py, read ceiling
                          # 4.50-4.60 TB/s; bench/RESULTS.md): the kernel of the staged tiles wants a faster pace on the
                          # models whose attention runs on the tensor cores: llama-3.2-1b 0.686 (440), 0.685-0.686
                          # (430), 0.686-0.688 (420), 0.699-0.700 (400), 0.723 (380), 0.732-0.734 (350) vs 0.693-0.697
                          # (460); at 8192 0.799-0.800 (440), 0.802 (420), 0.818 (380) vs 0.815-0.817; llama-3.1-8b
                          # 3.774-3.777 (440), 3.758 (420) vs 3.810-3.813. qwen3-1.7b, whose attention keeps its FMA
                          # passes (2 query heads a KV head), does not: 1.049-1.051 (440), 1.052-1.056 (420),
                          # 1.040-1.042 (480), 1.053-1.055 (510) vs 1.039-1.040 (460); its trace at 430 (position
                          # 64): the LM head 5.5 us faster, the down projection 0.36 us and attention 0.3 us slower a
                          # layer. So 440 (the cliff below 420 is 400's), and qwen3-1.7b keeps 460 through
                          # persist_page_pace_fma_ns. The attention kind only tells the models measured apart, it is
                          # not the cause: qwen3-1.7b with its attention on the tensor cores
                          # (persist_attn_mma_wide_min_group=2) also ran slower at 440, 1.045 / 1.045 vs 1.041 / 1.041
                          # (call 10); what makes its optimum 460 is not known.
                          # The LM head's pages alone at 400 or 360 (a knob built and taken out, `git show 301c7de`):
                          # qwen3-1.7b +0.1% / +0.8%, llama-3.2-1b at 430 +0.2% / +0.5%
                          persist_walk_kept=1, persist_page_pace_ns=440, persist_page_pace_fma_ns=460,
                          # some kinds at a pace of their own (thirty-seventh session, 9a3752d, ms, three rounds): the
                          # down projection at 460 or 480 on llama-3.2-1b 0.682-0.683 every way; qwen3-1.7b at 440
                          # with the down projection at 460 1.043-1.044 vs 1.046-1.049 (440) and 1.035-1.038 (460):
                          # a third of its loss at 440, not the rest. Off
                          persist_page_pace_kinds="",
                          # smollm2-135m (width 576, latency-bound: its weights are 5-27 KB an SM a GEMV) with the
                          # walk read each page, unpaced (ms, two rounds): 0.500 / 0.501 vs 0.504 / 0.504 (sixteenth
                          # session), 0.498-0.499 vs 0.502 (fifteenth); the kept walk unpaced 0.503 / 0.502. So the
                          # paced kept walk from a width of 1024 (no model between 576 and 2048 timed)
                          persist_paced_min_width=1024,
                          # the ring refills during QKV, attention and the output projection (the 6 + 4 pages of
                          # theirs the fifteenth session's trace found in the ring, in their ~16 us traced) at the
                          # full pace, its copies queued ahead of those phases' round trips (bench/hop_latency.cu: a
                          # hop of 1.7 us took 18-22 us with 12 pages in flight an SM). At ~1 us a page the refill
                          # should still end before gate/up (arithmetic: 10 pages in 10 us). 2026-12-01 sixteenth
                          # session (ms, two rounds, bench/RESULTS.md): llama-3.2-1b 700 0.744 / 0.746, 1000 0.744 /
                          # 0.743, 1500 0.752 / 0.752 vs 0.745 / 0.747; with spared splits 0.740 vs 0.735; qwen3-1.7b
                          # likewise 1.128 vs 1.122; smollm2-135m 0.505 vs 0.504. Off
                          persist_page_pace_ahead_ns=0,
                          # the ahead pace for long contexts only (the splits' K/V loads queue behind the refill):
                          # 2026-12-03 twenty-seventh session (ms, two rounds, bench/RESULTS.md): llama-3.2-1b at 8192
                          # 1000 ns from 2048 0.886 / 0.887, 700 ns 0.903 / 0.904 vs 0.894 / 0.893 (1000 ns on every
                          # position 0.884 / 0.887 vs 0.894 / 0.894); short context 0.740 / 0.740 vs 0.738 / 0.738
                          # (where the pace never applies: likely the ahead pace's bookkeeping, compiled in; not
                          # isolated). Off
                          persist_page_pace_ahead_from_pos=0,
                          # L2 lookahead (on below a width of 1024, above) measured noise on 1B unpaced (0.741 vs
                          # 0.741, fifteenth session): its asks go out in a burst when the ring fills. Paced, on
                          # smollm2-135m (where the lookahead is on): 0.503 / 0.502 vs 0.504 / 0.504 (sixteenth
                          # session, before persist_paced_min_width unpaced it); not run where the lookahead is off
                          # (wider models, persist_l2_ahead_max_width). With the table's widths no model now has both
                          # the lookahead (up to 1023) and the pace (from 1024). Off
                          persist_l2_ahead_paced=0,
                          # the ring's copies of pages already asked of L2 off the pace (with L2 lookahead on, paced):
                          # the stream waits on a full ring 7.7 us a layer before gate/up (persist_trace_stream), so the
                          # asks could refill it faster after. Thirty-fourth session (205a778, ms, two rounds): llama-
                          # 3.2-1b 0.696 / 0.697 all ways (256 or 512 KB), qwen3-1.7b 1.072 / 1.071 vs 1.040 / 1.042;
                          # traced, gate/up's page waits 7,700-7,859 SM-us vs 7,386: no faster from L2. Off
                          persist_l2_ahead_burst=0,
                          # the paces above are H200's. Its driver's attributes give a peak of 4,814 GB/s (kiec bench's
                          # line, sixteenth session; nvidia-smi's 3,201 MHz x 6144 bits would be 4,916); an H100's
                          # published 3,352 would want 460 -> 660 (arithmetic, the kernel's integer floor). N > 0 scales
                          # the paces by N over the GPU's peak: 4814 leaves H200's alone. 4916 on H200 (pace 470): 0.746
                          # / 0.749 vs 0.745 / 0.747 ms on llama-3.2-1b (sixteenth session). First run on another GPU,
                          # an H100 (driver's peak 3,352 GB/s, read ceiling 3.08-3.09 TB/s; 440 -> 631 ns), forty-fourth
                          # session (75cbe05, ms, two rounds, bench/RESULTS.md): llama-3.2-1b 0.868 / 0.870 vs 0.907 /
                          # 0.908 (-4.2%; 4100: -2.1%, 5300 +0.5% and 5800 +7.2% against 4814), qwen3-1.7b 1.261 vs
                          # 1.339 (-5.8%; 5300 +2.1%), llama-3.1-8b 5.098 vs 5.280 (-3.4%), llama-3.2-1b at 8192 1.027 /
                          # 1.028 vs 1.037 / 1.039 (-1.0%). So 4814: the same pace on H200, each SM's share of the rate
                          # elsewhere
                          persist_pace_ref_gbps=4814,
                          # 1 frees llama-3.1-8b's 57 KB x scratch: its ring 10 -> 12 pages (with persist_stages
                          # 13, llama-3.2-1b's 12 -> 13). With 13 pages on llama-3.2-1b at a9dfdd7: 0.840 vs 0.852
                          # ms; with poll sleep 100 too at edd1aac's kernel: 0.817 vs 0.823-0.826; other models not
                          # run (modelled, `scripts/time_model.py MODEL stream_gbps=32.1 ring_pages=N`: 8B 3834 ->
                          # 3767 us). On the paced stream (fifteenth and sixteenth sessions, ms, two rounds):
                          # llama-3.2-1b with 13 pages 0.875 vs 0.741, llama-3.1-8b 4.106 / 4.109 vs 3.890 / 3.889.
                          # With 1 the output projection (K 2048: 2 segments over 8 warps) loads each slice four times
                          # over; 2 makes only the GEMVs whose warps each hold a segment of their own direct (1B: the
                          # down projection, K 8192, whose 64 KB prologue took 2.4 us with 8-12 of the ring's 12
                          # pages landed, median 11, in the fifteenth session's trace; its scratch then 8 KB, room for
                          # 13 pages). 2026-12-01 seventeenth session (ms, two rounds): llama-3.2-1b 0.794 / 0.794 vs
                          # 0.739 / 0.741, with 13 pages 0.793 / 0.796; its trace (position 64) has the down
                          # projection's x ready 0.82 us after gate/up's last signal instead of 3.30, but its dots
                          # (the slices' loads now among them) 12.0 us a tile against 5.9, the phase 14.23 us against
                          # 10.90. Its stale words then reloaded a round at a time (4d4b96f): 1B 0.786 / 0.787 vs
                          # 0.738 / 0.740, qwen3-1.7b 1.190 / 1.189 vs 1.123 / 1.122. Each lane's 16-byte loads are
                          # 64 bytes apart (a lane takes a chunk of 8 words), so each load uses half of the 32-byte
                          # sectors it touches: twice the copy's L2 traffic, a guess at the loss not measured. Off
                          persist_x_direct=0,
                          # each warp's own copy of the down projection's x (thirty-seventh session, c49ded6, ms,
                          # two rounds, bench/RESULTS.md): llama-3.1-8b (K 14336) 3.793 / 3.792 vs 3.832 / 3.830 and
                          # 3.741 / 3.739 vs 3.774 / 3.774 (-1.0%, -0.9%), the same with its ring held at the block
                          # copy's 10 pages (3.736 / 3.737: the copy, not the 12 pages, is the gain); llama-3.2-1b (K
                          # 8192) 0.688 / 0.688 vs 0.685 / 0.685 (+0.5%; with a 13th page 0.690 / 0.691, and 0.684 /
                          # 0.684 vs 0.681 / 0.681), qwen3-1.7b (K 6144) 1.044 / 1.044 vs 1.038 / 1.034 (+0.8%).
                          # Traced, its x comes later on all three (0.2-0.7 us); why the longest K gains is not known,
                          # so the threshold only splits the Ks measured. With tagged pairs (a segment's loads in one
                          # round), fortieth session (a75b645, ms, two rounds): llama-3.2-1b 0.678 / 0.679 vs 0.678 /
                          # 0.678, with a 13th page 0.682 / 0.683; qwen3-1.7b 1.027 / 1.029 vs 1.026 / 1.028
                          persist_x_warp_copy_min_k=12288,
                          # every instruction waits on this token's producer, then on a phase of the previous token
                          # (a write-after-read on a shared slot), reached long before: polled second, its round trip
                          # came after the producer's signal, on every hop. Polled first, 2026-11-30 sixth session
                          # at 6c0519e (ms, two rounds, bench/RESULTS.md): llama-3.2-1b 0.805-0.806 vs 0.826-0.829,
                          # smollm2-135m 0.543 vs 0.566-0.567, qwen3-1.7b 1.204-1.207 vs 1.239-1.240, llama-3.1-8b
                          # 4.196-4.197 vs 4.225-4.227, llama-3.2-1b at 8192 1.019-1.020 vs 1.039; so on.
                          # (One ring-page release a warp instead of a thread, 0.820-0.822 on 1B, no faster in
                          # gemv_compute.cu, and compute-sanitizer's racecheck reported hazards on it: taken out.)
                          persist_waits_previous_first=1,
                          # with previous_first, the SM whose tile ended the producer's phase still polls two waits
                          # one after the other before its next tile (two round trips where one would do), and the
                          # next phase's last tile is often that SM's (the trace's slowest tile ends 0.6-0.8 us after
                          # the median). 236e4bf: alone 1.192 vs 1.197-1.201 ms on qwen3-1.7b, none on 1B; with tags and
                          # the attention pipeline, on by default (below)
                          persist_waits_together=1,
                          # in the eleventh session's traces the slowest tile of most GEMV phases is one whose SM was
                          # still busy when its inputs came: 0.6-1.1 us from its start to inputs ready, a load of its
                          # waits and a poll. A warp of the streaming warpgroup polling them ahead
                          # (persist_poll_ahead, twelfth session, 264f09b): llama-3.2-1b 0.761-0.765 vs 0.766-0.767
                          # ms, smollm2-135m 0.516-0.517 vs 0.506-0.507, qwen3-1.7b 1.138-1.140 vs 1.128-1.129;
                          # relaxed polls (persist_poll_relaxed): 0.763 vs 0.766, 0.511 vs 0.505-0.508, 1.126 vs
                          # 1.124. Both taken out (their code: git log -S persist_poll_ahead; bench/RESULTS.md says
                          # what each cost)
                          # at 8192 a split of llama-3.2-1b takes 512 rows in two passes of 256, each a round trip of
                          # loads and then its scores; persistent 8k costs 13 us a layer more than short context
                          # (bench/RESULTS.md, 5f1b610) for 3.7 us of K/V at the ceiling. 236e4bf: 0.931 vs
                          # 0.963-0.965 ms at 8192 on llama-3.2-1b; with tags 2 and waits together 0.768-0.769 vs
                          # 0.771-0.775 short
                          persist_attn_pipeline=1,
                          # the attention case is 5,376 of llama-3.2-1b's 11,160 instructions (84 KB; a GEMV case 8-17
                          # KB; scripts/code_size.py at 271523f): a layer runs ~130 KB of code, maybe more than the
                          # SM's instruction caches hold, so each phase may fetch its code from L2 under the weight
                          # stream's load. 2 keys a pass: attention 3,488, the kernel 9,216 (one pass still covers a
                          # 64-key split). Not timed itself; the refetch it would save is small: a GEMV share after 256
                          # KB of other code costs ~0.1 us more (gemv_compute.cu code cold/warm, 236e4bf)
                          persist_attn_keys=0,
                          # the same smaller step for short splits only (long ones keep 8 keys a pass and their
                          # round trips); the same bits. 236e4bf (ms): llama-3.2-1b 0.797-0.799 vs 0.803, smollm2-135m
                          # 0.521-0.523 vs 0.536; qwen3-1.7b with waits together 1.193-1.195 vs 1.192. With the
                          # pipeline and waits together, cf171d6 (ms, two rounds): llama-3.2-1b (tags 2) 0.762-0.764
                          # vs 0.767-0.768, at 8192 0.907 vs 0.914, qwen3-1.7b 1.119-1.121 vs 1.119-1.122,
                          # smollm2-135m (tags 0) 0.507 vs 0.515; on by default
                          persist_attn_short_keys=2,
                          # the 2026-11-30 eighth session's traces (c581e19, position 64; trace_summary.py's
                          # attention view, bench/RESULTS.md): the split whose partial comes last takes 3.50 us
                          # (llama-3.2-1b) and 2.52 (smollm2-135m) from its inputs to it, on the chain of every layer;
                          # after q arrives, RoPE loads inv_freq (a round trip) and runs sincosf, which depend on the
                          # position alone. With 1 the coefficients are made before the wait (the same bits).
                          # 2026-11-30 ninth session (fa12dbb / 42964fe, ms, two rounds, bench/RESULTS.md): alone
                          # 0.761 / 0.760 vs 0.761 / 0.762 on llama-3.2-1b; with kv_first (below) 0.758 / 0.759, at
                          # 8192 0.904 / 0.904 vs 0.907 / 0.908, but smollm2-135m 0.509 / 0.510 vs 0.507 / 0.506 and
                          # qwen3-1.7b 1.125 / 1.125 vs 1.121 / 1.118: within the spread both ways, off
                          persist_attn_early_rope=0,
                          # the same split's K/V rows of earlier steps are loaded after q arrives, is rotated and the
                          # new row is written (three barriers): a round trip more on the chain. With 1 a short pass
                          # (persist_attn_short_keys) loads them first and takes the new row from shared memory (the
                          # same bits). Loaded before the wait instead (persist_attn_early_kv, 2026-11-30 third
                          # session): 0.816-0.820 vs 0.822 ms on llama-3.2-1b then, taken out. Alone, ninth session:
                          # 0.763 / 0.762 vs 0.761 / 0.762 on llama-3.2-1b (with early RoPE: above); off
                          persist_attn_kv_first=0,
                          # after q's words settle, the rotation and the new row's write took three block barriers
                          # and two round trips through shared memory (the split at position 64 on smollm2-135m: q,
                          # rotation and new row 1.00 us of its 2.35, H100, fifty-seventh session's trace). Fifty-eighth
                          # session, H100 (variants.py, ms, two rounds, bench/RESULTS.md): 1 llama-3.2-1b -0.7 / -0.5 /
                          # -0.3%, llama-3.1-8b -0.0%, at 8192 +0.2%, but smollm2-135m +1.6 / +2.1 / +1.1%: traced at
                          # 64 its q stretch fell 1.01 -> 0.51 us, but the coefficients made before the wait held the
                          # wait back 0.31 us (its splits start as QKV ends). 2 (coefficients after the wait):
                          # smollm2-135m 0.330 / 0.331 vs 0.338 / 0.334 (-1.5%), at 2048 -1.7%, at 8192 0.489 / 0.489
                          # vs 0.498 / 0.496 (-1.7%); llama-3.2-1b -0.1% / -0.2%, at 8192 -0.0%; llama-3.1-8b -0.1%
                          # (fifty-ninth session). Traced at 64 (fifty-ninth session, H100) 2's q stretch is 0.73 us
                          # against 0's 1.01 and 1's 0.51: the coefficients' sincosf, now after the wait, takes the
                          # rest. 3 (read from the table each SM makes at the step's start): smollm2-135m 0.327 /
                          # 0.327 vs 0.330 / 0.330 (-1.0%) and, the other order, 0.329 / 0.327 vs 0.332 / 0.332
                          # (-1.1%), at 8192 -0.2%; llama-3.2-1b +0.1% (a build with one ring page fewer, 11, than
                          # its default kernel's; fifty-ninth session, one H100). So 3 (qwen3, with head norms: the
                          # next field)
                          persist_attn_q_pairs=3,
                          # with head norms (qwen3-1.7b: a warp a head), sixtieth session, one H100 (variants.py, ms,
                          # two rounds, logits over 8 steps identical): 1.183 / 1.185 vs 1.191 / 1.192 (-0.6%), at
                          # 8192 1.647 / 1.646 vs 1.658 / 1.652 (-0.5%), traced builds -0.6%; traced at 64 the split's
                          # q, norms, rotation and new row 0.80 us vs 1.26, its keys 1.13 vs 0.91. Not timed on an
                          # H200. 1
                          persist_attn_q_pairs_normed=1,
                          # the split that arrived last merged: its partial stored, its arrival's acq_rel add (the
                          # stores' acknowledgement, then the add's round trip), the partials loaded, the output stored
                          # and released: 1.86 us from the last split's partial to the signal on smollm2-135m, 1.62 on
                          # llama-3.2-1b (twelfth session's call-2 traces, trace_summary.py's attention view). With N
                          # the split holding row pos merges as the partials' tags come, no arrival on the way, while
                          # at most N splits are in use (the same bits). 2026-12-01 (thirteenth session, ms, two
                          # rounds, bench/RESULTS.md): 64 (the owner always) smollm2-135m 0.491 vs 0.498,
                          # llama-3.2-1b 0.753-0.754 vs 0.764-0.767, qwen3-1.7b 1.115 vs 1.126-1.130, but
                          # llama-3.2-1b at 8192 0.930-0.931 vs 0.911-0.913. A build with 8
                          # (the last to arrive merges past 8 in use; arrivals counted and waited by every split, the
                          # owner's added before its merge) was no faster at short context and as slow at 8192, where
                          # its tiles merged the old way. Fourteenth session: rebuilds that change nothing a token
                          # sees move it 0.5% at most (stop-poll counts 63 / 65), so 64's gain and loss on 1B are
                          # real; at 8192 it signals 3.4 us after the last partial against 3.0 (trace); loading the
                          # others' m and l once and 16 o words a batch (cebbece) was slower still; smollm2-135m's
                          # gain did not repeat (0.497 vs 0.497-0.499). The owner sleeping 100 / 300 ns between its
                          # rounds of reloads (b228fa5; was its spin slowing the splits it waits for?): 1B at 8192
                          # 0.921-0.923 / 0.924-0.925 vs 0.920-0.921 without (vs 0.903 default; fifteenth session),
                          # taken out. Seventeenth session (30ad11b): smollm2-135m 0.494 / 0.493 vs 0.500 / 0.502, at
                          # 8192 0.801 / 0.801 vs 0.780 / 0.779 (it loses at long context there too). Off until the
                          # long context stops losing
                          persist_attn_owner_merges=0,
                          # the chain from attention's last partial to the output projection's x, traced at position
                          # 64 (the forty-second session's H200 recordings, default kernels): the last arrival's
                          # merge and signal 1.71 / 1.78 / 2.35 us a layer on llama-3.2-1b / qwen3-1.7b /
                          # llama-3.1-8b, then the output projection's x ready 0.98 / 1.00 / 1.34 us later. The
                          # consumer's merge leaves the first out, for more words in its copy. Forty-seventh session,
                          # on an H100 (no H200 lent; e5cc345, bench/RESULTS.md): the same bits, compute-sanitizer
                          # clean, but N 2 +0.1-0.3% on the three wide models, N 4 +3.0% on llama-3.2-1b. Traced at
                          # position 64, the output projection's median x comes 0.4-0.9 us a layer sooner, but its
                          # last tile signals 0.4-0.75 us later (each of its 124 tiles merges every head: a prologue of
                          # 0.8 -> 2.8 us), and gate/up ends when it did. Untimed on H200. Off
                          persist_attn_consumer_merges=0,
                          # (scripts/ptxas.py MODEL persistent persist_attn_consumer_merges=N [persist_merge_loads=L]:
                          # at 8 no spills on qwen3-1.7b and llama-3.1-8b at N 2-4, nor on llama-3.2-1b at N 2 (one
                          # round trip), but 36 / 72 B there at N 3 / 4, none at 6, and 32 B at N 2 at 16, where
                          # llama-3.1-8b's N 2 has none (one round trip, two at 8). On H100 (forty-seventh session)
                          # llama-3.1-8b's N 2 at 16 -0.2% / +0.1% in two calls, at 8 +0.3%. 8
                          persist_merge_loads=8,
                          # in the fifteenth session's trace (llama-3.2-1b, position 64) the output projection's last
                          # tile was, in 9 of 16 layers, on an SM whose attention split was the one in use (~5 us
                          # against ~1 for the others: it signals last, then starts its own share), 0.26-0.77 us
                          # after the median tile (bench/results/2026-12-01c/o_last_tile.py; 13 of 16 with the old
                          # walk). With 1 those SMs (one a KV head) get no share (the others 16-17 rows instead of
                          # 15-16). 2026-12-01 sixteenth session (9ad4140, ms, two rounds each, bench/RESULTS.md):
                          # llama-3.2-1b 0.743 / 0.743 vs 0.745 / 0.747 and 0.735 / 0.735 vs 0.744 / 0.741 (two
                          # calls), at 8192 0.899 / 0.900 vs 0.906 / 0.905, qwen3-1.7b 1.122 / 1.122 vs 1.131 /
                          # 1.129, llama-3.1-8b 3.890 / 3.889 vs 3.904 / 3.908, smollm2-135m 0.504 / 0.504 vs 0.504 /
                          # 0.504. So 1
                          persist_attn_spare_splits=1,
                          # with owner merges, the owner (the split holding row pos: the last in use, which moves as
                          # the context grows) arrives for all after its signal, a release whose wait its SM's share of
                          # the output projection then starts behind. With 1 the owner is split 0, whose SM spare
                          # splits leave out of that projection (the same bits). Eighteenth session (ms, two rounds):
                          # with owner merges 8 on llama-3.2-1b 0.733 / 0.733 vs 0.741 / 0.741, but at 8192 0.908 /
                          # 0.909 vs 0.902 / 0.901; nineteenth session (owner merges 8 with it): qwen3-1.7b 1.106 vs
                          # 1.122 (-1.4%), llama-3.2-1b 0.736 vs 0.740-0.741 and at 8192 0.909-0.910 vs 0.901-0.902,
                          # llama-3.1-8b 3.923-3.926 vs 3.911-3.914: mixed. Thirty-third session (cc23327, with owner
                          # merges 8): llama-3.2-1b 0.727 / 0.725 vs 0.728 / 0.728, at 8192 0.862 / 0.862 vs 0.848 /
                          # 0.850, qwen3-1.7b 1.108 / 1.107 vs 1.108 / 1.110. 0 here, 1 on narrow models
                          # (persist_attn_newest_first_narrow)
                          persist_attn_newest_first=0,
                          # at 8192 on smollm2-135m the last arrival takes 7.4 us from the last partial to the signal
                          # (eighteenth session's trace, 44 splits a KV head, 13.2 us an attention phase), most of it
                          # its merge's loads (a guess: the trace does not cut the merge apart). Timed: see
                          # persist_combine_batch_narrow
                          persist_combine_batch=0,
                          # the release after a GEMV tile's stores waits 1.2-1.4 us for their acknowledgement (3d07718
                          # trace), on the chain of every phase: with tags its readers check the words instead
                          # (ir/passes/tags.py: tag_plan). 6c0519e, with previous_first (ms): llama-3.2-1b
                          # tags 1 0.799-0.803, 2 0.794-0.795 vs 0.805; qwen3-1.7b 1 1.176, 2 1.158-1.161 vs 1.205;
                          # but llama-3.2-1b at 8192 1 1.062-1.063, 2 1.088-1.090 vs 1.020; llama-3.1-8b 2 4.277-4.284
                          # vs 4.196; smollm2-135m 1 0.578, 2 0.575-0.576 vs 0.543. At 236e4bf (softcap code out), with
                          # waits together (and the pipeline): llama-3.2-1b 2 0.771-0.775 vs 0.803-0.808; qwen3-1.7b 2
                          # 1.120-1.123 vs 1.197-1.201; llama-3.1-8b 2 (+pipeline) 4.114-4.116 vs 4.123-4.125;
                          # smollm2-135m 2 (+pipeline) 0.526 vs 0.536; llama-3.2-1b at 8192 1 (+pipeline) 0.917-0.920
                          # vs 0.963-0.965 (2 not yet timed there). 2026-11-30 eighth session at cf171d6, with the
                          # pipeline and waits together (ms, two rounds): tags 2 vs 1 llama-3.2-1b 0.767-0.768 vs
                          # 0.782, at 8192 0.914 vs 0.920-0.922, qwen3-1.7b 1.119-1.122 vs 1.148-1.150; smollm2-135m
                          # tags 0 0.515 vs 1 0.529. So 2, except below a width of 1024 (smollm2-135m's 576: 0; no
                          # model between 576 and 2048 timed, so where the line really lies is not known). Again on
                          # smollm2-135m at 30ad11b (seventeenth session): tags 2 0.515 / 0.515, 1 0.518 / 0.518, 2
                          # with tag waits 1 0.534, 2 0.566 vs 0.501 / 0.500 untagged
                          # 2026-12-05 forty-seventh session (b2372bb, on an H100, ms, two rounds, bench/RESULTS.md):
                          # smollm2-135m with tags (min width 0) and the wide fields below (x direct, owner merges and
                          # newest first 0) 0.400 / 0.401 vs 0.440 / 0.438 (-8.8%), at 8192 0.554 / 0.548 vs 0.613 /
                          # 0.609 (-9.8%); tags with x direct 1 0.740 (+68%), without tags 0.458 (+4.5%). So 0: every
                          # model tagged (not yet timed on H200)
                          persist_tagged=2, persist_tagged_min_width=0,
                          # the norm's prologue stages x in the scratch: x loaded a word a thread, block_sum's two
                          # barriers, x scaled into shared memory, a third barrier, each warp's slice read back. On
                          # smollm2-135m (K 576: one segment, 3 rounds a lane) QKV's prologue and dots took 1.30 us a
                          # tile against 0.93 for the output projection's (x direct, its shape alike) in the nineteenth
                          # session's trace at position 40. Each warp normalizing its own x instead (2026-12-02,
                          # twenty-first session, ms, two rounds, bench/RESULTS.md): 0.486 / 0.486 vs 0.488 / 0.489,
                          # 0.487 / 0.488 vs 0.489 / 0.489, at 8192 0.715 vs 0.715-0.716; with a ring of 4 pages 0.483
                          # / 0.482 vs 0.484 / 0.484 but at 8192 0.702 / 0.699 vs 0.699 / 0.698. Under the noise: off
                          persist_norm_in_warps=0,
                          # smollm2-135m's gate/up tile has 12 items (2 pages of 7) for 8 warps: warps 0-3 take two
                          # one after the other, 3 rounds of 32 lanes each (8 working in the third) and two 5-step
                          # butterflies; ncu's samples put gate/up's dots at 4.8% of the token against 0.8-1.1% for
                          # the other GEMVs' (seventeenth session). A half-warp an item: one step of 5 rounds of 16
                          # and a 4-step butterfly for both, and the LM head's 46 items a warp in 23 steps. Timed
                          # (2026-12-02, two rounds): 0.490 / 0.491 vs 0.488 / 0.489, with the norm in the warps 0.496
                          # / 0.496, at 8192 (with it) 0.719 vs 0.715. Off
                          persist_dot_half_warps=0,
                          # a warp's items 2 or 4 at once (thirty-third session, cc23327 / 05ca6a4, ms, two rounds,
                          # bench/RESULTS.md): every GEMV llama-3.2-1b 0.752 / 0.751 and 0.778 / 0.774 vs 0.729 /
                          # 0.727, qwen3-1.7b (4) 1.187 / 1.188 vs 1.112 / 1.106, smollm2-135m (4) 0.516 / 0.517 vs
                          # 0.468 / 0.469; only the long shares (min share 8: gate/up, down, the LM head) 1B 0.749 /
                          # 0.750 and 0.759 / 0.761 vs 0.728 / 0.727, smollm2-135m 0.473 / 0.474 vs 0.468 / 0.467.
                          # gemv_compute.cu: a 64-row share's rate 61.7 -> 67.0 GB/s (4), but the 24-row QKV tile
                          # 1.70 -> 1.88 us warm and 1.79 -> 2.66 us with its code cold (a step's code, U items
                          # unrolled, refetched each phase), and a stream-bound share waits for U pages before it
                          # starts a step. Off
                          persist_dot_items=1, persist_dot_item_chunks=16, persist_dot_items_min_share=1,
                          # (the dots on the tensor cores again, persist_dot_mma at 16c31c8 ... e9d6f36: an item's
                          # 16-chunk steps as block diagonals of an mma.m16n8k16, the layout, pages and deal kept. On
                          # an H100, bench/mma_rows.cu: 0.84-0.92x the FMA tile's GB/s an SM one item a warp at a
                          # time, 1.09-1.34x 4 at once in 4 chains; the kernel +0.2-0.6% on llama-3.2-1b and
                          # qwen3-1.7b, +6.8% on smollm2-135m, +3.1% / +5.9% with 2 / 4 items at once on
                          # llama-3.2-1b (fiftieth and fifty-first sessions, bench/RESULTS.md). Taken out in the
                          # fifty-first session, `git show e9d6f36`)
                          # every acquire poll invalidates the SM's L1 (CCTL.IVALL), so a tile's instruction fields,
                          # its descriptor and its waits came from L2 one dependent round trip after another before
                          # its first poll, and a GEMV's held norm weights were converted (waited for) before it: the
                          # SM whose tile ended a phase last saw its next tile's inputs 0.8-1.6 us after that end
                          # where the median tile saw them at 0.5-0.6 (thirty-second session's trace, position 64),
                          # and was often the next phase's last too. Thirty-third session (4d7950a, ms, two rounds,
                          # bench/RESULTS.md): staged 0.698 / 0.696, raw 0.717 / 0.715, both 0.693 / 0.694 vs 0.719 /
                          # 0.719 on llama-3.2-1b; both: smollm2-135m 0.446 vs 0.472-0.474, qwen3-1.7b 1.039 vs
                          # 1.095, llama-3.2-1b at 8192 0.813-0.815 vs 0.849, llama-3.1-8b 3.808 vs 3.828-3.830. So 1
                          persist_stage_instrs=1, persist_norm_w_raw=1,
                          # a held norm's scale applied to each row's sum in the epilogue: traced at position 64 on
                          # llama-3.2-1b, QKV's x ready 1.87 -> 1.72 us after the down projection's last signal, gate/
                          # up's 1.81 -> 1.69. Fortieth session (a75b645, ms, two rounds, bench/RESULTS.md): llama-
                          # 3.2-1b 0.677 / 0.676 vs 0.678 / 0.678 (-0.3%), qwen3-1.7b 1.025 / 1.025 vs 1.026 / 1.028,
                          # llama-3.2-1b at 8192 0.796 / 0.796 vs 0.799 / 0.798, smollm2-135m 0.430 / 0.430 vs 0.434 /
                          # 0.434 (-0.9%), llama-3.1-8b 3.701 / 3.701 vs 3.714 / 3.714. So 1
                          persist_norm_late_scale=1,
                          # select's read of the host's stop flag before its wait and its write of the host's token
                          # after its signal: its span 3.33-3.55 -> 1.15-1.60 us in the thirty-sixth session's traces at
                          # position 64 (llama-3.2-1b, calls 1-2; smollm2-135m 2.37 -> 0.80), a token 0.695-0.696 ms
                          # either way (the 2 us is 0.3%, under two rounds' spread). So 1
                          persist_select_host_late=1,
                          # (the output projection's weights loaded into registers before its wait instead of through
                          # the ring, persist_o_regs at 76981c4, taken out after its first run: its 4 pages an SM sat
                          # in the ring through attention, but they are consumed before gate/up's x is ready and the
                          # ring refills behind them, so gate/up found 12 pages waiting either way, and the loads of
                          # the 116 SMs without an attention split, 8 MB at once while attention ran, slowed its last
                          # split's slice from 2.62 to 3.8-5.2 us. Thirty-fifth session, ms, two rounds: llama-3.2-1b
                          # 0.745 / 0.744 vs 0.695 / 0.695, with L2 asked ahead 0.746, no spared splits 0.729:
                          # bench/RESULTS.md). Nor, the same session, their items copied from the landed ring pages
                          # into registers before the wait, the pages released then (persist_o_held at 8ff94b8: its
                          # dots 1.5 -> 0.8 us, but the refill behind them slowed attention; llama-3.2-1b 0.702 vs
                          # 0.693-0.694, 0.691 without spared splits, qwen3-1.7b 1.031-1.032 vs 1.037, at 8192 0.819
                          # vs 0.812), nor gate/up's pages held back by the weight stream until the output projection
                          # had its inputs (persist_stream_hold at d479ad0: attention 0.4 us faster a layer, gate/up
                          # starting on 10 pages, not 12; llama-3.2-1b 0.699-0.700 vs 0.698, qwen3-1.7b 1.064-1.065
                          # vs 1.042). Taken out after their runs: `git show 8ff94b8 d479ad0`)
                          # the narrow models (smollm2-135m, width 576: untagged, unpaced) are bound by the chain's
                          # hops, not bytes. 2026-12-01 eighteenth session (c0b7143 + persist_attn_newest_first, ms,
                          # two rounds each, graph mode in the same runs 0.475-0.479, at 8192 0.736-0.739): x direct 1
                          # (untagged: O and down read plain floats, no copy) 0.489-0.490 vs 0.501-0.502, at 8192
                          # 0.757-0.760 vs 0.784-0.785; with owner merges 8 0.489 (the owner arrives for all after
                          # its signal: a release its SM's share of the output projection waits behind), with its SM
                          # spared as well (spare splits 5, or newest first) 0.483-0.484, at 8192 0.746-0.751; owner
                          # merges 64 0.482-0.484 but at 8192 0.782-0.783. So x direct 1, owner merges 8, newest first
                          # (llama-3.2-1b, wide: owner merges 8 with newest first 0.733 vs 0.741 but at 8192 0.908-0.909
                          # vs 0.901-0.902; wide models keep the fields above). No model between 576 and 2048 timed
                          # Forty-seventh session, with tags on smollm2-135m (persist_tagged_min_width): x direct 0,
                          # owner merges 0, newest first 0 (the wide fields) 0.400 / 0.401 ms; owner merges 8 0.402 /
                          # 0.401, newest first 1 0.401 / 0.401; at 8192 both 0.564 / 0.558 vs 0.554 / 0.548; x direct
                          # 1 0.740 (an untagged model's choice). So the wide fields there too
                          persist_narrow_width=1024, persist_x_direct_narrow=0, persist_attn_owner_merges_narrow=0,
                          persist_attn_newest_first_narrow=0,
                          # combine batch (the same session, 57234f8, two rounds each): smollm2-135m at 8192 16
                          # 0.714 / 0.714, 8 0.758 / 0.759 vs 0.752 / 0.752 (its 44 splits in 3 batches of loads);
                          # at short context its owner merges, so it is unused there. llama-3.2-1b at 8192 8 0.909-0.910
                          # vs 0.898-0.899; 16 spills 160 B there (ptxas): 0.984 vs 0.897-0.899 (nineteenth session).
                          # So 16 on narrow models. Tagged (forty-eighth session, an H100, 4ff9b91): 0 at 8192 0.556 /
                          # 0.551 vs 0.555 / 0.553, noise now; 16 kept
                          persist_combine_batch_narrow=16,
                          # the ring's depth on smollm2-135m, which streams 5-27 KB an SM a GEMV (3-4 of the 12 pages
                          # a layer): a freed page's refill goes out at once, into the hops' round trips. 2026-12-02
                          # twenty-first session (663a37c, ms, two rounds each, bench/RESULTS.md): 4 pages 0.484 /
                          # 0.484 vs 0.489 / 0.489 (graph mode 0.478 / 0.476), 3 0.486, 6 0.487-0.488; at 8192 4 pages
                          # 0.699 / 0.698 vs 0.719 / 0.718. llama-3.2-1b (wide) wants the whole ring: 8 pages 0.758 /
                          # 0.762, 6 0.790 / 0.791 vs 0.738 / 0.740. So 4 on narrow models. Tagged (forty-seventh
                          # session, an H100, 2962e4c): 8 pages 0.400 / 0.401 vs 0.403 / 0.400, at 8192 0.549 / 0.549
                          # vs 0.553 / 0.551; every narrow field the wide one 0.405 and at 8192 0.669 (+21%), of which
                          # the ring (forty-eighth session, 4ff9b91): 12 pages at 8192 0.632 / 0.628 vs 0.555 / 0.553
                          persist_stages_narrow=4,
                          # (persist_attn_mma_ahead below: 2 on llama-3.2-1b, 1 on smollm2-135m; tagged smollm2-135m at
                          # 8192, forty-eighth session on an H100: 2 0.572 / 0.572 vs 0.555 / 0.553)
                          persist_attn_mma_ahead_narrow=1,
                          # attention's rows a split at least on a narrow model, in persistent mode (graph mode keeps
                          # attn_min_keys). Fifty-sixth session on an H100 (e994e0a, ms, three / two rounds,
                          # bench/RESULTS.md): smollm2-135m 128 0.366 vs 0.367-0.369 (-0.4%), 256 0.338 (-8.0%), 512
                          # 0.338 (-8.1%); at 1024 256 0.420 vs 0.418-0.422, 512 +12.7%, 1024 +37%; at 2048 256 -3.6%,
                          # 512 +6.6%; at 8192 256 -3.1%, 512 -0.1%, 1024 +17.5%. Up to 256 rows one split a KV head
                          # takes them all: no partials, no arrivals, no merge (the last arrival's 1.6 us a layer at
                          # position 64, on the chain); at the bench's positions 2-5 splits of 64 rows and their
                          # merge cost more than the longer walk. llama-3.2-1b (wide, 98% of an H100's ceiling) 256
                          # -0.1%; on an H200 (thirty-first session, above) 256 was -0.3% to -0.7% on llama-3.2-1b and
                          # llama-3.1-8b and +2.6% on qwen3-1.7b, so the wide models keep 64
                          persist_attn_min_keys_narrow=256,
                          # (attention inside the output projection, persist_attn_o_below at fc7a3e4, taken out after
                          # its first run: below a position every attention tile of a KV head took the head's whole
                          # context and the projection tile after it on its SM that head's columns, a hop a layer
                          # less. 2026-12-01 nineteenth session, smollm2-135m, ms, two rounds: 0.503 / 0.503 vs 0.488
                          # / 0.488 at short context (p10 0.466 vs 0.473, p90 0.533 vs 0.495: a win at the shortest
                          # positions only), 0.644 vs 0.530 from 448, and 0.723 vs 0.714 at 8192, past it, where
                          # only the parts' reads differ. The whole walk a tile costs more than the hop: `git show
                          # fc7a3e4`, bench/RESULTS.md)
                          # a layer's prologues read 112 KB an SM of tagged words on llama-3.2-1b, 12% on top of its
                          # 917 KB of weights (arithmetic from its shapes: x of 2048, 2048, 2048 and 8192 floats at 8
                          # bytes); the probe put a second copy of them at +63 us a token (ninth session, a8b8076).
                          # Parity tags halve those bytes. 2026-11-30 tenth session at 570e9ca (ms, two rounds):
                          # llama-3.2-1b 0.761 / 0.757 vs 0.765 / 0.762, qwen3-1.7b 1.140 / 1.145 vs 1.121 / 1.124,
                          # smollm2-135m with tags on 0.525 / 0.525 vs 0.520 / 0.518 (bench/RESULTS.md): the bytes
                          # are not what the prologues cost. So 0. (With it no splits are spared,
                          # persist_attn_spare_splits: every SM must read each write of the residual stream). Tagged
                          # smollm2-135m (forty-eighth session, an H100): 0.414 / 0.411 vs 0.404 / 0.401, at 8192 0.574
                          # / 0.573 vs 0.555 / 0.553
                          persist_tag_parity=0,
                          # a reader of tagged words polls its writer's counter, then loads the words: two round trips
                          # after the last write where one would do (the trace's hops: 0.3-0.6 us a phase, 4% of the
                          # chain on llama-3.2-1b: scripts/trace_summary.py on c581e19's trace). Built in the tenth
                          # session; the eleventh measured it slower (the field's comment above), so off
                          # (again, thirty-third session at cc23327: llama-3.2-1b 0.748 / 0.749 vs 0.728 / 0.728)
                          persist_tag_waits=0, persist_tag_lead=100,
                          # tag waits on smollm2-135m, tagged since the forty-seventh session (forty-eighth, an H100,
                          # 4ff9b91, ms, two rounds, bench/RESULTS.md): 1 0.389 / 0.390 vs 0.404 / 0.401 and 0.391 /
                          # 0.392 vs 0.401 / 0.401 (p10 0.362 vs 0.391), at 8192 0.543 / 0.538 vs 0.559 / 0.552; 2
                          # 0.420 / 0.420. The wide models beside it: llama-3.2-1b 0.857 vs 0.858, qwen3-1.7b 1.251 /
                          # 1.250 vs 1.253 / 1.257 (noise, at 91-94% of the H100's ceiling; not run on an H200). So 1
                          # on narrow models. (Tag waits take the SiLU-mul's tagged pairs away: persistent.py,
                          # paired_values; the variants above timed them so)
                          persist_tag_waits_narrow=1,
                          # without previous_first: 0.772-0.773 vs 0.826-0.829 on 1B, smollm2 0.527 vs 0.566
                          # (the twice probe, persist_probe_twice, ninth session at a8b8076, ms, two rounds: dots twice
                          # 0.856 / 0.855 vs 0.765 on llama-3.2-1b, prologues twice 0.828; smollm2-135m 0.527 and 0.520
                          # vs 0.506-0.509; tenth session at 38a3854: bit 4 (QKV and output projection dots) 0.772
                          # vs 0.763 on llama-3.2-1b, bit 8 (the others' dots) 0.836: bench/RESULTS.md)
                          # a look at a page's barrier costs ~45 SM cycles (test_wait or try_wait, in a dependent
                          # chain; an integer test 22: bench/gemv_compute.cu), and the look saves nothing: llama-3.2-1b
                          # 0.728 / 0.728 ms with it and without, smollm2-135m 0.471 / 0.470 vs 0.469 / 0.469;
                          # gemv_compute.cu's shares 8-19% slower with it (thirty-second session, bench/RESULTS.md):
                          # off
                          persist_page_look=0,
                          persist_probe_relaxed_signal=0, persist_probe_warm_code=0, persist_probe_twice=0,
                          persist_trace_attention=0,
                          persist_trace_dots=0, persist_trace_stream=0,
                          # the traced step's code in every kernel costs every token: without it (H200, 7de685a,
                          # variants.py, ms, two rounds; fifty-first session, bench/RESULTS.md) llama-3.2-1b 0.655 /
                          # 0.656 vs 0.669 / 0.670 (-2.1%), qwen3-1.7b 0.989 / 0.990 vs 1.012 / 1.012 (-2.2%),
                          # llama-3.1-8b 3.625 / 3.634 vs 3.682 / 3.685 (-1.5%), smollm2-135m 0.363 / 0.363 vs 0.387 /
                          # 0.387 (-6.2%); the same bits (its GPU test). So 0: a trace compiles its artifact with 1
                          # (trace_summary.py does, variants.py --trace does)
                          persist_trace_code=0,
                          # persist_probe_o_local (thirty-ninth session, calls 2 and 3, ms, two rounds): llama-3.2-1b
                          # untagged 0.732 / 0.733 vs 0.734 / 0.735 (-0.3%, most of it from the positions with one
                          # split in use, whose SMs the spared splits leave out of the output projection: p10 0.705 vs
                          # 0.729); tags 1 0.712 / 0.713 vs 0.709 / 0.711. Fusing attention with the output projection
                          # by KV head could save no more, before its own merge and adds: not built
                          persist_probe_mlp_local=0, persist_probe_o_local=0, persist_probe_attention_idle=0,
                          # 2026-12-04 thirty-ninth session (25499ff, ms, two rounds, scripts/variants.py,
                          # bench/RESULTS.md): llama-3.2-1b 0.679 / 0.679 vs 0.684 / 0.685 (-0.8%), qwen3-1.7b
                          # 1.028 / 1.025 vs 1.042 / 1.040 (-1.4%), llama-3.2-1b at 8192 0.798 / 0.797 vs 0.801 / 0.799
                          # (-0.3%); traced at position 64 the down projection's x ready 2.00 vs 3.15 us after
                          # gate/up's last signal (llama-3.2-1b), 1.50 vs 2.42 (qwen3-1.7b). Halving the bytes alone
                          # (parity tags) or the round trips alone (persist_copy_batch 16) had left it at 3.13-3.15
                          # (same session): the copy was bound by both. Call 5 (efdc6f1): 0 again +0.8% on
                          # llama-3.2-1b (0.685 / 0.684 vs 0.678 / 0.680); 2 (attention's output too) -0.1%,
                          # qwen3-1.7b +0.6%, at 8192 +0.1% (the output projection's x ready 0.12 us sooner). So 1.
                          # A warp's own copy reads pairs too (acbf70e, call 8): llama-3.1-8b 3.763 / 3.765 vs 3.796 /
                          # 3.797 with 0 (-0.9%)
                          persist_tagged_pairs=1,
                          # 2026-12-02 twenty-fourth session (1880734, ms, two rounds each): smollm2-135m at 8192
                          # 0.662 vs 0.697 (-5.0%), llama-3.2-1b at 8192 0.892 vs 0.897-0.898 (-0.7%), short context
                          # 0.483 vs 0.485 and 0.737-0.738 vs 0.737-0.738; llama-3.1-8b's partials do not fit
                          # beside its ring (unstaged, unchanged). So 1
                          persist_combine_staged=1,
                          # 2026-12-02 twenty-fifth session (dc86e48, ms, two rounds, bench/RESULTS.md): llama-3.2-1b
                          # at 8192 0.909 / 0.910 vs 0.893 / 0.892 (+1.9%), short context and smollm2-135m the same
                          # (0.735 vs 0.734-0.737, 0.662 vs 0.662-0.663, 0.483 vs 0.482); off. With
                          # persist_attn_pipeline 0 it spills 512 B on llama-3.2-1b (ptxas: 8 keys held over the wait)
                          persist_attn_early_pass=0,
                          # fewer instructions a key at 8192, where the slice's math, not its loads, sets its time
                          # (bench/kv_slice.cu, 2026-12-03 twenty-seventh session: the slice 10.7 us, its loads alone
                          # 4.8): 4,512 -> 4,240 SASS instructions in kv_slice.cu's pipelined slice (all of its code,
                          # static count). Twenty-eighth session (66f6d56, ms, two rounds): llama-3.2-1b at 8192 0.883
                          # vs 0.894 (-1.3%), short context 0.736 vs 0.737, qwen3-1.7b 1.112 vs 1.123 (-1.0%),
                          # smollm2-135m 0.480-0.481 vs 0.481; kv_slice.cu's slice 10.37 us vs 11.10. So 1 (where
                          # persist_attn_mma leaves the FMA passes: heads 128 wide)
                          persist_attn_lean=1,
                          # twenty-eighth session (9d8a5ad, ms, two rounds, against lean 1): llama-3.2-1b at 8192 0.857
                          # / 0.856 vs 0.886 (-3.3%), short context 0.728 vs 0.736-0.737 (-1.1%), smollm2-135m 0.469 /
                          # 0.468 vs 0.480-0.481 (-2.4%); 32 rows a pass +4.0% and +8.5% (it spills). kv_slice.cu's
                          # sketch of it 6.05 us vs the FMA slice's 10.37-11.10. So 16
                          persist_attn_mma=16,
                          # twenty-ninth session (d94c7d0, ms, two rounds, bench/results/2026-12-03e): qwen3-1.7b (2
                          # query heads a KV head) 1.121 / 1.126 vs 1.112 / 1.114 (+0.9%), at 8192 1.435 / 1.436 vs
                          # 1.451 / 1.452 (-1.1%). A loop loading V under the scores and the next K under the weighted
                          # sum (7cbe11a, reverted) was +1.7% at short context (call 6): no better. Thirtieth session
                          # (bench/results/2026-12-04 call 2): llama-3.1-8b (4 a KV head) 3.859 / 3.856 vs 3.907 /
                          # 3.906 (-1.3%). So 16 where 4 or more heads share a KV head, the FMA passes below
                          persist_attn_mma_wide=16, persist_attn_mma_wide_min_group=4,
                          # thirtieth session (bench/results/2026-12-04 calls 1-2, variants.py, two rounds): 2
                          # llama-3.2-1b at 8192 0.851 / 0.851 vs 0.856 / 0.858 ms (-0.7%), short context 0.728 /
                          # 0.727 vs 0.728 / 0.728; smollm2-135m 0.471 / 0.470 vs 0.467 / 0.467 (+0.7%), at 8192 0.639
                          # vs 0.641. kv_slice.cu: 7.07 vs 7.04 us; 3 (it spills) 7.74. So 2, and 1 on narrow models
                          # (persist_attn_mma_ahead_narrow). A long split's passes of 32 or 64 rows a warp (78d31ad,
                          # reverted): llama-3.2-1b at 8192 +0.0% and +2.5% (call 5)
                          persist_attn_mma_ahead=2,
                          # thirty-second session (75cea0b, ms, two rounds, bench/RESULTS.md): llama-3.2-1b 0.732 /
                          # 0.734 vs 0.729 / 0.728 (+0.7%), at 8192 0.867 / 0.868 vs 0.850 / 0.853 (+1.9%),
                          # smollm2-135m 0.473 vs 0.471 (+0.4%). Its keys take 0.77 us against 1.13 at position 64,
                          # but q's words come later (q, rotation and new row 2.05 vs 1.31 us): read as the rows'
                          # loads queueing ahead of them (not measured apart). Off. Thirty-eighth session (655b6dc,
                          # variants.py, ms): 2 (the rows loaded before the tile's wait) on smollm2-135m 0.432 / 0.432
                          # vs 0.438 / 0.439, 0.434-0.435 vs 0.439-0.441 (three rounds), 0.433 / 0.433 vs 0.439 / 0.440
                          # (-1.3 to -1.5%, calls 2-4), at 8192 0.585 vs 0.601 (-2.7%, three rounds); llama-3.2-1b
                          # +0.2%, -0.5% (traced builds), +0.6%, at 8192 +2.2% (calls 2-4): traced at position 64 its
                          # keys took 0.81 us against 1.20, q's words 1.33 against 0.97, as with 1. So 2 on narrow
                          # models (persist_attn_mma_first_narrow), 0 on the others. The weight stream held while an
                          # SM runs an attention split with rows (persist_attn_holds_stream, 408d291, taken out; call
                          # 7): llama-3.2-1b +0.1% (the last split's slice 2.98 vs 3.27 us), qwen3-1.7b +0.8%
                          persist_attn_mma_first=0, persist_attn_mma_first_narrow=2,
                          # the same bits (8 GPU tests) but slower: 0.668 -> 0.687 / 0.692 / 0.696 ms at 1 / 2 / 3 on
                          # llama-3.2-1b, qwen3-1.7b +3.7% / +6.1% at 1 / 3, llama-3.1-8b +0.5% / +1.9%: every tile of
                          # an item-dealt GEMV sums ~20% slower, whole-row ones too, which outweighs the balance won;
                          # not the page loop's tests (a loop without them was as slow); cause unknown (forty-second
                          # session, bench/RESULTS.md)
                          persist_item_shares=0),
}


def with_fields(params, assignments: dict[str, str]):
    """A copy of a dataclass (a TargetParams, a cost table) with `field: value` strings from a command line applied,
    each converted to its field's type (the A/B scripts: variants.py, ptxas.py, time_model.py). A name that is no
    field (a typo, or a field taken out) or a value of the wrong type is a ValueError naming it."""
    names = [f.name for f in dataclasses.fields(params)]
    values = {}
    for k, v in assignments.items():
        if k not in names:
            close = difflib.get_close_matches(k, names, n=3)
            raise ValueError(f"{type(params).__name__} has no field {k!r}"
                             + (f" (did you mean {', '.join(close)}?)" if close else ""))
        kind = type(getattr(params, k))
        try:
            values[k] = kind(v)
        except ValueError:
            raise ValueError(f"{k}={v!r}: not a value of its type ({kind.__name__})") from None
    return dataclasses.replace(params, **values)


def target(arch: str) -> TargetParams:
    if arch not in TARGETS:
        raise ValueError(f"no target parameters for {arch} (kiec has {', '.join(TARGETS)})")
    return TARGETS[arch]
