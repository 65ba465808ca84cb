"""codegen.emit(program, ...) -> Sources: one file per kernel spec, the step's host code, and the weight layout.

Python computes every value (offsets, grids, shared memory); the templates only substitute them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import jinja2

from kiec.ir.passes.program import AttentionKernel, ElementwiseKernel, EmbedKernel, GemvKernel, Program

from .buffers import plan_buffers
from .targets import TargetParams

TEMPLATES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "templates")
if not os.path.isdir(os.path.join(TEMPLATES, "include")):  # installed: templates ship inside the package
    import kiec.templates as _t
    TEMPLATES = os.path.dirname(_t.__file__)
INCLUDE_DIR = os.path.join(TEMPLATES, "include")

CTYPES = {"bf16": "__nv_bfloat16", "f16": "__half"}
EPILOGUES = {"store": "kiec::EPI_STORE", "residual": "kiec::EPI_RESIDUAL", "silu_mul": "kiec::EPI_SILU_MUL",
             "argmax": "kiec::EPI_ARGMAX"}
ALIGN = 256


@dataclass(frozen=True)
class PackedTensor:
    name: str
    sources: tuple[str, ...]  # params concatenated along dim 0; empty for a constant table
    shape: tuple[int, ...]
    dtype: str  # bf16 | f16 | f32 | i32
    offset: int
    values: tuple[float, ...] = ()  # a constant table's contents (RoPE frequencies, the persistent schedule)
    layout: str = ""  # "" row-major; "blocks16xW": 16-row blocks W elements wide, swizzled (mma_blocked)

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * (4 if self.dtype in ("f32", "i32") else 2)


@dataclass
class Sources:
    files: dict[str, str] = field(default_factory=dict)  # file name -> text
    weights: list[PackedTensor] = field(default_factory=list)
    weight_bytes: int = 0
    kernels: list[dict] = field(default_factory=list)  # per launch: name, family, spec, bytes moved
    manifest: dict = field(default_factory=dict)  # what the mode adds to manifest.json


MMA_LAYOUT = "blocks16x"  # a "blocks16xW" layout's name before its width


def mma_layout(width: int) -> str:
    """The name of the layout of 16-row blocks `width` elements wide (mma_blocked; the manifest's weights' layout)."""
    return f"{MMA_LAYOUT}{width}"


def mma_block_width(layout: str, shape: tuple[int, ...]) -> int:
    """The block width W of a "blocks16xW" layout for a matrix of `shape` (a ValueError names what does not fit)."""
    digits = layout[len(MMA_LAYOUT):]
    width = int(digits) if layout.startswith(MMA_LAYOUT) and digits.isdigit() else 0
    if width <= 0 or width % 64:
        raise ValueError(f"weight layout {layout!r}: blocks16xW with W a multiple of 64")
    if len(shape) != 2 or shape[0] % 16 or shape[1] % width:
        raise ValueError(f"weight layout {layout!r}: a matrix of {shape} is not whole blocks of 16 rows x {width}")
    return width


def mma_blocked(w, layout: str):
    """A [n, k] matrix (a torch tensor) in a "blocks16xW" layout (gemv_mma.cuh): blocks of 16 rows x W elements, row
    block after row block and, within one, K block after K block; inside a block, row r's 8-element chunk c at chunk
    c ^ (r & 7)."""
    import torch
    width = mma_block_width(layout, tuple(w.shape))
    n, k = w.shape
    b = w.reshape(n // 16, 16, k // width, width // 8, 8).permute(0, 2, 1, 3, 4)  # [row block, K block, r, c, e]
    r = torch.arange(16)[:, None]
    src = torch.arange(width // 8)[None, :] ^ (r & 7)  # chunk c' holds chunk c' ^ (r & 7) (an involution)
    return b[:, :, r, src].contiguous().reshape(n, k)


class _Layout:
    def __init__(self, graph, dtype):
        self.graph, self.dtype = graph, dtype
        self.entries: dict[str, PackedTensor] = {}
        self.size = 0

    def add(self, name, sources=(), shape=None, dtype=None, values=(), layout="") -> int:
        if name not in self.entries:
            if shape is None:
                rows = sum(self.graph.params[s].type.shape[0] for s in sources)
                shape = (rows, *self.graph.params[sources[0]].type.shape[1:])
            if layout:
                mma_block_width(layout, shape)  # (checks it)
            t = PackedTensor(name, tuple(sources), tuple(shape), dtype or self.dtype, self.size, tuple(values),
                             layout)
            self.entries[name] = t
            self.size += (t.nbytes + ALIGN - 1) // ALIGN * ALIGN
        return self.entries[name].offset

    def param(self, p: str | None) -> str:
        return "nullptr" if p is None else f"W({self.add(p, (p,))})"


class _Emitter:
    """Walks the kernels in order: one method per family renders its spec file (once per spec) and appends
    its launch line to the step."""

    def __init__(self, program: Program, dtype: str, max_seq_len: int, target: TargetParams):
        self.p, self.g, self.dtype, self.seq, self.t = program, program.graph, dtype, max_seq_len, target
        self.ctype, self.esize = CTYPES[dtype], 2
        self.env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                                      keep_trailing_newline=True)
        self.lay, self.src = _Layout(self.g, dtype), Sources()
        self.attn = [k for k in program.kernels if isinstance(k, AttentionKernel)]
        self.splits = {k.name: self.attention_splits(k) for k in self.attn}  # over the KV length
        self.arena, self.arena_floats = plan_buffers(program, self.scratch(), self.tagged_values(), self.parity_tags())
        self.decls: dict[str, str] = {}
        self.configures: list[str] = []
        self.launches: list[str] = []
        self.kv_offset: dict[str, int] = {}  # layer cache -> byte offset in the KV allocation
        self.kv_bytes = 0

    def attention_splits(self, k: AttentionKernel) -> int:
        return self.t.attn_splits(k.kv_heads)

    def tagged_values(self) -> frozenset[str]:
        """Values laid out as (value, tag) pairs: none in graph mode."""
        return frozenset()

    def parity_tags(self) -> bool:
        """Tagged values as one float an element, the tag its lowest bit (plan_buffers): not in graph mode."""
        return False

    def scratch(self) -> dict[str, int]:
        """Arena regions beside the values: the attention partials, one region every layer reuses in turn."""
        attn = self.attn
        return {"part_o": max([self.splits[k.name] * k.n_heads * k.head_dim for k in attn], default=0),
                "part_ml": max([self.splits[k.name] * k.n_heads * 2 for k in attn], default=0)}

    def buf(self, value: str) -> str:
        return f"A({self.arena[value]})"

    def spec_file(self, spec: str, template: str, signature: str, configure: bool, **values) -> None:
        if spec in self.decls:
            return
        self.src.files[f"{spec}_{self.t.arch.replace('_', '')}.cu"] = self.env.get_template(template).render(
            spec=spec, ctype=self.ctype, **values)
        self.decls[spec] = f"void launch_{spec}({signature})"
        if configure:
            self.configures.append(f"configure_{spec}")
            self.decls[spec + ".configure"] = f"int configure_{spec}()"

    def embed(self, k: EmbedKernel) -> None:
        vocab, dim = self.g.params[k.table].type.shape
        self.launches.append(f"kiec::launch_pdl(kiec::embed_kernel<{self.ctype}>, dim3({(dim + 255) // 256}), "
                             f"dim3(256), 0, s, (const {self.ctype}*){self.lay.param(k.table)}, {dim}, {vocab}, "
                             f"c->tokens, "
                             f"{self.buf(k.out)}, c->st)")
        self.src.kernels.append(dict(name=k.name, family="embed", bytes=dim * self.esize * 2))

    def gemv(self, k: GemvKernel) -> None:
        t = self.t
        if k.k % 8:
            raise ValueError(f"{k.name}: K = {k.k} is not a multiple of 8 (the GEMV reads 16-byte vectors)")
        packed = "+".join(k.weights)
        w_off = self.lay.add(packed, k.weights)
        b_ptr = f"W({self.lay.add(packed + '.bias', k.biases)})" if k.biases else "nullptr"
        rows_per_output = 2 if k.epilogue == "silu_mul" else 1
        spec = (f"gemv_{self.dtype}_k{k.k}_{'rmsnorm_' if k.norm else ''}{k.epilogue}{'_bias' if k.biases else ''}"
                f"_w{t.gemv_warps}r{t.gemv_rows}")
        self.spec_file(spec, "gemv.cu.j2", "const void*, const void*, const float*, const void*, float, float*, int, "
                       "kiec::StepState*, int, cudaStream_t", True, k=k.k, warps=t.gemv_warps, rows=t.gemv_rows,
                       norm=k.norm is not None, epi_enum=EPILOGUES[k.epilogue], epilogue=k.epilogue,
                       bias=bool(k.biases), threads=t.gemv_warps * 32, smem_bytes=k.k * 4, min_blocks=t.gemv_min_blocks,
                       prefetch=t.gemv_prefetch_iters(k.n_out, k.k, rows_per_output), early=bool(t.gemv_early_loads))
        norm_w = self.lay.param(k.norm.weight) if k.norm else "nullptr"
        eps = f"{k.norm.eps!r}f" if k.norm else "0.f"
        self.launches.append(f"launch_{spec}(W({w_off}), {b_ptr}, {self.buf(k.x)}, {norm_w}, {eps}, {self.buf(k.out)}, "
                             f"{k.n_out}, c->st, {t.gemv_grid(k.n_out)}, s)")
        self.src.kernels.append(dict(name=k.name, family="gemv", spec=spec,
                                     bytes=k.n_out * rows_per_output * k.k * self.esize))

    def attention_layout(self, k: AttentionKernel) -> int:
        """Place the layer's KV cache and its RoPE frequency table; returns the table's offset."""
        if k.head_dim % 8 or 32 % (k.head_dim // 8):
            raise ValueError(f"{k.name}: head_dim {k.head_dim} has no attention kernel (kiec has 16, 32, 64, 128, 256)")
        r = k.rope
        self.kv_offset[k.append.cache] = self.kv_bytes
        self.kv_bytes += 2 * k.kv_heads * self.seq * k.head_dim * self.esize
        freqs = f"rope.{r.rotary_dim}.{r.theta!r}.{r.scaling}.{r.factor!r}.{r.low_freq_factor!r}." \
                f"{r.high_freq_factor!r}.{r.original_max_pos}"
        return self.lay.add(freqs, (), (r.rotary_dim // 2,), "f32", tuple(r.inv_freq()))

    def attention(self, k: AttentionKernel) -> None:
        f_off = self.attention_layout(k)
        a, r, t = k.attention, k.rope, self.t
        group, splits = k.n_heads // k.kv_heads, self.splits[k.name]
        spec = (f"attention_{self.dtype}_d{k.head_dim}_g{group}_r{r.rotary_dim}{'i' if r.interleaved else ''}"
                f"{'_qknorm' if k.q_norm else ''}_w{t.attn_warps}s{splits}u{t.attn_unroll(group)}m{t.attn_min_keys}"
                f"{'_l2' if t.attn_l2_prefetch else ''}")
        self.spec_file(spec, "attention.cu.j2",
                       "const float*, void*, int, int, const float*, const void*, const void*, float, float, float, "
                       "int, float*, float*, unsigned int*, float*, kiec::StepState*, cudaStream_t",
                       True, head_dim=k.head_dim, group=group, rotary=r.rotary_dim, interleaved=r.interleaved,
                       qk_norm=k.q_norm is not None, warps=t.attn_warps, splits=splits, threads=t.attn_warps * 32,
                       unroll=t.attn_unroll(group), min_keys=t.attn_min_keys, l2_hint=bool(t.attn_l2_prefetch))
        qn = self.lay.param(k.q_norm.weight) if k.q_norm else "nullptr"
        kn = self.lay.param(k.k_norm.weight) if k.k_norm else "nullptr"
        eps = f"{k.q_norm.eps!r}f" if k.q_norm else "0.f"
        self.launches.append(
            f"launch_{spec}({self.buf(k.qkv)}, KV({self.kv_offset[k.append.cache]}), {k.kv_heads}, {self.seq}, "
            f"F({f_off}), {qn}, {kn}, {eps}, {a.scale!r}f, {a.softcap!r}f, {a.window}, A({self.arena['part_o']}), "
            f"A({self.arena['part_ml']}), c->counters, {self.buf(a.out)}, c->st, s)")
        self.src.kernels.append(dict(name=k.name, family="attention", spec=spec, cache=a.cache,
                                     bytes_per_row=2 * k.kv_heads * k.head_dim * self.esize))

    def elementwise(self, k: ElementwiseKernel) -> None:
        from .tvm_kernels import elementwise, structure
        tv = elementwise(k, self.t.arch)
        args = ", ".join(f"float* {p}" for p in tv.params)
        self.spec_file(tv.spec, "tvm.cu.j2", f"{args}, cudaStream_t", False, structure=structure(k), source=tv.source,
                       kernel=tv.kernel, args=args, params=", ".join(tv.params), grid=tv.grid, block=tv.block)
        named = {f"in{j}": v for j, v in enumerate(k.inputs)} | {"out": k.out}
        self.launches.append(f"launch_{tv.spec}({', '.join(self.buf(named[p]) for p in tv.params)}, s)")
        self.src.kernels.append(dict(name=k.name, family="tvm", spec=tv.spec, bytes=0))

    def finish(self, header: str) -> Sources:
        self.launches.append("kiec::launch_pdl(kiec::advance_kernel, dim3(1), dim3(1), 0, s, c->st, c->tokens, "
                             "(volatile int*)c->host_tokens_dev)")
        src, lay = self.src, self.lay
        src.weights, src.weight_bytes = list(lay.entries.values()), lay.size
        src.files["model.cu"] = self.env.get_template("model.cu.j2").render(
            launches=self.launches, declarations=list(self.decls.values()), configures=self.configures,
            **self.model_constants(header))
        return src

    def model_constants(self, header: str) -> dict:
        """What both modes' model.cu define the same way: sizes, offsets, the arch."""
        vocab = next(k.n_out for k in self.p.kernels if getattr(k, "epilogue", "") == "argmax")
        return dict(header=header, weight_bytes=self.lay.size, kv_bytes=self.kv_bytes, arena_floats=self.arena_floats,
                    logits_offset=self.arena[self.g.outputs[0]], max_seq=self.seq, vocab=vocab,
                    arch_number=int(self.t.arch.split("_")[1]))


def walk(e: _Emitter, program: Program, header: str) -> Sources:
    """Each kernel through its family's method, in order, then the model source."""
    family = {EmbedKernel: e.embed, GemvKernel: e.gemv, AttentionKernel: e.attention, ElementwiseKernel: e.elementwise}
    for k in program.kernels:
        family[type(k)](k)
    return e.finish(header)


def emit(program: Program, dtype: str, max_seq_len: int, target: TargetParams, header: str) -> Sources:
    return walk(_Emitter(program, dtype, max_seq_len, target), program, header)
