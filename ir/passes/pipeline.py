"""The compiler's pass list, read top to bottom. Each entry is (name, graph -> graph); the verifier runs
after every one, and `dump` writes the IR after each (NN_name.kir)."""
from __future__ import annotations

import os
from typing import Callable

from ..graph import Graph
from ..text import print_graph
from ..verify import verify
from .fuse import fuse
from .program import Program

GRAPH_PASSES: list[tuple[str, Callable[[Graph], Graph]]] = [
    # The model-level graph of a frontend is already canonical (RMSNorm, Rope, Attention ... lifted);
    # canonicalization and pattern lifting for ONNX imports join here.
]


def run(graph: Graph, dump_dir: str | None = None) -> Program:
    """Graph passes in order, then fusion into kernels (fuse.RULES, in order; ops left over are an error)."""
    stages = [("loaded", graph)]
    verify(graph, after="load")
    for name, fn in GRAPH_PASSES:
        graph = fn(graph)
        verify(graph, after=name)
        stages.append((name, graph))
    program = fuse(graph)
    if dump_dir:
        os.makedirs(dump_dir, exist_ok=True)
        for i, (name, g) in enumerate(stages):
            with open(os.path.join(dump_dir, f"{i:02d}_{name}.kir"), "w") as fh:
                fh.write(print_graph(g))
        with open(os.path.join(dump_dir, f"{len(stages):02d}_fuse.txt"), "w") as fh:
            fh.write(describe(program))
    return program


def describe(program: Program) -> str:
    """The fused program, one kernel a line with the ops it covers (what `--dump-ir` writes after fuse)."""
    covers: dict[str, list[str]] = {}
    for value, kernel in program.covered.items():
        covers.setdefault(kernel, []).append(value)
    lines = []
    for i, k in enumerate(program.kernels):
        kind = type(k).__name__ + (f"[{k.epilogue}{', rmsnorm prologue' if k.norm else ''}]"
                                   if getattr(k, "epilogue", None) else "")
        lines.append(f"{i:4d} {kind:<40} -> %{k.name}   covers {', '.join('%' + v for v in covers.get(k.name, []))}")
    return "\n".join(lines) + "\n"
