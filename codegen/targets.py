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
    # models, not a cause (codegen/TUNING.md says what was measured)
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
    # persistent, with persist_pace_ref_gbps: the paces scaled by (that peak / the GPU's) to the power of this over
    # 100 (100: in proportion, each SM's share of the other GPU's rate; below: a pace less slowed on a slower GPU)
    persist_pace_ref_power_pct: int
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
    # persistent: > 0: a context of at most this many rows in one split a KV head (no merge; with owner merges at 1 or
    # more, no arrival on the chain either), a longer one split as attn_min_keys says (common.cuh: split_range_of's
    # solo). 0: off. Not with consumer merges or attn_l2_prefetch 2 (their split counts do not take it)
    persist_attn_solo_keys: int
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
    # persistent: 1: a GEMV lane loads its chunk of x from the scratch half by half in an order that spreads each
    # quarter-warp's 16-byte loads over all 32 banks (gemv_x.cuh: load_chunk8, chunk_first_half; the same bits)
    persist_x_spread: int
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
    # none on smollm2-135m. On by default since the fifty-third session: -1.5% to +0.1% against the FMA tile on
    # H100s, the logits within the budget, compute-sanitizer clean (codegen/TUNING.md)
    persist_mma_rows: str = "qkv+o+gate_up+down+head"
    # persistent: persist_mma_rows only for the GEMVs whose largest share in whole 16-row blocks is at most this many
    # percent above their largest share dealt by the row (llama-3.2-1b's QKV: 32 rows against 24, +33%, slower on
    # the tensor cores; codegen/TUNING.md)
    persist_mma_share_excess: int = 5
    # persistent: the kinds of tensor-core GEMV (of persist_mma_rows', joined by +) dealt by the page of a block
    # instead of by the whole block: an item is one of a 16-row block's K blocks (a ring page), the items dealt evenly
    # over the SMs in block order (gemv_item_shares), so a share may start and end inside a block. A share that starts
    # inside one publishes its 16 rows' sums over its pages of it as tagged words (gemv_mma.cuh: MmaShare); the tile
    # before, whose share ends inside that block, completes those rows with them: its pages' sums first, then the next
    # tile's (other bits than whole blocks: a block's sum split in two). The share rule (persist_mma_share_excess) does
    # not apply to them. Not with parity tags. "": none. Slower on an H100 (sixty-eighth session, codegen/TUNING.md):
    # gate/up so dealt +0.2% on llama-3.1-8b (its gate/up 1.1 us a layer shorter, the phases after it as much longer),
    # +2.2% on llama-3.2-1b, +2.4% on qwen3-1.7b, every kind +1.3% on llama-3.2-1b
    persist_mma_item_shares: str = ""
    # persistent: 1: persist_attn_spare_splits spares only as many SMs as leave the output projection's busiest share
    # no larger than with every SM (in its units: rows, or blocks of 16 rows on the tensor cores). Without it
    # llama-3.2-1b's and qwen3-1.7b's projections (128 blocks) go to 124 SMs, 4 of them taking 2 blocks: 32 rows where
    # every other SM takes 16 (ir/passes/persistent.py: even_spares). 0: every split spare_splits names. 1 was slower
    # at short context on an H100 (llama-3.2-1b +0.3%, qwen3-1.7b +0.8-1.0%: the unspared SMs' attention splits make
    # their blocks last), faster at long context and on llama-3.1-8b (-0.5-0.6%; codegen/TUNING.md)
    persist_attn_spare_even: int = 0
    # persistent: persist_attn_spare_even where every output projection is at least this wide (its K; 0: only where
    # persist_attn_spare_even is 1). Timed on H100s: -0.4% / -0.5% on llama-3.1-8b (K 4096), +0.3% / +0.8-1.0% on
    # llama-3.2-1b / qwen3-1.7b (K 2048). The reading (traced on the K 2048 models only): an extra block of 16 x 2048
    # ends 0.69-0.78 us late, an attention SM's block 1.35-1.71 us; one of 16 x 4096 streams twice the bytes
    persist_attn_spare_even_min_k: int = 4096

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
    # why each value, briefly, above it; the measurements behind it: codegen/TUNING.md (a section a line, in order)
    "sm_90": TargetParams(arch="sm_90", sms=132, gemv_warps=4, gemv_rows=2, gemv_blocks_per_sm=8, gemv_min_blocks=4,
                          gemv_early_loads=1,
                          # 64: 256 won 0.3-0.7% on the tensor-core models' short contexts but lost 2.6% on qwen3-1.7b
                          # and raised every p90
                          attn_warps=8, attn_blocks=132, attn_keys=8, attn_min_keys=64,
                          # asking L2 for a split's rows ahead was slower at 8192, either way
                          attn_l2_prefetch=0,
                          gencode="-gencode=arch=compute_90a,code=sm_90a",
                          prefetch_bytes=8 << 20,
                          # 12 x 16 KB pages: 192 KB an SM, 5.6 us of the H200's read rate; smaller or fewer pages were
                          # slower
                          persist_warps=8, persist_page_bytes=16 << 10, persist_stages=12,
                          # L2 lookahead helped only the narrow model (smollm2-135m), so below a width of 1024
                          persist_l2_ahead_bytes=256 << 10, persist_l2_ahead_max_width=1023,
                          # the stop position looked at every 64 polls (1.3% faster than at each); sleeping between
                          # polls: no gain kept
                          persist_stop_poll_every=64, persist_poll_sleep_ns=0,
                          persist_counter_stride=1, persist_reduce_batch=1,
                          # the LM head's warp sums batched: no faster
                          persist_reduce_batch_head=0,
                          # 8 loads in flight a thread; 16 spills on the llama models and was slower paced
                          persist_copy_batch=8,
                          # 8 words at once; 16 (spill-free since the forty-fifth session) no faster on an H200
                          persist_norm_batch=8,
                          # 4 rounds at once (two round trips); 7 no faster
                          persist_warp_copy_rounds=4,
                          # the weight stream first out of L2: evict-normal was 2% slower
                          persist_evict_first=1,
                          # the kept page walk paced at a page's share of the H200's rate: 440 ns where attention runs
                          # on the tensor cores, 460 for qwen3-1.7b's FMA passes
                          persist_walk_kept=1, persist_page_pace_ns=440, persist_page_pace_fma_ns=460,
                          # paces by GEMV kind: no faster
                          persist_page_pace_kinds="",
                          # the narrow model streams unpaced, its walk read each page
                          persist_paced_min_width=1024,
                          # a slower pace for the refill ahead: no faster
                          persist_page_pace_ahead_ns=0,
                          # the ahead pace at long context only: mixed, off
                          persist_page_pace_ahead_from_pos=0,
                          # no model has both the lookahead and the pace
                          persist_l2_ahead_paced=0,
                          # pages waiting in L2 refill the ring no faster
                          persist_l2_ahead_burst=0,
                          # the H200's peak: its paces as measured, and each SM's share of the rate on another GPU
                          persist_pace_ref_gbps=4814,
                          # an H100's paces scaled by the peaks' ratio to the power 0.87, not 1: 1.1% / 1.5% faster
                          # there on llama-3.2-1b / qwen3-1.7b (llama-3.1-8b's 420 in proportion +0.1-0.2%)
                          persist_pace_ref_power_pct=87,
                          # x loaded straight from memory was slower (twice the L2 traffic, a guess)
                          persist_x_direct=0,
                          # a warp's own copy of x from K 12288: llama-3.1-8b's 14336 gained 1%, the 8192 and 6144 of
                          # the others lost
                          persist_x_warp_copy_min_k=12288,
                          # the previous token's wait polled first: 0.7-4.2% faster
                          persist_waits_previous_first=1,
                          # an instruction's waits polled at once, a lane each: the SM that ended a phase no longer
                          # polls two in turn
                          persist_waits_together=1,
                          # the next K/V pass loaded while one computes: 3% faster at 8192
                          persist_attn_pipeline=1,
                          # graph mode's step (a smaller one only for short splits, below)
                          persist_attn_keys=0,
                          # a short split's pass of 2 keys: 0-1.6% faster
                          persist_attn_short_keys=2,
                          # the coefficients before the wait: within the spread both ways
                          persist_attn_early_rope=0,
                          # a short pass's earlier rows first: no faster
                          persist_attn_kv_first=0,
                          # rotation pairs a thread, the coefficients from the step's table: smollm2-135m 1.5% faster at
                          # 2, 1.0% more at 3 (H100s), the same bits
                          persist_attn_q_pairs=3,
                          # qwen3-1.7b's heads a warp each: 0.5-0.9% faster on H100s, the same bits
                          persist_attn_q_pairs_normed=1,
                          # the owner merging where it is the only split in use (solo contexts below): 0.7-1.2%
                          # faster at short context on H100s, the same at 1024 and 8192 keys; at 64 it lost at 8192
                          persist_attn_owner_merges=1,
                          # the output projection merging: slower on every wide model on an H100
                          persist_attn_consumer_merges=0,
                          # a context of up to 256 rows one split a KV head (its owner signals before it arrives):
                          # with owner merges at 1 0.7-1.2% faster at short context on H100s, attn_min_keys 256's
                          # gain without its loss at 1024 keys
                          persist_attn_solo_keys=256,
                          # 8: no spills at 2 merged splits
                          persist_merge_loads=8,
                          # the first split's SM out of the output projection: 0-1.0% faster
                          persist_attn_spare_splits=1,
                          # mixed: off (on the narrow models too, since they are tagged)
                          persist_attn_newest_first=0,
                          # the combine's loop unrolled by 8 on the wide models (16 spills on llama-3.2-1b)
                          persist_combine_batch=0,
                          # tagged words for GEMV and attention values: 0.2-10% faster, on every model since the
                          # forty-seventh session
                          persist_tagged=2, persist_tagged_min_width=0,
                          # the norm in each warp: under the noise
                          persist_norm_in_warps=0,
                          # an item a half-warp: slower
                          persist_dot_half_warps=0,
                          # a warp's items one at a time: two or four at once were 1-10% slower
                          persist_dot_items=1, persist_dot_item_chunks=16, persist_dot_items_min_share=1,
                          # the next tiles' fields staged on chip, the norm weights kept raw: 0.5-5.7% faster
                          persist_stage_instrs=1, persist_norm_w_raw=1,
                          # the norm's scale after the dots: 0.1-0.9% faster
                          persist_norm_late_scale=1,
                          # x's chunks loaded in order, two wavefronts a quarter-warp's load: not yet timed
                          persist_x_spread=0,
                          # the host's round trips off the chain (its 2 us under the spread)
                          persist_select_host_late=1,
                          # below a width of 1024 the narrow fields (smollm2-135m, tagged like the wide models)
                          persist_narrow_width=1024, persist_x_direct_narrow=0, persist_attn_owner_merges_narrow=0,
                          persist_attn_newest_first_narrow=0,
                          # 16 splits' partials a batch on the narrow model: 5% faster at 8192
                          persist_combine_batch_narrow=16,
                          # 4 pages on the narrow model (3-4 pages a layer an SM): 1-14% faster than 12 (14%: tagged, at
                          # 8192)
                          persist_stages_narrow=4,
                          # one pass ahead on the narrow model (2 slower at 8192)
                          persist_attn_mma_ahead_narrow=1,
                          # a narrow model's split takes up to 256 rows: 8% faster at short context
                          persist_attn_min_keys_narrow=256,
                          # parity tags: the bytes are not what the prologues cost
                          persist_tag_parity=0,
                          # spinning on tags instead of counters: slower on the wide models
                          persist_tag_waits=0, persist_tag_lead=100,
                          # but 2.4-3.2% faster on the narrow one
                          persist_tag_waits_narrow=1,
                          # a look at a page's barrier costs more than it saves
                          persist_page_look=0,
                          persist_probe_relaxed_signal=0, persist_probe_warm_code=0, persist_probe_twice=0,
                          persist_trace_attention=0,
                          persist_trace_dots=0, persist_trace_stream=0,
                          # no traced step's code: 1.5-6.2% faster (a trace compiles its own artifact)
                          persist_trace_code=0,
                          # probes (tokens wrong on purpose): timing aids, never on
                          persist_probe_mlp_local=0, persist_probe_o_local=0, persist_probe_attention_idle=0,
                          # the down projection's x as tagged bf16 pairs: 0.3-1.4% faster
                          persist_tagged_pairs=1,
                          # the partials staged with cp.async where they fit: 5% faster at 8192 on smollm2-135m
                          persist_combine_staged=1,
                          # the first pass before the wait: 1.9% slower at 8192
                          persist_attn_early_pass=0,
                          # fewer instructions a key in the FMA passes: 1.0-1.3% faster
                          persist_attn_lean=1,
                          # attention on the tensor cores, 16 rows a warp: 1.1-3.3% faster (32 spills)
                          persist_attn_mma=16,
                          # 128-wide heads on them where 4 or more heads share a KV head (llama-3.1-8b -1.3%)
                          persist_attn_mma_wide=16, persist_attn_mma_wide_min_group=4,
                          # two passes in flight: 0.7% faster at 8192 (one on the narrow model)
                          persist_attn_mma_ahead=2,
                          # the first passes' rows beside q's: slower on the wide models, 1.3-2.7% faster on the narrow
                          # one
                          persist_attn_mma_first=0, persist_attn_mma_first_narrow=2,
                          # item shares: the same bits, 0.5-6% slower (cause unknown)
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
