"""A timing model of a persistent schedule: how long a token takes given what each part of a tile costs, so that
the next change can be chosen by what it would buy (no GPU needed).
    python3 scripts/time_model.py llama-3.2-1b [field=value ...]   (fields of Costs, e.g. epilogue_us=1.0)
Prints the modelled token time, the steady token's phases by kind (to set beside scripts/trace_summary.py's chain
view: hop + span), and, for each cost in turn halved (or the compute rate doubled, the ring doubled, the release
gone: persist_tagged), what the token would take.

The model: each SM runs its list in order; an instruction starts when the SM is free (plus one read of its
counters) and each phase it waits on has completed plus one hop; a GEMV tile then spends its prologue, consumes its
pages (each page no sooner than it has arrived, at the compute rate), and its epilogue. The SM's weight stream asks
for the pages of its list in order at its share of the memory ceiling, a page no sooner than the page a ring's
length before it was released; a page lands latency_us after its turn (it holds its slot meanwhile). An attention
split in use takes attention_us, one the context is too short for none; a phase completes when its last tile does.

The costs are fitted to the H200 recording of llama-3.2-1b at position 64 of the sixtieth session (3f1766d,
bench/results/2026-12-06/s60_call2_variants_traces.tar, in git at b295c94; trace_summary.py): the ceiling 4.51 TB/s over
132 SMs; the dots 101 GB/s an SM on the tensor cores (the GEMVs but QKV: 22,416 SM-us for 2.27 GB) and 48 on the FMA
tile (QKV, whose shares persist_mma_share_excess keeps off them: 4,174 SM-us for 0.20 GB); epilogue 0.22 us and release
0.09 a tile; the prologue 0.12 us + 0.28 a 1024 floats of x (qkv's K 2048 0.68 us, the down projection's K 8192 2.36);
the hop 0.36 us; attention_us 4.77 makes its phase 5.39 us against the recording's 5.43; latency_us 1.5 makes gate/up's
12.8 us against the recording's 12.81. The counter read of 0.7 us is still an assumed L2 round trip, not measured.
Against the recording's phases the model is short on QKV (3.72 us against 4.02) and the output projection (2.65 against
3.17). Against `kiec bench` on that H200 (sixtieth session, 3f1766d): llama-3.2-1b 635 vs 640 us, qwen3-1.7b 885 vs 967
(8% short), llama-3.1-8b 3619 vs 3650, smollm2-135m 323 vs 322: read its what-ifs as directions. (The fit before,
2026-11-30 on an earlier kernel: 65 GB/s, 2.2 us after the pages, a hop 0.6 us, attention 6.5 us, no latency, one dot
rate.) Fields of the sm_90 table among the arguments change the schedule modelled (its deal, which GEMVs take the tensor
cores)."""
from __future__ import annotations

import dataclasses
import difflib
import math
import sys

from kiec.codegen.targets import with_fields
from kiec.ir.passes.persistent import dealt_weights
from kiec.ir.passes.phases import Schedule
from kiec.ir.passes.program import AttentionKernel, GemvKernel
from kiec.ir.passes.simulate import split_rows


@dataclasses.dataclass(frozen=True)
class Costs:
    stream_gbps: float = 34.2  # an SM's weight stream: its share of the read ceiling (4.51 TB/s / 132)
    ring_pages: int = 12
    page_bytes: int = 16384
    compute_gbps: float = 101.0  # an SM's dot products over pages already in shared memory, on the tensor cores
    fma_gbps: float = 48.0  # the same on the FMA tile (the GEMVs persist_mma_rows does not take)
    # a GEMV tile after its pages: the epilogue, then the release (the barrier and the signal: 1.2-1.4 us in the
    # 3d07718 trace, thread 0's red.release waiting for the stores; 0.09 in the sixtieth session's, with the relaxed
    # counters of tagged outputs, persist_tagged, among the changes since)
    epilogue_us: float = 0.22
    release_us: float = 0.09
    hop_us: float = 0.36  # a phase's last signal to a waiting tile's start
    poll_us: float = 0.7  # a tile whose inputs are long there still reads its counters once (an L2 round trip)
    prologue_us: float = 0.12  # a GEMV's prologue: this, plus
    prologue_us_per_kfloat: float = 0.28  # this per 1024 floats of its x
    attention_us: float = 4.77  # an attention split in use, from its start to its phase's signal
    other_us: float = 1.0  # embedding, select and elementwise tiles
    # a page lands this long after its stream's turn to ask for it came (past its share of the ceiling): the memory's
    # latency under load, during which the page holds its ring slot but is not there to compute on
    latency_us: float = 1.5
    element_bytes: int = 2  # bf16 weights


def share_bytes(sched: Schedule, ins, c: Costs) -> int:
    """A GEMV instruction's weight bytes as dealt: its rows, or its items where the schedule deals it to the item (a
    row's segments, or a block's pages: persist_mma_item_shares)."""
    return dealt_weights(sched, ins) * c.element_bytes


def simulate(sched: Schedule, c: Costs, tokens: int = 3, pos0: int = 64, done: dict | None = None,
             fma: frozenset[int] = frozenset()) -> list[float]:
    """Microseconds each token's select completes after the previous one's (the first: after time 0). `done`, if
    given, is filled with when each (token, phase) had its last signal; `fma`: the GEMVs (by kernel index) whose dots
    run at fma_gbps, not compute_gbps."""
    kernels, sms = sched.program.kernels, len(sched.lists)
    free = [0.0] * sms  # when each SM's compute warps are next free
    arrived: list[list[float]] = [[] for _ in range(sms)]  # per SM: when each page of its stream landed
    released: list[list[float]] = [[] for _ in range(sms)]  # per SM: when its compute warps let each page go
    done = {} if done is None else done  # (token, phase) -> when its last tile signalled

    asked = [0.0] * sms  # per SM: when its stream asked for its latest page
    page_us = c.page_bytes / c.stream_gbps / 1e3

    def page_lands(s: int, n: int) -> float:
        while len(arrived[s]) <= n:  # the stream runs ahead of the compute warps, a ring's length at most
            j = len(arrived[s])
            asked[s] = max(asked[s] + page_us if j else 0.0,
                           released[s][j - c.ring_pages] if j >= c.ring_pages else 0.0)
            arrived[s].append(asked[s] + page_us + c.latency_us)
        return arrived[s][n]

    by_phase: dict[int, list[tuple[int, object]]] = {}
    for s, lst in enumerate(sched.lists):
        for ins in lst:
            by_phase.setdefault(ins.counter, []).append((s, ins))
    ends = []
    for t in range(tokens):
        for phase in range(len(sched.phases)):
            finish = 0.0
            for s, ins in by_phase.get(phase, []):
                ready = free[s] + (c.poll_us if ins.waits else 0.0)
                for w in ins.waits:
                    key = (t - 1 if w.previous else t, w.counter)
                    if key in done:
                        ready = max(ready, done[key] + c.hop_us)
                k = kernels[ins.kernel]
                if isinstance(k, GemvKernel) and ins.opcode == "gemv":
                    now = ready + c.prologue_us + c.prologue_us_per_kfloat * k.k / 1024
                    size = share_bytes(sched, ins, c)
                    gbps = c.fma_gbps if ins.kernel in fma else c.compute_gbps
                    for p in range(math.ceil(size / c.page_bytes)):
                        n = len(released[s])
                        part = min(c.page_bytes, size - p * c.page_bytes)
                        now = max(now, page_lands(s, n)) + part / gbps / 1e3
                        released[s].append(now)
                    end = now + c.epilogue_us + c.release_us
                elif isinstance(k, AttentionKernel):
                    splits = sched.splits[ins.kernel]
                    active = len(split_rows(k, pos0 + t, splits, sched.min_keys, sched.solo_keys))
                    end = ready + (c.attention_us if ins.tile % splits < active else 0.0)
                else:
                    end = ready + c.other_us
                free[s] = end
                finish = max(finish, end)
            done[(t, phase)] = finish
        ends.append(done[(t, len(sched.phases) - 1)])
    return [b - a for a, b in zip([0.0] + ends, ends)]


def kind_of(sched: Schedule, phase: int) -> str:
    """A phase's kind as scripts/trace_summary.py names it (gemv:qkv, attention, ...)."""
    kernel, opcode = sched.phases[phase]
    k = sched.program.kernels[kernel]
    return f"gemv:{k.name.split('.')[-1]}" if isinstance(k, GemvKernel) and opcode == "gemv" else opcode


def phase_spans(sched: Schedule, c: Costs, fma: frozenset[int] = frozenset()) -> dict[str, tuple[int, float]]:
    """The steady token's phases by kind: (how many, mean us from the previous phase's last signal to this one's),
    trace_summary's chain view's hop + span."""
    done: dict = {}
    t = len(simulate(sched, c, done=done, fma=fma)) - 1
    spans: dict[str, list[float]] = {}
    for phase in range(len(sched.phases)):
        before = done[(t, phase - 1)] if phase else done[(t - 1, len(sched.phases) - 1)]
        spans.setdefault(kind_of(sched, phase), []).append(done[(t, phase)] - before)
    return {kind: (len(v), sum(v) / len(v)) for kind, v in spans.items()}


def token_us(sched: Schedule, c: Costs, fma: frozenset[int] = frozenset()) -> float:
    """The steady token: the last of three."""
    return simulate(sched, c, fma=fma)[-1]


def model_schedule(name: str, table: dict[str, str] | None = None) -> tuple[Schedule, frozenset[int]]:
    """The schedule kiec compile builds for a registry model on one H200 (sm_90's table, with `table`'s fields
    replaced), and its GEMVs on the FMA tile (those persist_mma_rows does not take)."""
    import kiec
    from kiec.codegen.persistent import _PersistentEmitter
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    prog = pipeline.run(kiec.load(name, dtype="bf16", max_seq_len=512).graph)
    emitter = _PersistentEmitter(prog, "bf16", 512, with_fields(target("sm_90"), table or {}))
    fma = frozenset(i for i, k in enumerate(prog.kernels) if isinstance(k, GemvKernel) and i not in emitter.mma)
    return emitter.sched, fma


def main(name: str, changes: list[str]) -> None:
    """changes: `field=value`, a field of Costs or else of the sm_90 table (a schedule's: persist_mma_rows, ...)."""
    from kiec.codegen.targets import TargetParams
    pairs = dict(x.split("=", 1) for x in changes)
    costs, table = ({f.name for f in dataclasses.fields(c)} for c in (Costs, TargetParams))
    for k in set(pairs) - costs - table:
        close = difflib.get_close_matches(k, costs | table, n=3)
        raise ValueError(f"{k!r} is no field of Costs nor of the sm_90 table"
                         + (f" (did you mean {', '.join(close)}?)" if close else ""))
    sched, fma = model_schedule(name, {k: v for k, v in pairs.items() if k not in costs})
    c = with_fields(Costs(), {k: v for k, v in pairs.items() if k in costs})
    base = token_us(sched, c, fma)
    print(f"{name}: {base:.0f} us a token modelled ({1e6 / base:.0f} tok/s)")
    kinds = sorted({kind_of(sched, p) for p, (k, op) in enumerate(sched.phases) if k in fma and op == "gemv"})
    print(f"  on the FMA tile: {', '.join(kinds) or 'none'}")
    print("  per phase, from the previous phase's last signal to its own, us (trace_summary.py: hop + span):")
    for kind, (n, us) in sorted(phase_spans(sched, c, fma).items(), key=lambda kv: -kv[1][0] * kv[1][1]):
        print(f"    {kind:<14} {n:>3} x {us:6.2f} = {n * us:6.1f}")
    whatif = {"release_us": 0.0, "epilogue_us": c.epilogue_us / 2, "hop_us": c.hop_us / 2, "poll_us": c.poll_us / 2,
              "attention_us": c.attention_us / 2,
              "prologue_us_per_kfloat": c.prologue_us_per_kfloat / 2, "compute_gbps": c.compute_gbps * 2,
              "fma_gbps": c.fma_gbps * 2, "ring_pages": c.ring_pages * 2, "latency_us": c.latency_us / 2}
    for field, value in whatif.items():
        t = token_us(sched, dataclasses.replace(c, **{field: value}), fma)
        print(f"  {field} {getattr(c, field)} -> {value}: {t:.0f} us ({base / t:.2f}x)")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
