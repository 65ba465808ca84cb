"""Run a fused Program kernel by kernel on the CPU, with the packed (concatenated) weights the kernels
see. Equal results to interp.run on the original graph say the fusion and the packing kept the meaning."""
from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from .. import interp
from ..ops import Attention, KVAppend, Rope
from .program import AttentionKernel, ElementwiseKernel, EmbedKernel, GemvKernel, Program


def gemv_rows(k: GemvKernel, env, lo: int = 0, hi: int | None = None) -> torch.Tensor:
    """Outputs [lo, hi) of a fused GEMV over the packed matrix (rows in kernel order); env maps names to
    tensors (x, weights, biases, norm weight, residual)."""
    hi = k.n_out if hi is None else hi
    return gemv_finish(k, env, lo, hi, gemv_dots(k, env, lo, hi))


def gemv_dots(k: GemvKernel, env, lo: int, hi: int, cols: slice = slice(None)) -> torch.Tensor:
    """The dot products of rows [lo, hi) (SiLU-mul: the gate rows, then the matching up rows) with the prologue's x,
    over the columns `cols` only (a row segment's part of each)."""
    x = env[k.x]
    if k.norm is not None:
        x = interp.IMPLS[type(k.norm)](k.norm, {k.norm.x: x, k.norm.weight: env[k.norm.weight]}.__getitem__)
    w = torch.cat([env[n] for n in k.weights])
    rows = torch.arange(lo, hi)
    if k.epilogue == "silu_mul":  # gate rows, then the matching up rows
        rows = torch.cat([rows, rows + k.n_out])
    return w[rows][:, cols] @ x[cols]


def gemv_finish(k: GemvKernel, env, lo: int, hi: int, y: torch.Tensor) -> torch.Tensor:
    """Outputs [lo, hi) from their rows' dot products y (gemv_dots): the biases, then the epilogue."""
    rows = torch.arange(lo, hi)
    if k.epilogue == "silu_mul":
        rows = torch.cat([rows, rows + k.n_out])
    if k.biases:
        y = y + torch.cat([env[b] for b in k.biases])[rows]
    if k.epilogue == "residual":
        y = env[k.residual][lo:hi] + y
    elif k.epilogue == "silu_mul":
        y = F.silu(y[: hi - lo]) * y[hi - lo:]
    return y


def _prepared(k: AttentionKernel, qkv: torch.Tensor, weights, cache: torch.Tensor, pos: int, g0: int, g1: int,
              append: bool):
    """KV heads [g0, g1): their queries normed and rotated, and (append) the new K/V row written into `cache`
    at `pos`. Returns (q [group * (g1 - g0) * dh], the cache view of those heads)."""
    group, dh = k.n_heads // k.kv_heads, k.head_dim
    q, kk, v = qkv.split([k.n_heads * dh, k.kv_heads * dh, k.kv_heads * dh])
    q, kk, v = q[g0 * group * dh:g1 * group * dh], kk[g0 * dh:g1 * dh], v[g0 * dh:g1 * dh]
    p = torch.tensor(pos)

    def norm(op, x):
        return x if op is None else interp.IMPLS[type(op)](op, {op.x: x, op.weight: weights[op.weight]}.__getitem__)

    def rope(x):
        return interp.IMPLS[Rope](k.rope, {k.rope.x: x, k.rope.pos: p}.__getitem__)

    part = cache[:, g0:g1]  # a view: the append lands in `cache`
    if append:
        a = k.append
        interp.IMPLS[KVAppend](a, {a.cache: part, a.k: rope(norm(k.k_norm, kk)), a.v: v, a.pos: p}.__getitem__)
    return rope(norm(k.q_norm, q)), part


def attention_heads(k: AttentionKernel, qkv: torch.Tensor, weights, cache: torch.Tensor, pos: int,
                    g0: int = 0, g1: int | None = None) -> torch.Tensor:
    """KV heads [g0, g1) of a fused attention kernel: their q/k norms and RoPE, the new K/V row written into
    `cache` at `pos`, then their query heads over the cache, all through the interpreter's ops."""
    g1 = k.kv_heads if g1 is None else g1
    q, part = _prepared(k, qkv, weights, cache, pos, g0, g1, True)
    att = dataclasses.replace(k.attention, n_heads=k.n_heads // k.kv_heads * (g1 - g0))
    return interp.IMPLS[Attention](att, {att.q: q, att.cache: part, att.pos: torch.tensor(pos)}.__getitem__)


def split_rows(k: AttentionKernel, pos: int, splits: int, min_keys: int, solo: int = 0) -> list[tuple[int, int]]:
    """The cache rows [lo, hi) each split in use takes at `pos` (flash-decoding): at least min_keys rows a
    split, so a short context uses fewer splits; a context of at most `solo` rows (persist_attn_solo_keys) one
    split. The last one holds row pos (common.cuh: split_range_of)."""
    start = max(0, pos + 1 - k.attention.window) if k.attention.window else 0
    n = pos + 1 - start
    chunk = n if 0 < solo and n <= solo else max(min_keys, -(-n // splits))
    return [(lo, min(lo + chunk, pos + 1)) for lo in range(start, pos + 1, chunk)]


def attention_split(k: AttentionKernel, qkv: torch.Tensor, weights, cache: torch.Tensor, pos: int, g: int,
                    lo: int, hi: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """KV head g's query heads over cache rows [lo, hi): (o [group, dh] not yet divided by l, m [group], l
    [group]), the running max and sum of exp(score - m). The split holding row pos appends it first."""
    q, part = _prepared(k, qkv, weights, cache, pos, g, g + 1, hi == pos + 1)
    a, group = k.attention, k.n_heads // k.kv_heads
    scores = (q.view(group, k.head_dim) @ part[0, 0, lo:hi].T) * a.scale  # [group, rows]
    if a.softcap:
        scores = a.softcap * torch.tanh(scores / a.softcap)
    m = scores.max(-1).values
    e = torch.exp(scores - m[:, None])
    return e @ part[1, 0, lo:hi], m, e.sum(-1)


def merge_splits(o: torch.Tensor, m: torch.Tensor, l: torch.Tensor) -> torch.Tensor:
    """The attention output [group * dh] from per-split (o [S, group, dh], m [S, group], l [S, group])."""
    mx = m.max(0).values
    c = torch.exp(m - mx)
    return ((o * c[..., None]).sum(0) / (l * c).sum(0)[:, None]).reshape(-1)


def _gemv(k: GemvKernel, env: dict) -> None:
    env[k.out] = gemv_rows(k, env)


def _attention(k: AttentionKernel, env: dict) -> None:
    env[k.attention.out] = attention_heads(k, env[k.qkv], env, env[k.append.cache], int(env[k.attention.pos]))


def simulate(program: Program, env: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    env = dict(env)
    for k in program.kernels:
        if isinstance(k, EmbedKernel):
            env[k.out] = env[k.table][int(env[k.token])]
        elif isinstance(k, GemvKernel):
            _gemv(k, env)
        elif isinstance(k, AttentionKernel):
            _attention(k, env)
        elif isinstance(k, ElementwiseKernel):
            local = {i: env[i] for i in k.inputs}
            for op in k.ops:
                local[op.out] = interp.IMPLS[type(op)](op, local.__getitem__)
            env[k.out] = local[k.out]
        else:
            raise TypeError(f"simulate: unknown kernel {type(k).__name__}")
    return env
