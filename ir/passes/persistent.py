"""The persistent (monokernel) schedule: every fused kernel cut into instructions, dealt to the SMs as
per-SM lists. An instruction waits on counters in global memory and bumps one when it is done; counters
only grow (token t waits for `tiles * (t + 1)`), so nothing is reset between tokens.

A counter belongs to a phase: one per kernel, and a last one, select, that picks the next token from the
logits (argmax or a seeded draw), checks EOS and the length, and hands the token to the next step's
embedding. Attention is cut into (KV head, split) tiles over the KV length, so that attention at long context
spreads over the SMs; each split writes a partial and arrives on its KV head's arrival counter, and the split
that arrives last merges the partials and bumps the phase counter: the phase completes once per KV head, one
hop after the splits, with no separate combine phase to wait on.

Dependencies come from the dataflow, not from kernel order: an instruction waits for every kernel that
wrote a value it reads (read after write) and for every kernel that still reads the buffer slot it is about
to overwrite (write after read). The VM in vm.py checks both on any interleaving.
"""
from __future__ import annotations

import dataclasses

from .phases import BLOCK_ROWS, Instr, Schedule, Wait, item_rows, output_size, phase_io, phases, slot_key, unit_rows
from .program import AttentionKernel, GemvKernel, Program, kernel_io
from .tags import TagPlan, direct_waits, late_waits, tag_covered


def _conflict(a: tuple[set, set], b: tuple[set, set], slot) -> bool:
    """a after b: a reads what b writes, or a writes where b reads or writes (a shared arena slot counts)."""
    ra, wa = {slot(v) for v in a[0]}, {slot(v) for v in a[1]}
    rb, wb = {slot(v) for v in b[0]}, {slot(v) for v in b[1]}
    return bool(ra & wb or wa & rb or wa & wb)


def dependencies(program: Program, slot_of: dict[str, int] | None = None) -> list[list[Wait]]:
    """For each phase: the earlier phases of the same token it conflicts with, and the phases at or after
    it of the previous token (their reads and writes of shared slots and state must be done)."""
    io, slot = phase_io(program), slot_key(slot_of)
    deps: list[list[Wait]] = []
    for i in range(len(io)):
        same = [Wait(j, 0) for j in range(i) if _conflict(io[i], io[j], slot)]
        prev = [Wait(j, 0, True) for j in range(i, len(io)) if _conflict(io[i], io[j], slot)]
        deps.append(same + prev)
    return deps


def gemvs_reading(program: Program, values: set[str]) -> frozenset[int]:
    """The GEMV kernels whose x is one of `values`, by index."""
    return frozenset(i for i, k in enumerate(program.kernels) if isinstance(k, GemvKernel) and k.x in values)


def down_projections(program: Program) -> frozenset[int]:
    """The kernels that are GEMVs whose x a SiLU-mul GEMV writes (the down projections), by index."""
    return gemvs_reading(program, {k.out for k in program.kernels
                                   if isinstance(k, GemvKernel) and k.epilogue == "silu_mul"})


def output_projections(program: Program) -> frozenset[int]:
    """The kernels that are GEMVs whose x an attention kernel writes (the output projections), by index."""
    return gemvs_reading(program, {v for k in program.kernels if isinstance(k, AttentionKernel)
                                   for v, _, _ in kernel_io(k)[1]})


def local_waits(program: Program, deps: list[list[Wait]], readers: frozenset[int]) -> list[list[Wait]]:
    """The timing probes' schedules (wrong on purpose): each GEMV kernel in `readers` without its waits on the
    phase that writes its x in the same token, before the reductions (so that what that wait implied is waited on
    directly). Each SM's tile of such a GEMV then starts once its own tile of the writer is done and reads an x
    the other SMs may not have written yet. persist_probe_mlp_local: the down projections (down_projections), as
    a down projection cut by its K would start; persist_probe_o_local: the output projections
    (output_projections), as one fused with attention by KV head would."""
    ph, kernels = phases(program), program.kernels
    writer = {v: c for c, (i, op) in enumerate(ph) if op != "select" for v, _, _ in kernel_io(kernels[i])[1]}
    out = []
    for (i, op), waits in zip(ph, deps):
        source = writer[kernels[i].x] if op == "gemv" and i in readers else -1
        out.append([w for w in waits if w.previous or w.counter != source])
    return out


def reduce_waits(deps: list[list[Wait]]) -> list[list[Wait]]:
    """Drop waits that others already imply. A counter reaching token t's target covers every earlier token,
    and waiting for a whole kernel covers every kernel it waited for in its own token."""
    done_before: list[set[tuple[int, int]]] = []  # kernel i -> {(kernel, tokens back)} finished once i may start

    def implied(w: Wait) -> set[tuple[int, int]]:
        d = int(w.previous)
        return {(w.counter, d)} | {(k, back + d) for k, back in done_before[w.counter]}

    def covered(have: set[tuple[int, int]], w: Wait) -> bool:
        return any(k == w.counter and back <= int(w.previous) for k, back in have)

    same = []  # first the same-token waits, kernel by kernel (they only name earlier kernels)
    for waits in deps:
        kept: list[Wait] = []
        for w in sorted((w for w in waits if not w.previous), key=lambda w: -w.counter):
            if not covered(set().union(set(), *(implied(k) for k in kept)), w):
                kept.append(w)
        same.append(kept)
        done_before.append(set().union(set(), *(implied(k) for k in kept)))
    out = []
    for i, waits in enumerate(deps):  # then the previous token's: a later kernel of it covers more
        kept = list(same[i])
        for w in sorted((w for w in waits if w.previous), key=lambda w: -w.counter):
            if not covered(set().union(set(), *(implied(k) for k in kept)), w):
                kept.append(w)
        out.append(kept)
    return out


def attention_splits(k: AttentionKernel, sms: int, max_splits: int = 64) -> int:
    """Splits over the KV length of an attention kernel: (KV head, split) tiles over about one SM each."""
    return max(1, min(max_splits, sms // k.kv_heads))


def gemv_shares(n: int, sms: int, first_sm: int = 0, skip: frozenset[int] = frozenset(),
                step: int = 1) -> list[tuple[int, int, int]]:
    """(sm, lo, hi): a GEMV's n output rows in equal shares to the row, one tile per SM, the longer ones first
    (the device's GEMV takes any row count: its work items are row segments). Between two waits a kernel takes
    as long as its busiest SM, so the shares are equal per kernel, not only over the whole token. A kernel with
    fewer rows than SMs starts at `first_sm`, so that small kernels spread out. The SMs in `skip` get none (the
    others share their rows). `step`: the shares are whole runs of that many rows (n a multiple of it)."""
    order = [s for s in ((first_sm + j) % sms for j in range(sms)) if s not in skip]
    if not order:
        raise ValueError(f"a GEMV of {n} rows with all {sms} SMs skipped")
    tiles, lo, units = [], 0, n // step
    for j in range(min(len(order), units)):
        share = step * (units // len(order) + (1 if j < units % len(order) else 0))
        tiles.append((order[j], lo, lo + share))
        lo += share
    return tiles


def even_spares(units: int, sms: int, spared: list[int]) -> frozenset[int]:
    """persist_attn_spare_even: the first of `spared` (attention's order) that a GEMV of `units` rows (or blocks) can
    leave out so that its busiest SM takes no more units than with every SM: 128 blocks over 132 SMs spare 4 at most
    (each of 128 SMs a block), where sparing 8 gave 4 SMs two."""
    busiest = -(-units // sms)
    return frozenset(spared[:max(0, sms - -(-units // busiest))])


def gemv_item_shares(n: int, segs: int, sms: int, first_sm: int = 0, skip: frozenset[int] = frozenset(),
                     unit: int = 1) -> list[tuple[int, int, int, int, int]]:
    """(sm, lo, hi, head, tail): a GEMV's n rows of `segs` segments each (its items, row-major) in equal shares to the
    item (gemv_shares over n * segs items), as rows [lo, hi) with the first row from segment head on and the last up
    to segment tail (0: whole). Shares differ by one item where whole rows differ by a row (or a pair: `unit`). A
    share must be at least a unit's items, so that the unit it leads and the unit it trails are two: with fewer
    units than SMs, shares of whole units (tails and heads 0)."""
    if n < (sms - len(skip)) * unit:
        return [(sm, lo, hi, 0, 0) for sm, lo, hi in gemv_shares(n, sms, first_sm, skip, unit)]
    return [(sm, a // segs, -(-b // segs), a % segs, b % segs)
            for sm, a, b in gemv_shares(n * segs, sms, first_sm, skip)]


def share_items(ins: Instr, segs: int, rows: int = 1) -> int:
    """The items of a GEMV instruction whose rows are cut into `segs`: row segments, or with `rows` 16 (item_rows) a
    16-row block's K blocks."""
    return (ins.hi - ins.lo) // rows * segs - ins.head - ((segs - ins.tail) if ins.tail else 0)


def check_item_shares(sched: Schedule) -> None:
    """Each kernel dealt to the item: its tiles, in tile order, take its rows' items one after another from the first
    to the last, each at least a unit's (unit_rows), so that the unit a tile trails is the next tile's lead (the
    trailing tile adds that tile's partials), and each on an SM of its own (a tile waits for the next one's
    partials: on one SM, the next would never run first). A ValueError names the first tile where that does not
    hold."""
    for i, segs in sched.item_segs.items():
        k, unit, rows = sched.program.kernels[i], unit_rows(sched, i), item_rows(sched, i)
        tiles = sorted(((ins, sm) for sm, lst in enumerate(sched.lists) for ins in lst
                        if ins.kernel == i and ins.opcode == "gemv"),  # (not select's: the LM head's kernel holds it)
                       key=lambda x: x[0].tile)
        if len({sm for _, sm in tiles}) != len(tiles):
            raise ValueError(f"{k.name}: two of its tiles on one SM")
        at = 0  # the next item
        for ins, _ in tiles:
            start, items = ins.lo // rows * segs + ins.head, share_items(ins, segs, rows)
            if (not (0 <= ins.head < segs and 0 <= ins.tail < segs) or start != at or items < segs * unit // rows
                    or ins.lo % rows or ins.hi % rows):
                raise ValueError(f"{k.name} tile {ins.tile}: rows [{ins.lo}, {ins.hi}) from segment {ins.head} to "
                                 f"{ins.tail or segs} of {segs} take items from {start} ({items}); the tile before "
                                 f"ends at item {at}, and a share is at least a unit's {segs * unit // rows}"
                                 + (f" in whole {rows}-row blocks" if rows > 1 else ""))
            at = start + items
        if at != k.n_out // rows * segs:
            raise ValueError(f"{k.name}: its tiles take {at} of its {k.n_out // rows * segs} items")


def schedule(program: Program, sms: int, tile_rows: int = 64, slot_of: dict[str, int] | None = None,
             min_keys: int = 64, max_splits: int = 64, previous_first: bool = False,
             tags: TagPlan | None = None, tag_waits: int = 0, tag_lead: int = 100,
             owner_merges: int = 0, spare_splits: int = 0, newest_first: bool = False,
             mlp_local: bool = False, early_pass: bool = False, o_local: bool = False,
             pair_rows: frozenset[int] = frozenset(), item_segs: dict[int, int] | None = None,
             consumer_merges: int = 0, block_rows: frozenset[int] = frozenset(), solo_keys: int = 0,
             spare_even: bool = False, block_items: frozenset[int] = frozenset()) -> Schedule:
    """Cut each phase into tiles and deal them to the SMs: GEMVs one equal share per SM (gemv_shares),
    attention (KV head, split) pairs over about one SM each (splits = sms / kv_heads), the rest `tile_rows`
    outputs a tile, round-robin. Every SM's list is in phase order (no deadlock). An instruction's waits are
    polled in order, one round trip each at least: previous_first puts the previous token's (long reached when
    the tile gets there) before this token's, so that their round trips pass while this token's producer still
    runs instead of after it. tags: the tagged values' plan (tag_plan), whose untagged reads wait on their
    writers directly. tag_waits (with tags): a tile reading tagged values does not wait on their writer's
    counter where that is the only reason to (tag_covered); it loads the words until they carry their tag.
    tag_lead (percent, below 100): instead of no wait, one for all but that share of the writer's tiles (a Wait's
    lead), so that the words are loaded again only over the writer's last tiles, not all along. tag_waits 2: also
    the GEMV waits that guard only writes are polled before the epilogue (late_waits). owner_merges: see
    Schedule (an owner waits for its head's other splits, so no SM may hold two splits of one phase: attention's
    tiles go one an SM). spare_splits: the GEMV after an attention phase (the output projection) gives no rows to
    the SMs of each KV head's first spare_splits splits, the ones in use from the shortest context on (split_rows
    fills splits from the first): its other SMs are waiting on them, so their share would start last. None are
    spared where they would be more than half the SMs (a GPU with few SMs for its KV heads). newest_first: see
    Schedule (split 0 then holds the token's row, so that the owner's SM is the one spared). mlp_local
    (persist_probe_mlp_local, a timing probe: the schedule is wrong on purpose): a GEMV whose x a SiLU-mul GEMV
    writes (the down projection) waits for none of that phase's tiles of its token (local_waits). o_local
    (persist_probe_o_local, a timing probe, wrong likewise): a GEMV whose x an attention kernel writes (the output
    projection) waits for none of attention's tiles of its token. early_pass: see Schedule. pair_rows: the GEMV
    kernels (by index) whose output is handed over as tagged pairs (persist_tagged_pairs: two rows a word), whose
    shares are whole pairs (or, dealt to the item too, completed a pair at a time). item_segs (persist_item_shares):
    GEMV kernels (by index) dealt to the row segment, with their segments a row (gemv_item_shares).
    consumer_merges: see Schedule. block_rows (persist_mma_rows): the GEMV kernels (by index) whose shares are whole
    blocks of 16 rows (their dot products on the tensor cores, 16 rows an mma). solo_keys: see Schedule. spare_even
    (persist_attn_spare_even): of spare_splits' SMs, only as many as leave the GEMV's busiest share no larger
    (even_spares; a GEMV dealt to the item, item_segs, leaves out all of them still). block_items
    (persist_mma_item_shares): GEMVs of both block_rows and item_segs, dealt to the item where an item is one of a
    16-row block's item_segs K blocks (a tensor-core page), in block order (gemv_item_shares over the blocks)."""
    if tag_waits and tags is None:
        raise ValueError("tag waits need tagged values (persist_tagged)")
    spin = frozenset(tags.writer) if tag_waits else frozenset()
    item_segs = dict(item_segs or {})
    if not block_items <= (block_rows & set(item_segs)):
        raise ValueError(f"GEMV kernels {sorted(block_items - (block_rows & set(item_segs)))}: block items need 16-row "
                         f"blocks (block_rows) and item segments (item_segs)")
    sched = Schedule(program, sms, [], [[] for _ in range(sms)], phases(program), {}, min_keys, spin, owner_merges,
                     newest_first, early_pass, item_segs, frozenset(pair_rows), consumer_merges, solo_keys,
                     frozenset(block_items))
    deps = dependencies(program, slot_of)
    # the probes' readers: before the reductions, and again after direct_waits (which would wait on an untagged x's
    # writer once more)
    probed = (down_projections(program) if mlp_local else frozenset()) | (
        output_projections(program) if o_local else frozenset())
    if probed:
        deps = local_waits(program, deps, probed)
    covered = tag_covered(program, tags, slot_of) if tag_waits else set()
    if tag_waits:
        deps = [[w for w in waits if w.previous or (c, w.counter) not in covered] for c, waits in enumerate(deps)]
    deps = reduce_waits(deps)
    if tags is not None:
        deps = direct_waits(program, deps, tags)
        if probed:
            deps = local_waits(program, deps, probed)
    if tag_lead < 100:  # after the reductions: such a wait implies nothing (its lead is set below, from the tiles)
        deps = [waits + [Wait(j, 0, False, -1) for j in sorted(j for cc, j in covered if cc == c)
                         if not any(w.counter == j and not w.previous for w in waits)]
                for c, waits in enumerate(deps)]
    if tag_waits >= 2:
        deps = late_waits(program, deps, tags, slot_of)
    if previous_first:
        deps = [sorted(waits, key=lambda w: not w.previous) for waits in deps]  # stable: each group keeps its order
    sm, spared = 0, []  # (the SMs the next GEMV leaves out, in attention's order)
    for c, (i, opcode) in enumerate(sched.phases):
        k = program.kernels[i]
        n = output_size(k, program)
        if opcode == "gemv":
            if i in pair_rows and n % 2:  # (a word two rows: no SM writes half of one)
                raise ValueError(f"{k.name}: {n} rows dealt in pairs")
            if i in block_rows and (n % BLOCK_ROWS or (i in item_segs and i not in block_items)):
                raise ValueError(f"{k.name}: {n} rows dealt in blocks of 16" + (" and to the item" if n % 16 == 0
                                                                                 else ""))
            if i in block_items:  # (items: a block's K blocks; the rows of whole blocks)
                placed = [(where, lo * BLOCK_ROWS, hi * BLOCK_ROWS, head, tail) for where, lo, hi, head, tail
                          in gemv_item_shares(n // BLOCK_ROWS, item_segs[i], sms, sm, frozenset(spared))]
            elif i in item_segs:
                placed = gemv_item_shares(n, item_segs[i], sms, sm, frozenset(spared), unit_rows(sched, i))
            else:
                step = 16 if i in block_rows else 2 if i in pair_rows else 1
                skip = even_spares(n // step, sms, spared) if spare_even else frozenset(spared)
                placed = [(*x, 0, 0) for x in gemv_shares(n, sms, sm, skip, step)]
            spared = []
        elif opcode == "select":
            placed = [(sm, 0, 1, 0, 0)]
        elif opcode == "attention":
            splits = sched.splits.setdefault(i, attention_splits(k, sms, max_splits))
            placed = [((sm + t) % sms, g, g + 1, 0, 0)
                      for t, g in enumerate(g for g in range(n) for _ in range(splits))]
            spared = list(dict.fromkeys(where for t, (where, *_) in enumerate(placed) if t % splits < spare_splits))
            spared = spared if 2 * len(spared) <= sms else []  # (the others would take twice the rows)
        else:
            placed = [((sm + t) % sms, lo, min(lo + tile_rows, n), 0, 0)
                      for t, lo in enumerate(range(0, n, tile_rows))]
        sched.tiles.append(n if opcode == "attention" else len(placed))  # attention: its KV heads' last splits
        made = [Instr(opcode, i, t, lo, hi, tuple(deps[c]), c, head, tail)  # (tile counts below)
                for t, (_, lo, hi, head, tail) in enumerate(placed)]
        for (where, *_), ins in zip(placed, made):
            sched.lists[where].append(ins)
        advance = len({where for where, *_ in placed})
        if opcode == "gemv":  # the SMs with a row (item) more come first: the next kernel starts after them (or all)
            size = [share_items(ins, item_segs.get(i, 1), item_rows(sched, i)) for ins in made]
            past = next((placed[j][0] for j in reversed(range(len(placed))) if size[j] > min(size)), placed[-1][0])
            advance = (past - sm) % sms + 1  # (without skipped SMs: the longer shares' count, or all placed)
        sm = (sm + advance) % sms
    def counted(w: Wait) -> Wait:  # the tiles of its phase, and a lead's (rounded up: 10% of 8 attention heads is 1)
        tiles = sched.tiles[w.counter]
        return Wait(w.counter, tiles, w.previous, -(-tiles * tag_lead // 100) if w.lead else 0, w.late)
    for lst in sched.lists:
        lst[:] = [dataclasses.replace(x, waits=tuple(counted(w) for w in x.waits)) for x in lst]
    check_item_shares(sched)
    return sched


def share_weights(k: GemvKernel, items: int, segs: int = 1, rows: int = 1) -> int:
    """Weight elements a share of `items` items of a GEMV's rows cut into `segs` reads (whole rows with 1; SiLU-mul:
    a gate row's and an up row's segment each; `rows`: an item spans that many rows, item_rows)."""
    return items * rows * (2 if k.epilogue == "silu_mul" else 1) * (k.k // segs)


def dealt_weights(sched: Schedule, ins: Instr) -> int:
    """Weight elements a GEMV instruction reads as the schedule dealt it: its rows, or its items where it is dealt to
    the item (a row's segments, or a block's pages: item_rows)."""
    segs, rows = sched.item_segs.get(ins.kernel, 1), item_rows(sched, ins.kernel)
    return share_weights(sched.program.kernels[ins.kernel], share_items(ins, segs, rows), segs, rows)


def balance(sched: Schedule) -> dict:
    """How evenly the weights are dealt (counted in elements: the bounds are ratios). phase_bound: the share of the memory ceiling the schedule can
    reach if each kernel ends when its busiest SM does (sum of per-kernel means / sum of per-kernel maxima);
    token_bound: the same over the whole token (only if SMs ran ahead across kernels freely)."""
    per = [[0] * sched.sms for _ in sched.program.kernels]
    for where, lst in enumerate(sched.lists):
        for ins in lst:
            k = sched.program.kernels[ins.kernel]
            if isinstance(k, GemvKernel):
                per[ins.kernel][where] += dealt_weights(sched, ins)
    busy = [row for row in per if any(row)]
    total = [sum(row[j] for row in busy) for j in range(sched.sms)]
    return dict(phase_bound=sum(sum(r) / sched.sms for r in busy) / sum(max(r) for r in busy),
                token_bound=(sum(total) / sched.sms) / max(total),
                instructions=sum(len(lst) for lst in sched.lists),
                max_waits=max((len(i.waits) for lst in sched.lists for i in lst), default=0))
