"""A/B of TargetParams variants on one model, in one process on one GPU (the tuning loop's measurement):
    python3 scripts/variants.py llama-3.2-1b base prefetch_bytes=0 gemv_rows=1
    python3 scripts/variants.py llama-3.2-1b mode=persistent mode=persistent,persist_warps=12
    python3 scripts/variants.py llama-3.2-1b:8192 mode=persistent mode=persistent,attn_min_keys=256
    python3 scripts/variants.py smollm2-135m mode=persistent / llama-3.2-1b:8192 mode=persistent
    python3 scripts/variants.py --trace=8192 llama-3.2-1b:8192 mode=persistent mode=persistent,persist_tagged=1
(MODEL:N: timed from N tokens of context; a lone / starts the next model's list, so one call runs several;
--rounds=N: N rounds of every variant instead of two, where a difference is within two rounds' spread.) Each
variant is the sm_90 table entry with the given fields replaced (mode= picks graph or persistent; seq=N builds it
for N positions, max_seq_len, instead of the context + 512); prints ms/token and MBU per variant. Each model's
artifacts are deleted after its timing (the lent machine's disk holds 64 GB: three llama-3.1-8b variants fit, five
did not, unless a variant's weights.bin is the first's, linked; a variant that may not fit the free space is left
out, with the rest of the list, before it is written). Before the timings each variant's logits over 8 steps are
compared with the first variant's (the largest difference over the first's largest logit; FAR past 5%): a
timing says nothing of what a variant computes, and a broken one can end its generations early. --trace=POS: then
each persistent variant's step at POS traced in the kernel (Engine.trace), side by side: per kind of phase its mean
hop and span along the chain (scripts/trace_summary.py), then each variant's whole summary; each persistent variant
is then compiled, and timed, with the traced step's code (persist_trace_code 1, off by default) unless it says."""
import os
import re
import shutil
import sys

import numpy as np

import trace_summary

import kiec
from kiec.bench import engine, measure_ceilings, positions_needed, release, time_kiec
from kiec.codegen import targets
from kiec.modes import MODES
from kiec.runtime import traceable
from kiec.summary import bytes_per_token


def traces(arts: dict[str, str], pos: int, prefix: str = "") -> None:
    """The persistent variants' steps at `pos`, traced: one column a variant (numbered in the legend), one row a
    kind of phase (hop + span us, mean over its phases), the traced step's span last; then each whole summary.
    `prefix` starts each kept recording's name (main's: the model's context, so that a model timed at two contexts in
    one call keeps both; before the fortieth session the second overwrote the first's)."""
    recs = {}
    save_dir = os.environ.get("VARIANTS_TRACE_DIR")  # each recording kept there as an .npz (trace_summary.py reads it)
    for v, art in arts.items():
        eng = engine(art)
        if eng.manifest.get("mode") == "persistent" and not traceable(eng.manifest):
            print(f"  {v}: not traced (compiled without the trace's code)")
        elif eng.manifest.get("mode") == "persistent":
            recs[v] = (eng.trace(pos), eng.manifest)
            if save_dir:
                os.makedirs(save_dir, exist_ok=True)
                # (no "=" or ",": the device tool leaves such names behind)
                name = re.sub(r"[^A-Za-z0-9.-]+", "_", f"{prefix}{os.path.basename(art)}_{v}")
                trace_summary.save(os.path.join(save_dir, f"{name}.npz"), recs[v][0], eng.manifest, pos)
    if not recs:
        return
    chains = {v: trace_summary.chain(ts, m["trace_slots"], m["schedule"], m["kernels"]) for v, (ts, m) in recs.items()}
    print(f"  traced at position {pos}: hop + span us a phase along the chain, mean per kind")
    for j, v in enumerate(recs):
        print(f"    [{j}] {v}")
    kinds = sorted({k for ch in chains.values() for k in ch}, key=lambda k: -max(
        ch[k][0] * (ch[k][1] + ch[k][2]) for ch in chains.values() if k in ch))
    print(f"    {'kind':<22}" + "".join(f"{f'[{j}]':>16}" for j in range(len(recs))))
    for k in kinds:
        cells = [f"{ch[k][1]:.2f} + {ch[k][2]:.2f}" if k in ch else "-" for ch in chains.values()]
        print(f"    {k:<22}" + "".join(f"{c:>16}" for c in cells))
    spans = [f"{trace_summary.token_span(trace_summary.columns(ts, m['trace_slots'])):.1f}" for ts, m in recs.values()]
    print(f"    {'token us':<22}" + "".join(f"{c:>16}" for c in spans))
    for j, (v, (ts, m)) in enumerate(recs.items()):
        print(f"\n  [{j}] {v}\n" + trace_summary.summary_of(ts, m, pos))


AGREE_STEPS, AGREE_FAR = 8, 0.05  # steps compared; the distance past which a variant is flagged


def agreement_lines(logits: dict[str, np.ndarray]) -> list[str]:
    """Each variant's logits ([steps, vocab]) against the first variant's: the largest absolute difference over the
    first's largest |logit|, FAR past AGREE_FAR (other sums' bits differ by ~1e-3 of it; a wrong kernel by its
    whole size)."""
    ref = next(iter(logits.values()))
    scale = float(np.abs(ref).max()) or 1.0
    lines = [f"  logits over {ref.shape[0]} steps against the first variant's (largest difference / largest logit)"]
    for j, (v, x) in enumerate(logits.items()):
        if j == 0:
            continue
        d = float(np.abs(x - ref).max()) / scale if np.isfinite(x).all() else float("inf")
        lines.append(f"    {v}: {d:.2e}{'  FAR' if not d <= AGREE_FAR else ''}")
    return lines


def stepped(art: str, steps: int = AGREE_STEPS) -> np.ndarray:
    """The artifact's logits over `steps` decode steps from position 0 (fixed tokens)."""
    eng = engine(art)
    return np.stack([eng.step(1 + 7 * p, p) for p in range(steps)])


def summary_lines(times: dict[str, list[float]]) -> list[str]:
    """Each variant's medians (ms, a round each) and its mean against the first variant's, in percent (negative:
    faster); a variant's spread between its rounds is the yardstick for the difference."""
    base = sum(next(iter(times.values()))) / len(next(iter(times.values())))
    width = max(len(v) for v in times)
    lines = ["  summary: ms a round, mean against the first"]
    for j, (v, ms) in enumerate(times.items()):
        mean = sum(ms) / len(ms)
        rel = "" if j == 0 else f"{(mean / base - 1) * 100:+.1f}%"
        lines.append(f"    {v:<{width}}  {' / '.join(f'{t:.3f}' for t in ms)}  {rel}".rstrip())
    return lines


def no_room(model_name: str, left: int, each: int, free: int) -> str | None:
    """Why the next of `left` variants is not compiled: its weights (`each` bytes, unless it makes the first
    variant's bytes and is linked to them: kiec.build.write_weights) may not fit the `free` bytes left; or None.
    Said before writing, not after minutes of it (five llama-3.1-8b variants, 16 GB each, ran out of the lent
    machine's disk at the third); the variants compiled so far are still timed. `free`: the bytes df calls
    available (after that call df showed 4.2 GB available with ~170 GB more free in the filesystem's blocks)."""
    if each <= free:
        return None
    return (f"{model_name}: {left} variant{'s' if left > 1 else ''} left out: one may take {each / 1e9:.0f} GB of "
            f"weights, the disk has {free / 1e9:.0f} GB free")


def main(spec: str, variants: list[str], trace_pos: int | None = None, rounds: int = 2) -> None:
    model_name, _, ctx = spec.partition(":")
    context = int(ctx or 0)
    models = {context + 512: kiec.load(model_name, dtype="bf16", max_seq_len=context + 512)}
    model = models[context + 512]
    nbytes = bytes_per_token(model.graph, max(context, 32) + 128).read  # the middle of the 256 timed steps
    base = targets.TARGETS["sm_90"]
    work = "/tmp/kiec_variants"
    shutil.rmtree(work, ignore_errors=True)  # a killed call's artifacts
    os.makedirs(work, exist_ok=True)
    arts = {}
    weights = bytes_per_token(model.graph, 0).read  # (about weights.bin's size: context 0 reads little else)
    for j, v in enumerate(variants):
        full = no_room(model_name, len(variants) - j, weights, shutil.disk_usage(work).free)
        if full:
            print(full)
            break
        mode, seq, changes = split_variant(v)
        if trace_pos is not None and mode == "persistent":
            changes.setdefault("persist_trace_code", "1")  # (traced: the step's code in, in every variant alike)
        seq = int(seq or context + 512)
        need = positions_needed(context, 32, 256)  # (kiec bench's count for the same timing)
        if seq < need:
            raise SystemExit(f"{model_name} {v}: seq={seq} is short of the {need} positions this timing needs")
        if seq not in models:
            models[seq] = kiec.load(model_name, dtype="bf16", max_seq_len=seq)
        tp = targets.with_fields(base, changes)
        targets.TARGETS["sm_90"] = tp
        try:
            # the first variant's tensors copied, or its whole weights.bin linked where this one's is the same
            arts[v] = kiec.compile(models[seq], f"{work}/{model_name}-{len(arts)}", mode=mode,
                                   weights_like=next(iter(arts.values()), None))
        finally:
            targets.TARGETS["sm_90"] = base
    if not arts:
        return
    ceilings = measure_ceilings(work)
    ceil = ceilings["read_tbps"]
    print(f"{spec}: {nbytes / 1e9:.3f} GB/token, read ceiling {ceil:.2f} TB/s, floor {nbytes / ceil / 1e9:.3f} ms"
          + (f" (peak {ceilings['peak_gbps'] / 1e3:.2f} TB/s)" if ceilings.get("peak_gbps") else ""))
    if len(arts) > 1:
        print("\n".join(agreement_lines({v: stepped(art) for v, art in arts.items()})))
    times: dict[str, list[float]] = {v: [] for v in arts}
    for rnd in range(rounds):  # (two by default), to see the spread between repeats of the same variant
        for v, art in arts.items():
            s, _ = time_kiec(art, 32, 256, context)
            times[v].append(s.median_ms)
            print(f"  round {rnd} {v:<32} {s.median_ms:.3f} ms (p10 {s.p10_ms:.3f}, p90 {s.p90_ms:.3f}) "
                  f"{1e3 / s.median_ms:.0f} tok/s MBU {nbytes / (s.median_ms * 1e-3) / (ceil * 1e12) * 100:.1f}%")
    print("\n".join(summary_lines(times)))
    if trace_pos is not None:
        traces(arts, trace_pos, f"ctx{context}_" if context else "")
    release()  # this list's engines and their GPU memory, before the next model's
    shutil.rmtree(work, ignore_errors=True)


def parse(argv: list[str]) -> tuple[list[tuple[str, list[str]]], int | None, int]:
    """The command line: each model's list (a lone / between them), --trace=POS and --rounds=N (2 unless given)."""
    opts = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in argv if a.startswith("--") and "=" in a}
    unknown = [a for a in argv if a.startswith("--") and a.split("=", 1)[0] not in ("--trace", "--rounds")]
    if unknown:
        raise SystemExit(f"variants.py: unknown option {unknown[0]!r} (--trace=POS, --rounds=N)")
    rounds = int(opts.get("--rounds", 2))
    if rounds < 1:
        raise SystemExit(f"variants.py: --rounds={rounds}: at least 1")
    args, lists = [a for a in argv if not a.startswith("--")], []
    while args:
        cut = args.index("/") if "/" in args else len(args)
        lists.append((args[0], args[1:cut]))
        args = args[cut + 1:]
    return lists, int(opts["--trace"]) if "--trace" in opts else None, rounds


def split_variant(v: str) -> tuple[str, str | None, dict[str, str]]:
    """A variant's text as (mode, seq or None, the TargetParams fields it replaces): "mode=persistent,seq=9000,f=1"."""
    changes = dict(kv.split("=", 1) for kv in v.split(",") if "=" in kv)
    return changes.pop("mode", "graph"), changes.pop("seq", None), changes


def check_fields(lists: list[tuple[str, list[str]]]) -> None:
    """Every variant's fields, before anything is compiled or timed: a name that is no TargetParams field or a value
    of the wrong type stops the run here, not after the models before it have spent the call's GPU time."""
    for spec, variants in lists:
        for v in variants:
            mode, _, changes = split_variant(v)
            if mode not in MODES:
                raise SystemExit(f"variants.py: {spec} {v}: mode={mode}: one of {', '.join(MODES)}")
            try:
                targets.with_fields(targets.TARGETS["sm_90"], changes)
            except ValueError as e:
                raise SystemExit(f"variants.py: {spec} {v}: {e}") from None


if __name__ == "__main__":
    lists, pos, rounds = parse(sys.argv[1:])
    check_fields(lists)
    for spec, variants in lists:
        main(spec, variants, pos, rounds)
