"""The interpreter: one torch function per op. It defines what every op means and is the oracle for every
fusion and every kernel. It computes in the dtype of the tensors it is given: fp32 is the semantics of
record; the same code in bf16 is the "torch in the same dtype" that error budgets compare against."""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F

from .graph import Graph
from .ops import (Activation, Add, AllReduce, Argmax, Attention, Embedding, KVAppend, LayerNorm, Linear, Mul,
                  Op, RMSNorm, Rope)

Get = Callable[[str], torch.Tensor]


def _embedding(op: Embedding, get: Get):
    return get(op.table)[int(get(op.index))]


def _rmsnorm(op: RMSNorm, get: Get):
    x = get(op.x)
    g = x.view(-1, op.group or x.numel())
    y = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + op.eps)
    return (y * get(op.weight)).view(-1)


def _layernorm(op: LayerNorm, get: Get):
    bias = get(op.bias) if op.bias is not None else None
    return F.layer_norm(get(op.x), (get(op.x).numel(),), get(op.weight), bias, op.eps)


def _linear(op: Linear, get: Get):
    y = get(op.weight) @ get(op.x)
    return y + get(op.bias) if op.bias is not None else y


def rope_cos_sin(op: Rope, pos: int) -> tuple[torch.Tensor, torch.Tensor]:
    angle = torch.tensor(op.inv_freq(), dtype=torch.float32) * float(pos)
    return angle.cos(), angle.sin()


def _rope(op: Rope, get: Get):
    x = get(op.x).view(-1, op.head_dim)
    cos, sin = (t.to(x.device, x.dtype) for t in rope_cos_sin(op, int(get(op.pos))))
    rot, rest = x[:, : op.rotary_dim], x[:, op.rotary_dim :]
    if op.interleaved:
        a, b = rot[:, 0::2], rot[:, 1::2]
        rotated = torch.stack([a * cos - b * sin, b * cos + a * sin], dim=-1).flatten(1)
    else:
        a, b = rot.chunk(2, dim=-1)
        rotated = torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)
    return torch.cat([rotated, rest], dim=-1).reshape(-1)


def _kvappend(op: KVAppend, get: Get):
    cache, pos = get(op.cache), int(get(op.pos))
    kv_heads, head_dim = cache.shape[1], cache.shape[3]
    if not 0 <= pos < cache.shape[2]:
        raise IndexError(f"KVAppend -> %{op.out}: position {pos} is outside the cache (max_seq_len {cache.shape[2]})")
    cache[0, :, pos] = get(op.k).view(kv_heads, head_dim).to(cache.dtype)
    cache[1, :, pos] = get(op.v).view(kv_heads, head_dim).to(cache.dtype)
    return cache


def _attention(op: Attention, get: Get):
    cache, pos = get(op.cache), int(get(op.pos))
    kv_heads, head_dim = cache.shape[1], cache.shape[3]
    start = max(0, pos + 1 - op.window) if op.window else 0
    k = cache[0, :, start : pos + 1].repeat_interleave(op.n_heads // kv_heads, dim=0)  # [H, T, Dh]
    v = cache[1, :, start : pos + 1].repeat_interleave(op.n_heads // kv_heads, dim=0)
    q = get(op.q).view(op.n_heads, 1, head_dim)
    scores = (q @ k.transpose(1, 2)) * op.scale  # [H, 1, T]
    if op.softcap:
        scores = op.softcap * torch.tanh(scores / op.softcap)
    return (scores.softmax(-1) @ v).reshape(-1)


_ACTIVATIONS = {
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}

IMPLS: dict[type[Op], Callable[[Op, Get], torch.Tensor]] = {
    Embedding: _embedding,
    RMSNorm: _rmsnorm,
    LayerNorm: _layernorm,
    Linear: _linear,
    Rope: _rope,
    KVAppend: _kvappend,
    Attention: _attention,
    Activation: lambda op, get: _ACTIVATIONS[op.fn](get(op.x)),
    Mul: lambda op, get: get(op.a) * get(op.b),
    Add: lambda op, get: get(op.a) + get(op.b),
    Argmax: lambda op, get: get(op.x).argmax().to(torch.int32),
    AllReduce: lambda op, get: get(op.x).clone(),  # one device: the sum over a group of one
}


def run(graph: Graph, env: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Run every op of `graph` in order. `env` holds inputs, parameters and state (state is updated in
    place); returns `env` with every op result added."""
    env = dict(env)
    for op in graph.ops:
        impl = IMPLS.get(type(op))
        if impl is None:
            raise NotImplementedError(f"the interpreter has no implementation of {type(op).__name__}")
        try:
            env[op.out] = impl(op, env.__getitem__)
        except KeyError as e:
            raise KeyError(f"{type(op).__name__} -> %{op.out}: no value for {e}") from None
    return env


def attention_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)
