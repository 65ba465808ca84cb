"""Weights read on demand: a model's tensors are never all in memory at once unless a caller asks."""
from __future__ import annotations

import zlib
from typing import Callable, Iterator

import torch

from kiec.ir.graph import Graph
from kiec.ir.types import torch_dtype

Loader = Callable[[], torch.Tensor]


class WeightStore:
    """name -> tensor in the graph's parameter dtype, each read from its source when asked for."""

    def __init__(self, graph: Graph, loaders: dict[str, Loader]):
        missing = [n for n in graph.params if n not in loaders]
        if missing:
            raise ValueError(f"no weight for parameter {missing[0]}")
        self._graph = graph
        self._loaders = loaders

    def __len__(self) -> int:
        return len(self._graph.params)

    def __iter__(self) -> Iterator[str]:
        return iter(self._graph.params)

    def __getitem__(self, name: str) -> torch.Tensor:
        p = self._graph.params[name]
        t = self._loaders[name]()
        if tuple(t.shape) != p.type.shape:
            raise ValueError(f"weight {name} has shape {list(t.shape)}, expected {list(p.type.shape)}")
        return t.to(torch_dtype(p.type.dtype))


def random_loader(name: str, shape: tuple[int, ...], seed: int) -> Loader:
    """A reproducible random tensor for `name`: norm weights near 1, matrices and biases N(0, 0.02)."""

    def load() -> torch.Tensor:
        g = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
        t = torch.randn(shape, generator=g) * 0.02
        return t * 5 + 1 if "norm" in name else t

    return load
