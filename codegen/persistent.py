"""Persistent mode: the whole program as one kernel (templates/include/kiec/persistent.cuh).

The scheduler's per-SM instruction lists travel in weights.bin (the instruction format is persistent_abi's);
the generated source holds what the device cannot look up cheaply: one dispatch case per fused kernel, each a
call of a tile function with the kernel's constants and the offsets of its weights and buffers.
"""
from __future__ import annotations

import struct

from kiec.ir.passes.persistent import Schedule, partials, schedule
from kiec.ir.passes.program import AttentionKernel, ElementwiseKernel, EmbedKernel, GemvKernel, Program

from .buffers import plan_buffers
from .emit import CTYPES, EPILOGUES, Sources, _Emitter
from .persistent_abi import header as abi_header
from .persistent_abi import pack_schedule
from .targets import TargetParams

CAND = 1024  # sampling candidates the select tile sorts in shared memory (persistent.cuh)
SMEM_LIMIT = 227 * 1024  # dynamic shared memory one H100/H200 block may take


class _PersistentEmitter(_Emitter):
    """Lays out the weights like graph mode; instead of launches it writes one dispatch case per kernel."""

    def __init__(self, program: Program, dtype: str, max_seq_len: int, target: TargetParams):
        super().__init__(program, dtype, max_seq_len, target)
        t, attn = target, [k for k in program.kernels if isinstance(k, AttentionKernel)]
        # each layer's attention partials get their own buffers, so that layers never wait on each other's
        scratch = {}
        self.sched_splits = {k.name: max(1, min(64, t.sms // k.kv_heads)) for k in attn}
        for k in attn:
            slots = k.kv_heads * self.sched_splits[k.name] * (k.n_heads // k.kv_heads)
            scratch[partials(k) + ".o"], scratch[partials(k) + ".ml"] = slots * k.head_dim, slots * 2
        self.arena, self.arena_floats = plan_buffers(program, scratch)
        self.sched: Schedule = schedule(program, t.sms, slot_of=dict(self.arena), min_keys=t.attn_min_keys)
        assert all(self.sched.splits[i] == self.sched_splits[k.name] for i, k in enumerate(program.kernels)
                   if isinstance(k, AttentionKernel))
        self.warps = t.persist_warps
        self.cases: list[str] = []
        self.smem = (32 + 2 * CAND) * 4  # select

    def attn_keys(self, group: int) -> int:
        """Keys in flight per lane group: graph mode's, over twice the warps (the same keys in flight per block,
        within the 128 registers a thread of a 512-thread block has)."""
        return max(1, self.t.attn_unroll(group) * self.t.attn_warps // self.warps)

    def _rows(self, i: int) -> int:
        """The most outputs one instruction of kernel i computes."""
        return max((ins.hi - ins.lo) for lst in self.sched.lists for ins in lst if ins.kernel == i)

    def embed(self, k: EmbedKernel) -> None:
        vocab, dim = self.g.params[k.table].type.shape
        self.cases.append(f"kiec::embed_tile<T>(u, (const T*){self.lay.param(k.table)}, {dim}, {vocab}, {self.buf(k.out)})")
        self.src.kernels.append(dict(name=k.name, family="embed", bytes=dim * self.esize * 2))

    def gemv(self, k: GemvKernel) -> None:
        if k.k % 8:
            raise ValueError(f"{k.name}: K = {k.k} is not a multiple of 8 (the GEMV reads 16-byte vectors)")
        i = self.p.kernels.index(k)
        packed = "+".join(k.weights)
        w_off = self.lay.add(packed, k.weights)
        b_ptr = f"(const T*)W({self.lay.add(packed + '.bias', k.biases)})" if k.biases else "nullptr"
        norm_w = f"(const T*){self.lay.param(k.norm.weight)}" if k.norm else "nullptr"
        eps = f"{k.norm.eps!r}f" if k.norm else "0.f"
        silu = k.epilogue == "silu_mul"
        chunks = min(self.t.persist_chunks, -(-k.k // 8 // 32))
        call = (f"kiec::gemv_tile<T, {k.k}, {self.warps}, {'true' if k.norm else 'false'}, {EPILOGUES[k.epilogue]}, "
                f"{'true' if k.biases else 'false'}, {chunks}>(u, (const T*)W({w_off}), {b_ptr}, {self.buf(k.x)}, "
                f"{norm_w}, {eps}, {self.buf(k.out)}, {k.n_out}, {self.t.persist_prefetch_bytes}u, smem)")
        if k.epilogue == "argmax":
            call = (f"u.ins->opcode == kiec::OP_SELECT ? kiec::select_tile(u, {self.buf(k.out)}, {k.n_out}, smem) : "
                    + call)
        self.cases.append(call)
        rows, segs = self._rows(i), -(-k.k // 8 // (32 * chunks))
        self.smem = max(self.smem, (k.k + (2 * rows if silu else rows + 1) * segs + self.warps) * 4)
        self.src.kernels.append(dict(name=k.name, family="gemv", bytes=k.n_out * (2 if silu else 1) * k.k * self.esize))

    def attention(self, k: AttentionKernel) -> None:
        if k.head_dim % 8 or 32 % (k.head_dim // 8):
            raise ValueError(f"{k.name}: head_dim {k.head_dim} has no attention kernel (kiec has 16, 32, 64, 128, 256)")
        a, r, t = k.attention, k.rope, self.t
        group, splits = k.n_heads // k.kv_heads, self.sched_splits[k.name]
        self.kv_offset[k.append.cache] = self.kv_bytes
        self.kv_bytes += 2 * k.kv_heads * self.seq * k.head_dim * self.esize
        freqs = f"rope.{r.rotary_dim}.{r.theta!r}.{r.scaling}.{r.factor!r}.{r.low_freq_factor!r}." \
                f"{r.high_freq_factor!r}.{r.original_max_pos}"
        f_off = self.lay.add(freqs, (), (r.rotary_dim // 2,), "f32", tuple(r.inv_freq()))
        qn = f"(const T*){self.lay.param(k.q_norm.weight)}" if k.q_norm else "nullptr"
        kn = f"(const T*){self.lay.param(k.k_norm.weight)}" if k.k_norm else "nullptr"
        eps = f"{k.q_norm.eps!r}f" if k.q_norm else "0.f"
        po, pml = f"A({self.arena[partials(k) + '.o']})", f"A({self.arena[partials(k) + '.ml']})"
        tmpl = (f"T, {k.head_dim}, {group}, {r.rotary_dim}, {'true' if r.interleaved else 'false'}, "
                f"{'true' if k.q_norm else 'false'}, {self.warps}, {splits}, {self.attn_keys(group)}, {t.attn_min_keys}")
        self.cases.append(
            f"u.ins->opcode == kiec::OP_COMBINE ? kiec::combine_tile<{k.head_dim}, {group}, {splits}, {t.attn_min_keys}>"
            f"(u, {a.window}, {po}, {pml}, {self.buf(a.out)}) : kiec::attention_tile<{tmpl}>(u, {self.buf(k.qkv)}, "
            f"(T*)KV({self.kv_offset[k.append.cache]}), {k.kv_heads}, {self.seq}, F({f_off}), {qn}, {kn}, {eps}, "
            f"{a.scale!r}f, {a.softcap!r}f, {a.window}, {po}, {pml}, {self.buf(a.out)}, smem)")
        self.smem = max(self.smem, (group * k.head_dim + k.head_dim + 2 * self.warps * group
                                    + self.warps * group * k.head_dim) * 4)
        self.src.kernels.append(dict(name=k.name, family="attention", cache=a.cache,
                                     bytes_per_row=2 * k.kv_heads * k.head_dim * self.esize))

    def elementwise(self, k: ElementwiseKernel) -> None:
        ops = ", ".join(type(op).__name__ for op in k.ops)
        raise ValueError(f"{k.name} ({ops}): persistent mode has no device code for elementwise chains that no "
                         f"template covers (graph mode runs them through TVM); compile with --mode graph")

    def finish(self, header: str) -> Sources:
        blob, starts = pack_schedule(self.sched)
        words = struct.unpack(f"<{len(blob) // 4}i", blob)
        instr_off = self.lay.add("persistent.instructions", (), (len(words),), "i32", words)
        starts_off = self.lay.add("persistent.starts", (), (len(starts) + 1,), "i32",
                                  tuple(starts) + (sum(len(x) for x in self.sched.lists),))
        if self.smem > SMEM_LIMIT:
            raise ValueError(f"the persistent kernel needs {self.smem} bytes of shared memory, a block has {SMEM_LIMIT}")
        src, lay = self.src, self.lay
        src.weights, src.weight_bytes = list(lay.entries.values()), lay.size
        vocab = next(k.n_out for k in self.p.kernels if getattr(k, "epilogue", "") == "argmax")
        src.files["persistent_abi.h"] = abi_header()
        src.files["model.cu"] = self.env.get_template("persistent.cu.j2").render(
            header=header, ctype=self.ctype, cases=self.cases, weight_bytes=lay.size, kv_bytes=self.kv_bytes,
            arena_floats=self.arena_floats, logits_offset=self.arena[self.g.outputs[0]], max_seq=self.seq, vocab=vocab,
            arch_number=int(self.t.arch.split("_")[1]), sms=self.sched.sms, phases=len(self.sched.phases),
            threads=self.warps * 32, smem=self.smem, instr_off=instr_off, starts_off=starts_off,
            instructions=sum(len(x) for x in self.sched.lists))
        return src


def emit_persistent(program: Program, dtype: str, max_seq_len: int, target: TargetParams, header: str) -> Sources:
    e = _PersistentEmitter(program, dtype, max_seq_len, target)
    family = {EmbedKernel: e.embed, GemvKernel: e.gemv, AttentionKernel: e.attention, ElementwiseKernel: e.elementwise}
    for k in program.kernels:
        family[type(k)](k)
    return e.finish(header)
