"""Where a persistent kernel's token goes: in-kernel timestamps of one decode step (Engine.trace), summed per
kind of instruction. Usage: python scripts/trace_summary.py ARTIFACT [POS]  (needs the GPU)."""
import collections
import sys

import numpy as np

import kiec


def summary(eng: kiec.Engine, pos: int) -> str:
    ts = eng.trace(pos).astype(np.int64)
    sched = eng.manifest["schedule"]
    kernels = eng.manifest["kernels"]
    ok = ts[:, 0] > 0
    t0, t1 = ts[ok, 0].min(), ts[ok, 2].max()
    span = (t1 - t0) / 1e3
    wait, work, count = collections.Counter(), collections.Counter(), collections.Counter()
    for (sm, opcode, k), (a, b, c) in zip(sched, ts):
        if a == 0:
            continue
        fam = kernels[k].get("family", "?")
        name = opcode if opcode in ("attention", "combine", "select", "embed") else f"{fam}:{kernels[k]['name'].split('.')[-1]}"
        wait[name] += (b - a) / 1e3
        work[name] += (c - b) / 1e3
        count[name] += 1
    sms = eng.manifest["sms"]
    lines = [f"position {pos}: token span {span:.1f} us over {sms} SMs ({span * sms:.0f} SM-us); per instruction kind, "
             f"SM-us summed over the SMs (and per token per SM):",
             f"{'kind':<24}{'count':>7}{'waiting':>12}{'working':>12}{'work/SM':>10}"]
    for name in sorted(count, key=lambda n: -(wait[n] + work[n])):
        lines.append(f"{name:<24}{count[name]:>7}{wait[name]:>12.0f}{work[name]:>12.0f}{work[name] / sms:>10.1f}")
    tw, tk = sum(wait.values()), sum(work.values())
    lines.append(f"{'total':<24}{sum(count.values()):>7}{tw:>12.0f}{tk:>12.0f}  waiting {tw / (tw + tk) * 100:.0f}% "
                 f"of the SMs' time")
    return "\n".join(lines)


if __name__ == "__main__":
    eng = kiec.Engine(sys.argv[1])
    print(summary(eng, int(sys.argv[2]) if len(sys.argv) > 2 else 64))
