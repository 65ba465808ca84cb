"""Where the output projection's phase ends, with and without persist_attn_consumer_merges (forty-seventh session):
per layer, from QKV's last signal, the output projection's median x ready and last signal, and gate/up's last signal,
mean us over the layers. Usage (from the repository root, after `tar xf` of s47_call4_variants_traces.tar):
    python3 bench/results/2026-12-05/s47_o_end.py FILE.npz ..."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts"))
import trace_summary  # noqa: E402

for path in sys.argv[1:]:
    ts, manifest, pos = trace_summary.load(path)
    col = trace_summary.columns(ts, manifest["trace_slots"])
    sched = manifest["schedule"]
    every = trace_summary.phase_rows(col, sched)
    x_med, o_end, up_end = [], [], []
    # attention phase c: c - 1 is QKV, c + 1 the output projection, c + 2 gate/up
    for c in trace_summary.phase_rows(col, sched, "attention"):
        origin = col["done"][every[c - 1]].max()
        x_med.append((np.median(col["x_ready"][every[c + 1]]) - origin) / 1e3)
        o_end.append((col["done"][every[c + 1]].max() - origin) / 1e3)
        up_end.append((col["done"][every[c + 2]].max() - origin) / 1e3)
    print(f"{os.path.basename(path)}: token {trace_summary.token_span(col):.1f} us; after QKV's last signal, the "
          f"output projection's median x {np.mean(x_med):.2f}, its last signal {np.mean(o_end):.2f}, gate/up's last "
          f"signal {np.mean(up_end):.2f} us")
