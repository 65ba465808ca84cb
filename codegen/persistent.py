"""Persistent mode: the whole program as one kernel (templates/include/kiec/persistent.cuh).

The scheduler's per-SM instruction lists and one descriptor per fused kernel (its weight and buffer offsets and
scalars) travel in weights.bin, in persistent_abi's formats. The generated source holds one dispatch case per
distinct tile function (its compile-time constants): every case is inlined into the kernel, and a few bodies fit
the register file where one per layer did not (ptxas spilled the weight registers of calls between them).
"""
from __future__ import annotations

import struct

from kiec.errors import ModeUnsupported  # a model this mode cannot build (graph mode may): kiec.compile falls back
from kiec.ir.passes.persistent import attention_splits, output_projections, schedule, share_items
from kiec.ir.passes.phases import BLOCK_ROWS, Schedule, item_rows, partials
from kiec.ir.passes.program import AttentionKernel, ElementwiseKernel, EmbedKernel, GemvKernel, Program
from kiec.ir.passes.tags import tag_parity, tag_plan

from .buffers import TAGGED_REGION
from .emit import EPILOGUES, Sources, _Emitter, mma_layout, walk
from .persistent_abi import header as abi_header
from .persistent_abi import SAMPLE_CANDIDATES, pack_kernel, pack_schedule, trace_slots
from .persistent_rules import PersistentRules, for_model, l2_ahead_bytes, paced_stream, tag_level, traceable
from .targets import TargetParams

PROBE_SUMS = "probe.mlp_local.sums"  # persist_probe_mlp_local 2: the int64 sums its down projections add to
SMEM_LIMIT = 227 * 1024  # shared memory one H100/H200 block may take
# room left for the kernel's own __shared__ variables (ptxas -v: 128 bytes; with persist_attn_q_pairs 3 its RopeTable
# too, 12 bytes a pair, at most 64 pairs: 896 bytes)
STATIC_SMEM = 1024
STAGE_SMEM = 1024  # more of it with persist_stage_instrs (persistent.cuh: InstrStage's slots, 952 bytes)
WARP_COPY_FLOATS = 32 * 8  # a warp's round of x with persist_x_warp_copy_min_k (gemv_x.cuh's, the same name)


def carry(k: GemvKernel) -> str:
    """The arena region of a GEMV dealt to the item (persist_item_shares) where its tiles publish their lead units'
    sums (gemv_pages.cuh: ItemShare)."""
    return k.name + ".carry"


def ring_head_bytes(stages: int) -> int:
    """The ring's barriers before its pages: two 8-byte mbarriers a page, in 128-byte lines (for persist_stages:
    never less than the kernel's Ring takes)."""
    return 128 * -(-(2 * stages * 8) // 128)


# attention_tile's template parameters (persistent.cuh), in order: the ten every call writes, then the tail's, each with
# its default there (persistent.cuh declares them; tests/cpu/test_compile_attention.py checks the two agree). The
# emitter names each value it passes, and tests read a call's arguments by these names (tests/tiles.py), not by place
ATTENTION_TILE_HEAD = ("T", "HEAD_DIM", "GROUP", "ROTARY", "INTERLEAVED", "QK_NORM", "WARPS", "SPLITS", "U",
                       "MIN_KEYS")
ATTENTION_TILE_TAIL = (("TAGGED", False), ("PIPE", False), ("SOFTCAP", True), ("U_SHORT", 0), ("EARLY_ROPE", False),
                       ("KV_FIRST", False), ("OWNER_MAX", 0), ("NEWEST_FIRST", False), ("IDLE", False),
                       ("STAGED", False), ("EARLY_PASS", False), ("LEAN", False), ("MMA_KEYS", 0), ("MMA_AHEAD", 1),
                       ("MMA_FIRST", 0), ("PAIRED", False), ("CONSUMER", 0), ("Q_PAIRS", 0), ("SOLO", 0))


def template_value(v) -> str:
    """A template argument as generated source writes it (bools as true / false)."""
    return str(v).lower() if isinstance(v, bool) else str(v)


def template_tail(values: list, defaults: list) -> str:
    """A tile function's trailing template arguments (each with a default in its header): `values` written up to
    the last one that differs from its default."""
    values = list(values)
    while values and values[-1] == defaults[len(values) - 1]:
        values.pop()
    return "".join(f", {template_value(v)}" for v in values)


class _PersistentEmitter(PersistentRules, _Emitter):
    """Lays out the weights like graph mode; instead of launches it writes one dispatch case per kernel, its tile
    chosen by the rules (persistent_rules.py)."""

    def __init__(self, program: Program, dtype: str, max_seq_len: int, target: TargetParams):
        target = for_model(program, target)  # a narrow model's own fields (persist_narrow_width)
        # persist_tagged: the values handed over as tagged words (the base class lays them out in the arena)
        level = tag_level(program, target)
        self.tags = tag_plan(program, attention=level >= 2) if level else None
        super().__init__(program, dtype, max_seq_len, target)
        t = target
        if t.persist_tag_waits not in (0, 1, 2):
            raise ValueError(f"persist_tag_waits {t.persist_tag_waits}: 0, 1 (tag waits) or 2 (and write guards late)")
        self.tag_waits = t.persist_tag_waits if self.tags else 0  # (a model without tags has none to spin on)
        if self.tag_waits and t.persist_tag_parity:
            raise ValueError("persist_tag_waits with persist_tag_parity (on a narrow model, persist_tag_waits_narrow): "
                             "a parity tells a word's last write from the one before only, so its reader must wait for "
                             "the writer's counter first")
        self.consumer_merges = self.consumer_merge_count()
        if t.persist_x_direct not in (0, 1, 2):
            raise ValueError(f"persist_x_direct {t.persist_x_direct}: 0, 1 (every GEMV without a norm) or 2 (those "
                             f"whose warps hold a segment of x each)")
        if t.persist_x_warp_copy_min_k < 0:
            raise ValueError(f"persist_x_warp_copy_min_k {t.persist_x_warp_copy_min_k}: 0 (never) or the least K of "
                             f"a GEMV whose warps copy their own segments of x")
        if t.persist_attn_mma_first not in (0, 1, 2):
            raise ValueError(f"persist_attn_mma_first {t.persist_attn_mma_first}: 0, 1 (the first passes' rows "
                             f"loaded beside q's words) or 2 (before the tile's wait)")
        if t.persist_dot_items not in (1, 2, 4, 8) or t.persist_dot_item_chunks < 1:
            raise ValueError(f"persist_dot_items {t.persist_dot_items}: 1, 2, 4 or 8 items a warp at once, with "
                             f"persist_dot_item_chunks ({t.persist_dot_item_chunks}) at least 1")
        if not 0 <= t.persist_tag_lead <= 100:
            raise ValueError(f"persist_tag_lead {t.persist_tag_lead}: a percentage of the writer's tiles, 0 to 100")
        if t.persist_probe_o_local and self.tags and any(
                program.kernels[i].x in self.tags.writer for i in output_projections(program)):
            raise ValueError("persist_probe_o_local with attention's output as tagged words (persist_tagged 2): the "
                             "output projection would wait on their tags whatever it waits for; time it with "
                             "persist_tagged 0 or 1")
        if self.tag_waits and t.persist_x_direct:
            raise ValueError("persist_tag_waits with persist_x_direct (on a narrow model, persist_tag_waits_narrow and "
                             "persist_x_direct_narrow): not supported (x slices read straight from memory have never "
                             "run with words loaded before their writer's counter was met)")
        self.warps = t.persist_warps
        self.paired = self.paired_values()  # (persist_tagged_pairs)
        self.mma = self.mma_gemvs()  # (persist_mma_rows)
        self.mma_items = self.mma_item_shares()  # (persist_mma_item_shares: of self.mma, dealt by the page)
        # parity tags need every SM to read each write of the residual stream (tag_parity), which a spared SM
        # skips at the output projection: they take no spared splits
        self.sched: Schedule = schedule(program, t.sms, slot_of=dict(self.arena), min_keys=t.attn_min_keys,
                                        previous_first=bool(t.persist_waits_previous_first), tags=self.tags,
                                        tag_waits=self.tag_waits, tag_lead=t.persist_tag_lead,
                                        owner_merges=t.persist_attn_owner_merges,
                                        consumer_merges=self.consumer_merges, solo_keys=self.solo_keys(),
                                        spare_splits=0 if self.parity_tags() else t.persist_attn_spare_splits,
                                        newest_first=bool(t.persist_attn_newest_first),
                                        spare_even=self.spare_even(),
                                        mlp_local=bool(t.persist_probe_mlp_local),
                                        o_local=bool(t.persist_probe_o_local),
                                        early_pass=bool(t.persist_attn_early_pass),
                                        pair_rows=frozenset(i for i, k in enumerate(program.kernels)
                                                            if isinstance(k, GemvKernel) and k.out in self.paired),
                                        item_segs={**self.item_shares, **self.mma_items}, block_rows=self.mma,
                                        block_items=frozenset(self.mma_items))
        self.rows: dict[int, int] = {}  # kernel -> the most outputs one of its instructions computes
        for ins in (ins for lst in self.sched.lists for ins in lst):
            self.rows[ins.kernel] = max(self.rows.get(ins.kernel, 0), ins.hi - ins.lo)
        self.cases: list[str] = []  # one per distinct tile function (spec)
        self.descs: list[bytes] = []  # one per kernel
        self.smem = (32 + 2 * SAMPLE_CANDIDATES) * 4  # select: its block scratch, candidate weights and ids
        self.arrivals = 0  # attention arrival counters so far (one per layer and KV head)
        self.rope_table: dict | None = None  # (persist_attn_q_pairs 3: the table's pairs and frequencies' offset)

    def attention_splits(self, k: AttentionKernel) -> int:
        return attention_splits(k, self.t.sms)  # the schedule's (KV head, split) tiles

    def scratch(self) -> dict[str, int]:
        """Each layer's attention partials get their own region, so that layers never wait on each other's (as
        8-byte words with persist_attn_owner_merges: a value and its tag)."""
        out, words = {}, 2 if self.t.persist_attn_owner_merges or self.t.persist_attn_consumer_merges else 1
        for k in self.attn:
            slots = self.partial_slots(k)
            out[partials(k) + ".o"], out[partials(k) + ".ml"] = slots * k.head_dim * words, slots * 2 * words
        if self.t.persist_probe_mlp_local >= 2:  # the probe's int64 sums: the widest down projection's outputs
            out[PROBE_SUMS] = 2 * max((k.n_out for k in self.p.kernels if self.after_silu(k)), default=1)
        for i, segs in self.item_shares.items():  # a lead unit's sums: a tagged word each (a pair's: gate and up of
            silu = self.p.kernels[i].epilogue == "silu_mul"  # two rows), a slot a tile
            out[carry(self.p.kernels[i])] = 2 * self.t.sms * segs * (4 if silu else 1)
        # persist_mma_item_shares: a lead block's 16 rows' sums, gate and up, a slot a tile; by kind, before the
        # tensor-core GEMVs are chosen (those that are not leave theirs unused)
        kinds = self.mma_item_kinds()
        for i, k in enumerate(self.p.kernels):
            if isinstance(k, GemvKernel) and i not in self.item_shares and self.gemv_kind(k) in kinds:
                out[carry(k)] = 2 * self.t.sms * BLOCK_ROWS * (2 if k.epilogue == "silu_mul" else 1)
        return out

    def tile_items(self, ins) -> int:
        """A GEMV instruction's items (row segments: what its share streams, a unit of the weights), 0 elsewhere: the
        manifest's schedule carries them for the trace's views (scripts/trace_summary.py: long_last)."""
        k = self.p.kernels[ins.kernel]
        if ins.opcode != "gemv" or not isinstance(k, GemvKernel):
            return 0  # (dealt to the item: the schedule's items, a row's segments or a block's pages)
        segs = self.sched.item_segs.get(ins.kernel, self.segments(k))
        return share_items(ins, segs, item_rows(self.sched, ins.kernel))

    def partial_slots(self, k: AttentionKernel) -> int:
        """An attention kernel's partials: one (o, m, l) per query head and split."""
        return k.kv_heads * self.splits[k.name] * (k.n_heads // k.kv_heads)

    def _case(self, body: str, **desc) -> None:
        if body not in self.cases:
            self.cases.append(body)
        self.descs.append(pack_kernel(self.cases.index(body), **desc))

    def _w(self, name: str | None) -> int:
        return -1 if name is None else self.lay.add(name, (name,))

    def embed(self, k: EmbedKernel) -> None:
        vocab, dim = self.g.params[k.table].type.shape
        tagged = "true" if self.tagged(k.out) else "false"
        self._case(f"kiec::embed_tile<T, {tagged}>(u, (const T*)W(d.w[0]), d.n, d.m, A(d.a[0]))", n=dim, m=vocab,
                   w=(self._w(k.table),), a=(self.arena[k.out],))
        self.src.kernels.append(dict(name=k.name, family="embed", bytes=dim * self.esize * 2))

    def parity_table(self) -> dict | None:
        """Parity tags: each phase's two bits (tag_parity) and the tagged slots' region the runtime zeroes before
        each launch (floats of the arena); None without them."""
        if not self.parity_tags():
            return None
        bits = tag_parity(self.p, self.tags, self.sched)
        start = self.arena[TAGGED_REGION]
        return dict(bits=[bits.get(c, 0) for c in range(len(self.sched.phases))], start=start,
                    floats=self.arena_floats - start)

    def gemv(self, k: GemvKernel) -> None:
        if k.k % 8:
            raise ModeUnsupported(f"{k.name}: K = {k.k} is not a multiple of 8 (the GEMV reads 16-byte vectors)")
        packed, i = "+".join(k.weights), self.p.kernels.index(k)
        mma = i in self.mma  # (persist_mma_rows: the weights as 16-row blocks, a copy apart)
        layout = mma_layout(self.mma_width(k)) if mma else ""
        w_off = self.lay.add(packed + ("@" + layout if mma else ""), k.weights, layout=layout)
        b_off = self.lay.add(packed + ".bias", k.biases) if k.biases else -1
        silu = k.epilogue == "silu_mul"
        segs = self.segments(k)
        tx, ty = self.tagged(k.x), self.tagged(k.out)
        direct, warp_copy = self.x_direct(k), self.x_warp_copy(k)
        # the norm in each warp's registers (persist_norm_in_warps): where every warp holds all of x, read untagged
        wnorm = self.norm_in_warps(k)
        # an item a half-warp (persist_dot_half_warps): where a tile gives some warp more than one item, x is untagged
        # and a half-warp's rounds stay few (registers: 8 floats of x a round); not with the twice probe
        rows = self.rows[i]  # the most outputs one of its tiles computes
        items = rows * segs
        half_rounds = -(-(k.k // 8 // segs) // 16)
        # (dealt to the item: one item at a time, a warp each; or a tensor-core GEMV dealt by the page, MmaShare)
        sk = i in self.item_shares or i in self.mma_items
        half = bool(self.t.persist_dot_half_warps and not tx and items > self.warps and half_rounds <= 6
                    and not self.twice(k) and not warp_copy and not sk and not mma)
        # the LM head's warp sums in their own batch (persist_reduce_batch_head; 0: the table's persist_reduce_batch)
        batch = self.t.persist_reduce_batch_head if k.epilogue == "argmax" else 0
        if batch not in (0, 1, 2, 4, 8, 16, 32):
            raise ValueError(f"persist_reduce_batch_head {batch}: 0 or a power of two up to 32 (warp_batch.cuh)")
        batch = 0 if half or mma else batch  # (half-warp items sum over 16 lanes their own way, mma blocks theirs)
        # persist_probe_mlp_local 2: a down projection's tiles add 1 to each of its outputs' int64 sums (a timing probe)
        sums = self.t.persist_probe_mlp_local >= 2 and self.after_silu(k)
        # a warp's items several at once (persist_dot_items) where a warp of its tiles has at least
        # persist_dot_items_min_share of them (the long shares: gate/up, down, the LM head on llama-3.2-1b)
        per_warp = -(-items // self.warps)
        dot_items = (self.t.persist_dot_items if per_warp >= self.t.persist_dot_items_min_share and not half
                     and not sk and not mma else 1)
        # persist_attn_consumer_merges: x made from the attention's partials (ConsumerMerge)
        merge = self.merge_of(k)
        if merge and (k.norm or direct or warp_copy or not tx or k.x in self.paired or sums or sk or self.twice(k)):
            raise ValueError(f"persist_attn_consumer_merges: {k.name} reads attention's output other than as a tagged "
                             f"x copied into the scratch (a norm, x direct, a warp's own copy, pairs, a probe or item "
                             f"shares)")
        mg = (f"kiec::ConsumerMerge<{merge.head_dim}, {merge.n_heads // merge.kv_heads}, {self.splits[merge.name]}, "
              f"{self.t.attn_min_keys}, {self.consumer_merges}>" if merge else "kiec::NoConsumerMerge")
        tail = template_tail([direct, tx, ty, self.twice(k), wnorm, batch, half, sums, dot_items, warp_copy,
                              k.x in self.paired, k.out in self.paired, sk, mg, mma],
                             [False, False, False, 0, False, 0, False, False, 1, False, False, False, False,
                              "kiec::NoConsumerMerge", False])  # .. SK, MG, MMA
        body = (f"kiec::gemv_tile<T, {k.k}, {self.warps}, {'true' if k.norm else 'false'}, {EPILOGUES[k.epilogue]}, "
                f"{'true' if k.biases else 'false'}, {segs}{tail}>(u, ring, "
                f"(const T*)WN(d.w[1]), A(d.a[0]), (const T*)WN(d.w[2]), d.eps, A(d.a[1]), d.n, smem"
                + (", (unsigned long long*)A(d.a[2]))" if sums else ", nullptr, A(d.a[3]))" if sk
                   else ", nullptr, nullptr, A(d.a[2]), A(d.a[3]))" if merge else ")"))
        if k.epilogue == "argmax":
            body = "u.ins->opcode == kiec::OP_SELECT ? kiec::select_tile(u, A(d.a[1]), d.n, smem) : " + body
        self._case(body, n=k.n_out, eps=k.norm.eps if k.norm else 0.0, row_bytes=k.k * self.esize,
                   item_bytes=16 * self.mma_width(k) * self.esize if mma else k.k // 8 // segs * 16, silu=silu,
                   blocks=mma, tag_x=self.tag_writer(k.x),
                   tag_res=self.tag_writer(k.residual), pace=self.kind_paces.get(self.gemv_kind(k), 0),
                   w=(w_off, b_off, self._w(k.norm and k.norm.weight)), window=merge.attention.window if merge else 0,
                   a=(self.arena[k.x], self.arena[k.out]) + ((self.arena[PROBE_SUMS],) if sums else ())
                   + ((-1, self.arena[carry(k)]) if sk else ())
                   + ((self.arena[partials(merge) + ".o"], self.arena[partials(merge) + ".ml"]) if merge else ()))
        staged = not direct and not wnorm  # x in the scratch: all of it, or a round of its segment a warp (warp_copy)
        x_floats = (self.warps * WARP_COPY_FLOATS if warp_copy else k.k) if staged else 0
        rows += 1 if sk and not mma and k.out in self.paired else 0  # (ItemShare: a trailing pair's row past the share)
        # acc (a sum a segment of each row, or a row's with mma), the warps' words and mma's two slots of block sums
        # (gemv_mma.cuh: gemv_pages_mma's stage, a slot for each of a share's first two blocks)
        staging = min(2, rows // 16) * self.warps * 16 * (2 if silu else 1) if mma else 0
        self.smem = max(self.smem, (x_floats + (2 if silu else 1) * rows * (1 if mma else segs) + self.warps
                                    + staging) * 4)
        self.src.kernels.append(dict(name=k.name, family="gemv", bytes=k.n_out * (2 if silu else 1) * k.k * self.esize))

    def attention(self, k: AttentionKernel) -> None:
        f_off = self.attention_layout(k)
        a, r, t = k.attention, k.rope, self.t
        group = k.n_heads // k.kv_heads
        splits, keys = self.splits[k.name], self.attn_keys(group)
        tmpl = (f"T, {k.head_dim}, {group}, {r.rotary_dim}, {'true' if r.interleaved else 'false'}, "
                f"{'true' if k.q_norm else 'false'}, {self.warps}, {splits}, {keys}, {t.attn_min_keys}")
        if self.tagged(k.qkv) != self.tagged(a.out):
            raise ValueError(f"{k.name}: its input and output are tagged alike or not at all (tag_plan)")
        short = t.persist_attn_short_keys if 0 < t.persist_attn_short_keys < keys else 0
        mma, q_pairs = self.mma_keys(k), self.q_pairs(k)
        tail = dict(TAGGED=self.tagged(k.qkv), PIPE=bool(t.persist_attn_pipeline), SOFTCAP=bool(a.softcap > 0),
                    U_SHORT=short, EARLY_ROPE=bool(t.persist_attn_early_rope),
                    KV_FIRST=bool(t.persist_attn_kv_first and short), OWNER_MAX=t.persist_attn_owner_merges,
                    NEWEST_FIRST=bool(t.persist_attn_newest_first), IDLE=bool(t.persist_probe_attention_idle),
                    STAGED=self.combine_staged(k), EARLY_PASS=bool(t.persist_attn_early_pass),
                    LEAN=bool(t.persist_attn_lean), MMA_KEYS=mma,
                    MMA_AHEAD=t.persist_attn_mma_ahead if mma and k.head_dim == 64 else 1,
                    MMA_FIRST=t.persist_attn_mma_first if mma and k.head_dim == 64 else 0,
                    PAIRED=a.out in self.paired, CONSUMER=self.consumer_merges, Q_PAIRS=q_pairs,
                    SOLO=self.sched.solo_keys)
        assert list(tail) == [n for n, _ in ATTENTION_TILE_TAIL], "attention_tile's tail: every parameter, in order"
        tmpl += template_tail(list(tail.values()), [d for _, d in ATTENTION_TILE_TAIL])
        self._case(f"kiec::attention_tile<{tmpl}>(u, A(d.a[0]), (T*)KV(d.w[0]), d.n, d.m, F(d.w[1]), "
                   f"(const T*)WN(d.w[2]), (const T*)WN(d.w[3]), d.eps, d.scale, d.softcap, d.window, A(d.a[1]), "
                   f"A(d.a[2]), A(d.a[3]), u.a->arrivals + d.arrive, smem)",
                   n=k.kv_heads, m=self.seq, window=a.window, eps=k.q_norm.eps if k.q_norm else 0.0, scale=a.scale,
                   softcap=a.softcap, arrive=self.arrivals, splits=splits, min_keys=t.attn_min_keys,
                   tag_x=self.tag_writer(k.qkv),
                   row_bytes=k.head_dim * self.esize,
                   w=(self.kv_offset[k.append.cache], f_off, self._w(k.q_norm and k.q_norm.weight),
                      self._w(k.k_norm and k.k_norm.weight)),
                   a=(self.arena[k.qkv], self.arena[partials(k) + ".o"], self.arena[partials(k) + ".ml"],
                      self.arena[a.out]))
        if q_pairs == 3:  # (every such attention shares the one table: rope_table_pairs)
            self.rope_table = dict(pairs=self.rope_table_pairs(), offset=f_off)
        self.arrivals += k.kv_heads
        self.smem = max(self.smem, self.attention_smem(k))
        self.src.kernels.append(dict(name=k.name, family="attention", cache=a.cache,
                                     bytes_per_row=2 * k.kv_heads * k.head_dim * self.esize))

    def attention_smem(self, k: AttentionKernel, staged: bool | None = None) -> int:
        """Bytes of scratch an attention tile takes: AttentionSmem, then (staged: attention_combine's CombineStage,
        16-byte aligned) every split's partial."""
        group = k.n_heads // k.kv_heads
        base = (group * k.head_dim + 2 * k.head_dim + 2 * self.warps * group + self.warps * group * k.head_dim) * 4
        staged = self.combine_staged(k) if staged is None else staged
        return (-(-base // 16) * 16 + self.splits[k.name] * group * (k.head_dim + 2) * 4) if staged else base

    @property
    def static_smem(self) -> int:
        """The shared memory the kernel's own __shared__ variables may take (beside the dynamic ring and scratch)."""
        return STATIC_SMEM + (STAGE_SMEM if self.t.persist_stage_instrs else 0)

    def combine_staged(self, k: AttentionKernel) -> bool:
        """persist_combine_staged for this attention: where its partials fit beside a full ring (persist_stages
        pages) in the scratch, so that the ring keeps its depth; else the combine loads them into registers."""
        if not self.t.persist_combine_staged:
            return False
        stages = self.t.persist_stages
        room = SMEM_LIMIT - self.static_smem - ring_head_bytes(stages) - stages * self.t.persist_page_bytes
        return self.attention_smem(k, staged=True) <= room

    def elementwise(self, k: ElementwiseKernel) -> None:
        ops = ", ".join(type(op).__name__ for op in k.ops)
        raise ModeUnsupported(f"{k.name} ({ops}): persistent mode has no device code for elementwise chains that "
                              f"no template covers (graph mode runs them through TVM)")

    def finish(self, header: str) -> Sources:
        blob, starts = pack_schedule(self.sched)
        words = struct.unpack(f"<{len(blob) // 4}i", blob)
        instr_off = self.lay.add("persistent.instructions", (), (len(words),), "i32", words)
        starts_off = self.lay.add("persistent.starts", (), (len(starts) + 1,), "i32",
                                  tuple(starts) + (sum(len(x) for x in self.sched.lists),))
        descs = b"".join(self.descs)
        kernels_off = self.lay.add("persistent.kernels", (), (len(descs) // 4,), "i32",
                                   struct.unpack(f"<{len(descs) // 4}i", descs))
        # the ring's barriers and pages first, then the tiles' scratch: as many pages as fit, up to persist_stages
        # (the barriers' room counted for persist_stages: never less than the kernel's Ring takes)
        page, ring_head = self.t.persist_page_bytes, ring_head_bytes(self.t.persist_stages)
        stages = min(self.t.persist_stages, (SMEM_LIMIT - self.static_smem - self.smem - ring_head) // page)
        if stages < 2:
            raise ModeUnsupported(f"the persistent kernel's tiles need {self.smem} bytes of shared memory, which "
                                  f"leaves room for {max(stages, 0)} weight pages of {page} bytes (a block has "
                                  f"{SMEM_LIMIT}; at least 2 pages are needed)")
        smem = ring_head + stages * page + self.smem
        src, lay = self.src, self.lay
        src.weights, src.weight_bytes = list(lay.entries.values()), lay.size
        src.files["persistent_abi.h"] = abi_header()
        # the instruction table's order, for reading kiec_trace's timestamps: [sm, opcode, kernel, phase] each
        instructions = sum(len(x) for x in self.sched.lists)
        src.manifest = dict(sms=self.sched.sms, instructions=instructions,
                            traceable=traceable(self.t),
                            trace_slots=trace_slots(bool(self.t.persist_trace_dots), bool(self.t.persist_trace_stream)),
                            schedule=[[sm, ins.opcode, ins.kernel, ins.counter, ins.hi - ins.lo,
                                       self.tile_items(ins)] for sm, lst in enumerate(self.sched.lists) for ins in lst])
        paced = paced_stream(self.p, self.t)
        pace = self.page_pace() if paced else 0
        src.files["model.cu"] = self.env.get_template("persistent.cu.j2").render(
            ctype=self.ctype, cases=self.cases, sms=self.sched.sms, phases=len(self.sched.phases),
            warps=self.warps, smem=smem, stages=stages, page=page, arrivals=max(self.arrivals, 1),
            l2_ahead=l2_ahead_bytes(self.p, self.t) // page, stop_poll_every=self.t.persist_stop_poll_every,
            poll_sleep_ns=self.t.persist_poll_sleep_ns, waits_together=int(bool(self.t.persist_waits_together)),
            probe_relaxed_signal=self.t.persist_probe_relaxed_signal, probe_warm_code=self.t.persist_probe_warm_code,
            page_look=self.t.persist_page_look,
            trace_code=int(traceable(self.t)),
            trace_attention=self.t.persist_trace_attention, trace_dots=self.t.persist_trace_dots,
            trace_stream=self.t.persist_trace_stream,
            tagged=int(self.tags is not None), tag_parity=self.parity_table(), tag_waits=self.tag_waits,
            reduce_batch=self.t.persist_reduce_batch, copy_batch=self.t.persist_copy_batch,
            norm_batch=self.t.persist_norm_batch, warp_copy_rounds=self.t.persist_warp_copy_rounds,
            merge_loads=self.t.persist_merge_loads,
            dot_item_chunks=self.t.persist_dot_item_chunks, stage_instrs=self.t.persist_stage_instrs,
            norm_w_raw=int(bool(self.t.persist_norm_w_raw)),
            norm_late_scale=int(bool(self.t.persist_norm_late_scale)),
            x_spread=int(bool(self.t.persist_x_spread)),
            item_shares=int(bool(self.item_shares or self.mma_items)),
            select_host_late=int(bool(self.t.persist_select_host_late)),
            evict_first=int(bool(self.t.persist_evict_first)),
            walk_kept=int(bool(self.t.persist_walk_kept and paced)), page_pace_ns=pace,
            page_pace_ahead_ns=self.t.persist_page_pace_ahead_ns if pace else 0,
            page_pace_kinds=int(bool(self.kind_paces)),
            page_pace_ahead_from=self.t.persist_page_pace_ahead_from_pos,
            l2_ahead_paced=int(bool(self.t.persist_l2_ahead_paced and pace)),
            l2_ahead_burst=int(bool(self.t.persist_l2_ahead_burst and pace)),
            pace_ref_gbps=self.t.persist_pace_ref_gbps if pace else 0,
            pace_ref_power_pct=self.pace_ref_power(),
            attn_l2_hint=self.t.attn_l2_prefetch, combine_batch=self.t.persist_combine_batch,
            scratch=self.smem, rope_table=self.rope_table,
            counter_stride=self.t.persist_counter_stride, instr_off=instr_off, starts_off=starts_off,
            kernels_off=kernels_off, instructions=instructions, **self.model_constants(header))
        return src


def emit_persistent(program: Program, dtype: str, max_seq_len: int, target: TargetParams, header: str) -> Sources:
    return walk(_PersistentEmitter(program, dtype, max_seq_len, target), program, header)
