"""What whole-row GEMV shares cost against shares to the row segment, by arithmetic on the persistent schedule (no
GPU): for each GEMV phase, the busiest SM's weight bytes over the phase's mean, summed over a token, and the same
if the phase's bytes were dealt in items (row segments, gemv_tile's SEGS) instead of rows.
    python3 scripts/share_bound.py llama-3.2-1b [qwen3-1.7b ...] [field=value ...]
Prints per model: the phase bound (mean over busiest, summed over the phases: what the memory could reach if each
phase ended when its busiest SM did) with rows and with items, and the busiest SMs' excess bytes over the mean in us
at an SM's share of a 4.5 TB/s ceiling (34 GB/s). A bound, not a timing: stalls and the chain are not modelled.
"With rows" is the schedule as dealt, so with persist_item_shares=1 its residual GEMVs' shares are items already."""
import sys

from kiec.codegen import targets
from kiec.codegen.persistent import _PersistentEmitter
from kiec.ir.passes.persistent import share_items, share_weights
from kiec.ir.passes.program import GemvKernel

import kiec
from kiec.build import pipeline

SM_GBPS = 34.0


def emitter(name: str, fields: dict[str, str] | None = None) -> _PersistentEmitter:
    """The persistent emitter of a model at the sm_90 target with `fields` replaced: its schedule (em.sched) without
    emitting the sources (scripts/item_share_tiles.py too)."""
    program = pipeline.run(kiec.load(name, dtype="bf16", max_seq_len=512).graph, None)
    return _PersistentEmitter(program, "bf16", 512, targets.with_fields(targets.TARGETS["sm_90"], fields or {}))


def bound(name: str, fields: dict[str, str] | None = None) -> tuple[float, float, float, float]:
    em = emitter(name, fields)
    program = em.p
    esize = 2  # bf16
    shares: dict[int, list[int]] = {}
    for lst in em.sched.lists:
        for ins in lst:
            if isinstance(program.kernels[ins.kernel], GemvKernel):
                segs = em.sched.item_segs.get(ins.kernel, 1)
                shares.setdefault(ins.counter, []).append(share_weights(program.kernels[ins.kernel],
                                                                        share_items(ins, segs), segs))
    mean = rows = items = 0.0
    for c, elems in shares.items():
        k = program.kernels[em.sched.phases[c][0]]
        item = share_weights(k, 1, em.segments(k))  # an item's elements
        total, n = sum(elems), len(elems)
        mean += total / n * esize
        rows += max(elems) * esize
        items += -(-total // (item * n)) * item * esize  # the mean rounded up to an item
    return mean / rows, mean / items, (rows - mean) / (SM_GBPS * 1e3), (items - mean) / (SM_GBPS * 1e3)


if __name__ == "__main__":
    fields = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
    for name in (a for a in sys.argv[1:] if "=" not in a):
        b_rows, b_items, us_rows, us_items = bound(name, fields)
        print(f"{name}: phase bound {b_rows:.4f} with rows, {b_items:.4f} with items; the busiest SMs' excess "
              f"{us_rows:.1f} us a token with rows, {us_items:.1f} with items")
