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
    dtype: str  # bf16 | f16 | f32
    offset: int
    values: tuple[float, ...] = ()  # a constant table's contents (RoPE frequencies)

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * (4 if self.dtype == "f32" else 2)


@dataclass
class Sources:
    files: dict[str, str] = field(default_factory=dict)  # file name -> text
    weights: list[PackedTensor] = field(default_factory=list)
    weight_bytes: int = 0
    kernels: list[dict] = field(default_factory=list)  # per launch: name, family, spec, bytes moved


class _Layout:
    def __init__(self, graph, dtype):
        self.graph, self.dtype = graph, dtype
        self.entries: dict[str, PackedTensor] = {}
        self.size = 0

    def add(self, name, sources=(), shape=None, dtype=None, values=()) -> int:
        if name not in self.entries:
            if shape is None:
                rows = sum(self.graph.params[s].type.shape[0] for s in sources)
                shape = (rows, *self.graph.params[sources[0]].type.shape[1:])
            t = PackedTensor(name, tuple(sources), tuple(shape), dtype or self.dtype, self.size, tuple(values))
            self.entries[name] = t
            self.size += (t.nbytes + ALIGN - 1) // ALIGN * ALIGN
        return self.entries[name].offset

    def param(self, p: str | None) -> str:
        return "nullptr" if p is None else f"W({self.add(p, (p,))})"


def structure_of(k) -> str:
    from .tvm_kernels import structure
    return structure(k)


def emit(program: Program, dtype: str, max_seq_len: int, target: TargetParams, header: str) -> Sources:
    g, ctype = program.graph, CTYPES[dtype]
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    lay = _Layout(g, dtype)
    src = Sources()
    attn = [k for k in program.kernels if isinstance(k, AttentionKernel)]
    splits = {k.name: target.attn_splits(k.kv_heads) for k in attn}
    scratch = {"part_o": max([splits[k.name] * k.n_heads * k.head_dim for k in attn], default=0),
               "part_ml": max([splits[k.name] * k.n_heads * 2 for k in attn], default=0)}
    arena, arena_floats = plan_buffers(program, scratch)
    decls, configures, launches = {}, [], []
    layer_kv = {}
    kv_bytes = 0
    esize = 2
    arch_number = int(target.arch.split("_")[1])

    def buf(value):
        return f"A({arena[value]})"

    for k in program.kernels:
        if isinstance(k, EmbedKernel):
            dim = g.params[k.table].type.shape[1]
            vocab = g.params[k.table].type.shape[0]
            launches.append(f"kiec::launch_pdl(kiec::embed_kernel<{ctype}>, dim3({(dim + 255) // 256}), dim3(256), 0, s, "
                            f"(const {ctype}*){lay.param(k.table)}, {dim}, {vocab}, c->tokens, {buf(k.out)}, c->st)")
            src.kernels.append(dict(name=k.name, family="embed", bytes=dim * esize * 2))
        elif isinstance(k, GemvKernel):
            if k.k % 8:
                raise ValueError(f"{k.name}: K = {k.k} is not a multiple of 8 (the GEMV reads 16-byte vectors)")
            packed = "+".join(k.weights)
            w_off = lay.add(packed, k.weights)
            b_ptr = f"W({lay.add(packed + '.bias', k.biases)})" if k.biases else "nullptr"
            spec = (f"gemv_{dtype}_k{k.k}_{'rmsnorm_' if k.norm else ''}{k.epilogue}{'_bias' if k.biases else ''}"
                    f"_w{target.gemv_warps}r{target.gemv_rows}")
            if spec not in decls:
                src.files[f"{spec}_{target.arch.replace('_', '')}.cu"] = env.get_template("gemv.cu.j2").render(
                    spec=spec, ctype=ctype, k=k.k, warps=target.gemv_warps, rows=target.gemv_rows, norm=k.norm is not None,
                    epi_enum=EPILOGUES[k.epilogue], epilogue=k.epilogue, bias=bool(k.biases),
                    threads=target.gemv_warps * 32, smem_bytes=k.k * 4, min_blocks=target.gemv_min_blocks,
                    prefetch=target.gemv_prefetch_iters(k.n_out, k.k, 2 if k.epilogue == "silu_mul" else 1))
                decls[spec] = (f"void launch_{spec}(const void*, const void*, const float*, const void*, float, float*, "
                               f"int, kiec::StepState*, int, cudaStream_t)")
                configures.append(f"configure_{spec}")
                decls[spec + ".configure"] = f"int configure_{spec}()"
            norm_w = lay.param(k.norm.weight) if k.norm else "nullptr"
            eps = f"{k.norm.eps!r}f" if k.norm else "0.f"
            launches.append(f"launch_{spec}(W({w_off}), {b_ptr}, {buf(k.x)}, {norm_w}, {eps}, {buf(k.out)}, {k.n_out}, "
                            f"c->st, {target.gemv_grid(k.n_out)}, s)")
            rows = k.n_out * (2 if k.epilogue == "silu_mul" else 1)
            src.kernels.append(dict(name=k.name, family="gemv", spec=spec, bytes=rows * k.k * esize))
        elif isinstance(k, AttentionKernel):
            if k.head_dim % 8 or 32 % (k.head_dim // 8):
                raise ValueError(f"{k.name}: head_dim {k.head_dim} has no attention kernel (kiec has 16, 32, 64, 128, 256)")
            a, r = k.attention, k.rope
            group = k.n_heads // k.kv_heads
            cache = a.cache
            layer_kv[k.append.cache] = kv_bytes
            kv_bytes += 2 * k.kv_heads * max_seq_len * k.head_dim * esize
            freq_name = f"rope.{r.rotary_dim}.{r.theta!r}.{r.scaling}.{r.factor!r}.{r.low_freq_factor!r}." \
                        f"{r.high_freq_factor!r}.{r.original_max_pos}"
            f_off = lay.add(freq_name, (), (r.rotary_dim // 2,), "f32", tuple(r.inv_freq()))
            spec = (f"attention_{dtype}_d{k.head_dim}_g{group}_r{r.rotary_dim}{'i' if r.interleaved else ''}"
                    f"{'_qknorm' if k.q_norm else ''}_w{target.attn_warps}s{splits[k.name]}")
            if spec not in decls:
                src.files[f"{spec}_{target.arch.replace('_', '')}.cu"] = env.get_template("attention.cu.j2").render(
                    spec=spec, ctype=ctype, head_dim=k.head_dim, group=group, rotary=r.rotary_dim,
                    interleaved=r.interleaved, qk_norm=k.q_norm is not None, warps=target.attn_warps,
                    splits=splits[k.name], threads=target.attn_warps * 32)
                decls[spec] = (f"void launch_{spec}(const float*, void*, int, int, const float*, const void*, const void*, "
                               f"float, float, float, int, float*, float*, unsigned int*, float*, kiec::StepState*, "
                               f"cudaStream_t)")
                configures.append(f"configure_{spec}")
                decls[spec + ".configure"] = f"int configure_{spec}()"
            qn = lay.param(k.q_norm.weight) if k.q_norm else "nullptr"
            kn = lay.param(k.k_norm.weight) if k.k_norm else "nullptr"
            eps = f"{k.q_norm.eps!r}f" if k.q_norm else "0.f"
            launches.append(
                f"launch_{spec}({buf(k.qkv)}, KV({layer_kv[k.append.cache]}), {k.kv_heads}, {max_seq_len}, F({f_off}), "
                f"{qn}, {kn}, {eps}, {a.scale!r}f, {a.softcap!r}f, {a.window}, A({arena['part_o']}), "
                f"A({arena['part_ml']}), c->counters, {buf(a.out)}, c->st, s)")
            src.kernels.append(dict(name=k.name, family="attention", spec=spec, cache=cache,
                                    bytes_per_row=2 * k.kv_heads * k.head_dim * esize))
        elif isinstance(k, ElementwiseKernel):
            from .tvm_kernels import elementwise
            tv = elementwise(k, target.arch)
            if tv.spec not in decls:
                args = ", ".join(f"float* {p}" for p in tv.params)
                src.files[f"{tv.spec}_{target.arch.replace('_', '')}.cu"] = env.get_template("tvm.cu.j2").render(
                    spec=tv.spec, structure=structure_of(k), source=tv.source, kernel=tv.kernel, args=args,
                    params=", ".join(tv.params), grid=tv.grid, block=tv.block)
                decls[tv.spec] = f"void launch_{tv.spec}({args}, cudaStream_t)"
            named = {f"in{j}": v for j, v in enumerate(k.inputs)} | {"out": k.out}
            launches.append(f"launch_{tv.spec}({', '.join(buf(named[p]) for p in tv.params)}, s)")
            src.kernels.append(dict(name=k.name, family="tvm", spec=tv.spec, bytes=0))
    launches.append("kiec::launch_pdl(kiec::advance_kernel, dim3(1), dim3(1), 0, s, c->st, c->tokens, "
                    "(volatile int*)c->host_tokens_dev)")
    src.weights = list(lay.entries.values())
    src.weight_bytes = lay.size
    src.files["model.cu"] = env.get_template("model.cu.j2").render(
        header=header, launches=launches, declarations=list(decls.values()), configures=configures,
        weight_bytes=lay.size, kv_bytes=kv_bytes, arena_floats=arena_floats, logits_offset=arena[g.outputs[0]],
        max_seq=max_seq_len, vocab=next(k.n_out for k in program.kernels if getattr(k, "epilogue", "") == "argmax"),
        arch_number=arch_number)
    return src
