"""Arithmetic, no GPU: the largest share of a layer's GEMV weight bytes one SM (of 132) streams, over the mean, when
a GEMV's rows are dealt as today (whole rows, a contiguous range a tile; gate/up a pair of rows an output) and when
16-row blocks are cut into 512-element K slices (16 KB units, the 16-row swizzled tensor-core way's pages) and those
units are dealt instead. A block split between tiles needs its partial sums completed before its epilogue (not
counted here). Shapes from the models' configs.
    python3 bench/results/2026-12-06/s51_deal_units.py"""
import math

SMS = 132
MODELS = {  # hidden, q heads, kv heads, head dim, intermediate
    "llama-3.2-1b": (2048, 32, 8, 64, 8192),
    "qwen3-1.7b": (2048, 16, 8, 128, 6144),
    "llama-3.1-8b": (4096, 32, 8, 128, 14336),
}

for name, (h, q, kv, hd, inter) in MODELS.items():
    gemvs = {"qkv": ((q + 2 * kv) * hd, h, 1), "o": (h, q * hd, 1), "gate/up": (inter, h, 2), "down": (h, inter, 1)}
    cells, rows_max, units_max, mean_sum = [], 0, 0, 0
    for kind, (n, k, per_out) in gemvs.items():
        mean = n * per_out * k * 2 / SMS
        rows = math.ceil(n / SMS) * per_out * k * 2
        units = math.ceil(math.ceil(n * per_out / 16) * math.ceil(k / 512) / SMS) * 16 * 512 * 2
        rows_max, units_max, mean_sum = rows_max + rows, units_max + units, mean_sum + mean
        cells.append(f"{kind} rows +{rows / mean * 100 - 100:.1f}% units +{units / mean * 100 - 100:.1f}%")
    print(f"{name}: " + "; ".join(cells) + f" | the layer: rows +{rows_max / mean_sum * 100 - 100:.1f}%, "
          f"units +{units_max / mean_sum * 100 - 100:.1f}%")
