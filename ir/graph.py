"""A decode-step graph: inputs, parameters, state, a list of ops in order, outputs."""
from __future__ import annotations

from dataclasses import dataclass, field

from .ops import Op
from .types import TensorType

SHARDS = ("replicated", "rows", "cols")  # rows: split the output dim (dim 0); cols: split the input dim


@dataclass(frozen=True)
class Param:
    name: str
    type: TensorType
    shard: str = "replicated"

    def __post_init__(self):
        if self.shard not in SHARDS:
            raise ValueError(f"param {self.name}: shard {self.shard!r} not one of {SHARDS}")


@dataclass(frozen=True)
class State:
    """Device state that lives across steps; a layer's KV cache is [2, kv_heads, max_seq_len, head_dim]."""

    name: str
    type: TensorType


@dataclass
class Graph:
    name: str
    inputs: dict[str, TensorType] = field(default_factory=dict)  # token: i32[], pos: i32[]
    params: dict[str, Param] = field(default_factory=dict)
    states: dict[str, State] = field(default_factory=dict)
    ops: list[Op] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    types: dict[str, TensorType] = field(default_factory=dict)  # type of each op result

    def type_of(self, name: str) -> TensorType:
        if name in self.types:
            return self.types[name]
        if name in self.inputs:
            return self.inputs[name]
        if name in self.params:
            return self.params[name].type
        if name in self.states:
            return self.states[name].type
        raise KeyError(f"%{name} is not defined in graph {self.name}")

    def producer(self) -> dict[str, Op]:
        return {op.out: op for op in self.ops}

    def users(self) -> dict[str, list[Op]]:
        uses: dict[str, list[Op]] = {}
        for op in self.ops:
            for v in op.inputs():
                uses.setdefault(v, []).append(op)
        return uses

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for op in self.ops:
            counts[type(op).__name__] = counts.get(type(op).__name__, 0) + 1
        return counts
