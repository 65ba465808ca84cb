"""Where a persistent kernel's token goes: in-kernel timestamps of one decode step (Engine.trace).
Usage: python scripts/trace_summary.py ARTIFACT [POS] [--save=FILE.npz] [--warm=N]  (needs the GPU; --save keeps the
           recording; --warm: N traced launches first, dropped: Engine.trace's warm)
       python scripts/trace_summary.py FILE.npz                                    (a saved recording, no GPU)

Views: per kind of instruction, the SMs' time waiting and working (and the pages ready); along the chain of
phases, for each phase the hop (from the previous phase's last signal to this phase's first SM seeing its inputs)
and the span (from that first SM to this phase's last signal), averaged per kind; the handover (its tiles' inputs
ready, x ready and done after the previous phase's last signal, min / median / max); the slowest tile of each GEMV
phase, and where it lost against the median one; and the spread of ready pages."""
import collections
import itertools
import json
import sys
from typing import Iterator

import numpy as np


def kind(opcode: str, kernel: dict) -> str:
    return opcode if opcode in ("attention", "select", "embed") else f"{kernel.get('family', '?')}:{kernel['name'].split('.')[-1]}"


def columns(ts: np.ndarray, slots: list[str]) -> dict[str, np.ndarray]:
    """The recording by slot name (codegen/persistent_abi.py's TRACE_SLOTS), the cycles converted to ns at the
    SMs' clock over the step (all instructions' cycles over their ns). An instruction that began but stamped no
    done (persist_probe_attention_idle's splits other than a head's first, which return once their inputs are ready)
    is taken as done when its inputs were ready."""
    col = {name: ts[:, i].astype(np.int64) for i, name in enumerate(slots)}
    ok = col["start"] > 0
    col["done"] = np.where(ok & (col["done"] < col["ready"]), col["ready"], col["done"])
    ns = (col["done"] - col["start"])[ok].sum()
    ghz = col["cycles"][ok].sum() / ns if ns > 0 else 1.0
    col["page_wait"] = col["page_wait_cycles"] / ghz
    zeros = np.zeros(len(ts), dtype=np.int64)  # recordings from before these slots
    col["pages_ready"] = col.get("pages_ready", zeros)
    col["stored"] = col.get("stored", zeros)
    return col


def token_span(col: dict[str, np.ndarray]) -> float:
    """us from the step's first instruction's start to its last one's end (columns' view of a recording)."""
    ok = col["start"] > 0
    return (col["done"][ok].max() - col["start"][ok].min()) / 1e3


PARTS = ("waiting", "prologue", "pages", "dots", "epilogue", "release")  # kind_sums' parts of an instruction's time


def dots_span(col: dict[str, np.ndarray], i: int) -> tuple[int, int]:
    """(x ready, sums done) of instruction i, ns: each at least the stamp before it (an instruction without x or
    sums, attention's, has them at its ready)."""
    x = col["x_ready"][i] if col["x_ready"][i] >= col["ready"][i] else col["ready"][i]
    return x, col["sums_done"][i] if col["sums_done"][i] >= x else x


def kind_sums(col: dict[str, np.ndarray], sched: list, kernels: list) -> dict[str, collections.Counter]:
    """SM-us per kind of instruction (columns' view of a recording): waiting on inputs, then working, which is split
    into the prologue (inputs ready to x ready: a GEMV's norm, an attention split's slice), waiting for weight pages,
    the dot products (a GEMV's, the rest of its pages' time), the epilogue (a GEMV's, to its stores issued;
    everything after the prologue for the other kinds) and the release (a GEMV's signal: the block's barrier and the
    release add, which waits until the stores are acknowledged); with each kind's count, and for GEMVs their count
    (gemvs) and the pages already in the ring when their x was ready (pages_ready, summed)."""
    ok = col["start"] > 0
    sums: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for i, (sm, opcode, k, *_) in enumerate(sched):
        if not ok[i]:
            continue
        name, ready, done = kind(opcode, kernels[k]), col["ready"][i], col["done"][i]
        x, dots_end = dots_span(col, i)
        stored = col["stored"][i] if dots_end <= col["stored"][i] <= done else done
        c = sums[name]
        c["count"] += 1
        c["waiting"] += (ready - col["start"][i]) / 1e3
        c["prologue"] += (x - ready) / 1e3
        c["pages"] += col["page_wait"][i] / 1e3
        c["dots"] += max(0.0, (dots_end - x - col["page_wait"][i]) / 1e3)
        c["epilogue"] += (stored - dots_end) / 1e3
        c["release"] += (done - stored) / 1e3
        if opcode == "gemv":
            c["gemvs"] += 1
            c["pages_ready"] += int(col["pages_ready"][i])
    return sums


def per_kind(ts: np.ndarray, slots: list[str], sched: list, kernels: list, sms: int) -> list[str]:
    """kind_sums as a table: SM-us per kind and part, the work per token per SM, and a GEMV's pages already in the
    ring when its x was ready (mean)."""
    col = columns(ts, slots)
    span, sums = token_span(col), kind_sums(col, sched, kernels)
    lines = [f"token span {span:.1f} us over {sms} SMs ({span * sms:.0f} SM-us); per instruction kind, SM-us summed "
             f"over the SMs (working = prologue + pages + dots + epilogue + release; work/SM: per token per SM):",
             f"{'kind':<24}{'count':>7}" + "".join(f"{p:>10}" for p in PARTS) + f"{'work/SM':>10}{'ready pg':>10}"]
    total = collections.Counter()
    for name, c in sorted(sums.items(), key=lambda kv: -sum(kv[1][p] for p in PARTS)):
        total.update(c)
        work = sum(c[p] for p in PARTS[1:])
        ready = f"{c['pages_ready'] / c['gemvs']:>10.1f}" if c["gemvs"] else f"{'-':>10}"
        lines.append(f"{name:<24}{c['count']:>7}" + "".join(f"{c[p]:>10.1f}" for p in PARTS) + f"{work / sms:>10.1f}"
                     + ready)
    all_time = sum(total[p] for p in PARTS)
    lines.append(f"{'total':<24}{total['count']:>7}" + "".join(f"{total[p]:>10.1f}" for p in PARTS)
                 + f"  waiting {total['waiting'] / all_time * 100:.0f}% of the SMs' time")
    return lines


def phase_rows(col: dict[str, np.ndarray], sched: list, opcode: str | None = None) -> dict[int, np.ndarray]:
    """Each phase's (counter's) recorded instructions, their rows in the recording; with `opcode`, its phases alone."""
    phases: dict[int, list[int]] = collections.defaultdict(list)
    for i, (_, op, _, c, *_) in enumerate(sched):
        if col["start"][i] > 0 and (opcode is None or op == opcode):
            phases[c].append(i)
    return {c: np.array(rows) for c, rows in phases.items()}


def along_chain(col: dict[str, np.ndarray], sched: list) -> Iterator[tuple[np.ndarray, str, int, int | None]]:
    """The phases in order: each one's rows, opcode and kernel, and the latest last signal of the phases before it
    (ns; None for the first)."""
    prev_end = None
    for c, rows in sorted(phase_rows(col, sched).items()):
        _, opcode, k, *_ = sched[rows[0]]
        yield rows, opcode, k, prev_end
        last_done = col["done"][rows].max()
        prev_end = last_done if prev_end is None else max(prev_end, last_done)


def chain(ts: np.ndarray, slots: list[str], sched: list, kernels: list) -> dict[str, tuple[int, float, float]]:
    """Per kind: (phases, mean hop us, mean span us) along the phases in order. A phase's hop runs from the
    previous phase's last signal to its own first inputs-ready, its span from there to its own last signal; a
    phase whose first SM saw its inputs before the previous one ended (they do not depend on each other) has a
    hop of 0."""
    col = columns(ts, slots)
    out: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    for rows, opcode, k, prev_end in along_chain(col, sched):
        first_ready, last_done = col["ready"][rows].min(), col["done"][rows].max()
        hop = 0.0 if prev_end is None else max(0.0, (first_ready - prev_end) / 1e3)
        out[kind(opcode, kernels[k])].append((hop, (last_done - first_ready) / 1e3))
    return {name: (len(v), float(np.mean([h for h, _ in v])), float(np.mean([s for _, s in v]))) for name, v in out.items()}


def handover(ts: np.ndarray, slots: list[str], sched: list, kernels: list) -> dict[str, list[float]]:
    """Per kind: its tiles' inputs ready, x ready (GEMVs) and done, each as (min, median, max) over a phase's tiles
    in us after the previous phase's last signal, averaged over its phases (9 numbers; x ready NaN but for GEMVs).
    The phase's own stretch of the chain is its done max; a median far under the max says the phase waits for its
    slowest tile, and a handover that makes the median tile earlier does not shorten it unless the max moves."""
    col = columns(ts, slots)
    out: dict[str, list[list[float]]] = collections.defaultdict(list)
    for rows, opcode, k, prev_end in along_chain(col, sched):
        if prev_end is None:
            continue

        def spread(name: str) -> list[float]:
            d = (col[name][rows] - prev_end) / 1e3
            return [float(d.min()), float(np.median(d)), float(d.max())]
        xs = spread("x_ready") if opcode == "gemv" else [float("nan")] * 3
        out[kind(opcode, kernels[k])].append(spread("ready") + xs + spread("done"))
    return {name: [float(v) for v in np.mean(v, axis=0)] for name, v in out.items()}


def handover_lines(h: dict[str, list[float]]) -> list[str]:
    lines = ["after the previous phase's last signal, us (min / median / max over a phase's tiles, mean over its "
             "phases):", f"{'kind':<24}{'inputs ready':>21}{'x ready':>21}{'done':>21}"]
    for name, v in sorted(h.items(), key=lambda kv: -kv[1][8]):
        cells = ["" if np.isnan(v[i]) else f"{v[i]:.2f} {v[i + 1]:.2f} {v[i + 2]:.2f}" for i in (0, 3, 6)]
        lines.append(f"{name:<24}" + "".join(f"{c:>21}" for c in cells))
    return lines


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


def tails(ts: np.ndarray, slots: list[str], sched: list, kernels: list) -> tuple[dict[str, float], collections.Counter]:
    """Per GEMV kind: the mean over its phases of the last SM's signal after the median SM's (us: what waiting
    for the slowest tile costs the phase); and how often each SM signalled a GEMV phase last."""
    col = columns(ts, slots)
    out: dict[str, list[float]] = collections.defaultdict(list)
    last: collections.Counter = collections.Counter()
    for rows in phase_rows(col, sched, "gemv").values():
        done = col["done"][rows] - col["done"][rows].min()  # (before the median's float: see slowest_parts)
        out[kind("gemv", kernels[sched[rows[0]][2]])].append((done.max() - np.median(done)) / 1e3)
        last[sched[rows[int(done.argmax())]][0]] += 1
    return {name: float(np.mean(v)) for name, v in out.items()}, last


def ready_pages(ts: np.ndarray, slots: list[str], sched: list, kernels: list) -> dict[str, list[int]]:
    """Per GEMV kind: the spread of pages already in the ring when a tile's x was ready (min, p10, median, p90,
    max over its tiles): a ring that filled while the tile waited shows as the ring's page count."""
    col = columns(ts, slots)
    out: dict[str, list[int]] = collections.defaultdict(list)
    for i, (sm, opcode, k, *_) in enumerate(sched):
        if col["start"][i] > 0 and opcode == "gemv":
            out[kind(opcode, kernels[k])].append(int(col["pages_ready"][i]))
    return {name: [int(np.percentile(v, q, method="nearest")) for q in (0, 10, 50, 90, 100)]
            for name, v in out.items()}


def long_last(ts: np.ndarray, slots: list[str], sched: list, kernels: list) -> dict[str, tuple[int, int, int, int]]:
    """Per GEMV kind, from a schedule whose entries carry each tile's rows (a fifth field, recordings since the
    fortieth session) or items (row segments, a sixth, since the forty-first: shares dealt to the item differ by one):
    (phases whose last tile held the phase's longest share, phases whose shares differ, the fewest and the most rows
    or items a tile). Shares of whole rows differ by a row where the SMs do not divide the rows, so the longest shares
    stream a row more (a page on a down projection); this says how often that row sets the phase's end. Empty for
    older recordings."""
    if not sched or len(sched[0]) < 5:
        return {}
    col = columns(ts, slots)
    out: dict[str, list[int]] = {}
    for rows in phase_rows(col, sched, "gemv").values():
        share = np.array([sched[i][-1] for i in rows])
        last = int(col["done"][rows].argmax())
        o = out.setdefault(kind("gemv", kernels[sched[rows[0]][2]]), [0, 0, 10 ** 9, 0])
        uneven = share.max() > share.min()
        o[0] += int(uneven and share[last] == share.max())
        o[1] += int(uneven)
        o[2], o[3] = min(o[2], int(share.min())), max(o[3], int(share.max()))
    return {name: (a, b, lo, hi) for name, (a, b, lo, hi) in out.items()}


def long_last_lines(ll: dict[str, tuple[int, int, int, int]], unit: str = "rows") -> list[str]:
    if not any(b for _, b, _, _ in ll.values()):
        return []
    return [f"the slowest tile held its phase's longest share ({unit} a tile: fewest-most), in phases with uneven "
            f"shares:", *(f"  {name:<22} {a} of {b} ({lo}-{hi} {unit})" for name, (a, b, lo, hi) in ll.items() if b)]


def dots_by_share(ts: np.ndarray, slots: list[str], sched: list, kernels: list) -> dict[str, dict[int, tuple]]:
    """Per GEMV kind, per share size (a tile's rows, or items where the schedule carries them: long_last's field):
    (tiles, median us of its dot products as kind_sums counts them: x ready to the sums, less its page waits; median
    us of page waits). The slope between two sizes is what a row (item) more costs a tile, where the tile's first
    item's cost is the rest. Empty for recordings without the field."""
    if not sched or len(sched[0]) < 5:
        return {}
    col = columns(ts, slots)
    cut: dict[str, dict[int, list]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for i, entry in enumerate(sched):
        if entry[1] != "gemv" or col["start"][i] <= 0:
            continue
        (x, sums), wait = dots_span(col, i), float(col["page_wait"][i])
        cut[kind("gemv", kernels[entry[2]])][int(entry[-1])].append((max(0.0, (sums - x - wait) / 1e3), wait / 1e3))
    return {name: {n: (len(v), float(np.median([d for d, _ in v])), float(np.median([w for _, w in v])))
                   for n, v in sorted(sizes.items())} for name, sizes in cut.items()}


def dots_by_share_lines(ds: dict[str, dict[int, tuple]], unit: str = "rows") -> list[str]:
    if not ds:
        return []
    return [f"a GEMV tile's dots by its {unit} (tiles; median us, x ready to sums less page waits, + page waits):",
            *(f"  {name:<22} " + "; ".join(f"{n} {unit}: {t} tiles, {d:.2f} + {w:.2f}"
                                           for n, (t, d, w) in sizes.items()) for name, sizes in ds.items())]


def tail_lines(t: dict[str, float], last: collections.Counter) -> list[str]:
    lines = ["the slowest tile of each GEMV phase (last signal after the median SM's, us, mean over the phases):",
             "  " + ", ".join(f"{name} {us:.2f}" for name, us in sorted(t.items(), key=lambda kv: -kv[1]))]
    phases = sum(last.values())
    lines.append(f"  the SMs most often last ({phases} phases): "
                 + ", ".join(f"SM {sm} {n}x" for sm, n in last.most_common(6)))
    return lines


def slowest_parts(ts: np.ndarray, slots: list[str], sched: list,
                  kernels: list) -> dict[str, tuple[list[float], int, int]]:
    """Per GEMV kind: where its phases' slowest tile (the last done) lost against the median tile, us, mean over the
    phases: inputs ready later, prologue (to x ready), pages and dots (to the sums), epilogue and release (to done),
    and done; with how many of its phases (of how many) that tile started after the previous phase's last signal,
    its SM still busy with its previous instruction then. The first phase has no previous one and is left out."""
    col = columns(ts, slots)
    out: dict[str, list] = collections.defaultdict(lambda: [[], 0, 0])
    for rows, opcode, k, prev_end in along_chain(col, sched):
        if prev_end is None or opcode != "gemv":
            continue
        # (ns after prev_end before any float: %globaltimer's ns since 1970 lose ~256 ns to a float64)
        ready, x, sums, done = ((col[n][rows] - prev_end).astype(np.float64)
                                for n in ("ready", "x_ready", "sums_done", "done"))
        parts = [ready, x - ready, sums - x, done - sums, done]
        j = int(done.argmax())
        entry = out[kind(opcode, kernels[k])]
        entry[0].append([(p[j] - np.median(p)) / 1e3 for p in parts])
        entry[1] += int(col["start"][rows[j]] >= prev_end)
        entry[2] += 1
    return {name: ([float(v) for v in np.mean(d, axis=0)], late, n) for name, (d, late, n) in out.items()}


def slowest_lines(sp: dict[str, tuple[list[float], int, int]]) -> list[str]:
    lines = ["the slowest tile of each GEMV phase against the median tile, us later (mean over the phases), and the "
             "phases where it started after the previous phase ended:",
             f"{'kind':<24}{'ready':>8}{'prologue':>10}{'pages+dots':>12}{'epi+release':>13}{'done':>8}"
             f"{'started late':>14}"]
    for name, (d, late, n) in sorted(sp.items(), key=lambda kv: -kv[1][0][4]):
        lines.append(f"{name:<24}{d[0]:>8.2f}{d[1]:>10.2f}{d[2]:>12.2f}{d[3]:>13.2f}{d[4]:>8.2f}{f'{late} of {n}':>14}")
    return lines


def save(path: str, ts: np.ndarray, manifest: dict, pos: int) -> None:
    """The recording and what reading it needs, for summary_of elsewhere (no GPU): one .npz."""
    keep = {k: manifest[k] for k in ("trace_slots", "schedule", "kernels", "sms")}
    np.savez_compressed(path, ts=ts, pos=pos, manifest=json.dumps(keep))


def load(path: str) -> tuple[np.ndarray, dict, int]:
    with np.load(path) as f:
        return f["ts"], json.loads(str(f["manifest"])), int(f["pos"])


def traceable_engine(path: str):
    """An Engine of the artifact at `path`, or, where it was compiled without the traced step's code (persist_trace_code
    0, the default), of the same model compiled with it at path + "-traceable" (the table's other fields, the
    artifact's weights linked), saying so."""
    import dataclasses

    import kiec
    from kiec.codegen import targets
    from kiec.runtime import traceable
    eng = kiec.Engine(path)
    if traceable(eng.manifest):
        return eng
    man = eng.manifest
    eng.close()
    out = path.rstrip("/") + "-traceable"
    print(f"{path}: compiled without the trace's code; tracing {out}, the same model compiled with it "
          f"(persist_trace_code 1, the table's other fields)")
    arch = man["arch"]  # (the table entry it was built from: kiec.compile checked it is one)
    base = targets.TARGETS[arch]
    targets.TARGETS[arch] = dataclasses.replace(base, persist_trace_code=1)
    try:
        model = kiec.load(man["source"], dtype=man["dtype"], max_seq_len=man["max_seq_len"])
        return kiec.Engine(kiec.compile(model, out, arch=arch, tp=man["tp"], mode="persistent", weights_like=path))
    finally:
        targets.TARGETS[arch] = base


def summary(eng, pos: int, save_to: str | None = None, warm: int = 0) -> str:
    ts = eng.trace(pos, warm=warm)
    if save_to:
        save(save_to, ts, eng.manifest, pos)
    return summary_of(ts, eng.manifest, pos)


# With persist_trace_attention, an attention split's time from inputs ready to done cut at its stamps: q rotated and
# the new row written; keys done; warps merged and the partial stored; the rest (the arrival, the last split's merge
# of the partials and its signal)
ATTENTION_CUTS = [("q, rope, new row", "ready", "sums_done"), ("keys", "sums_done", "stored"),
                  ("warps merged, stored", "stored", "x_ready"), ("arrive, merge, signal", "x_ready", "done")]


def attention_stamped(col: dict[str, np.ndarray], sched: list, i: int) -> bool:
    """Whether row i is an attention split that took rows and stamped ATTENTION_CUTS' moments in order."""
    return (sched[i][1] == "attention" and col["start"][i] > 0
            and col["ready"][i] <= col["sums_done"][i] <= col["stored"][i] <= col["x_ready"][i] <= col["done"][i])


def attention_parts(ts: np.ndarray, slots: list[str], sched: list) -> list[str]:
    """With persist_trace_attention: the attention splits that took rows, their time from inputs ready to done cut
    at their stamps (ATTENTION_CUTS), mean us (and max) over them. Nothing when the recording has no such stamps."""
    col = columns(ts, slots)
    rows = [i for i in range(len(sched)) if attention_stamped(col, sched, i)]
    if not rows:
        return []
    lines = [f"attention splits with rows ({len(rows)}), inputs ready to done, us (mean, max):"]
    for name, a, b in ATTENTION_CUTS:
        d = (col[b][rows] - col[a][rows]) / 1e3
        lines.append(f"  {name:<24}{d.mean():>8.2f}{d.max():>8.2f}")
    return lines


def attention_critical(ts: np.ndarray, slots: list[str], sched: list) -> list[str]:
    """Per attention phase, the split that reached its partial last (inputs ready to partial stored: its slice)
    and the one that signalled last (partial stored to done: the arrival, the merge and the signal; with
    persist_attn_owner_merges the owner's x_ready is its slice's end, so its tail holds its wait for the others),
    mean us (min, max) over the phases: the two stretches of attention on the chain; and the last partial to the
    signal (the phase's latest x_ready to its last done: the merge's part of the chain in either way); and the last
    partial to the next phase's median x ready (the output projection's x: what persist_attn_consumer_merges, whose
    output projection merges the partials itself, shortens), where the next phase is recorded. Phases whose splits
    stamped no partial (persist_probe_attention_idle) are left out."""
    col = columns(ts, slots)
    phases = {c: rows for c, rows in phase_rows(col, sched, "attention").items()
              if (col["x_ready"][rows] >= col["ready"][rows]).any()}
    if not phases:
        return []
    every = phase_rows(col, sched)
    slice_us, tail_us, after_us, next_us = [], [], [], []
    for c, rows in phases.items():
        last_x = rows[int(np.argmax(col["x_ready"][rows]))]
        last_done = rows[int(np.argmax(col["done"][rows]))]
        slice_us.append((col["x_ready"][last_x] - col["ready"][last_x]) / 1e3)
        tail_us.append((col["done"][last_done] - col["x_ready"][last_done]) / 1e3)
        after_us.append((col["done"][last_done] - col["x_ready"][last_x]) / 1e3)
        if c + 1 in every:
            next_us.append((np.median(col["x_ready"][every[c + 1]]) - col["x_ready"][last_x]) / 1e3)
    lines = [f"attention, per phase ({len(phases)}), us (mean, min, max):"]
    for name, v in (("last split's slice", slice_us), ("last signal's tail", tail_us),
                    ("last partial to signal", after_us), ("last partial to next x", next_us)):
        if v:
            lines.append(f"  {name:<24}{np.mean(v):>8.2f}{np.min(v):>8.2f}{np.max(v):>8.2f}")
    return lines


def dot_parts(ts: np.ndarray, slots: list[str], sched: list, kernels: list) -> list[str]:
    """With persist_trace_dots: per GEMV kind, its tiles' dot products (x ready to sums done) cut at their stamps,
    mean us over the tiles: the slice of x loaded from the scratch (thread 0's), from there to the latest warp's first
    item summed, on to the latest warp's last item, and the block's barrier after it; beside them the warps' spread
    (the earliest warp's last item to the latest's: with few items a warp, a warp may end before another's first)
    and, where the recording has them, the first items' spread (the earliest warp's to the latest's) and the warp
    whose first item most often came last, with its share of the tiles. Nothing when the recording has no such
    stamps."""
    if "warp_done_max" not in slots:
        return []
    col = columns(ts, slots)
    more = "first_item_warp" in slots  # (e0a6c65's two slots: recordings before them lack them)
    order = ("x_ready", "x_sliced", "first_item", "warp_done_max", "sums_done")
    out: dict[str, list[list[float]]] = collections.defaultdict(list)
    for i, (sm, opcode, k, *_) in enumerate(sched):
        moments = [col[n][i] for n in order]
        if opcode == "gemv" and col["start"][i] > 0 and moments[1] > 0 and all(
                a <= b for a, b in itertools.pairwise(moments)):
            cuts = [(b - a) / 1e3 for a, b in itertools.pairwise(moments)]
            firsts = [(col["first_item"][i] - col["first_item_min"][i]) / 1e3,
                      col["first_item_warp"][i]] if more else []
            out[kind(opcode, kernels[k])].append(cuts + [(col["warp_done_max"][i] - col["warp_done_min"][i]) / 1e3]
                                                 + firsts)
    if not out:
        return []
    lines = ["a GEMV tile's dot products cut at its stamps, us (mean over its tiles):",
             f"{'kind':<24}{'tiles':>6}{'x slice':>9}{'1st item':>10}{'rest':>8}{'barrier':>9}{'dots':>8}"
             f"{'warps spread':>14}" + (f"{'1st items spread':>18}{'last 1st warp':>15}" if more else "")]
    for name, d in sorted(out.items(), key=lambda kv: -np.mean(kv[1], axis=0)[:4].sum()):
        d = np.array(d)
        m = d.mean(axis=0)
        line = (f"{name:<24}{len(d):>6}{m[0]:>9.2f}{m[1]:>10.2f}{m[2]:>8.2f}{m[3]:>9.2f}{m[:4].sum():>8.2f}"
                f"{m[4]:>14.2f}")
        if more:
            warps, counts = np.unique(d[:, 6].astype(int), return_counts=True)
            top = int(counts.argmax())
            line += f"{m[5]:>18.2f}{f'{warps[top]} ({100 * counts[top] / len(d):.0f}%)':>15}"
        lines.append(line)
    return lines


def stream_parts(ts: np.ndarray, slots: list[str], sched: list, kernels: list, sms: int) -> list[str]:
    """With persist_trace_stream: the weight stream's side of the traced step. Per GEMV kind, mean us over its
    tiles: the stream's wait for a free page of the ring over the tile's pages (full: the compute warps were behind,
    and the SM's share of the memory went unread), its wait on the pace, how long before the tile's x was ready the
    stream came to its first page (negative: after) and after it the last page's copy went out. Then the SMs' full
    waits summed over the step (the memory time the ring lost, per SM: mean, min, max) against the token span.
    Nothing when the recording has no such stamps."""
    if "stream_full_ns" not in slots:
        return []
    col = columns(ts, slots)
    out: dict[str, list[list[float]]] = collections.defaultdict(list)
    full_per_sm = np.zeros(sms)
    stalls = []  # (from, to) ns: a tile's full wait, taken as ending at its x ready
    for i, (sm, opcode, k, *_) in enumerate(sched):
        if opcode != "gemv" or col["stream_first"][i] <= 0 or col["x_ready"][i] <= 0:
            continue
        full_per_sm[sm] += col["stream_full_ns"][i] / 1e3
        if col["stream_full_ns"][i] > 0:
            stalls.append((col["x_ready"][i] - col["stream_full_ns"][i], col["x_ready"][i]))
        out[kind(opcode, kernels[k])].append([col["stream_full_ns"][i] / 1e3, col["stream_pace_ns"][i] / 1e3,
                                              (col["x_ready"][i] - col["stream_first"][i]) / 1e3,
                                              (col["stream_last"][i] - col["x_ready"][i]) / 1e3])
    if not out:
        return []
    lines = ["the weight stream in the traced step, us (mean over a kind's tiles; lead: its first page before the "
             "tile's x ready, last: its last copy after):",
             f"{'kind':<24}{'tiles':>6}{'ring full':>11}{'paced':>8}{'lead':>8}{'last':>8}{'full, all tiles':>17}"]
    for name, d in sorted(out.items(), key=lambda kv: -np.sum(kv[1], axis=0)[0]):
        d = np.array(d)
        m = d.mean(axis=0)
        lines.append(f"{name:<24}{len(d):>6}{m[0]:>11.2f}{m[1]:>8.2f}{m[2]:>8.2f}{m[3]:>8.2f}{d[:, 0].sum():>17.1f}")
    span = token_span(col)
    lines.append(f"the ring full, summed over an SM's tiles: mean {full_per_sm.mean():.1f} us (min "
                 f"{full_per_sm.min():.1f}, max {full_per_sm.max():.1f}) of the {span:.1f} us token span "
                 f"({100 * full_per_sm.mean() / span:.0f}%)")
    at_once = {share: stalled_at_once(stalls, share * sms) / 1e3 for share in (0.5, 0.9)}
    lines.append(f"rings full at once (a tile's full wait taken as ending at its x ready): half the SMs or more "
                 f"{100 * at_once[0.5] / span:.1f}% of the span, 90% or more {100 * at_once[0.9] / span:.1f}%")
    return lines


def stalled_at_once(stalls: list[tuple[int, int]], least: float) -> int:
    """ns during which at least `least` of the (from, to) intervals overlap (a sweep over their ends)."""
    events = sorted([(a, 1) for a, _ in stalls] + [(b, -1) for _, b in stalls])
    total, n, since = 0, 0, 0
    for t, d in events:
        if n >= least:
            total += t - since
        n, since = n + d, t
    return int(total)


def summary_of(ts: np.ndarray, m: dict, pos: int) -> str:
    slots, sched, kernels, sms = m["trace_slots"], m["schedule"], m["kernels"], m["sms"]
    lines = per_kind(ts, slots, sched, kernels, sms)
    lines[0] = f"position {pos}: {lines[0]}"
    lines += ["", *chain_lines(chain(ts, slots, sched, kernels))]
    lines += ["", *handover_lines(handover(ts, slots, sched, kernels))]
    lines += ["", *tail_lines(*tails(ts, slots, sched, kernels))]
    unit = "items" if sched and len(sched[0]) > 5 else "rows"
    lines += long_last_lines(long_last(ts, slots, sched, kernels), unit)
    by_share = dots_by_share_lines(dots_by_share(ts, slots, sched, kernels), unit)
    lines += ["", *by_share] if by_share else []
    lines += ["", *slowest_lines(slowest_parts(ts, slots, sched, kernels))]
    for view in (attention_critical(ts, slots, sched), attention_parts(ts, slots, sched),
                 dot_parts(ts, slots, sched, kernels), stream_parts(ts, slots, sched, kernels, sms)):
        lines += ["", *view] if view else []
    lines += ["", "pages in the ring when a GEMV tile's x was ready (min, p10, median, p90, max over its tiles):"]
    lines += [f"  {name:<22} {' '.join(f'{v:>3}' for v in q)}" for name, q in ready_pages(ts, slots, sched, kernels).items()]
    return "\n".join(lines)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    saves = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--save=")]
    warm = [int(a.split("=", 1)[1]) for a in sys.argv[1:] if a.startswith("--warm=")]
    if args[0].endswith(".npz"):  # a saved recording: no GPU
        print(summary_of(*load(args[0])))
    else:
        print(summary(traceable_engine(args[0]), int(args[1]) if len(args) > 1 else 64, saves[0] if saves else None,
                      warm[0] if warm else 0))
