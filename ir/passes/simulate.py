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
    x = env[k.x]
    if k.norm is not None:
        x = interp.IMPLS[type(k.norm)](k.norm, {k.norm.x: x, k.norm.weight: env[k.norm.weight]}.__getitem__)
    w = torch.cat([env[n] for n in k.weights])
    rows = torch.arange(lo, hi)
    if k.epilogue == "silu_mul":  # gate rows, then the matching up rows
        rows = torch.cat([rows, rows + k.n_out])
    y = w[rows] @ x
    if k.biases:
        y = y + torch.cat([env[b] for b in k.biases])[rows]
    if k.epilogue == "residual":
        y = env[k.residual][lo:hi] + y
    elif k.epilogue == "silu_mul":
        y = F.silu(y[: hi - lo]) * y[hi - lo:]
    return y


def attention_heads(k: AttentionKernel, qkv: torch.Tensor, weights, cache: torch.Tensor, pos: int,
                    g0: int = 0, g1: int | None = None) -> torch.Tensor:
    """KV heads [g0, g1) of a fused attention kernel: their q/k norms and RoPE, the new K/V row written into
    `cache` at `pos`, then their query heads over the cache, all through the interpreter's ops."""
    g1 = k.kv_heads if g1 is None else g1
    group, dh = k.n_heads // k.kv_heads, k.head_dim
    q, kk, v = qkv.split([k.n_heads * dh, k.kv_heads * dh, k.kv_heads * dh])
    q, kk, v = q[g0 * group * dh:g1 * group * dh], kk[g0 * dh:g1 * dh], v[g0 * dh:g1 * dh]
    p = torch.tensor(pos)

    def norm(op, x):
        return x if op is None else interp.IMPLS[type(op)](op, {op.x: x, op.weight: weights[op.weight]}.__getitem__)

    def rope(x):
        return interp.IMPLS[Rope](k.rope, {k.rope.x: x, k.rope.pos: p}.__getitem__)

    part = cache[:, g0:g1]  # a view: the append lands in `cache`
    a = k.append
    interp.IMPLS[KVAppend](a, {a.cache: part, a.k: rope(norm(k.k_norm, kk)), a.v: v, a.pos: p}.__getitem__)
    att = dataclasses.replace(k.attention, n_heads=group * (g1 - g0))
    return interp.IMPLS[Attention](att, {att.q: rope(norm(k.q_norm, q)), att.cache: part, att.pos: p}.__getitem__)


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
