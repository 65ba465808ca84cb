"""The thirty-third session's view of the thirty-second's trace (llama-3.2-1b, position 64, default):
    mkdir -p /tmp/tr && tar xf bench/results/2026-12-04/s32_call2_traces.tar -C /tmp/tr
    python3 bench/results/2026-12-04/s33_last_sm_ready.py /tmp/tr/traces/llama-3.2-1b-0_mode_persistent.npz
For 20 consecutive phases from the 21st in time order: the SM whose tile ended the phase last, its next tile's start
and inputs seen (ready) after that end, against the next phase's median tile's ready, and when that SM's next tile
and the next phase end (us after the phase's end)."""
import collections
import json
import sys

import numpy as np

z = np.load(sys.argv[1], allow_pickle=True)
ts = z["ts"].astype(np.int64)
sched = json.loads(str(z["manifest"]))["schedule"]
sm = np.array([int(s[0]) for s in sched])
ph = np.array([int(s[3]) for s in sched])
START, READY, DONE = 0, 1, 4
rows = collections.defaultdict(list)
by_sm = collections.defaultdict(list)
for i in range(len(sched)):
    if ts[i, START]:
        rows[ph[i]].append(i)
        by_sm[sm[i]].append(i)
after = {}
for lst in by_sm.values():
    lst.sort(key=lambda i: ts[i, START])
    after.update(zip(lst, lst[1:]))
order = sorted(rows, key=lambda p: ts[rows[p], START].min())
for p, q in zip(order[20:40], order[21:41]):
    last = max(rows[p], key=lambda i: ts[i, DONE])
    end, nxt = ts[last, DONE], after.get(last)
    if nxt is None:
        continue
    us = lambda v: (v - end) / 1e3  # noqa: E731
    print(f"phase {p:3d}: last SM's next tile start {us(ts[nxt, START]):5.2f} ready {us(ts[nxt, READY]):5.2f} | next "
          f"phase's median ready {np.median(us(ts[rows[q], READY])):5.2f} | that tile done {us(ts[nxt, DONE]):6.2f}, "
          f"next phase's last {us(ts[rows[q], DONE].max()):6.2f}")
