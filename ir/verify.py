"""verify(graph): types, single assignment, use after definition, and which ops are legal at a stage."""
from __future__ import annotations

import dataclasses

from .graph import Graph
from .ops import MODEL_OPS, IRTypeError, Op


class VerifyError(ValueError):
    pass


def verify(graph: Graph, legal: tuple[type[Op], ...] = MODEL_OPS, after: str = "") -> None:
    """Raise VerifyError naming the op (and the pass, when `after` is given) that breaks an invariant."""
    where = f" after pass {after}" if after else ""

    def fail(msg: str):
        raise VerifyError(f"graph {graph.name}{where}: {msg}")

    defined: set[str] = set()
    for name in [*graph.inputs, *graph.params, *graph.states]:
        if name in defined:
            fail(f"%{name} is defined twice")
        defined.add(name)
    for i, op in enumerate(graph.ops):
        label = f"op {i} ({type(op).__name__} -> %{op.out})"
        if type(op) not in legal:
            fail(f"{label} is not legal at this stage")
        for f in dataclasses.fields(op):
            v = getattr(op, f.name)
            if f.type.startswith("Value") and not (v is None and "None" in f.type) and not isinstance(v, str):
                fail(f"{label}: field {f.name} must name a value, got {v!r}")
        for v in op.inputs():
            if v not in defined:
                fail(f"{label} uses %{v} before it is defined")
        if op.out in defined:
            fail(f"{label} assigns %{op.out}, which is already defined (single assignment)")
        try:
            inferred = op.infer(graph.type_of)
        except IRTypeError as e:
            fail(f"{label}: {e}")
        if graph.types.get(op.out) != inferred:
            fail(f"{label} is recorded as {graph.types.get(op.out)} but its inputs give {inferred}")
        defined.add(op.out)
    extra = set(graph.types) - {op.out for op in graph.ops}
    if extra:
        fail(f"types recorded for values no op defines: {sorted(extra)[:3]}")
    for name in graph.outputs:
        if name not in defined:
            fail(f"output %{name} is not defined")
