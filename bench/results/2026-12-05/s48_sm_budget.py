"""Where an SM's time goes in one layer of a traced token, against the time the memory needs for that layer's
weights at the SM's share of the read ceiling (bench/RESULTS.md, forty-eighth session). The dot products run at the
SM's clock, so they take the same time on an H100 and an H200, while the memory's time shrinks with its bandwidth:
where an SM's own work (dots, prologues, epilogues, attention) and its waits for inputs come near the memory's time,
the weight stream has no slack left to hide them in.
Usage (from the repository root): python3 bench/results/2026-12-05/s48_sm_budget.py MODEL CEILING_TBPS FILE.npz
(a recording that scripts/trace_summary.py reads; CEILING_TBPS: the read ceiling of the run that made it)"""
import subprocess
import sys

SHAPES = {  # hidden, intermediate, query width, key/value width, layers
    "llama-3.2-1b": (2048, 8192, 2048, 512, 16),
    "qwen3-1.7b": (2048, 6144, 2048, 1024, 28),
    "llama-3.1-8b": (4096, 14336, 4096, 1024, 32),
}
LAYER_KINDS = ("gemv:qkv", "attention", "gemv:x_attn", "gemv:act", "gemv:x_mlp")


def per_kind(path: str) -> dict[str, list[float]]:
    """trace_summary.py's first view: SM-us a token per kind (waiting, prologue, pages, dots, epilogue, release)."""
    out = subprocess.run([sys.executable, "scripts/trace_summary.py", path], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    rows = {}
    for line in out[2:]:
        if line.startswith("total"):
            break
        p = line.split()
        rows[p[0]] = [float(x) if x != "-" else 0.0 for x in p[1:]]
    return rows


def main(model: str, ceiling: float, path: str) -> None:
    h, i, q, kv, layers = SHAPES[model]
    weights = ((q + 2 * kv) * h + h * q + 2 * i * h + h * i) * 2  # bf16 bytes of a layer's GEMVs
    memory = weights / 132 / (ceiling * 1e12 / 132) * 1e6  # us a layer at the ceiling
    rows = per_kind(path)
    n = 132 * layers
    got = {name: sum(rows[k][col] for k in LAYER_KINDS) / n for name, col in
           [("inputs", 1), ("prologue", 2), ("pages", 3), ("dots", 4), ("epilogue", 5), ("release", 6)]}
    own = got["prologue"] + got["dots"] + got["epilogue"] + got["release"]
    print(f"{model} at {ceiling} TB/s: us an SM a layer; memory {memory:.1f} (the layer's {weights / 1e6:.1f} MB)")
    print(f"  dots {got['dots']:.1f}  prologues {got['prologue']:.1f}  epilogues + releases "
          f"{got['epilogue'] + got['release']:.1f}  (own work {own:.1f}, {own / memory:.0%} of the memory's)")
    print(f"  waiting for inputs {got['inputs']:.1f}, for pages {got['pages']:.1f}; own work + inputs "
          f"{own + got['inputs']:.1f} ({(own + got['inputs']) / memory:.0%})")


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), sys.argv[3])
