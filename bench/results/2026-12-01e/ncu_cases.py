"""Call 3's ncu samples (smollm2-135m persistent, 64 tokens) by dispatch case and part of a tile, % of all samples:
    python3 bench/results/2026-12-01e/ncu_cases.py
The instruction ranges were read off the listing (scripts/ncu_source.py FILE --range A B): each case runs from the
instruction after the previous case's signal (REDG) to its own; the cases told apart by their tile counts (the signal
executed 253,440 times = 3,960 tiles x 64 tokens; the output projection's 247,680 = 3,870, its spared SMs), the SiLU
epilogue's MUFU.EX2 (gate/up), and the copy prologue's LDG.128 -> STS.128 (output and down projections)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts"))
import ncu_source  # noqa: E402

CASES = {  # part: [first, end) instruction indices
    "QKV": dict(before=(3122, 3232), norm_and_wait=(3232, 3531), dots=(3531, 3743), epilogue_release=(3743, 3790)),
    "gate/up": dict(before=(3790, 3880), wait=(3880, 3882), norm=(3882, 3956), dots=(3956, 4233),
                    epilogue=(4233, 4505), release=(4505, 4520)),
    "O": dict(before=(4520, 4611), wait=(4611, 4613), copy=(4613, 4860), dots=(4860, 4975), release=(4975, 4990)),
    "down": dict(before=(7054, 7143), wait=(7143, 7145), copy=(7145, 7379), dots=(7379, 7509), release=(7509, 7524)),
}

if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    stalls, ins = ncu_source.load(os.path.join(here, "call3_ncu_smollm2-135m-persistent_source.csv.gz"))
    total = sum(i["samples"] for i in ins)
    for case, parts in CASES.items():
        cells = [f"{part} {100 * sum(i['samples'] for i in ins[a:b]) / total:.2f}" for part, (a, b) in parts.items()]
        print(f"{case:8s} " + ", ".join(cells))
