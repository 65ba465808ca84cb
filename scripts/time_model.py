"""A timing model of a persistent schedule: how long a token takes given what each part of a tile costs, so that
the next change can be chosen by what it would buy (no GPU needed).
    python3 scripts/time_model.py llama-3.2-1b [field=value ...]   (fields of Costs, e.g. epilogue_us=1.0)
Prints the modelled token time and, for each cost in turn halved (or the compute rate doubled, the ring doubled,
the release gone: persist_tagged), what the token would take.

The model: each SM runs its list in order; an instruction starts when the SM is free (plus one read of its
counters) and each phase it waits on has completed plus one hop; a GEMV tile then spends its prologue, consumes its pages (each page no sooner than it
has arrived, at the compute rate), and its epilogue. The SM's weight stream fetches the pages of its list in order
at its share of the memory ceiling, a page no sooner than the page a ring's length before it was released. An
attention split in use takes attention_us, one the context is too short for none; a phase completes when its last
tile does. The costs' defaults are fitted to the llama-3.2-1b trace of 2026-11-30 (856b915, bench/RESULTS.md):
the GEMVs' time after their prologue is bytes / 65 GB/s + 2.2 us, a hop 0.6 us, a layer's attention phase 6.5 us;
the counter read of 0.7 us is an assumed L2 round trip under load, not measured. Against the measured tokens
(bench/RESULTS.md, 2026-11-30) it is 13% short on llama-3.2-1b (732 vs 838 us), 16% on qwen3-1.7b (1085 vs 1285),
15% on llama-3.1-8b (3522 vs 4160) and 6% long on smollm2-135m (638 vs 602): read its what-ifs as directions."""
from __future__ import annotations

import dataclasses
import math
import sys

from kiec.codegen.targets import with_fields
from kiec.ir.passes.persistent import share_weights
from kiec.ir.passes.phases import Schedule
from kiec.ir.passes.program import AttentionKernel, GemvKernel
from kiec.ir.passes.simulate import split_rows


@dataclasses.dataclass(frozen=True)
class Costs:
    stream_gbps: float = 34.9  # an SM's weight stream: its share of the read ceiling (4.61 TB/s / 132)
    ring_pages: int = 12
    page_bytes: int = 16384
    compute_gbps: float = 65.0  # an SM's dot products over pages already in shared memory
    # a GEMV tile after its pages: 2.2 us fitted, of which the 3d07718 trace puts 1.2-1.4 in the release (the
    # barrier and thread 0's red.release, waiting for the stores' acknowledgement; persist_tagged's relaxed
    # counters go without it) and the rest in the epilogue
    epilogue_us: float = 0.9
    release_us: float = 1.3
    hop_us: float = 0.6  # a phase's last signal to a waiting tile's start
    poll_us: float = 0.7  # a tile whose inputs are long there still reads its counters once (an L2 round trip)
    prologue_us: float = 0.14  # a GEMV's prologue: this, plus
    prologue_us_per_kfloat: float = 0.22  # this per 1024 floats of its x
    attention_us: float = 6.5  # an attention split in use, from its start to its phase's signal
    other_us: float = 1.0  # embedding, select and elementwise tiles
    element_bytes: int = 2  # bf16 weights


def gemv_bytes(k: GemvKernel, rows: int, c: Costs) -> int:
    return share_weights(k, rows) * c.element_bytes


def simulate(sched: Schedule, c: Costs, tokens: int = 3, pos0: int = 64) -> list[float]:
    """Microseconds each token's select completes after the previous one's (the first: after time 0)."""
    kernels, sms = sched.program.kernels, len(sched.lists)
    free = [0.0] * sms  # when each SM's compute warps are next free
    arrived: list[list[float]] = [[] for _ in range(sms)]  # per SM: when each page of its stream landed
    released: list[list[float]] = [[] for _ in range(sms)]  # per SM: when its compute warps let each page go
    done: dict[tuple[int, int], float] = {}  # (token, phase) -> when its last tile signalled

    def page_lands(s: int, n: int) -> float:
        while len(arrived[s]) <= n:  # the stream runs ahead of the compute warps, a ring's length at most
            j = len(arrived[s])
            start = max(arrived[s][-1] if j else 0.0, released[s][j - c.ring_pages] if j >= c.ring_pages else 0.0)
            arrived[s].append(start + c.page_bytes / c.stream_gbps / 1e3)
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
                    size = gemv_bytes(k, ins.hi - ins.lo, c)
                    for p in range(math.ceil(size / c.page_bytes)):
                        n = len(released[s])
                        part = min(c.page_bytes, size - p * c.page_bytes)
                        now = max(now, page_lands(s, n)) + part / c.compute_gbps / 1e3
                        released[s].append(now)
                    end = now + c.epilogue_us + c.release_us
                elif isinstance(k, AttentionKernel):
                    splits = sched.splits[ins.kernel]
                    active = len(split_rows(k, pos0 + t, splits, sched.min_keys))
                    end = ready + (c.attention_us if ins.tile % splits < active else 0.0)
                else:
                    end = ready + c.other_us
                free[s] = end
                finish = max(finish, end)
            done[(t, phase)] = finish
        ends.append(done[(t, len(sched.phases) - 1)])
    return [b - a for a, b in zip([0.0] + ends, ends)]


def token_us(sched: Schedule, c: Costs) -> float:
    """The steady token: the last of three."""
    return simulate(sched, c)[-1]


def model_schedule(name: str) -> Schedule:
    """The schedule kiec compile builds for a registry model on one H200 (sm_90's table)."""
    import kiec
    from kiec.codegen.persistent import _PersistentEmitter
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    prog = pipeline.run(kiec.load(name, dtype="bf16", max_seq_len=512).graph)
    return _PersistentEmitter(prog, "bf16", 512, target("sm_90")).sched


def main(name: str, changes: list[str]) -> None:
    sched = model_schedule(name)
    c = with_fields(Costs(), dict(x.split("=") for x in changes))
    base = token_us(sched, c)
    print(f"{name}: {base:.0f} us a token modelled ({1e6 / base:.0f} tok/s)")
    whatif = {"release_us": 0.0, "epilogue_us": c.epilogue_us / 2, "hop_us": c.hop_us / 2, "poll_us": c.poll_us / 2,
              "attention_us": c.attention_us / 2,
              "prologue_us_per_kfloat": c.prologue_us_per_kfloat / 2, "compute_gbps": c.compute_gbps * 2,
              "ring_pages": c.ring_pages * 2}
    for field, value in whatif.items():
        t = token_us(sched, dataclasses.replace(c, **{field: value}))
        print(f"  {field} {getattr(c, field)} -> {value}: {t:.0f} us ({base / t:.2f}x)")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
