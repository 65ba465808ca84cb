"""Where an SM's time goes in one layer of a traced token, against the time the memory needs for that layer's
weights at the SM's share of the read ceiling (bench/RESULTS.md, forty-eighth session). The dot products run at the
SM's clock, so they take the same time on an H100 and an H200, while the memory's time shrinks with its bandwidth:
where an SM's own work (dots, prologues, epilogues, attention) and its waits for inputs come near the memory's time,
the weight stream has no slack left to hide them in. The layer's kernels, their weight bytes and the layer count
come from the recording's manifest.
Usage (from the repository root): python3 bench/results/2026-12-05/s48_sm_budget.py CEILING_TBPS FILE.npz ...
(recordings that scripts/trace_summary.py reads; CEILING_TBPS: the read ceiling of the run that made them)"""
import collections
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts"))
import trace_summary  # noqa: E402


def budget(path: str, ceiling: float) -> None:
    ts, m, _ = trace_summary.load(path)
    kernels, sched, sms = m["kernels"], m["schedule"], m["sms"]
    in_layer = [bool(re.match(r"L\d+\.", k["name"])) for k in kernels]
    layers = sum(k["family"] == "attention" for k in kernels)
    weights = sum(k["bytes"] for k, x in zip(kernels, in_layer) if x and k["family"] == "gemv") / layers
    memory = weights / sms / (ceiling * 1e12 / sms) * 1e6  # us a layer at the ceiling
    kinds = {trace_summary.kind(op, kernels[k]) for _, op, k, *_ in sched if in_layer[k]}
    sums = trace_summary.kind_sums(trace_summary.columns(ts, m["trace_slots"]), sched, kernels)
    got = collections.Counter()
    for name in kinds:
        got.update({p: v / (sms * layers) for p, v in sums[name].items() if p in trace_summary.PARTS})
    own = got["prologue"] + got["dots"] + got["epilogue"] + got["release"]
    rate = weights / sms / got["dots"] / 1e3  # GB/s of weights an SM in the dots (attention has none)
    print(f"{os.path.basename(path)} at {ceiling} TB/s: us an SM a layer; memory {memory:.1f} (the layer's "
          f"{weights / 1e6:.1f} MB)")
    print(f"  dots {got['dots']:.1f} ({got['dots'] / own:.0%} of own work, {rate:.0f} GB/s of weights an SM)  "
          f"prologues {got['prologue']:.1f}  epilogues + releases {got['epilogue'] + got['release']:.1f}  "
          f"(own work {own:.1f}, {own / memory:.0%} of the memory's)")
    print(f"  waiting for inputs {got['waiting']:.1f}, for pages {got['pages']:.1f}; own work + inputs "
          f"{own + got['waiting']:.1f} ({(own + got['waiting']) / memory:.0%})")


if __name__ == "__main__":
    for f in sys.argv[2:]:
        budget(f, float(sys.argv[1]))
