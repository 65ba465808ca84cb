"""Arithmetic on e3615a3 call 6's traces (bench/RESULTS.md, eleventh session), run from the repository root:
    python3 bench/results/2026-11-30f/e3615a3_call6_analysis.py
last_sm: the SM whose tile ended each phase, its next tile's start, inputs ready, x ready and done after that end,
and how often it had the next phase's last x. poll_ahead: first-order estimate of persist_poll_ahead, each tile that
started after the previous phase ended seeing its inputs 50 ns after its start instead of when it did; a phase's
saving is its old last done less its new one (nothing downstream moved)."""
import sys, numpy as np, collections
sys.path.insert(0, "scripts")
import trace_summary as t
D = "bench/results/2026-11-30f/e3615a3_call6_traces/"
FILES = ["llama-3.2-1b-0_mode_persistent.npz", "smollm2-135m-0_mode_persistent_persist_tagged_min_width_0.npz"]


def phases_of(f):
    ts, m, pos = t.load(D + f)
    col = t.columns(ts, m["trace_slots"]); sched = m["schedule"]
    ph = collections.defaultdict(list)
    for i, e in enumerate(sched):
        if col["start"][i] > 0: ph[e[3]].append(i)
    return col, sched, m, ph


def last_sm():
    for f in FILES:
        col, sched, m, ph = phases_of(f)
        same = tot = 0; gaps = collections.defaultdict(list)
        prev_last_sm = None; prev_end = None
        for c in sorted(ph):
            rows = np.array(ph[c]); op = sched[rows[0]][1]; name = t.kind(op, m["kernels"][sched[rows[0]][2]])
            if prev_last_sm is not None and op == "gemv":
                lastx_sm = sched[rows[col["x_ready"][rows].argmax()]][0]
                lastdone_sm = sched[rows[col["done"][rows].argmax()]][0]
                tot += 1; same += lastx_sm == prev_last_sm
                # the previous phase's last SM: its tile in this phase: ready, x_ready, done after prev_end
                r = [i for i in rows if sched[i][0] == prev_last_sm]
                if r:
                    i = r[0]
                    gaps[name].append(((col["start"][i]-prev_end)/1e3, (col["ready"][i]-prev_end)/1e3, (col["x_ready"][i]-prev_end)/1e3, (col["done"][i]-prev_end)/1e3, (col["done"][rows].max()-prev_end)/1e3, lastdone_sm == prev_last_sm))
            prev_last_sm = sched[rows[col["done"][rows].argmax()]][0]; prev_end = col["done"][rows].max()
        print(f, f"phases whose last x-ready SM was the previous phase's last SM: {same}/{tot}")
        for k, v in gaps.items():
            a = np.array(v, dtype=float)
            print(f"  {k:<12} prev-last SM's tile: start {a[:,0].mean():.2f} ready {a[:,1].mean():.2f} x {a[:,2].mean():.2f} done {a[:,3].mean():.2f} | phase last done {a[:,4].mean():.2f}; it is last again {a[:,5].mean()*100:.0f}%")


def poll_ahead():
    for f in FILES:
        col, sched, m, ph = phases_of(f)
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


if __name__ == "__main__":
    last_sm()
    poll_ahead()
