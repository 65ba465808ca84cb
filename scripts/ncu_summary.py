"""Sum an ncu --csv per-kernel report by kernel family: time, DRAM bytes read and GB/s for each."""
import csv
import re
import sys
from collections import defaultdict


def main(path: str) -> None:
    with open(path) as fh:
        lines = [ln for ln in fh if ln.startswith('"')]
    rows = list(csv.DictReader(lines))
    per = defaultdict(lambda: defaultdict(float))  # kernel id -> metric -> value
    names = {}
    for r in rows:
        key = r["ID"]
        # the template instance (K, epilogue, ... for a GEMV) without the parameter list
        names[key] = re.sub(r"\(.*", "", r["Kernel Name"]).replace("void ", "").replace("__nv_bfloat16", "bf16")
        unit = r.get("Metric Unit", "")
        v = float(r["Metric Value"].replace(",", ""))
        scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "byte": 1.0,
                 "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}[unit]
        per[key][r["Metric Name"]] = v * scale
    fam = defaultdict(lambda: [0, 0.0, 0.0])
    for key, m in per.items():
        f = fam[names[key]]
        f[0] += 1
        f[1] += m.get("gpu__time_duration.sum", 0.0)
        f[2] += m.get("dram__bytes_read.sum", 0.0)
    total = sum(f[1] for f in fam.values())
    print(f"{'kernel':<64}{'count':>6}{'total us':>11}{'us each':>9}{'MB each':>9}{'GB/s':>8}")
    for name, (n, us, b) in sorted(fam.items(), key=lambda kv: -kv[1][1]):
        print(f"{name[:63]:<64}{n:>6}{us:>11.1f}{us / n:>9.2f}{b / n / 1e6:>9.2f}{b / (us * 1e-6) / 1e9 if us else 0:>8.0f}")
    print(f"{'all kernels':<64}{sum(f[0] for f in fam.values()):>6}{total:>11.1f}")


if __name__ == "__main__":
    main(sys.argv[1])
