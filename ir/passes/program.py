"""What the scheduler hands codegen: fused kernels as small dataclasses, in launch order."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..graph import Graph
from ..ops import Attention, KVAppend, Op, RMSNorm, Rope


@dataclass(frozen=True)
class EmbedKernel:
    name: str
    table: str  # param [vocab, dim]
    token: str  # graph input
    out: str


@dataclass(frozen=True)
class GemvKernel:
    """y = epilogue(W · prologue(x)); W is the row-concatenation of `weights` (packed at compile time)."""

    name: str
    x: str
    weights: tuple[str, ...]
    biases: tuple[str, ...]  # empty, or one per weight
    norm: RMSNorm | None  # prologue
    epilogue: str  # store | residual | silu_mul | argmax
    out: str  # for residual: the Add's result, which aliases its residual input
    n_out: int
    k: int
    residual: str | None = None  # the Add's other input (the residual stream)
    silu: str | None = None  # for silu_mul: the activation function applied to the first half


@dataclass(frozen=True)
class AttentionKernel:
    """q/k norm + RoPE + KV append + split-KV decode attention + combine, over the packed qkv vector."""

    name: str
    qkv: str
    q_norm: RMSNorm | None
    k_norm: RMSNorm | None
    rope: Rope
    append: KVAppend
    attention: Attention
    n_heads: int
    kv_heads: int
    head_dim: int


@dataclass(frozen=True)
class ElementwiseKernel:
    """A chain of elementwise ops (activations, products, sums of vectors) that no template covers,
    lowered through TVM into one kernel. `ops` are in graph order; `inputs` are the values it reads."""

    name: str
    ops: tuple[Op, ...]
    inputs: tuple[str, ...]
    out: str
    n: int


Kernel = EmbedKernel | GemvKernel | AttentionKernel | ElementwiseKernel


@dataclass
class Program:
    graph: Graph
    kernels: list[Kernel] = field(default_factory=list)
    covered: dict[str, str] = field(default_factory=dict)  # op result -> kernel name


def kernel_bytes(kernel: Kernel, graph: Graph, context: int) -> int:
    """Bytes the kernel reads from memory per token: its weights (the packed matrix once), the embedding
    row, or the K/V rows attention reads at `context` tokens already cached."""
    def nbytes(name: str) -> int:
        return graph.params[name].type.nbytes

    if isinstance(kernel, EmbedKernel):
        return nbytes(kernel.table) // graph.params[kernel.table].type.shape[0]
    if isinstance(kernel, GemvKernel):
        norm = nbytes(kernel.norm.weight) if kernel.norm else 0
        return sum(nbytes(w) for w in kernel.weights) + sum(nbytes(b) for b in kernel.biases) + norm
    if isinstance(kernel, ElementwiseKernel):
        return 0  # activations only: a few KB from L2, not weights
    c = graph.type_of(kernel.append.cache)
    rows = min(context + 1, kernel.attention.window or c.shape[2], c.shape[2])
    norms = sum(nbytes(n.weight) for n in (kernel.q_norm, kernel.k_norm) if n is not None)
    return 2 * c.shape[1] * c.shape[3] * rows * (c.nbytes // c.numel) + norms


def kernel_io(k: Kernel) -> tuple[list[str], list[tuple[str, int, str | None]]]:
    """(values read, [(value written, floats, the input it aliases or None)])."""
    if isinstance(k, EmbedKernel):
        return [], [(k.out, -1, None)]
    if isinstance(k, GemvKernel):
        if k.epilogue == "residual":
            return [k.x, k.residual], [(k.out, k.n_out, k.residual)]
        return [k.x], [(k.out, k.n_out, None)]
    if isinstance(k, AttentionKernel):
        return [k.qkv], [(k.attention.out, k.n_heads * k.head_dim, None)]
    if isinstance(k, ElementwiseKernel):
        return list(k.inputs), [(k.out, k.n, None)]
    raise TypeError(f"plan_buffers: unknown kernel {type(k).__name__}")
