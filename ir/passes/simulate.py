"""Run a fused Program kernel by kernel on the CPU, with the packed (concatenated) weights the kernels
see. Equal results to interp.run on the original graph say the fusion and the packing kept the meaning."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import interp
from .program import AttentionKernel, ElementwiseKernel, EmbedKernel, GemvKernel, Program


def _gemv(k: GemvKernel, env: dict) -> None:
    x = env[k.x]
    if k.norm is not None:
        x = interp.IMPLS[type(k.norm)](k.norm, {**env, k.norm.x: x}.__getitem__)
    w = torch.cat([env[n] for n in k.weights])  # the packed matrix, rows in kernel order
    y = w @ x
    if k.biases:
        y = y + torch.cat([env[b] for b in k.biases])
    if k.epilogue == "residual":
        y = env[k.residual] + y
    elif k.epilogue == "silu_mul":
        y = F.silu(y[: k.n_out]) * y[k.n_out:]
    env[k.out] = y


def _attention(k: AttentionKernel, env: dict) -> None:
    q_size, kv_size = k.n_heads * k.head_dim, k.kv_heads * k.head_dim
    q, kk, v = env[k.qkv].split([q_size, kv_size, kv_size])
    local = dict(env)
    for norm, value in ((k.q_norm, q), (k.k_norm, kk)):
        if norm is not None:
            local[norm.x] = value
    q_in = k.q_norm.out if k.q_norm else k.rope.x
    if k.q_norm:
        local[q_in] = interp.IMPLS[type(k.q_norm)](k.q_norm, local.__getitem__)
    else:
        local[q_in] = q
    k_in = k.k_norm.out if k.k_norm else k.append.k + ".in"
    local[k_in] = interp.IMPLS[type(k.k_norm)](k.k_norm, local.__getitem__) if k.k_norm else kk
    q_rot = interp.IMPLS[type(k.rope)](k.rope, {**local, k.rope.x: local[q_in]}.__getitem__)
    k_rot = interp.IMPLS[type(k.rope)](k.rope, {**local, k.rope.x: local[k_in]}.__getitem__)
    local.update({k.append.k: k_rot, k.append.v: v, k.attention.q: q_rot})
    local[k.append.out] = interp.IMPLS[type(k.append)](k.append, local.__getitem__)
    env[k.attention.out] = interp.IMPLS[type(k.attention)](k.attention, local.__getitem__)


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
