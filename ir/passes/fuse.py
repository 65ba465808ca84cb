"""Fusion rules: each looks at the op where scheduling stands and returns (kernel, ops it covers) or None.

The fusing rules are tried in order at every op; the first that answers wins. Then the fallback rules
(a plain GEMV for any Linear, one TVM kernel for any chain of elementwise ops) take what is left. An op
that no rule covers stops compilation with its name. Kernels run in the order of the last op they cover.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from ..graph import Graph
from ..ops import Activation, Add, Argmax, Attention, Embedding, KVAppend, Linear, Mul, Op, RMSNorm, Rope
from .program import AttentionKernel, ElementwiseKernel, EmbedKernel, GemvKernel, Kernel, Program

CHAINABLE = (Activation, Add, Mul)  # vector elementwise ops the TVM fallback fuses into one kernel

Match = tuple[Kernel, list[Op]] | None


class Unscheduled(ValueError):
    pass


class _View:
    """Producer/user lookups over one graph."""

    def __init__(self, graph: Graph):
        self.g = graph
        self.prod = graph.producer()
        self.users = graph.users()

    def only_user(self, value: str) -> Op | None:
        u = self.users.get(value, [])
        return u[0] if len(u) == 1 else None

    def made_by(self, value: str, cls) -> Op | None:
        op = self.prod.get(value)
        return op if isinstance(op, cls) else None


def _norm_prologue(v: _View, x: str) -> tuple[RMSNorm | None, str]:
    norm = v.made_by(x, RMSNorm)
    if norm is not None and norm.group == 0:
        return norm, norm.x
    return None, x


def embedding(v: _View, op: Op) -> Match:
    if not isinstance(op, Embedding):
        return None
    return EmbedKernel(op.out, op.table, op.index, op.out), [op]


def qkv_attention(v: _View, op: Op) -> Match:
    """RMSNorm → q, k, v Linears (one x) → [per-head norms] → RoPE → KV append → attention."""
    if not isinstance(op, Attention):
        return None
    append = v.made_by(op.cache, KVAppend)
    q_rope = v.made_by(op.q, Rope)
    k_rope = append and v.made_by(append.k, Rope)
    if not (append and q_rope and k_rope) or dataclasses.replace(k_rope, out=q_rope.out, x=q_rope.x) != q_rope:
        return None
    q_norm, k_norm = v.made_by(q_rope.x, RMSNorm), v.made_by(k_rope.x, RMSNorm)
    lin = [v.made_by(q_norm.x if q_norm else q_rope.x, Linear), v.made_by(k_norm.x if k_norm else k_rope.x, Linear),
           v.made_by(append.v, Linear)]
    if not all(lin) or len({li.x for li in lin}) != 1 or len({li.bias is None for li in lin}) != 1:
        return None
    covered = [o for o in (q_norm, k_norm, q_rope, k_rope, append, op) if o is not None]
    _, kv_heads, _, head_dim = v.g.type_of(append.cache).shape
    norm, x = _norm_prologue(v, lin[0].x)
    packed = v.g.types[lin[0].out].shape[0] + 2 * v.g.types[lin[1].out].shape[0]
    gemv = GemvKernel(op.out + ".qkv", x, tuple(li.weight for li in lin),
                      tuple(li.bias for li in lin) if lin[0].bias else (), norm, "store", op.out + ".qkv",
                      packed, v.g.type_of(x).shape[0])
    attn = AttentionKernel(op.out, gemv.out, q_norm, k_norm, q_rope, append, op, op.n_heads, kv_heads, head_dim)
    return [gemv, attn], lin + ([norm] if norm else []) + covered


def residual_gemv(v: _View, op: Op) -> Match:
    """Linear → Add(residual, linear): the add is the GEMV's epilogue, in place on the residual stream."""
    if not isinstance(op, Add):
        return None
    for res, other in ((op.a, op.b), (op.b, op.a)):
        lin = v.made_by(other, Linear)
        if lin is not None and v.only_user(lin.out) is op:
            norm, x = _norm_prologue(v, lin.x)
            return GemvKernel(op.out, x, (lin.weight,), (lin.bias,) if lin.bias else (), norm, "residual", op.out,
                              v.g.types[lin.out].shape[0], v.g.type_of(x).shape[0], residual=res), \
                [lin, op] + ([norm] if norm else [])
    return None


def gated_mlp(v: _View, op: Op) -> Match:
    """RMSNorm → gate, up Linears (one x) → act(gate) · up."""
    if not isinstance(op, Mul):
        return None
    for a, b in ((op.a, op.b), (op.b, op.a)):
        act, up = v.made_by(a, Activation), v.made_by(b, Linear)
        gate = act and v.made_by(act.x, Linear)
        if gate and up and gate.x == up.x and gate.bias is None and up.bias is None and act.fn == "silu":
            norm, x = _norm_prologue(v, gate.x)
            return GemvKernel(op.out, x, (gate.weight, up.weight), (), norm, "silu_mul", op.out,
                              v.g.types[gate.out].shape[0], v.g.type_of(x).shape[0], silu=act.fn), \
                [gate, up, act, op] + ([norm] if norm else [])
    return None


def lm_head_argmax(v: _View, op: Op) -> Match:
    """RMSNorm → Linear → Argmax: the logits and, in the same pass, their argmax."""
    if not isinstance(op, Argmax):
        return None
    lin = v.made_by(op.x, Linear)
    if lin is None:
        return None
    norm, x = _norm_prologue(v, lin.x)
    return GemvKernel(lin.out, x, (lin.weight,), (lin.bias,) if lin.bias else (), norm, "argmax", lin.out,
                      v.g.types[lin.out].shape[0], v.g.type_of(x).shape[0]), [lin, op] + ([norm] if norm else [])


def fallback_linear(v: _View, op: Op) -> Match:
    """Any Linear left: a GEMV that stores its result (with its RMSNorm as prologue)."""
    if not isinstance(op, Linear):
        return None
    norm, x = _norm_prologue(v, op.x)
    return GemvKernel(op.out, x, (op.weight,), (op.bias,) if op.bias else (), norm, "store", op.out,
                      v.g.types[op.out].shape[0], v.g.type_of(x).shape[0]), [op] + ([norm] if norm else [])


def fallback_elementwise(v: _View, op: Op, covered: dict[str, str]) -> Match:
    """A chain of vector elementwise ops, rooted at its last op: one kernel generated by TVM."""
    if not isinstance(op, CHAINABLE):
        return None
    nxt = v.only_user(op.out)
    if isinstance(nxt, CHAINABLE) and nxt.out not in covered and op.out not in v.g.outputs:
        return None  # the consumer roots the chain
    chain, frontier = [op], list(op.inputs())
    while frontier:
        value = frontier.pop()
        prod = v.prod.get(value)
        if isinstance(prod, CHAINABLE) and prod.out not in covered and all(u in chain for u in v.users[value]):
            chain.append(prod)
            frontier += prod.inputs()
    order = {o.out: i for i, o in enumerate(v.g.ops)}
    chain.sort(key=lambda o: order[o.out])
    made = {o.out for o in chain}
    inputs = tuple(dict.fromkeys(i for o in chain for i in o.inputs() if i not in made))
    return ElementwiseKernel(op.out, tuple(chain), inputs, op.out, v.g.types[op.out].shape[0]), chain


RULES: list[Callable[[_View, Op], Match]] = [embedding, qkv_attention, residual_gemv, gated_mlp, lm_head_argmax]


def _take(prog: Program, m: Match, root: int, order: list) -> bool:
    if m is None:
        return False
    kernels, covers = (m[0] if isinstance(m[0], list) else [m[0]]), m[1]
    # an RMSNorm prologue is recomputed by every GEMV that reads it, so it may be covered more than once
    if any(o.out in prog.covered for o in covers if not (isinstance(o, RMSNorm) and o.group == 0)):
        return False
    order += [(root, len(order), k) for k in kernels]
    prog.covered.update({o.out: kernels[-1].name for o in covers})
    return True


def fuse(graph: Graph) -> Program:
    v = _View(graph)
    prog = Program(graph)
    order: list = []
    for i, op in enumerate(graph.ops):
        if op.out not in prog.covered:
            any(_take(prog, rule(v, op), i, order) for rule in RULES)
    for i, op in enumerate(graph.ops):
        if op.out not in prog.covered:
            _take(prog, fallback_linear(v, op), i, order) or _take(prog, fallback_elementwise(v, op, prog.covered), i, order)
    prog.kernels = [k for _, _, k in sorted(order, key=lambda t: (t[0], t[1]))]
    missing = [o for o in graph.ops if o.out not in prog.covered]
    if missing:
        o = missing[0]
        raise Unscheduled(f"no fusion rule covers {type(o).__name__} -> %{o.out} ({len(missing)} ops uncovered)")
    return prog
