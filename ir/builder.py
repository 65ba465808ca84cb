"""Builder: the one way frontends and tests make graphs; it names results and infers their types."""
from __future__ import annotations

from .graph import Graph, Param, State
from .ops import Op
from .types import TensorType
from .verify import verify


class Builder:
    def __init__(self, name: str):
        self.graph = Graph(name)
        self._taken: set[str] = set()

    def _claim(self, name: str) -> str:
        if name in self._taken:
            raise ValueError(f"graph {self.graph.name}: %{name} is defined twice")
        self._taken.add(name)
        return name

    def fresh(self, hint: str) -> str:
        if hint not in self._taken:
            return hint
        i = 1
        while f"{hint}.{i}" in self._taken:
            i += 1
        return f"{hint}.{i}"

    def input(self, name: str, type: TensorType) -> str:
        self.graph.inputs[self._claim(name)] = type
        return name

    def param(self, name: str, shape: tuple[int, ...], dtype: str, shard: str = "replicated") -> str:
        self.graph.params[self._claim(name)] = Param(name, TensorType(tuple(shape), dtype), shard)
        return name

    def state(self, name: str, type: TensorType) -> str:
        self.graph.states[self._claim(name)] = State(name, type)
        return name

    def emit(self, op_cls: type[Op], hint: str, **fields) -> str:
        """Append op_cls(out=<fresh name>, **fields) and return its result's name."""
        op = op_cls(out=self.fresh(hint), **fields)
        missing = [v for v in op.inputs() if v not in self._taken]
        if missing:
            raise ValueError(f"{op_cls.__name__} -> %{op.out}: uses undefined %{missing[0]}")
        self.graph.types[op.out] = op.infer(self.graph.type_of)
        self.graph.ops.append(op)
        self._claim(op.out)
        return op.out

    def output(self, *names: str) -> None:
        self.graph.outputs.extend(names)

    def finish(self) -> Graph:
        verify(self.graph)
        return self.graph
