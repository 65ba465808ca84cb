"""The fifty-eighth session's reading of its call-4 recordings (s58_call4_variants_traces.tar, untarred into a folder):
for each recording, the attention splits that took rows, mean us over them of their start to inputs ready (the tile's
work before its wait, and the wait), their start and inputs ready after the previous phase's (QKV's) last done, and
inputs ready to q rotated and the new row written (the sums_done stamp, persist_trace_attention's first).
    python3 bench/results/2026-12-06/s58_attention_start.py FOLDER"""
import glob
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "scripts"))
import trace_summary as ts  # noqa: E402  (scripts/trace_summary.py)

for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.npz"))):
    rec, manifest, _ = ts.load(path)
    col, sched = ts.columns(rec, manifest["trace_slots"]), manifest["schedule"]
    rows = [i for i in range(len(sched)) if ts.attention_stamped(col, sched, i)]
    phases = ts.phase_rows(col, sched)
    start, ready = [], []
    for i in rows:
        prev = phases[sched[i][3] - 1]  # (the phase before attention's: QKV)
        start.append((col["start"][i] - col["done"][prev].max()) / 1e3)
        ready.append((col["ready"][i] - col["done"][prev].max()) / 1e3)
    waited = (col["ready"][rows] - col["start"][rows]).mean() / 1e3
    q = (col["sums_done"][rows] - col["ready"][rows]).mean() / 1e3
    print(f"{os.path.basename(path)}: {len(rows)} splits; start to ready {waited:.2f}; after QKV's last done: start "
          f"{np.mean(start):.2f}, ready {np.mean(ready):.2f}, q rotated {np.mean(ready) + q:.2f} (ready to q {q:.2f})")
