"""plan_buffers: every value a kernel writes gets a slot in one float arena; a slot is reused once its
value has no later reader. A residual epilogue writes in place, so its result takes its input's slot. A tagged
value (persistent mode's persist_tagged) takes two floats an element, and tagged and untagged values never share a
slot: an old float read as a tag could then pass for one. With parity tags (persist_tag_parity) a tagged value
takes one float an element and a slot of its own, in a region at the arena's end (TAGGED_REGION: its start), which
the runtime zeroes before each launch: a word's tag is a parity, which only a slot's own writes may advance."""
from __future__ import annotations

from kiec.ir.passes.program import Program, kernel_io

ALIGN_FLOATS = 64  # 256-byte slots: every vector starts 16-byte (and L2-sector) aligned
TAGGED_REGION = "(tagged)"  # parity tags: the offset where the tagged values' own slots start (they run to the end)


def plan_buffers(program: Program, extra: dict[str, int], tagged: frozenset[str] | set[str] = frozenset(),
                 parity: bool = False) -> tuple[dict[str, int], int]:
    """Offsets (in floats) of every kernel-written value and of each `extra` scratch region; `tagged` values
    take two floats an element (value, tag) from slots of their own kind, or with `parity` one float an element
    from slots never reused, after everything else (offsets[TAGGED_REGION] to the end)."""
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
    own = 0  # parity: the tagged values' slots so far, placed after everything else at the end

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
            if not (parity and v in tagged):
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
            elif parity and v in tagged:
                offsets[v], size[v] = own, (n + ALIGN_FLOATS - 1) // ALIGN_FLOATS * ALIGN_FLOATS
                own += size[v]
            else:
                n *= 2 if v in tagged else 1
                offsets[v], size[v] = take(n, v in tagged), (n + ALIGN_FLOATS - 1) // ALIGN_FLOATS * ALIGN_FLOATS
            live[v] = last_read.get(v, i)
    for name, n in extra.items():
        offsets[name] = top
        top += (n + ALIGN_FLOATS - 1) // ALIGN_FLOATS * ALIGN_FLOATS
    if parity:
        for v in [v for v in tagged if v in offsets]:
            offsets[v] += top
        offsets[TAGGED_REGION] = top
        top += own
    return offsets, top
