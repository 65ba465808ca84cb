"""The ops of kiec's IR: small frozen dataclasses with named fields.

Every op names its result `out`. Fields annotated `Value` (or `Value | None`) refer to other values of
the graph (inputs, parameters, state, or results of earlier ops); every other field is an attribute.
`infer` checks the input types and returns the result type; the verifier and the builder both call it.

Activations are f32 at this level (the semantics of record); parameters keep their storage dtype;
codegen picks the storage of intermediates. Decode vectors are flat: a [heads * head_dim] vector
carries its head count in the op's attributes.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, ClassVar

from .types import FLOAT_DTYPES, TensorType

Value = str  # the name of a value in the graph
TypeOf = Callable[[str], TensorType]


class IRTypeError(ValueError):
    """An op's inputs do not have the types it needs."""


def _need(cond: bool, op: Op, msg: str) -> None:
    if not cond:
        raise IRTypeError(f"{type(op).__name__} -> %{op.out}: {msg}")


def _vector(op: Op, t: TensorType, what: str) -> int:
    _need(len(t.shape) == 1, op, f"{what} must be a vector, got {t}")
    return t.shape[0]


def _float(op: Op, t: TensorType, what: str) -> None:
    _need(t.dtype in FLOAT_DTYPES, op, f"{what} must be a float tensor, got {t}")


def _f32(n: int) -> TensorType:
    return TensorType((n,), "f32")


class Op:
    """Base of all ops. Subclasses are frozen dataclasses whose first field is `out`."""

    out: Value
    kind: ClassVar[str] = "op"

    @classmethod
    def value_fields(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls) if f.name != "out" and f.type.startswith("Value")]

    @classmethod
    def attr_fields(cls) -> list[dataclasses.Field]:
        return [f for f in dataclasses.fields(cls) if f.name != "out" and not f.type.startswith("Value")]

    def inputs(self) -> list[Value]:
        return [v for v in (getattr(self, n) for n in self.value_fields()) if v is not None]

    def infer(self, ty: TypeOf) -> TensorType:
        raise NotImplementedError(type(self).__name__)


# ----------------------------------------------------------------------------------------------------
# lookups and norms


@dataclass(frozen=True)
class Embedding(Op):
    out: Value
    table: Value  # [vocab, dim]
    index: Value  # i32 scalar
    kind: ClassVar[str] = "gather"

    def infer(self, ty):
        t, i = ty(self.table), ty(self.index)
        _need(len(t.shape) == 2, self, f"table must be [vocab, dim], got {t}")
        _need(i.shape == () and i.dtype in ("i32", "i64"), self, f"index must be an integer scalar, got {i}")
        return _f32(t.shape[1])


@dataclass(frozen=True)
class RMSNorm(Op):
    out: Value
    x: Value
    weight: Value  # [n], or [group] when the norm is taken per group (Qwen3's per-head q/k norm)
    eps: float
    group: int = 0  # 0: one statistic over the whole vector
    kind: ClassVar[str] = "norm"

    def infer(self, ty):
        n = _vector(self, ty(self.x), "x")
        w = _vector(self, ty(self.weight), "weight")
        size = self.group or n
        _need(self.group >= 0 and n % size == 0, self, f"group {self.group} does not divide {n}")
        _need(w == size, self, f"weight has {w} elements, expected {size}")
        return _f32(n)


@dataclass(frozen=True)
class LayerNorm(Op):
    out: Value
    x: Value
    weight: Value
    bias: Value | None
    eps: float
    kind: ClassVar[str] = "norm"

    def infer(self, ty):
        n = _vector(self, ty(self.x), "x")
        _need(ty(self.weight).shape == (n,), self, f"weight must be [{n}], got {ty(self.weight)}")
        if self.bias is not None:
            _need(ty(self.bias).shape == (n,), self, f"bias must be [{n}], got {ty(self.bias)}")
        return _f32(n)


# ----------------------------------------------------------------------------------------------------
# matrix-vector


@dataclass(frozen=True)
class Linear(Op):
    out: Value
    x: Value  # [K]
    weight: Value  # [N, K]
    bias: Value | None = None  # [N]
    kind: ClassVar[str] = "gemv"

    def infer(self, ty):
        k = _vector(self, ty(self.x), "x")
        w = ty(self.weight)
        _float(self, w, "weight")
        _need(len(w.shape) == 2 and w.shape[1] == k, self, f"weight must be [N, {k}], got {w}")
        if self.bias is not None:
            _need(ty(self.bias).shape == (w.shape[0],), self, f"bias must be [{w.shape[0]}], got {ty(self.bias)}")
        return _f32(w.shape[0])


# ----------------------------------------------------------------------------------------------------
# attention

ROPE_SCALINGS = ("none", "linear", "llama3")


@dataclass(frozen=True)
class Rope(Op):
    """Rotary embedding of a [heads * head_dim] vector at position `pos`.

    Half-split (GPT-NeoX/HF Llama) pairs element i with i + rotary_dim/2; interleaved (GPT-J) pairs 2i
    with 2i+1. Only the first `rotary_dim` elements of each head rotate (partial rotary).
    """

    out: Value
    x: Value
    pos: Value
    head_dim: int
    rotary_dim: int
    theta: float
    interleaved: bool = False
    scaling: str = "none"  # none | linear | llama3
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 1.0
    original_max_pos: int = 0
    kind: ClassVar[str] = "elementwise"

    def infer(self, ty):
        n = _vector(self, ty(self.x), "x")
        _need(self.head_dim > 0 and n % self.head_dim == 0, self, f"head_dim {self.head_dim} does not divide {n}")
        _need(0 < self.rotary_dim <= self.head_dim and self.rotary_dim % 2 == 0, self,
              f"rotary_dim {self.rotary_dim} must be even and in (0, {self.head_dim}]")
        _need(self.scaling in ROPE_SCALINGS, self, f"scaling {self.scaling!r} not one of {ROPE_SCALINGS}")
        _need(ty(self.pos).shape == (), self, "pos must be a scalar")
        return _f32(n)

    def inv_freq(self) -> list[float]:
        """Angle per position of each rotating pair, after scaling (as HF's rope_init_fn computes it)."""
        d = self.rotary_dim
        freqs = [1.0 / self.theta ** (2 * i / d) for i in range(d // 2)]
        if self.scaling == "linear":
            return [f / self.factor for f in freqs]
        if self.scaling == "llama3":
            low_wavelen = self.original_max_pos / self.low_freq_factor
            high_wavelen = self.original_max_pos / self.high_freq_factor
            out = []
            for f in freqs:
                wavelen = 2 * math.pi / f
                if wavelen < high_wavelen:
                    out.append(f)
                elif wavelen > low_wavelen:
                    out.append(f / self.factor)
                else:
                    smooth = (self.original_max_pos / wavelen - self.low_freq_factor) / (
                        self.high_freq_factor - self.low_freq_factor)
                    out.append((1 - smooth) * f / self.factor + smooth * f)
            return out
        return freqs


@dataclass(frozen=True)
class KVAppend(Op):
    """Write k and v at row `pos` of a layer's cache; the result is the updated cache."""

    out: Value
    cache: Value  # state [2, kv_heads, max_seq_len, head_dim]
    k: Value  # [kv_heads * head_dim]
    v: Value
    pos: Value
    kind: ClassVar[str] = "state"

    def infer(self, ty):
        c = ty(self.cache)
        _need(len(c.shape) == 4 and c.shape[0] == 2, self, f"cache must be [2, kv_heads, seq, head_dim], got {c}")
        width = c.shape[1] * c.shape[3]
        for name in ("k", "v"):
            _need(ty(getattr(self, name)).shape == (width,), self, f"{name} must be [{width}], got {ty(getattr(self, name))}")
        _need(ty(self.pos).shape == (), self, "pos must be a scalar")
        return c


@dataclass(frozen=True)
class Attention(Op):
    """Decode attention of one query over cache rows 0..pos (GQA: n_heads / kv_heads queries per KV head).

    window > 0 keeps only keys with pos - j < window; softcap > 0 maps scores s to softcap*tanh(s/softcap).
    """

    out: Value
    q: Value  # [n_heads * head_dim]
    cache: Value  # result of this layer's KVAppend
    pos: Value
    n_heads: int
    scale: float
    window: int = 0
    softcap: float = 0.0
    kind: ClassVar[str] = "attention"

    def infer(self, ty):
        c = ty(self.cache)
        _need(len(c.shape) == 4 and c.shape[0] == 2, self, f"cache must be [2, kv_heads, seq, head_dim], got {c}")
        kv_heads, head_dim = c.shape[1], c.shape[3]
        _need(self.n_heads % kv_heads == 0, self, f"n_heads {self.n_heads} is not a multiple of kv_heads {kv_heads}")
        _need(ty(self.q).shape == (self.n_heads * head_dim,), self,
              f"q must be [{self.n_heads * head_dim}], got {ty(self.q)}")
        return _f32(self.n_heads * head_dim)


# ----------------------------------------------------------------------------------------------------
# elementwise and the rest

ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "relu")


@dataclass(frozen=True)
class Activation(Op):
    out: Value
    x: Value
    fn: str  # silu | gelu | gelu_tanh | relu
    kind: ClassVar[str] = "elementwise"

    def infer(self, ty):
        _need(self.fn in ACTIVATIONS, self, f"unknown activation {self.fn!r} (kiec has {', '.join(ACTIVATIONS)})")
        return _f32(_vector(self, ty(self.x), "x"))


@dataclass(frozen=True)
class Mul(Op):
    out: Value
    a: Value
    b: Value
    kind: ClassVar[str] = "elementwise"

    def infer(self, ty):
        n = _vector(self, ty(self.a), "a")
        _need(ty(self.b).shape == (n,), self, f"b must be [{n}], got {ty(self.b)}")
        return _f32(n)


@dataclass(frozen=True)
class Add(Op):
    out: Value
    a: Value
    b: Value
    kind: ClassVar[str] = "elementwise"

    infer = Mul.infer


@dataclass(frozen=True)
class Argmax(Op):
    out: Value
    x: Value
    kind: ClassVar[str] = "reduction"

    def infer(self, ty):
        _vector(self, ty(self.x), "x")
        return TensorType((), "i32")


@dataclass(frozen=True)
class AllReduce(Op):
    """Sum of x over the tensor-parallel group (the identity on one device)."""

    out: Value
    x: Value
    kind: ClassVar[str] = "collective"

    def infer(self, ty):
        return _f32(_vector(self, ty(self.x), "x"))


MODEL_OPS: tuple[type[Op], ...] = (
    Embedding, RMSNorm, LayerNorm, Linear, Rope, KVAppend, Attention, Activation, Mul, Add, Argmax, AllReduce,
)
ALL_OPS: dict[str, type[Op]] = {cls.__name__: cls for cls in MODEL_OPS}
