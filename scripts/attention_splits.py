"""An attention-traced recording's splits by their rows at the traced position (persist_trace_attention): the
manifest names no split, so the schedule is made again here (share_bound.py's emitter) for each instruction's
(KV head, split) tile, and each split's rows come from simulate.split_rows, as split_range_of deals them.
Usage: python3 scripts/attention_splits.py FILE.npz MODEL [field=value ...]   (a saved recording, no GPU; the fields
the recorded build was compiled with that move the schedule)
Prints, per kind of split (its rows, and whether it holds the new row): splits, each of trace_summary.py's attention
cuts as mean / max us, and in how many phases such a split stored the last partial and gave the last signal."""
import os
import sys

import numpy as np
from kiec.ir.passes.simulate import split_rows

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace_summary  # (scripts beside this one, on the path above)
from share_bound import emitter


def split_roles(em, sched: list, pos: int) -> list[tuple[int, bool] | None]:
    """Each manifest row's (rows, holds the new row) at `pos` where it is an attention split with rows, else None.
    Checks that the emitter's schedule is the recording's (opcode, kernel and phase of every instruction)."""
    made = [(sm, ins) for sm, lst in enumerate(em.sched.lists) for ins in lst]
    if len(made) != len(sched) or any([sm, ins.opcode, ins.kernel, ins.counter] != s[:4]
                                      for (sm, ins), s in zip(made, sched)):
        raise ValueError("the recording's schedule is not the one made again here (other fields or model?)")
    out: list[tuple[int, bool] | None] = []
    for _, ins in made:
        if ins.opcode != "attention":
            out.append(None)
            continue
        splits = em.sched.splits[ins.kernel]
        ranges = split_rows(em.p.kernels[ins.kernel], pos, splits, em.sched.min_keys, em.sched.solo_keys)
        s = ins.tile % splits
        out.append((ranges[s][1] - ranges[s][0], s == len(ranges) - 1) if s < len(ranges) else None)
    return out


def by_role(ts: np.ndarray, slots: list[str], sched: list, roles: list) -> dict[tuple[int, bool], dict]:
    """Per (rows, holds the new row): the cuts' durations (us) of its stamped splits, and how many phases' last
    partial (latest x_ready) and last signal (latest done) were such a split's."""
    col = trace_summary.columns(ts, slots)
    out: dict[tuple[int, bool], dict] = {}
    for rows in trace_summary.phase_rows(col, sched, "attention").values():
        stamped = [i for i in rows if roles[i] and trace_summary.attention_stamped(col, sched, i)]
        if not stamped:
            continue
        for i in stamped:
            g = out.setdefault(roles[i], {"cuts": [], "last_partial": 0, "last_signal": 0})
            g["cuts"].append([(col[b][i] - col[a][i]) / 1e3 for _, a, b in trace_summary.ATTENTION_CUTS])
        out[roles[max(stamped, key=lambda i: col["x_ready"][i])]]["last_partial"] += 1
        out[roles[max(stamped, key=lambda i: col["done"][i])]]["last_signal"] += 1
    return out


def main(path: str, model: str, *changes: str) -> None:
    ts, m, pos = trace_summary.load(path)
    try:
        roles = split_roles(emitter(model, dict(c.split("=", 1) for c in changes)), m["schedule"], pos)
    except ValueError as e:
        sys.exit(f"{path}: {e}")
    groups = by_role(ts, m["trace_slots"], m["schedule"], roles)
    if not groups:
        sys.exit(f"{path}: no attention split stamped its parts (a build without persist_trace_attention?)")
    names = [name for name, _, _ in trace_summary.ATTENTION_CUTS]
    print(f"position {pos}: attention splits by their rows, us (mean / max): " + "; ".join(names))
    for (rows, new), g in sorted(groups.items()):
        d = np.array(g["cuts"])
        cuts = "  ".join(f"{d[:, c].mean():.2f} / {d[:, c].max():.2f}" for c in range(len(names)))
        print(f"  {rows:>5} rows{' (new row)' if new else '':<10} {len(d):>5} splits  {cuts}  last partial in "
              f"{g['last_partial']} phases, last signal in {g['last_signal']}")


if __name__ == "__main__":
    main(*sys.argv[1:])
