"""Call 16's ncu samples (smollm2-135m persistent at f4d0878 on an H100, 64 tokens) by part of the kernel, % of all
samples, with the part's segments (scripts/ncu_source.py: segments) of 0.5% or more:
    python3 bench/results/2026-12-06/s57_ncu_cases.py
The parts' ranges were read off the listing (scripts/ncu_source.py FILE --range A B, --segments): the cases told apart
by their signals' counts (REDG/ATOMG executed 253,440 times = 3,960 tiles x 64 tokens; the output projection's
247,680 = 3,870), the norm's MUFU.RSQ (QKV, gate/up), the SiLU's MUFU.EX2 (gate/up), the pages each tile waits for
(SYNCS.PHASECHK: 2 a gate/up tile), the tagged-pair copies' LDG.E.128.STRONG (output and down projections) and the
argmax's ATOMG.MAX (the LM head)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts"))
import ncu_source  # noqa: E402

PARTS = {  # [first, end) instruction indices, each a cut of the segments too
    "dispatch (instruction staging, the case's jump)": (193, 313),
    "attention (its tile, arrival and rare combine)": (313, 2449),
    "QKV": (2449, 2956),
    "gate/up": (2956, 3708),
    "output projection": (3708, 4135),
    "LM head": (4135, 4790),
    "down projection": (6106, 6557),
    "streaming thread": (6557, 7000),
}

if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    stalls, ins = ncu_source.load(os.path.join(here, "s57_call16_ncu_smollm2-135m-persistent_source.csv.gz"))
    total = sum(i["samples"] for i in ins)
    segs = ncu_source.segments(ins, stalls, also=tuple(k for ab in PARTS.values() for k in ab))
    for name, (a, b) in PARTS.items():
        share = 100 * sum(i["samples"] for i in ins[a:b]) / total
        mine = [f"{lo}-{hi} {pct:.1f} ({top.split(':')[0]})" for lo, hi, pct, _, top in segs if a <= lo < b]
        print(f"{name:50s} {share:5.1f}%  " + ", ".join(mine))
