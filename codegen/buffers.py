"""plan_buffers: every value a kernel writes gets a slot in one float arena; a slot is reused once its
value has no later reader. A residual epilogue writes in place, so its result takes its input's slot. A tagged
value (persistent mode's persist_tagged) takes two floats an element, and tagged and untagged values never share a
slot: an old float read as a tag could then pass for one."""
from __future__ import annotations

from kiec.ir.passes.program import Program, kernel_io

ALIGN_FLOATS = 64  # 256-byte slots: every vector starts 16-byte (and L2-sector) aligned


def plan_buffers(program: Program, extra: dict[str, int],
                 tagged: frozenset[str] | set[str] = frozenset()) -> tuple[dict[str, int], int]:
    """Offsets (in floats) of every kernel-written value and of each `extra` scratch region; `tagged` values
    take two floats an element (value, tag) from slots of their own kind."""
    g = program.graph
    io = [kernel_io(k) for k in program.kernels]
    last_read: dict[str, int] = {}
    for i, (reads, _) in enumerate(io):
        for v in reads:
            last_read[v] = i
    for v in g.outputs:
        last_read[v] = len(io)
    offsets: dict[str, int] = {}
    size: dict[str, int] = {}
    free: list[tuple[int, int, bool]] = []  # (offset, floats, tagged?) of slots nobody holds
    live: dict[str, int] = {}  # value -> index of the kernel after which its slot frees
    top = 0

    def take(n: int, tag: bool) -> int:
        nonlocal top
        fits = [s for s in free if s[1] >= n and s[2] == tag]
        if fits:
            best = min(fits, key=lambda s: s[1])
            free.remove(best)
            return best[0]
        off, top = top, top + (n + ALIGN_FLOATS - 1) // ALIGN_FLOATS * ALIGN_FLOATS
        return off

    for i, (reads, writes) in enumerate(io):
        for v in [v for v, until in live.items() if until < i]:
            free.append((offsets[v], size[v], v in tagged))
            del live[v]
        for v, n, alias in writes:
            if n < 0:
                n = g.types[v].shape[0]
            if alias is not None:
                if (alias in tagged) != (v in tagged):
                    raise ValueError(f"{v} aliases {alias}: both tagged or neither")
                offsets[v], size[v] = offsets[alias], size[alias]
                live.pop(alias, None)
            else:
                n *= 2 if v in tagged else 1
                offsets[v], size[v] = take(n, v in tagged), (n + ALIGN_FLOATS - 1) // ALIGN_FLOATS * ALIGN_FLOATS
            live[v] = last_read.get(v, i)
    for name, n in extra.items():
        offsets[name] = top
        top += (n + ALIGN_FLOATS - 1) // ALIGN_FLOATS * ALIGN_FLOATS
    return offsets, top
