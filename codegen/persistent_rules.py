"""Persistent mode's rules: which tile each kernel of a model gets, read off the target table.

The emitter (codegen/persistent.py) asks these while it writes a kernel's dispatch case: a model's own fields (a
narrow one's *_narrow values), whether its weight stream is paced, which values travel as tagged words or pairs,
which GEMVs run on the tensor cores, take x straight from memory or a warp's own copy, are dealt to the row segment,
or merge attention's partials into their x, and a GEMV's kind for the per-kind paces. A rule that reads a field
with a range checks it and names it when it is out of range.
"""
from __future__ import annotations

import dataclasses
import functools

from kiec.errors import ModeUnsupported
from kiec.ir.passes.persistent import down_projections, gemv_shares, output_projections
from kiec.ir.passes.program import AttentionKernel, EmbedKernel, GemvKernel, Program, kernel_io

from .targets import TargetParams

# PersistentRules.gemv_kind's names (the fields that list kinds)
GEMV_KINDS = ("qkv", "o", "gate_up", "down", "head")


def plus_items(text: str) -> list[str]:
    """The items of a field that joins them by + (persist_mma_rows' kinds, persist_page_pace_kinds' kind:ns), stripped,
    empty ones dropped."""
    return [x.strip() for x in text.split("+") if x.strip()]


def row_segments(k: int, warps: int, page_bytes: int, silu: bool) -> int:
    """Segments a persistent GEMV cuts each weight row into (gemv_tile's SEGS): a divisor of the warps (a warp
    keeps one segment of x in registers) that tiles the row's 16-byte chunks, the fewest with at most 4 chunks a
    lane per segment; failing that, the most (longer segments, more registers). A page must hold one item."""
    chunks = k // 8
    fits = [s for s in range(1, warps + 1) if warps % s == 0 and chunks % s == 0
            and (chunks // s) * 16 * (2 if silu else 1) <= page_bytes]
    if not fits:
        raise ModeUnsupported(f"K = {k}: no cut of a row into segments fits a {page_bytes}-byte page with {warps} "
                              f"warps")
    short = [s for s in fits if -(-(chunks // s) // 32) <= 4]
    return short[0] if short else fits[-1]


def traceable(t) -> bool:
    """Whether the kernel carries the traced step's code (persist_trace_code, or a field that stamps more of it)."""
    return bool(t.persist_trace_code or t.persist_trace_attention or t.persist_trace_dots or t.persist_trace_stream)


def model_width(program: Program) -> int:
    """The model's width: its embedding's row (0 for a program without an embedding)."""
    return max((program.graph.params[k.table].type.shape[1] for k in program.kernels if isinstance(k, EmbedKernel)),
               default=0)


def narrower_than(program: Program, min_width: int) -> bool:
    """Whether the model's width (its embedding's row) is below min_width; a program without an embedding is not."""
    width = model_width(program)
    return bool(width) and width < min_width


def paced_stream(program: Program, target: TargetParams) -> bool:
    """Whether this model's weight stream keeps its page walk and paces it (persist_walk_kept, persist_page_pace_ns):
    not where its width is below persist_paced_min_width."""
    return not narrower_than(program, target.persist_paced_min_width)


def tag_level(program: Program, target: TargetParams) -> int:
    """persist_tagged for this model: 0 where its width is below persist_tagged_min_width."""
    return 0 if narrower_than(program, target.persist_tagged_min_width) else target.persist_tagged


def for_model(program: Program, target: TargetParams) -> TargetParams:
    """The target as this model's kernel runs it: a model narrower than persist_narrow_width takes the *_narrow
    fields' values for persist_x_direct, persist_attn_owner_merges, persist_attn_newest_first, persist_combine_batch,
    persist_stages, persist_attn_mma_ahead, persist_attn_mma_first, persist_tag_waits and attn_min_keys (its
    persistent kernel's: graph mode reads the target itself)."""
    if not narrower_than(program, target.persist_narrow_width):
        return target
    return dataclasses.replace(target, persist_x_direct=target.persist_x_direct_narrow,
                               persist_attn_owner_merges=target.persist_attn_owner_merges_narrow,
                               persist_attn_newest_first=target.persist_attn_newest_first_narrow,
                               persist_combine_batch=target.persist_combine_batch_narrow,
                               persist_stages=target.persist_stages_narrow,
                               persist_attn_mma_ahead=target.persist_attn_mma_ahead_narrow,
                               persist_attn_mma_first=target.persist_attn_mma_first_narrow,
                               persist_tag_waits=target.persist_tag_waits_narrow,
                               attn_min_keys=target.persist_attn_min_keys_narrow)


def l2_ahead_bytes(program: Program, target: TargetParams) -> int:
    """persist_l2_ahead_bytes for this model: 0 where its width is above persist_l2_ahead_max_width."""
    return target.persist_l2_ahead_bytes if model_width(program) <= target.persist_l2_ahead_max_width else 0


class PersistentRules:
    """The per-kernel choices of _PersistentEmitter, which mixes them in: they read its target (t, the model's own
    fields), program (p), tag plan (tags: None without tagged words), tag waits as the model takes them (tag_waits),
    compute warps (warps), element type (ctype), attention kernels (attn) and persist_attn_consumer_merges as the
    model takes it (consumer_merges)."""

    def consumer_merge_count(self) -> int:
        """persist_attn_consumer_merges as this model's kernel takes it (0: off): attention's output must be tagged
        words whose every reader is a GEMV that copies them into the scratch as its x (no norm, not direct, not a
        warp's own copy, not pairs: gemv() checks those), heads a multiple of 64 wide, without owner merges (a narrow
        model's persist_attn_owner_merges_narrow too), tag waits or parity tags (the partials' words are 8 bytes with
        the full tag; at the positions the consumer merges, nothing writes the output, which parity tags count on),
        newest first or the idle probe, which the device code does not take with it (attention_tile's static_assert
        says so too, but only at nvcc)."""
        t, program = self.t, self.p
        n = t.persist_attn_consumer_merges
        if not n:
            return 0
        if n < 2:
            raise ValueError(f"persist_attn_consumer_merges {n}: 0 (off) or the most splits in use (2 or more) whose "
                             f"partials the output projection merges")
        if t.persist_merge_loads < 1:
            raise ValueError(f"persist_merge_loads {t.persist_merge_loads}: the partials' loads a lane at once, 1 or "
                             f"more")
        why = ("attention's output is not tagged words (persist_tagged 2)" if not self.tags or not any(
                   isinstance(k, AttentionKernel) and k.attention.out in self.tags.writer for k in program.kernels)
               else "persist_attn_owner_merges (persist_attn_owner_merges_narrow on a narrow model) is on"
               if t.persist_attn_owner_merges
               else "persist_tag_waits (persist_tag_waits_narrow on a narrow model) is on" if self.tag_waits
               else "persist_tag_parity is on" if t.persist_tag_parity
               else "persist_attn_newest_first (persist_attn_newest_first_narrow on a narrow model) is on"
               if t.persist_attn_newest_first
               else "persist_probe_attention_idle is on" if t.persist_probe_attention_idle
               else "persist_attn_solo_keys is on (the output projection's count of splits in use does not take it)"
               if t.persist_attn_solo_keys
               else "a head is not a multiple of 64 wide (a warp's lanes take a head's elements, an even count a lane)"
               if any(isinstance(k, AttentionKernel) and k.head_dim % 64 for k in program.kernels)
               else "attention's output is read other than as a GEMV's x (at the merged positions nothing writes it)"
               if any(k.attention.out in program.graph.outputs or not self.read_as_x(k.attention.out)
                      for k in program.kernels if isinstance(k, AttentionKernel))
               else None)
        if why:
            raise ValueError(f"persist_attn_consumer_merges {n}: {why}")
        return n

    def read_as_x(self, v: str, also=lambda r: True) -> bool:
        """Whether v is read, and only as the x of GEMVs (each one `also` holds for)."""
        readers = [r for r in self.p.kernels if v in kernel_io(r)[0]]
        return bool(readers) and all(isinstance(r, GemvKernel) and r.x == v and also(r) for r in readers)

    def merge_of(self, k: GemvKernel) -> AttentionKernel | None:
        """The attention kernel whose partials this GEMV merges into its x (persist_attn_consumer_merges), or None."""
        if not self.consumer_merges:
            return None
        return next((a for a in self.attn if a.attention.out == k.x), None)

    def tagged(self, value: str | None) -> bool:
        return value is not None and self.tags is not None and value in self.tags.writer

    def tag_writer(self, value: str | None) -> int:
        """The phase whose tag a tagged value's words carry (-1: untagged)."""
        return self.tags.writer[value] if self.tagged(value) else -1

    def tagged_values(self) -> frozenset[str]:
        return frozenset(self.tags.writer) if self.tags else frozenset()

    def parity_tags(self) -> bool:
        return bool(self.tags and self.t.persist_tag_parity)

    @functools.cached_property
    def item_shares(self) -> dict[int, int]:
        """persist_item_shares: the GEMVs (by index) whose shares are dealt to the row segment, and their segments a
        row: 1: the residual adds without a norm (the output and down projections); 2: the SiLU-muls (gate/up) too;
        3: every GEMV (QKV and the LM head too). Each with at least a row an SM (the schedule deals fewer units, a
        row or a pair, whole: gemv_item_shares), its tile function taking one item at a time."""
        t = self.t
        if t.persist_item_shares not in (0, 1, 2, 3):
            raise ValueError(f"persist_item_shares {t.persist_item_shares}: 0, 1 (the residual GEMVs dealt to the "
                             f"row segment), 2 (and the SiLU-muls) or 3 (every GEMV)")
        if not t.persist_item_shares:
            return {}
        for name in ("persist_tag_parity", "persist_probe_warm_code", "persist_probe_twice"):
            if getattr(t, name):
                raise ValueError(f"persist_item_shares with {name}: a head's partial is an 8-byte tagged word "
                                 f"published once (not a parity, nor by a probe's second pass)")
        if t.persist_probe_mlp_local >= 2:
            raise ValueError("persist_item_shares with persist_probe_mlp_local 2: the probe's sums are not built "
                             "into a tile dealt to the item (a timing probe of whole-row shares)")
        level = t.persist_item_shares

        def dealt(k) -> bool:
            if k.epilogue == "residual":
                return not k.norm or level >= 3
            return level >= 3 or (level >= 2 and k.epilogue == "silu_mul")
        return {i: self.segments(k) for i, k in enumerate(self.p.kernels)
                if isinstance(k, GemvKernel) and dealt(k) and k.n_out >= t.sms}

    def after_silu(self, k) -> bool:
        """Whether k is a GEMV whose x a SiLU-mul GEMV writes (a down projection)."""
        return self.p.kernels.index(k) in self.down_projections

    @functools.cached_property
    def down_projections(self) -> frozenset[int]:
        return down_projections(self.p)

    @functools.cached_property
    def attention_io(self) -> frozenset[str]:
        """The values attention reads (its packed qkv) and writes (its output)."""
        return frozenset(v for a in self.attn for v in (a.qkv, a.attention.out))

    def twice(self, k: GemvKernel) -> int:
        """gemv_tile's TWICE for this GEMV (persist_probe_twice: bit 1 every GEMV's dots, 2 every prologue, 4 the dots
        of the GEMVs on either side of an attention (QKV, output projection), 8 the others' dots)."""
        probe = self.t.persist_probe_twice
        beside = k.out in self.attention_io or k.x in self.attention_io
        dots = bool(probe & 1 or (probe & 4 and beside) or (probe & 8 and not beside))
        return int(dots) | (2 if probe & 2 else 0)

    def segments(self, k: GemvKernel) -> int:
        return row_segments(k.k, self.t.persist_warps, self.t.persist_page_bytes, k.epilogue == "silu_mul")

    def x_direct(self, k: GemvKernel) -> bool:
        """x straight from memory, none in the scratch: every GEMV without a norm (persist_x_direct 1), or only those
        whose warps each hold a segment of x of their own (2: none loads a slice another warp loads too)."""
        d = self.t.persist_x_direct
        return not k.norm and (d == 1 or (d == 2 and self.segments(k) == self.warps))

    def x_warp_copy(self, k: GemvKernel) -> bool:
        """Each warp's own copy of its segment of x through 1 KB of the scratch (persist_x_warp_copy_min_k), the same
        cases from a K."""
        min_k = self.t.persist_x_warp_copy_min_k
        return bool(min_k and k.k >= min_k and not k.norm and self.segments(k) == self.warps and not self.x_direct(k))

    def norm_in_warps(self, k: GemvKernel) -> bool:
        """persist_norm_in_warps for this GEMV: the norm in each warp's registers where every warp holds all of x,
        read untagged."""
        return bool(self.t.persist_norm_in_warps and k.norm and self.segments(k) == 1 and self.warps == 8
                    and not self.tagged(k.x))

    @staticmethod
    def mma_width(k: GemvKernel) -> int:
        """A tensor-core GEMV's block width (gemv_mma.cuh's BW): 512 elements (16 KB, a page), a SiLU-mul's 256."""
        return 256 if k.epilogue == "silu_mul" else 512

    def mma_gemvs(self) -> frozenset[int]:
        """persist_mma_rows: the GEMVs (by index) whose dot products run on the tensor cores (gemv_mma.cuh), those of
        the kinds it names that can: n a multiple of 16, K of the block width (mma_width), x staged in the scratch
        (not x direct, a warp's own copy or the norm in the warps), no item shares, consumer merge or probe, and
        dealt in whole blocks about as evenly as by the row (persist_mma_share_excess; not asked of the kinds
        persist_mma_item_shares deals by the page: mma_item_kinds); none unless the ring's pages
        are 16 KB (a block's) and the warps divide a page's 16 or 32 steps, nor with fp16 weights: x's pieces are
        then fp16 too, which overflows past 65504 (a down projection's input may) where the FMA tile reads x in fp32."""
        text = self.t.persist_mma_rows.strip()
        named = set(plus_items(text))
        if named - set(GEMV_KINDS):
            raise ValueError(f"persist_mma_rows {text!r}: {', '.join(sorted(named - set(GEMV_KINDS)))} is no kind of "
                             f"GEMV ({', '.join(GEMV_KINDS)}, joined by +)")
        if not named:
            return frozenset()
        t, paged = self.t, self.mma_item_kinds()
        if t.persist_page_bytes != 16 << 10 or 16 % self.warps:  # (a block fills a page; its steps go to the warps)
            return frozenset()
        if self.ctype != "__nv_bfloat16":  # (x's pieces take the weights' type: bf16 has fp32's range)
            return frozenset()
        probes = t.persist_probe_warm_code or t.persist_probe_twice or t.persist_probe_mlp_local >= 2

        def largest(n: int, step: int) -> int:  # the largest share gemv_shares deals in runs of `step` rows
            return max(hi - lo for _, lo, hi in gemv_shares(n, t.sms, step=step))
        return frozenset(
            i for i, k in enumerate(self.p.kernels)
            if isinstance(k, GemvKernel) and self.gemv_kind(k) in named and k.n_out % 16 == 0
            and k.k % self.mma_width(k) == 0 and not self.x_direct(k) and not self.x_warp_copy(k)
            and not self.norm_in_warps(k) and i not in self.item_shares and self.merge_of(k) is None and not probes
            and (self.gemv_kind(k) in paged
                 or 100 * largest(k.n_out, 16) <= (100 + t.persist_mma_share_excess) * largest(k.n_out, 1)))

    def mma_item_kinds(self) -> frozenset[str]:
        """persist_mma_item_shares' kinds, checked: kinds of GEMV (GEMV_KINDS), not with parity tags or the probes
        whose second pass a published partial does not take."""
        text = self.t.persist_mma_item_shares.strip()
        named = frozenset(plus_items(text))
        if named - set(GEMV_KINDS):
            raise ValueError(f"persist_mma_item_shares {text!r}: {', '.join(sorted(named - set(GEMV_KINDS)))} is no "
                             f"kind of GEMV ({', '.join(GEMV_KINDS)}, joined by +)")
        if named:
            for name in ("persist_tag_parity", "persist_probe_warm_code", "persist_probe_twice"):
                if getattr(self.t, name):
                    raise ValueError(f"persist_mma_item_shares with {name}: a block's partial is an 8-byte tagged word "
                                     f"published once (not a parity, nor by a probe's second pass)")
        return named

    def mma_item_shares(self) -> dict[int, int]:
        """The tensor-core GEMVs (self.mma, by index) dealt by the page of a block (persist_mma_item_shares), and their
        K blocks a block (pages: the schedule's item segments, Schedule.block_items)."""
        kinds = self.mma_item_kinds()
        return {i: self.p.kernels[i].k // self.mma_width(self.p.kernels[i]) for i in sorted(self.mma)
                if self.gemv_kind(self.p.kernels[i]) in kinds}

    def paired_values(self) -> frozenset[str]:
        """persist_tagged_pairs: the tagged values handed over as tagged pairs (common.cuh: st_tagged_pair, two
        elements rounded to bf16 a word): the SiLU-mul's output (an even count; 1 and 2), attention's output (2, without
        owner merges), where every reader is a GEMV that copies it into the scratch, all of it or a warp's segment (no
        norm, not direct), without tag waits or parity tags. A SiLU-mul's shares are whole pairs (schedule's
        pair_rows); attention writes its heads' outputs, an even count, a warp's lanes 32 consecutive elements
        (store_out)."""
        level = self.t.persist_tagged_pairs
        if level not in (0, 1, 2):
            raise ValueError(f"persist_tagged_pairs {level}: 0, 1 (the SiLU-mul's output) or 2 (and attention's)")
        if not (level and self.tags) or self.t.persist_tag_waits or self.t.persist_tag_parity:
            return frozenset()
        ks = self.p.kernels
        written = {k.out for k in ks if isinstance(k, GemvKernel) and k.epilogue == "silu_mul" and k.n_out % 2 == 0}
        if level >= 2 and not self.t.persist_attn_owner_merges and not self.t.persist_attn_consumer_merges:
            written |= {k.attention.out for k in ks if isinstance(k, AttentionKernel)}

        def copied(v: str) -> bool:  # read, and only as the x a GEMV copies into the scratch
            return self.read_as_x(v, lambda r: not r.norm and r.k % 4 == 0 and not self.x_direct(r))
        return frozenset(v for v in written if self.tagged(v) and v not in self.p.graph.outputs and copied(v))

    def attn_keys(self, group: int) -> int:
        """Keys a pass per lane group: persist_attn_keys, or else graph mode's keys per block spread over this
        block's warps; halved with persist_attn_pipeline, which holds two passes' rows at once."""
        keys = self.t.persist_attn_keys or max(1, self.t.attn_unroll(group) * self.t.attn_warps // self.warps)
        return max(1, keys // 2) if self.t.persist_attn_pipeline else keys

    def mma_keys(self, k: AttentionKernel) -> int:
        """Rows a warp a pass of attention's passes on the tensor cores (persist_attn_mma; persist_attn_mma_wide for
        heads 128 wide, which load one pass's rows at a time: mma_passes; there only where at least
        persist_attn_mma_wide_min_group query heads share a KV head), or 0 where the slice keeps its FMA passes:
        a cache other than bf16 / fp16, head_dim other than 64 or 128, more than 8 query heads a KV head, or rows
        loaded ahead of the new one's write (persist_attn_early_pass, persist_attn_kv_first where a short pass
        runs)."""
        t, group = self.t, k.n_heads // k.kv_heads
        for name in ("persist_attn_mma", "persist_attn_mma_wide"):
            if getattr(t, name) not in (0, 16, 32):
                raise ValueError(f"{name} {getattr(t, name)}: rows a warp a pass, 0 (off), 16 or 32 "
                                 "(attention_mma.cuh: mma_passes)")
        if t.persist_attn_mma_ahead not in (1, 2, 3):
            raise ValueError(f"persist_attn_mma_ahead {t.persist_attn_mma_ahead}: passes in flight, 1, 2 or 3 "
                             "(attention_mma.cuh: mma_passes)")
        keys = t.persist_attn_mma if k.head_dim != 128 else (
            t.persist_attn_mma_wide if group >= t.persist_attn_mma_wide_min_group else 0)
        short = 0 < t.persist_attn_short_keys < self.attn_keys(group)
        if (not keys or self.ctype not in ("__nv_bfloat16", "__half") or k.head_dim not in (64, 128) or group > 8
                or t.persist_attn_early_pass or (t.persist_attn_kv_first and short)):
            return 0
        return keys

    def q_pairs(self, k: AttentionKernel) -> int:
        """persist_attn_q_pairs for this attention (attention_tile's Q_PAIRS: attention_slice rotates whole pairs in
        a thread's registers; 2: the coefficients made after the wait; 3: read from the step's table, where
        rope_table_pairs allows it, else 2) where pairs_fit says it applies; 0 elsewhere (a partial rotary, qwen3's
        head norms unless persist_attn_q_pairs_normed)."""
        if self.t.persist_attn_q_pairs not in (0, 1, 2, 3):
            raise ValueError(f"persist_attn_q_pairs {self.t.persist_attn_q_pairs}: 0, 1, 2 (the rotation's "
                             "coefficients made after the wait) or 3 (read from a table made at the step's start)")
        if not self.pairs_fit(k):
            return 0
        return 2 if self.t.persist_attn_q_pairs == 3 and not self.rope_table_pairs() else self.t.persist_attn_q_pairs

    def pairs_fit(self, k: AttentionKernel) -> bool:
        """Whether persist_attn_q_pairs applies to this attention: tagged q and k words, every dim of a head rotated,
        and no head norm; or, with persist_attn_q_pairs_normed, norms on both q and k (a warp a head: pairs not
        interleaved, heads a multiple of 64 wide, fewer query heads a KV head than warps, no tag waits, whose words
        the tile would load before its wait a pair a thread)."""
        if not self.tagged(k.qkv) or k.rope.rotary_dim != k.head_dim:
            return False
        if not k.q_norm and not k.k_norm:
            return True
        return bool(self.t.persist_attn_q_pairs_normed and k.q_norm and k.k_norm and not k.rope.interleaved
                    and k.head_dim % 64 == 0 and k.n_heads // k.kv_heads < self.warps and not self.tag_waits)

    def rope_table_pairs(self) -> int:
        """persist_attn_q_pairs 3: the pairs of the table of a step's rotation coefficients that each SM makes at the
        step's start (attention_rows.cuh: RopeTable), where the attentions it applies to share one rope (one
        frequency table; a model whose layers rotate by different frequencies takes 2) of at most 64 pairs (768
        bytes, which the room persistent.py's STATIC_SMEM leaves for the kernel's own shared variables holds); 0
        elsewhere."""
        return self._rope_table_pairs if self.t.persist_attn_q_pairs == 3 else 0

    @functools.cached_property
    def _rope_table_pairs(self) -> int:  # (once an emitter: q_pairs asks for it at every attention)
        ropes = {(k.rope.rotary_dim, tuple(k.rope.inv_freq())) for k in self.p.kernels
                 if isinstance(k, AttentionKernel) and self.pairs_fit(k)}
        if len(ropes) != 1:
            return 0
        (dim, _), = ropes
        return dim // 2 if dim // 2 <= 64 else 0

    def gemv_kind(self, k) -> str:
        """A GEMV's kind for persist_page_pace_kinds, by its epilogue: head (argmax: the LM head), gate_up (SiLU-mul),
        down (a residual add after a SiLU-mul), o (another residual add: the output projection), qkv (a plain store:
        the QKV projection, the only such GEMV of the families persistent mode compiles)."""
        if k.epilogue == "argmax":
            return "head"
        if k.epilogue == "silu_mul":
            return "gate_up"
        if k.epilogue == "residual":
            return "down" if self.after_silu(k) else "o"
        return "qkv"

    @functools.cached_property
    def kind_paces(self) -> dict[str, int]:
        """persist_page_pace_kinds as {kind: ns}, on a paced stream only (none unpaced)."""
        text, kinds, out = self.t.persist_page_pace_kinds.strip(), GEMV_KINDS, {}
        for item in plus_items(text):
            name, _, ns = item.partition(":")
            if name.strip() not in kinds or not ns.strip().isdigit() or int(ns) <= 0:
                raise ValueError(f"persist_page_pace_kinds {text!r}: {item!r} is not kind:ns with a kind of "
                                 f"{', '.join(kinds)} and ns > 0")
            out[name.strip()] = int(ns)
        if out and self.t.persist_page_pace_ahead_ns:
            raise ValueError("persist_page_pace_kinds and persist_page_pace_ahead_ns: a page takes one or the other "
                             "(ring.cuh: stream_weights), not both")
        return out if paced_stream(self.p, self.t) and self.page_pace() else {}

    def page_pace(self) -> int:
        """The paced stream's pace: persist_page_pace_ns (0: unpaced), or persist_page_pace_fma_ns instead where some
        attention keeps its FMA passes (codegen/TUNING.md says what was measured)."""
        pace = self.t.persist_page_pace_ns
        fma = pace > 0 and self.t.persist_page_pace_fma_ns > 0 and any(self.mma_keys(k) == 0 for k in self.attn)
        return self.t.persist_page_pace_fma_ns if fma else pace

    def spare_even(self) -> bool:
        """persist_attn_spare_even (1: on), or on where every output projection is at least
        persist_attn_spare_even_min_k wide (its K, the attention's output; 0: never so). An SM of a split in use that
        takes a block of the projection starts it last (its split's work first); an SM with one block more than the
        others ends last by that block's stream. Timed, the even deal won at K 4096 (llama-3.1-8b) and lost at 2048
        (llama-3.2-1b, qwen3-1.7b): codegen/TUNING.md."""
        t = self.t
        if t.persist_attn_spare_even not in (0, 1) or t.persist_attn_spare_even_min_k < 0:
            raise ValueError(f"persist_attn_spare_even {t.persist_attn_spare_even}: 0 or 1; "
                             f"persist_attn_spare_even_min_k {t.persist_attn_spare_even_min_k}: 0 (never) or a K")
        ks = [self.p.kernels[i].k for i in output_projections(self.p)]
        return bool(t.persist_attn_spare_even) or bool(t.persist_attn_spare_even_min_k and ks
                                                       and min(ks) >= t.persist_attn_spare_even_min_k)

    def solo_keys(self) -> int:
        """persist_attn_solo_keys, checked: 0 (off) or the most rows a context has in one split, not with
        attn_l2_prefetch 2, whose weight stream splits the context by the descriptor's min_keys alone (ring.cuh:
        PageWalk's kv_rows; consumer merges refuse it in consumer_merge_count)."""
        n = self.t.persist_attn_solo_keys
        if n < 0:
            raise ValueError(f"persist_attn_solo_keys {n}: 0 (off) or the most rows a context has in one split")
        if n and self.t.attn_l2_prefetch == 2:
            raise ValueError(f"persist_attn_solo_keys {n} with attn_l2_prefetch 2: the weight stream's asks for a "
                             "split's rows do not take it")
        return n

    def pace_ref_power(self) -> int:
        """persist_pace_ref_power_pct, checked: the paces scale by the peaks' ratio to its power over 100 (ring.cuh's
        page_pace), 1 to 200."""
        pct = self.t.persist_pace_ref_power_pct
        if not 1 <= pct <= 200:
            raise ValueError(f"persist_pace_ref_power_pct {pct}: the power of the peaks' ratio the paces scale by, in "
                             "hundredths, 1 to 200 (100: in proportion)")
        return pct
