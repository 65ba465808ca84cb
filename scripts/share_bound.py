"""What whole-row GEMV shares cost against shares to the row segment, by arithmetic on the persistent schedule (no
GPU): for each GEMV phase, the busiest SM's weight bytes over the phase's mean, summed over a token, and the same
if the phase's bytes were dealt in items (row segments, gemv_tile's SEGS) instead of rows.
    python3 scripts/share_bound.py llama-3.2-1b [qwen3-1.7b ...] [field=value ...]
Prints per model: the phase bound (mean over busiest, summed over the phases: what the memory could reach if each
phase ended when its busiest SM did) with rows and with items, and the busiest SMs' excess bytes over the mean in us
at an SM's share of a 4.5 TB/s ceiling (34 GB/s). A bound, not a timing: stalls and the chain are not modelled.
"With rows" is the schedule as dealt, so with persist_item_shares=1 its residual GEMVs' shares are items already.
    python3 scripts/share_bound.py --kinds llama-3.2-1b [...] [field=value ...]
instead prints, per kind of GEMV (PersistentRules.gemv_kind: qkv, o, gate_up, down, head) as dealt, a phase's mean and
busiest share in KB, how many SMs take the busiest and how many take part, and the busiest SMs' excess over the mean
summed over the token in us at that 34 GB/s: where the whole-token excess of the first form comes from."""
import sys

from kiec.codegen import targets
from kiec.codegen.persistent import _PersistentEmitter
from kiec.ir.passes.persistent import dealt_weights, share_weights
from kiec.ir.passes.program import GemvKernel

import kiec
from kiec.build import pipeline

SM_GBPS = 34.0


def emitter(name: str, fields: dict[str, str] | None = None) -> _PersistentEmitter:
    """The persistent emitter of a model at the sm_90 target with `fields` replaced: its schedule (em.sched) without
    emitting the sources (scripts/item_share_tiles.py too)."""
    program = pipeline.run(kiec.load(name, dtype="bf16", max_seq_len=512).graph, None)
    return _PersistentEmitter(program, "bf16", 512, targets.with_fields(targets.TARGETS["sm_90"], fields or {}))


def phase_shares(em: _PersistentEmitter) -> dict[int, list[int]]:
    """{phase counter: the weight elements of each of its GEMV tiles} as dealt (not select's instruction, which the LM
    head's kernel holds)."""
    shares: dict[int, list[int]] = {}
    for lst in em.sched.lists:
        for ins in lst:
            k = em.p.kernels[ins.kernel]
            if isinstance(k, GemvKernel) and ins.opcode == "gemv":
                shares.setdefault(ins.counter, []).append(dealt_weights(em.sched, ins))
    return shares


def by_kind(name: str, fields: dict[str, str] | None = None) -> list[tuple[str, int, float, float, int, int, float]]:
    """(kind, phases, mean KB, busiest KB, SMs at the busiest, SMs taking part, the busiest's excess in us a token) for
    each kind of GEMV in the order the kinds first come in the token."""
    em = emitter(name, fields)
    out: dict[str, list] = {}
    for c, elems in phase_shares(em).items():
        kind = em.gemv_kind(em.p.kernels[em.sched.phases[c][0]])
        mean, top = sum(elems) / len(elems) * 2, max(elems) * 2  # (bf16 bytes)
        row = out.setdefault(kind, [kind, 0, mean / 1024, top / 1024, elems.count(max(elems)), len(elems), 0.0])
        row[1] += 1
        row[6] += (top - mean) / (SM_GBPS * 1e3)
    return [tuple(r) for r in out.values()]


def bound(name: str, fields: dict[str, str] | None = None) -> tuple[float, float, float, float]:
    em = emitter(name, fields)
    program = em.p
    esize = 2  # bf16
    mean = rows = items = 0.0
    for c, elems in phase_shares(em).items():
        k = program.kernels[em.sched.phases[c][0]]
        item = share_weights(k, 1, em.segments(k))  # an item's elements
        total, n = sum(elems), len(elems)
        mean += total / n * esize
        rows += max(elems) * esize
        items += -(-total // (item * n)) * item * esize  # the mean rounded up to an item
    return mean / rows, mean / items, (rows - mean) / (SM_GBPS * 1e3), (items - mean) / (SM_GBPS * 1e3)


if __name__ == "__main__":
    fields = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
    kinds = "--kinds" in sys.argv[1:]
    for name in (a for a in sys.argv[1:] if "=" not in a and a != "--kinds"):
        if kinds:
            print(f"{name}: kind, phases, a phase's mean and busiest share (KB), SMs at the busiest / taking part, "
                  f"the busiest's excess (us a token at {SM_GBPS:.0f} GB/s)")
            for kind, n, mean, top, at_top, part, us in by_kind(name, fields):
                print(f"  {kind:8} {n:3} x  mean {mean:7.1f}  busiest {top:7.1f}  {at_top:3} / {part:3} SMs  "
                      f"{us:6.1f} us")
            continue
        b_rows, b_items, us_rows, us_items = bound(name, fields)
        print(f"{name}: phase bound {b_rows:.4f} with rows, {b_items:.4f} with items; the busiest SMs' excess "
              f"{us_rows:.1f} us a token with rows, {us_items:.1f} with items")
