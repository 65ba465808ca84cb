"""Tagged values (persist_tagged): the values a persistent kernel hands over as words that carry their writer's
tag, so that a reader checks its data instead of waiting on the writer's counter; which values (tag_plan), the
parity tags' bits (tag_parity), and the waits that change with them (direct_waits, tag_covered, late_waits).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .phases import Schedule, Wait, phase_io, phases, slot_key
from .program import AttentionKernel, EmbedKernel, GemvKernel, Program, kernel_io


@dataclass(frozen=True)
class TagPlan:
    """The values handed over as tagged words (persist_tagged): each float beside a 32-bit tag naming the phase and
    token that wrote it, stored and loaded 8 bytes at once, so that a reader checks its data instead of relying on
    the writer's release (the wait for its stores' acknowledgement). writer: tagged value -> its writer's phase;
    relaxed: the phases that write only tagged values, whose counters move without the release (a hint that the
    words are worth reading)."""

    writer: dict[str, int]
    relaxed: frozenset[int]


def alias_roots(program: Program) -> dict[str, str]:
    """Every kernel-written value -> the first value of its alias chain (a residual epilogue writes in place, so its
    result is its input's slot: the residual stream is one chain from the embedding through every layer)."""
    alias = {v: a for k in program.kernels for v, _, a in kernel_io(k)[1] if a is not None}
    roots = {}
    for k in program.kernels:
        for v, _, _ in kernel_io(k)[1]:
            r = v
            while r in alias:
                r = alias[r]
            roots[v] = r
    return roots


def tag_plan(program: Program, attention: bool = False) -> TagPlan:
    """Tag a value when every reader checks tags and the writer writes them: written by the embedding or a GEMV's
    store, residual or SiLU-mul epilogue, read only by GEMVs (their prologue's x, a residual epilogue's stream),
    each time after its writer in the same token, and not a graph output. A residual aliases its input's slot, so
    an alias chain is tagged whole or not at all. `attention` (persist_tagged 2): attention also reads its packed
    qkv and writes its output as tagged words. Every other value keeps the release and acquire of the counters
    (the logits, the token; attention's without `attention`): their readers wait on their writers directly (see
    `direct_waits`)."""
    kernels = program.kernels
    phase_of = {i: c for c, (i, op) in enumerate(phases(program)) if op != "select"}
    writer = {v: i for i, k in enumerate(kernels) for v, _, _ in kernel_io(k)[1]}
    ok = {v for v, i in writer.items()
          if isinstance(kernels[i], EmbedKernel)
          or (isinstance(kernels[i], GemvKernel) and kernels[i].epilogue in ("store", "residual", "silu_mul"))
          or (attention and isinstance(kernels[i], AttentionKernel))}
    checks = (GemvKernel, AttentionKernel) if attention else (GemvKernel,)
    for i, k in enumerate(kernels):
        for v in kernel_io(k)[0]:
            if not (isinstance(k, checks) and writer.get(v, len(kernels)) < i):
                ok.discard(v)
    ok -= set(program.graph.outputs)
    chains: dict[str, set[str]] = {}
    for v, r in alias_roots(program).items():
        chains.setdefault(r, set()).add(v)
    ok = {v for members in chains.values() if members <= ok for v in members}
    relaxed = frozenset(phase_of[i] for i, k in enumerate(kernels)
                        if i in phase_of and all(v in ok for v, _, _ in kernel_io(k)[1]))
    return TagPlan({v: phase_of[writer[v]] for v in ok}, relaxed)


def tag_parity(program: Program, plan: TagPlan, sched: Schedule | None = None) -> dict[int, int]:
    """Parity tags (persist_tag_parity): the tag of a tagged word is one bit, the parity of its slot's writes so far.
    A value's slot is its own (codegen/buffers.py), shared only along its alias chain (a residual stream: the
    embedding, then each residual epilogue writing in place), which W writer phases write each token; the k-th of
    them (0-based) in token t of a launch is the slot's write t W + k + 1 (the runtime zeroes the slots, parity 0,
    before each launch), so it carries ((t & W) ^ (k + 1)) & 1. Returns, for each writer phase, W & 1 in bit 0 and
    (k + 1) & 1 in bit 1. A reader waits for its writer's parity: the word then holds that write or the one before
    it, never an older one: a chain written once a token is read by the same instructions, which read the same
    words at the write before a token earlier; a chain written more often (the residual stream) must be read by
    GEMVs only (their prologues read all of it, their residual epilogues rows the prologues read before), each
    with a tile on every SM (checked with `sched`), so that every SM read the whole chain at each write before the
    one it waits for. A ValueError names the phase where that does not hold."""
    roots = alias_roots(program)
    chains: dict[str, list[int]] = {}
    for v, w in plan.writer.items():
        chains.setdefault(roots[v], []).append(w)
    bits: dict[int, int] = {}
    if sched is not None:
        order_of = {i: c for c, (i, op) in enumerate(sched.phases) if op != "select"}  # (the LM head's GEMV)
        tiles_on: dict[int, set[int]] = {}
        for sm, lst in enumerate(sched.lists):
            for ins in lst:
                tiles_on.setdefault(ins.counter, set()).add(sm)
        for i, k in enumerate(program.kernels):
            for v in kernel_io(k)[0]:
                if v not in plan.writer or len(chains[roots[v]]) == 1:
                    continue
                c = order_of[i]
                if not isinstance(k, GemvKernel):
                    raise ValueError(f"parity tags: {k.name} (phase {c}) reads {v}, which is written "
                                     f"{len(chains[roots[v]])} times a token, and is not a GEMV")
                if len(tiles_on[c]) != sched.sms:
                    raise ValueError(f"parity tags: {k.name} (phase {c}) reads {v}, which is written "
                                     f"{len(chains[roots[v]])} times a token, on {len(tiles_on[c])} of "
                                     f"{sched.sms} SMs (each must read every write of it)")
    for phases_ in chains.values():
        order = sorted(phases_)
        for k, w in enumerate(order):
            b = (len(order) & 1) | (((k + 1) & 1) << 1)
            if bits.setdefault(w, b) != b:
                raise ValueError(f"phase {w} writes tagged values of two chains with different parities")
    return bits


def direct_waits(program: Program, deps: list[list[Wait]], plan: TagPlan) -> list[list[Wait]]:
    """With tagged values, a counter no longer carries what its phase saw (a relaxed count releases nothing), so
    no read may rely on a wait that `reduce_waits` dropped as implied: every untagged value a phase reads gets a
    wait on its writer itself, the latest earlier phase of the token that writes it, or else the latest of the
    previous token (the embedding's token, which select wrote). A phase's own state (attention's KV cache and
    partials) is not waited on here: attention acquires its cache rows from its arrivals."""
    io = phase_io(program)
    out = []
    for c, waits in enumerate(deps):
        kept = list(waits)
        for v in io[c][0] - set(plan.writer) - io[c][1]:
            j = next((j for j in range(c - 1, -1, -1) if v in io[j][1]), None)
            previous = j is None
            if previous:
                j = next((j for j in range(len(io) - 1, c, -1) if v in io[j][1]), None)
            if j is not None and not any(w.counter == j and w.previous == previous for w in kept):
                kept.append(Wait(j, 0, previous))
        out.append(kept)
    return out


def tag_covered(program: Program, plan: TagPlan, slot_of: dict[str, int] | None = None) -> set[tuple[int, int]]:
    """Tag waits (persist_tag_waits): the (reader, writer) phase pairs of one token whose only conflict is the
    reader's read of tagged values the writer writes: a reader that loads each such word until it carries its
    writer's tag for this token needs no wait on the writer's counter. Any other conflict between the two (the
    reader writes a slot the writer reads or writes, or reads a slot the writer writes under another name, or an
    untagged value of it) keeps the wait. The previous token's waits are not touched."""
    io, slot = phase_io(program), slot_key(slot_of)
    return {(c, j) for c, (rc, wc) in enumerate(io) for j, (rj, wj) in enumerate(io[:c])
            if rc & wj and _reads_only_tags_of(rc, wj, j, plan, slot)
            and not {slot(v) for v in wc} & {slot(v) for v in rj | wj}}


def late_waits(program: Program, deps: list[list[Wait]], plan: TagPlan,
               slot_of: dict[str, int] | None = None) -> list[list[Wait]]:
    """Tag waits 2: a GEMV phase's waits on writers whose output it reads only as tagged values of theirs (its
    reads meet their writes in no other slot) guard only its writes (write-after-read, write-after-write): marked
    late, polled before the epilogue. Its tagged reads check their words; its untagged reads have waits of their
    own (direct_waits), which stay early, and so do the leads (they hold back the spin)."""
    ph, io, slot = phases(program), phase_io(program), slot_key(slot_of)
    return [[dataclasses.replace(w, late=ph[c][1] == "gemv" and not w.lead
                                 and _reads_only_tags_of(io[c][0], io[w.counter][1], w.counter, plan, slot))
             for w in waits] for c, waits in enumerate(deps)]


def _reads_only_tags_of(reads: set[str], writes: set[str], writer: int, plan: TagPlan, slot) -> bool:
    """A phase reading `reads` meets `writer`'s `writes` in no slot but those of tagged values `writer` writes
    (its reads of that writer are all checked by their tags)."""
    tagged = {slot(v) for v in reads & writes if plan.writer.get(v) == writer}
    return {slot(v) for v in reads} & {slot(v) for v in writes} <= tagged
