"""How an item-dealt GEMV's tiles spent their dot products, by what each one does in the hand-over (persist_item_shares):
publishes its lead row's sums (its share starts mid-row) or not, asks for the next tile's (ends mid-row) or not.
Usage: python3 scripts/item_share_tiles.py FILE.npz MODEL field=value ...   (a saved recording, no GPU; the fields the
recorded build was compiled with, persist_item_shares among them: the schedule is made again here for each tile's
head and tail, which the recording's manifest does not keep, and checked against the manifest's rows and items)
Prints, per item-dealt GEMV kind and kind of tile: tiles, and the mean and least us from x ready to the sums done less
the page waits (trace_summary.py's dots column, a tile at a time)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace_summary  # noqa: E402  (scripts beside this one)
from share_bound import emitter  # noqa: E402


def tile_shares(model: str, fields: dict[str, str]) -> list[tuple[int, int, int, int]]:
    """Each instruction's (lo, hi, head, tail) in the manifest's order (codegen/persistent.py writes its schedule SM
    by SM, each SM's list in order)."""
    return [(ins.lo, ins.hi, ins.head, ins.tail) for lst in emitter(model, fields).sched.lists for ins in lst]


def roles(ts: np.ndarray, slots: list[str], sched: list, kernels: list,
          shares: list[tuple[int, int, int, int]]) -> dict[tuple[str, str], list[float]]:
    """The dots (us) of each item-dealt GEMV kind's recorded tiles (a kind where some tile starts or ends mid-row),
    grouped by kind and role: "publishes" (head > 0) or "-", then "asks" (tail > 0) or "-". shares: tile_shares'."""
    if len(shares) != len(sched) or any(hi - lo != s[4] for (lo, hi, _, _), s in zip(shares, sched)):
        raise ValueError("the recording's schedule is not the one made again here (other fields or model?)")
    col = trace_summary.columns(ts, slots)
    kinds = [trace_summary.kind(opcode, kernels[k]) if opcode == "gemv" else None for _, opcode, k, *_ in sched]
    dealt = {kind for kind, (_, _, head, tail) in zip(kinds, shares) if kind and (head or tail)}
    groups: dict[tuple[str, str], list[float]] = {}
    for i, kind in enumerate(kinds):
        _, _, head, tail = shares[i]
        if kind not in dealt or col["start"][i] == 0:
            continue
        role = ("publishes" if head else "-") + ", " + ("asks" if tail else "-")
        dots = (col["sums_done"][i] - col["x_ready"][i] - col["page_wait"][i]) / 1e3
        groups.setdefault((kind, role), []).append(float(dots))
    return groups


def main(path: str, model: str, *changes: str) -> None:
    ts, m, _ = trace_summary.load(path)
    try:
        groups = roles(ts, m["trace_slots"], m["schedule"], m["kernels"],
                       tile_shares(model, dict(c.split("=", 1) for c in changes)))
    except ValueError as e:
        sys.exit(f"{path}: {e}")
    for (kind, role), v in sorted(groups.items()):
        print(f"{kind:<16} {role:<16} {len(v):>5} tiles  mean {np.mean(v):.2f} us  least {np.min(v):.2f}")


if __name__ == "__main__":
    main(*sys.argv[1:])
