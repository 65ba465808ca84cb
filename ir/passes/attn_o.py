"""Attention inside the output projection (persistent mode's persist_attn_o_below): one hop a layer less.

A decode layer hands its attention's output to the output projection through a phase counter: every projection
tile waits for every KV head's attention, then copies the output. Below a threshold position, a fused layer instead
skips its attention phase, and each output-projection tile computes the attention of one KV head itself, over the
whole context (all the tiles of a head alike: each writes the head's new K/V row, the same bits), then its rows of
the projection over that head's columns only. The projection is cut by K into one part per KV head: part 0, with
the residual, is written in place into the residual stream, parts 1.. into a buffer of their own, and each reader of
the stream adds them in head order (the next norm's x, the down projection's residual). At or past the threshold the
attention phase runs as before and the tiles take their head's columns of its output: the same parts, so the
readers never care which way a position went.

Below the threshold the layer's attention tiles still run, each taking its KV head's whole context as one split
would (every tile of a head alike), and leave their state in shared memory for the projection tile that follows on
the same SM: the schedule gives each SM its own attention tile's head (head_shares). The cost is that whole walk in
every tile (a split walks a slice): a few round trips at a few hundred positions, many at thousands, hence the
threshold. Models with few KV heads gain most (a reader adds
`heads` arrays, 3 on SmolLM2-135M)."""
from __future__ import annotations

from dataclasses import dataclass

from .program import AttentionKernel, GemvKernel, Program, kernel_io


@dataclass(frozen=True)
class AttnO:
    """A fused layer's output projection (its kernel index is the key in `fusable`'s map)."""

    attention: int  # its attention kernel's index: the one just before it
    heads: int  # KV heads, one part of the projection each
    k: int  # the projection's columns a part: the head's query heads times head_dim
    parts: str  # the buffer of parts 1 .. heads - 1, [heads - 1][n_out]


def parts_name(k: GemvKernel) -> str:
    """The name of a fused output projection's parts buffer (parts 1 .. heads - 1)."""
    return k.name + ".parts"


def fusable(program: Program) -> dict[int, AttnO]:
    """Every output projection that can take its attention inside: a residual GEMV without a norm or bias right after
    an attention kernel, reading that attention's output (and nothing else reading it), its K the attention's query
    heads times head_dim."""
    kernels, out = program.kernels, {}
    readers: dict[str, int] = {}
    for k in kernels:
        for v in kernel_io(k)[0]:
            readers[v] = readers.get(v, 0) + 1
    for i, k in enumerate(kernels[1:], 1):
        a = kernels[i - 1]
        if not (isinstance(k, GemvKernel) and isinstance(a, AttentionKernel)):
            continue
        if (k.x == a.attention.out and k.epilogue == "residual" and k.norm is None and not k.biases
                and k.k == a.n_heads * a.head_dim and readers.get(a.attention.out) == 1
                and a.attention.out not in program.graph.outputs):
            out[i] = AttnO(i - 1, a.kv_heads, k.k // a.kv_heads, parts_name(k))
    return out


def part_readers(program: Program, fused: dict[int, AttnO]) -> dict[str, str]:
    """A fused projection's output (the residual stream after it) -> its parts buffer, which every reader of that
    value reads too."""
    return {program.kernels[i].out: f.parts for i, f in fused.items()}


def head_shares(n: int, groups: list[list[int]]) -> list[tuple[int, int, int, int]]:
    """(sm, KV head, lo, hi): a fused projection's tiles. groups[h]: the SMs whose attention tile of the layer takes
    head h (its splits'), in split order; each gets an equal share of the projection's n rows (its head's columns of
    them), so that the projection's tile follows its own head's attention tile on every SM (below the threshold it
    takes that tile's state from shared memory). SMs without an attention tile of the layer get none."""
    out = []
    for h, group in enumerate(groups):
        if not group:
            raise ValueError(f"attention inside the output projection: KV head {h} has no attention tile")
        lo = 0
        for j, sm in enumerate(group[:n]):
            share = n // len(group) + (1 if j < n % len(group) else 0)
            out.append((sm, h, lo, lo + share))
            lo += share
    return out
