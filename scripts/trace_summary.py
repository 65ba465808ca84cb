"""Where a persistent kernel's token goes: in-kernel timestamps of one decode step (Engine.trace).
Usage: python scripts/trace_summary.py ARTIFACT [POS]  (needs the GPU).

Two views: per kind of instruction, the SMs' time waiting and working; and along the chain of phases, for each
phase the hop (from the previous phase's last signal to this phase's first SM seeing its inputs) and the span
(from that first SM to this phase's last signal), averaged per kind."""
import collections
import sys

import numpy as np


def kind(opcode: str, kernel: dict) -> str:
    return opcode if opcode in ("attention", "select", "embed") else f"{kernel.get('family', '?')}:{kernel['name'].split('.')[-1]}"


def per_kind(ts: np.ndarray, sched: list, kernels: list, sms: int) -> list[str]:
    ok = ts[:, 0] > 0
    span = (ts[ok, 2].max() - ts[ok, 0].min()) / 1e3
    wait, work, count = collections.Counter(), collections.Counter(), collections.Counter()
    for (sm, opcode, k, *_), (a, b, c) in zip(sched, ts):
        if a == 0:
            continue
        name = kind(opcode, kernels[k])
        wait[name] += (b - a) / 1e3
        work[name] += (c - b) / 1e3
        count[name] += 1
    lines = [f"token span {span:.1f} us over {sms} SMs ({span * sms:.0f} SM-us); per instruction kind, SM-us summed "
             f"over the SMs (and per token per SM):",
             f"{'kind':<24}{'count':>7}{'waiting':>12}{'working':>12}{'work/SM':>10}"]
    for name in sorted(count, key=lambda n: -(wait[n] + work[n])):
        lines.append(f"{name:<24}{count[name]:>7}{wait[name]:>12.0f}{work[name]:>12.0f}{work[name] / sms:>10.1f}")
    tw, tk = sum(wait.values()), sum(work.values())
    lines.append(f"{'total':<24}{sum(count.values()):>7}{tw:>12.0f}{tk:>12.0f}  waiting {tw / (tw + tk) * 100:.0f}% "
                 f"of the SMs' time")
    return lines


def chain(ts: np.ndarray, sched: list, kernels: list) -> dict[str, tuple[int, float, float]]:
    """Per kind: (phases, mean hop us, mean span us) along the phases in order. A phase's hop runs from the
    previous phase's last signal to its own first inputs-ready, its span from there to its own last signal; a
    phase whose first SM saw its inputs before the previous one ended (they do not depend on each other) has a
    hop of 0."""
    phases: dict[int, list[int]] = collections.defaultdict(list)
    for i, entry in enumerate(sched):
        if ts[i, 0] > 0:
            phases[entry[3]].append(i)
    out: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    prev_end = None
    for c in sorted(phases):
        rows = ts[phases[c]]
        first_ready, last_done = rows[:, 1].min(), rows[:, 2].max()
        hop = 0.0 if prev_end is None else max(0.0, (first_ready - prev_end) / 1e3)
        _, opcode, k, _ = sched[phases[c][0]]
        out[kind(opcode, kernels[k])].append((hop, (last_done - first_ready) / 1e3))
        prev_end = last_done if prev_end is None else max(prev_end, last_done)
    return {name: (len(v), float(np.mean([h for h, _ in v])), float(np.mean([s for _, s in v]))) for name, v in out.items()}


def chain_lines(ch: dict[str, tuple[int, float, float]]) -> list[str]:
    lines = ["along the chain of phases (hop: previous phase's last signal to the first SM ready; span: first SM "
             "ready to last signal), per kind:",
             f"{'kind':<24}{'phases':>7}{'hop us':>9}{'span us':>9}{'hops':>9}{'spans':>9}"]
    for name, (n, hop, span) in sorted(ch.items(), key=lambda kv: -kv[1][0] * (kv[1][1] + kv[1][2])):
        lines.append(f"{name:<24}{n:>7}{hop:>9.2f}{span:>9.2f}{n * hop:>9.1f}{n * span:>9.1f}")
    hops, spans = sum(n * h for n, h, _ in ch.values()), sum(n * s for n, _, s in ch.values())
    lines.append(f"{'total':<24}{sum(n for n, _, _ in ch.values()):>7}{'':>18}{hops:>9.1f}{spans:>9.1f}  hops are "
                 f"{hops / (hops + spans) * 100:.0f}% of the chain")
    return lines


def summary(eng, pos: int) -> str:
    ts = eng.trace(pos).astype(np.int64)
    sched, kernels, sms = eng.manifest["schedule"], eng.manifest["kernels"], eng.manifest["sms"]
    lines = per_kind(ts, sched, kernels, sms)
    lines[0] = f"position {pos}: {lines[0]}"
    if sched and len(sched[0]) > 3:
        lines += ["", *chain_lines(chain(ts, sched, kernels))]
    return "\n".join(lines)


if __name__ == "__main__":
    import kiec
    eng = kiec.Engine(sys.argv[1])
    print(summary(eng, int(sys.argv[2]) if len(sys.argv) > 2 else 64))
