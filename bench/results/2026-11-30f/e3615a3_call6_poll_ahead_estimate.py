"""First-order estimate of persist_poll_ahead from e3615a3 call 6's traces (bench/RESULTS.md, eleventh session): each
tile that started after the previous phase ended sees its inputs 50 ns after its start instead of when it did; a
phase's saving is its old last done less its new one (nothing downstream moved). Run from the repository root."""
import sys, numpy as np, collections
sys.path.insert(0, "scripts")
import trace_summary as t
D = "bench/results/2026-11-30f/e3615a3_call6_traces/"
for f in ["llama-3.2-1b-0_mode_persistent.npz", "smollm2-135m-0_mode_persistent_persist_tagged_min_width_0.npz"]:
    ts, m, pos = t.load(D + f)
    col = t.columns(ts, m["trace_slots"]); sched = m["schedule"]
    ph = collections.defaultdict(list)
    for i, e in enumerate(sched):
        if col["start"][i] > 0: ph[e[3]].append(i)
    save = collections.defaultdict(float); prev_end = None
    for c in sorted(ph):
        rows = np.array(ph[c]); op = sched[rows[0]][1]
        if prev_end is not None:
            st, rd, dn = (col[k][rows] - prev_end for k in ("start", "ready", "done"))
            late = st >= 0
            cut = np.where(late, np.maximum(0, rd - st - 50), 0)  # ready 50 ns after start
            new = dn - cut
            save[t.kind(op, m["kernels"][sched[rows[0]][2]])] += (dn.max() - new.max()) / 1e3
        prev_end = col["done"][rows].max() if prev_end is None else max(prev_end, col["done"][rows].max())
    print(f, "first-order saving if late starters saw their inputs 50 ns after their start, us a token:",
          {k: round(v, 1) for k, v in save.items()}, "total", round(sum(save.values()), 1),
          "of", round(t.token_span(col), 1))
