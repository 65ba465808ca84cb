"""`kiec bench`: kiec against torch eager and torch.compile on the same model, weights and GPU, in one
process, with the memory ceilings measured in the same run. Prints ms/token (median, p10, p90), tok/s,
MBU (bytes read per token / time / measured read ceiling), prefill time and the ratios."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass, field

import numpy as np

from kiec.errors import KiecError, ModeUnsupported
from kiec.modes import DEFAULT_MODE


class Bar:
    """A progress bar on stderr: redrawn in place on a terminal, one line when done elsewhere (CI logs)."""

    def __init__(self, label: str, total: int, stream=None, width: int = 30):
        self.label, self.total, self.done, self.width = label, max(1, total), 0, width
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()

    def line(self) -> str:
        filled = self.width * self.done // self.total
        return f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total}"

    def step(self, n: int = 1) -> None:
        self.done = min(self.total, self.done + n)
        if self.tty:
            self.stream.write("\r" + self.line() + ("\n" if self.done == self.total else ""))
        elif self.done == self.total:
            self.stream.write(self.line() + "\n")
        self.stream.flush()


@dataclass(frozen=True)
class Stats:
    median_ms: float
    p10_ms: float
    p90_ms: float

    @staticmethod
    def of(samples_ms) -> "Stats":
        a = np.asarray(samples_ms, dtype=np.float64)
        if a.size == 0 or not np.isfinite(a).all():
            raise ValueError("timing samples must be finite and non-empty")
        return Stats(float(np.median(a)), float(np.percentile(a, 10)), float(np.percentile(a, 90)))


@dataclass
class Row:
    name: str
    stats: Stats
    bytes_per_token: int
    ceiling_tbps: float
    prefill_ms: float | None = None
    context: int = 0

    @property
    def tok_s(self) -> float:
        return 1e3 / self.stats.median_ms

    @property
    def mbu(self) -> float:
        return self.bytes_per_token / (self.stats.median_ms * 1e-3) / (self.ceiling_tbps * 1e12)


@dataclass
class Report:
    header: dict
    ceilings: dict  # read_tbps, copy_tbps
    rows: list[Row] = field(default_factory=list)
    kernels: list[dict] = field(default_factory=list)  # per kernel spec: count, us_each, bytes_each, gbps

    def contexts(self) -> list[int]:
        return sorted({r.context for r in self.rows})

    def first(self, context: int) -> Row:
        return next(r for r in self.rows if r.context == context)

    def to_dict(self) -> dict:
        return dict(header=self.header, ceilings=self.ceilings, kernels=self.kernels, rows=[
            dict(name=r.name, context=r.context, **asdict(r.stats), tok_s=r.tok_s, mbu=r.mbu,
                 bytes_per_token=r.bytes_per_token, prefill_ms=r.prefill_ms,
                 speedup_of_first=r.stats.median_ms / self.first(r.context).stats.median_ms)
            for r in self.rows])


def format_table(rep: Report) -> str:
    h = rep.header
    lines = [f"model {h['model']} | {h['dtype']} | prompt {h['prompt_len']} + {h['new_tokens']} new | {h['gpu']} | "
             f"driver {h['driver']} | torch {h['torch']} | kiec {h['commit']}",
             f"read ceiling {rep.ceilings['read_tbps']:.2f} TB/s, copy {rep.ceilings['copy_tbps']:.2f} TB/s"
             + (f"; peak {rep.ceilings['peak_gbps'] / 1e3:.2f} TB/s (the driver's memory clock x bus width)"
                if rep.ceilings.get("peak_gbps") else "")]
    for ctx in rep.contexts():
        first = rep.first(ctx)
        lines += ["", f"context {ctx}: {first.bytes_per_token / 1e9:.3f} GB read per token",
                  f"{'engine':<16}{'ms/tok med':>11}{'p10':>8}{'p90':>8}{'tok/s':>9}{'MBU':>7}{'prefill ms':>12}"
                  f"{'kiec is':>10}"]
        for r in (r for r in rep.rows if r.context == ctx):
            ratio = f"{r.stats.median_ms / first.stats.median_ms:.2f}x" if r is not first else ""
            pre = f"{r.prefill_ms:.2f}" if r.prefill_ms is not None else "-"
            lines.append(f"{r.name:<16}{r.stats.median_ms:>11.3f}{r.stats.p10_ms:>8.3f}{r.stats.p90_ms:>8.3f}"
                         f"{r.tok_s:>9.0f}{r.mbu * 100:>6.1f}%{pre:>12}{ratio:>10}")
    if rep.kernels:
        read = rep.ceilings["read_tbps"] * 1e3
        lines += ["", f"kiec's kernels (each spec's launches back to back, all layers; context {rep.kernels[0]['context']})",
                  f"{'kernel':<48}{'count':>6}{'us each':>9}{'MB each':>9}{'GB/s':>8}{'of read':>9}"]
        for k in rep.kernels:
            lines.append(f"{k['spec'][:47]:<48}{k['count']:>6}{k['us_each']:>9.2f}{k['bytes_each'] / 1e6:>9.2f}"
                         f"{k['gbps']:>8.0f}{k['gbps'] / read * 100:>8.1f}%")
    return "\n".join(lines)


def git_commit() -> str:
    if os.environ.get("KIEC_COMMIT"):  # set where the tree travels without .git (the lent GPU machine)
        return os.environ["KIEC_COMMIT"]
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        return subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


# ---------------------------------------------------------------------------------------------- GPU side


def _events_ms(fn, reps: int) -> list[float]:
    import torch
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return out


def ceiling_library(work_dir: str):
    """templates/read_ceiling.cu built once per source (its hash in the name, so that an edited source is built
    again) and loaded."""
    import ctypes
    import hashlib

    from kiec.build import check_toolchain
    from kiec.codegen.emit import INCLUDE_DIR, TEMPLATES
    src = os.path.join(TEMPLATES, "read_ceiling.cu")
    with open(src, "rb") as fh, open(os.path.join(INCLUDE_DIR, "kiec", "device_info.cuh"), "rb") as inc:
        digest = hashlib.sha1(fh.read() + inc.read()).hexdigest()[:12]
    so = os.path.join(work_dir, f"libkiec_read_ceiling_{digest}.so")
    if not os.path.exists(so):
        os.makedirs(work_dir, exist_ok=True)
        r = subprocess.run([check_toolchain("cuda", "sm_90"), "-O3", "-shared", "-Xcompiler", "-fPIC", "-arch=sm_90",
                            "-I", INCLUDE_DIR, src, "-o", so + ".tmp"], capture_output=True, text=True)
        if r.returncode:
            raise KiecError(f"building the read-ceiling kernel failed: {r.stderr[-2000:]}")
        os.replace(so + ".tmp", so)  # (no half-written library under the name a later run trusts)
    lib = ctypes.CDLL(so)
    lib.kiec_read_tbps.restype = ctypes.c_double
    lib.kiec_read_tbps.argtypes = [ctypes.c_size_t, ctypes.c_int]
    lib.kiec_peak_gbps.restype = ctypes.c_uint
    return lib


def measure_ceilings(work_dir: str, gb: float = 4.0) -> dict:
    """Streaming read over `gb` GB (bytes read / time; the MBU denominator), a device-to-device copy (bytes read +
    written / time), and the driver's peak (memory clock x bus width, GB/s; 0 where it does not say)."""
    import torch
    lib = ceiling_library(work_dir)
    read = lib.kiec_read_tbps(int(gb * 1e9) // 16 * 16, 20)  # (the median rate of a streaming read over gb GB)
    if read <= 0:
        raise KiecError("the read-ceiling kernel failed (is the GPU usable? nvidia-smi)")
    n = int(gb * 1e9) // 4
    x = torch.rand(n, device="cuda")
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    copy = float(np.median(_events_ms(lambda: y.copy_(x), 20)))
    x = y = None  # free the 8 GB before the next measurement
    torch.cuda.empty_cache()
    return dict(read_tbps=read, copy_tbps=2 * n * 4 / (copy * 1e-3) / 1e12, read_gb=gb,
                peak_gbps=int(lib.kiec_peak_gbps()))


# What one run_bench keeps loaded across its contexts: the kiec Engine and the torch decoder (with its
# compiled step), each built once; an 8B model's weights are then read from disk or generated once, not
# once per context and peer. release() frees them at the end (scripts/variants.py shares both).
_OPEN: dict = {}


def engine(artifact: str):
    """The artifact's Engine, opened once; a directory rebuilt at the same path (kiec.compile renames a new one
    into place) is opened again, not served by the engine of the one it replaced."""
    from kiec.runtime import Engine
    st = os.stat(os.path.join(artifact, "manifest.json"))
    key = ("engine", artifact, st.st_ino, st.st_mtime_ns)
    if key not in _OPEN:
        _OPEN[key] = Engine(artifact)
    return _OPEN[key]


def _torch_step(model, compiled: bool, max_seq_len: int):
    from kiec.baselines.torch_decoder import TorchDecoder, decode_fn
    key = ("decoder", id(model), max_seq_len)
    if key not in _OPEN:
        _OPEN[key] = TorchDecoder(model, max_seq_len)
    if key + (compiled,) not in _OPEN:
        _OPEN[key + (compiled,)] = decode_fn(_OPEN[key], compiled)
    return _OPEN[key], _OPEN[key + (compiled,)]


def release() -> None:
    for v in _OPEN.values():
        if hasattr(v, "close"):
            v.close()
    _OPEN.clear()
    try:
        import torch
        torch.cuda.empty_cache()
    except Exception:  # no torch or no GPU: nothing to free
        pass


def check_numbers(prompt_len: int, new_tokens: int, contexts: list[int]) -> None:
    """A bench's numbers, before any work (a compile takes minutes)."""
    if prompt_len < 1:
        raise KiecError(f"prompt length {prompt_len}: at least 1 token")
    if new_tokens < 1:
        raise KiecError(f"new tokens {new_tokens}: at least 1")
    if not contexts or min(contexts) < 0:
        raise KiecError(f"contexts {list(contexts)}: at least one, each 0 or more tokens")


def require_gpu() -> None:
    """A bench times on a CUDA GPU: without one it stops before compiling anything."""
    import torch
    if not torch.cuda.is_available():
        raise KiecError("kiec bench times on a CUDA GPU, and torch sees none here (`kiec compile` runs without one)")


def positions_needed(context: int, prompt_len: int, new_tokens: int) -> int:
    """The max_seq_len a timing from `context` needs: the timed steps past the context or the prompt, and 32 of
    slack (time_kiec_modes' untimed steps before each chunk run past the last timed one)."""
    return max(context, prompt_len) + new_tokens + 32


def time_kiec(artifact: str, prompt_len: int, new_tokens: int, context: int, chunk: int = 16) -> tuple[Stats, float]:
    """One artifact's ms per step (median, p10, p90 over chunks of `chunk` steps) and time to first token."""
    return time_kiec_modes([artifact], prompt_len, new_tokens, context, chunk)[0]


def time_kiec_modes(artifacts: list[str], prompt_len: int, new_tokens: int, context: int, chunk: int = 16,
                    rewarm: int = 2) -> list[tuple[Stats, float]]:
    """time_kiec for several artifacts of one model (its modes), their chunks interleaved: every round times one
    chunk of each, the order turned round from one round to the next (A B, B A, ...), so that a drift of the GPU's
    state over the run (its clocks after the compile and the ceiling measurement) falls on every mode alike. Timed
    one after the other instead, smollm2-135m's graph mode took 0.490 ms first and 0.478 second, persistent mode
    0.484 both. Interleaved, each chunk after another mode's starts on that mode's L2 and caches: without untimed
    steps first, graph mode took 0.484-0.485 ms there against 0.477-0.478 in scripts/variants.py's runs of a whole
    timing at a time, persistent mode 0.487-0.488 against 0.482-0.483 (bench/RESULTS.md, 2026-12-02, twenty-third
    session). So with several artifacts every chunk runs `rewarm` steps untimed before its own."""
    engs = [engine(a) for a in artifacts]
    ttft, start = [], max(context, prompt_len)
    for eng in engs:
        prompt = list(np.random.default_rng(0).integers(0, eng.vocab_size, size=prompt_len))
        for _ in eng.stream([int(t) for t in prompt], 2):  # warm-up and time to first token
            pass
        ttft.append(eng.last_ttft_s * 1e3)
        eng.time_steps(start, 8, warmup=8)
    chunks = max(1, new_tokens // chunk)
    bar = Bar(f"  kiec, {chunks} x {chunk} steps" + (f" x {len(engs)} modes" if len(engs) > 1 else ""), chunks)
    samples: list[list[float]] = [[] for _ in engs]
    for i in range(chunks):
        order = range(len(engs)) if i % 2 == 0 else reversed(range(len(engs)))
        for k in order:
            samples[k].append(engs[k].time_steps(start + i * chunk, chunk, warmup=rewarm if len(engs) > 1 else 0))
        bar.step()
    return [(Stats.of(s), t) for s, t in zip(samples, ttft)]


def time_kernels(artifact: str, context: int, reps: int = 20) -> list[dict]:
    """Each kernel spec alone: all its launches (every layer's copy, so weights do not stay in L2) timed back
    to back; GB/s from the bytes the manifest says each launch reads (attention: its K/V rows at `context`)."""
    eng = engine(artifact)
    eng.time_steps(context, 4, warmup=0)  # a real cache up to `context` + 4 for the attention launches
    pos = context + 4
    groups: dict[str, list[int]] = {}
    for i, k in enumerate(eng.manifest["kernels"]):
        groups.setdefault(k.get("spec", k["family"]), []).append(i)
    out = []
    bar = Bar(f"  {len(groups)} kernel specs", len(groups))
    for spec, idx in groups.items():
        k = eng.manifest["kernels"][idx[0]]
        nbytes = k.get("bytes", 0) if "bytes_per_row" not in k else k["bytes_per_row"] * (pos + 1)
        us = eng.time_launches(idx, reps) * 1e3 / len(idx)
        out.append(dict(spec=spec, family=k["family"], count=len(idx), us_each=us, bytes_each=nbytes,
                        gbps=nbytes / (us * 1e-6) / 1e9 if us > 0 else 0.0, context=context))
        bar.step()
    return sorted(out, key=lambda r: -r["us_each"] * r["count"])


def time_torch(model, compiled: bool, prompt_len: int, new_tokens: int, context: int, max_seq_len: int):
    import torch

    dec, step = _torch_step(model, compiled, max_seq_len)
    prompt = torch.randint(0, model.config.vocab_size, (prompt_len,), device="cuda")
    with torch.no_grad():
        pre = _events_ms(lambda: dec(prompt, torch.arange(prompt_len, device="cuda")), 3)
        tok = torch.zeros(1, dtype=torch.long, device="cuda")
        start = max(context, prompt_len)
        name = "torch.compile" if compiled else "eager"
        warm = Bar(f"  {name} warm-up{' (the first step compiles)' if compiled else ''}", 8)
        for i in range(8):
            tok = step(tok, torch.tensor([start + i], device="cuda")).clone()
            warm.step()
        poss = [torch.tensor([start + i], device="cuda") for i in range(new_tokens)]
        samples, bar = [], Bar(f"  {name}, {new_tokens} steps", new_tokens)
        for p in poss:
            samples += _events_ms(lambda: step(tok, p), 1)
            bar.step()
    return Stats.of(samples), float(np.median(pre))


def header(model_name: str, dtype: str, prompt_len: int, new_tokens: int) -> dict:
    import torch
    drv = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip().splitlines()
    return dict(model=model_name, dtype=dtype, prompt_len=prompt_len, new_tokens=new_tokens,
                gpu=torch.cuda.get_device_name(0), driver=drv[0] if drv else "?", torch=torch.__version__,
                commit=git_commit(), python=platform.python_version())


def run_bench(target: str, vs: list[str], prompt_len: int, new_tokens: int, contexts: list[int], work_dir: str,
              json_path: str | None = None, log=lambda m: print(m, file=sys.stderr, flush=True),
              modes: tuple[str, ...] | None = None) -> Report:
    """Each context: kiec (each mode a MODEL is compiled in), then each peer, on the same weights; ceilings
    measured first, in this process. modes None: DEFAULT_MODE, or graph mode where persistent mode cannot build
    the model (as kiec.compile without a mode); modes named are built or refused."""
    import kiec

    check_numbers(prompt_len, new_tokens, contexts)
    require_gpu()
    need = positions_needed(max(contexts), prompt_len, new_tokens)
    if os.path.isdir(target):
        from kiec.build import read_manifest
        man = read_manifest(target, current=True)
        artifacts = {man.get("mode", "graph"): target}
        model = kiec.load(man["source"], dtype="bf16", max_seq_len=man["max_seq_len"])
        if man["max_seq_len"] < need:
            raise kiec.KiecError(f"{target}: max_seq_len {man['max_seq_len']} < the {need} positions this bench needs")
    else:
        model = kiec.load(target, dtype="bf16", max_seq_len=need)
        artifacts = {}

        def build(mode: str) -> None:
            artifacts[mode] = os.path.join(work_dir, model.name + ("" if mode == "graph" else f"-{mode}"))
            log(f"compiling {target} -> {artifacts[mode]} ({mode} mode)")
            kiec.compile(model, artifacts[mode], mode=mode,  # the other mode's tensors copied, not converted again
                         weights_like=next((a for m, a in artifacts.items() if m != mode), None))
        for mode in modes or (DEFAULT_MODE,):
            try:
                build(mode)
            except ModeUnsupported as e:
                del artifacts[mode]
                if modes is not None or mode == "graph":
                    raise
                log(f"{e}; timing graph mode instead")
                build("graph")
    log("measuring the memory ceilings")
    ceil = measure_ceilings(work_dir)
    rep = Report(header(model.name, "bf16", prompt_len, new_tokens), ceil)
    try:
        _time_contexts(rep, model, artifacts, vs, prompt_len, new_tokens, contexts, need, log)
    finally:
        release()
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(rep.to_dict(), fh, indent=1)
    return rep


def _time_contexts(rep: Report, model, artifacts: dict[str, str], vs, prompt_len, new_tokens, contexts, need,
                   log) -> None:
    from kiec.summary import bytes_per_token

    ceil = rep.ceilings
    for ctx in contexts:
        nbytes = bytes_per_token(model.graph, context=max(ctx, prompt_len) + new_tokens // 2).read
        log(f"context {ctx}: timing kiec ({', '.join(artifacts)}" + (", interleaved)" if len(artifacts) > 1 else ")"))
        timed = time_kiec_modes(list(artifacts.values()), prompt_len, new_tokens, ctx)
        for mode, (stats, ttft) in zip(artifacts, timed):
            rep.rows.append(Row(f"kiec ({mode})", stats, nbytes, ceil["read_tbps"], ttft, ctx))
        if ctx == contexts[0] and "graph" in artifacts:  # persistent mode is one launch: no kernels to time apart
            log(f"context {ctx}: timing each kernel")
            rep.kernels = time_kernels(artifacts["graph"], max(ctx, prompt_len))
        for peer in vs:
            log(f"context {ctx}: timing {peer}")
            try:
                s, pre = time_torch(model, peer == "torch-compile", prompt_len, new_tokens, ctx, need)
            except NotImplementedError as e:
                log(f"{peer}: skipped ({e})")
                continue
            rep.rows.append(Row(peer, s, nbytes, ceil["read_tbps"], pre, ctx))
