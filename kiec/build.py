"""kiec.compile: model -> artifact directory (sources, libkiec_model.so, kiec-run, weights.bin, manifest.json).

The directory appears only when complete: everything is built in a sibling temp directory that replaces
the old artifact at the end, so a failed or interrupted compile leaves the previous one intact.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from kiec import unit_cache
from kiec.codegen.emit import INCLUDE_DIR, TEMPLATES, Sources, emit, mma_blocked
from kiec.codegen.persistent import emit_persistent
from kiec.codegen.targets import TARGETS, TargetParams, target as target_params
from kiec.errors import KiecError, ModeUnsupported
from kiec.ir.passes import pipeline
from kiec.ir.passes.fuse import Unscheduled
from kiec.model import Model
from kiec.modes import DEFAULT_MODE, MODES

ABI_VERSION = 3  # 3: kiec_wait, kiec_set_stall_timeout, kiec_hung


def _progress(msg: str) -> None:
    print(f"[kiec] {msg}", file=sys.stderr, flush=True)


def check_toolchain(target: str, arch: str) -> str:
    if target != "cuda":
        raise KiecError(f"target {target!r} is not built yet (kiec builds cuda)")
    if arch not in TARGETS:
        raise KiecError(f"arch {arch!r} has no target parameters (kiec has {', '.join(TARGETS)})")
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if nvcc is None:
        raise KiecError("nvcc not found on PATH: kiec compile needs the CUDA toolkit")
    archs = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True).stdout.split()
    if f"compute_{arch.split('_')[1]}" not in archs:
        raise KiecError(f"{nvcc} cannot build for {arch} (it lists {' '.join(archs)})")
    return nvcc


def read_manifest(artifact: str, current: bool = False) -> dict:
    """An artifact directory's manifest.json; KiecError naming the directory or the file where there is none that
    reads as a JSON object, or (current) where the artifact is not of this kiec's ABI."""
    path = os.path.join(artifact, "manifest.json")
    if not os.path.isfile(path):
        raise KiecError(f"{artifact}: no manifest.json (not a kiec artifact, or an unfinished compile)")
    try:
        with open(path) as fh:
            man = json.load(fh)
    except (OSError, ValueError) as e:
        raise KiecError(f"{path}: unreadable ({e}): a damaged artifact, compile it again") from None
    if not isinstance(man, dict):
        raise KiecError(f"{path}: not a JSON object: a damaged artifact, compile it again")
    if current and man.get("abi") != ABI_VERSION:
        raise KiecError(f"{artifact}: artifact ABI {man.get('abi')}, this kiec reads {ABI_VERSION}")
    return man


def _manifest(artifact: str) -> dict | None:
    """An artifact directory's manifest.json, or None where there is none that reads as one."""
    try:
        return read_manifest(artifact)
    except KiecError:
        return None


def _reusable(like: str | None, model: Model, dtype: str) -> tuple[str | None, dict]:
    """An earlier artifact's weights.bin and its packed model tensors by (sources, shape, dtype) -> offset, when it
    was built from the same model (name and source) in the same dtype; else (None, {})."""
    man = _manifest(like) if like else None
    if man is None:
        return None, {}
    path = os.path.join(like, "weights.bin")
    if (man.get("model"), man.get("source"), man.get("dtype")) != (model.name, model.source, dtype) \
            or not os.path.isfile(path) or os.path.getsize(path) != man.get("weight_bytes"):
        return None, {}
    return path, {(tuple(w["sources"]), tuple(w["shape"]), w["dtype"], w.get("layout", "")): w["offset"]
                  for w in man.get("weights", []) if w["sources"]}


def _key(t) -> tuple:
    """How a packed model tensor is looked up in a like artifact's manifest (_reusable's keys)."""
    return t.sources, t.shape, t.dtype, t.layout


def _table_bytes(t) -> bytes:
    """A constant table's bytes in weights.bin (the schedule, descriptors, RoPE's frequencies)."""
    return np.asarray(t.values, dtype=np.int32 if t.dtype == "i32" else np.float32).tobytes()


def _same_bytes(src: Sources, like_path: str | None, like_at: dict) -> bool:
    """Whether weights.bin would be the like artifact's byte for byte: the same size, every model tensor where that
    one holds it (packed alike), every constant table the same (a variant that changes only the kernels' code)."""
    if like_path is None or os.path.getsize(like_path) != src.weight_bytes:
        return False
    ends = [t.offset for t in src.weights[1:]] + [src.weight_bytes]  # each tensor's room: its bytes, then zeros
    with open(like_path, "rb") as old:
        for t, end in zip(src.weights, ends):
            data = _table_bytes(t) if t.values else None
            if data is None and like_at.get(_key(t)) != t.offset:
                return False
            old.seek(t.offset)
            if data is not None and old.read(len(data)) != data:
                return False
            old.seek(t.offset + (len(data) if data is not None else t.nbytes))
            if old.read(end - old.tell()).strip(b"\0"):
                return False
    return True


def write_weights(model: Model, src: Sources, path: str, dtype: str, like: str | None = None) -> None:
    """Stream the packed tensors to weights.bin, one at a time (a model is never held whole in memory). like: an
    artifact built from the same model (kiec.compile's weights_like): a model tensor it packed alike is copied from
    its weights.bin instead of converted again; constant tables (the schedule among them) are always written. Where
    the whole file would be the same bytes as like's, it is a hard link to that one instead (no bytes written: the
    lent GPU machine's disk held three llama-3.1-8b artifacts, 16 GB each, not five; weights.bin is never written
    in place, so the two artifacts cannot drift apart)."""
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    like_path, like_at = _reusable(like, model, dtype)
    if _same_bytes(src, like_path, like_at):
        try:
            os.link(like_path, path)
            _progress(f"weights.bin linked to {like}'s (the same bytes)")
            return
        except OSError:  # (another filesystem, or links refused: written as below)
            pass
    done, t0, last, copied = 0, time.time(), 0.0, 0
    with open(path, "wb") as fh, open(like_path or os.devnull, "rb") as old:
        for t in src.weights:
            assert fh.tell() == t.offset, (t.name, fh.tell(), t.offset)
            at = like_at.get(_key(t))
            if t.values:
                data = _table_bytes(t)
            elif at is not None:
                old.seek(at)
                data = old.read(t.nbytes)
                copied += len(data)
            else:
                parts = [model.weights[s].to(tdt) for s in t.sources]
                w = parts[0] if len(parts) == 1 else torch.cat(parts)
                if t.layout:  # (a tensor-core GEMV's blocks: persist_mma_rows)
                    w = mma_blocked(w, t.layout)
                data = w.contiguous().view(torch.int16).numpy().tobytes()
            fh.write(data)
            fh.write(b"\0" * ((-len(data)) % 256))
            done += len(data)
            if time.time() - last > 2:
                last = time.time()
                _progress(f"weights {done / 1e9:.2f} / {src.weight_bytes / 1e9:.2f} GB ({time.time() - t0:.0f} s)")
        if fh.tell() != src.weight_bytes:
            fh.write(b"\0" * (src.weight_bytes - fh.tell()))
    if copied:
        _progress(f"{copied / 1e9:.2f} GB of it copied from {like}")
    elif like:
        _progress(f"no tensor reused from {like}: another model, source or dtype, or its weights.bin is not whole")


def nvcc_flags(gencode: str) -> list[str]:
    """How every generated unit is compiled (scripts/ptxas.py reports on the same)."""
    return ["-O3", "-std=c++17", *gencode.split(), "-Xcompiler", "-fPIC", "-I", INCLUDE_DIR, "-lineinfo"]


def nvcc_build(nvcc: str, src_dir: str, out_dir: str, gencode: str) -> None:
    """libkiec_model.so and kiec-run from src_dir's units, each unit's object from kiec/unit_cache.py where it holds
    one (units it gave are compiled again if the link fails)."""
    flags = nvcc_flags(gencode)
    units = sorted(f for f in os.listdir(src_dir) if f.endswith(".cu"))
    keys = unit_cache.unit_keys(nvcc, flags, src_dir, units, INCLUDE_DIR)
    obj_dir = os.path.abspath(os.path.join(out_dir, "obj"))
    os.makedirs(obj_dir, exist_ok=True)

    def obj_of(name):
        return os.path.join(obj_dir, name[:-3] + ".o")

    def compile_one(name, cached) -> bool:
        """Whether its object came from the cache."""
        obj = obj_of(name)
        if cached and unit_cache.fetch(keys[name], obj):
            return True
        # (in its directory by a relative name: the object holds no path of this build, so the cache can share it)
        r = subprocess.run([nvcc, *flags, "-c", name, "-o", obj], cwd=src_dir, capture_output=True, text=True)
        if r.returncode:
            raise KiecError(f"nvcc failed on {name}:\n{r.stderr[-4000:]}")
        unit_cache.store(keys[name], obj)
        return False

    def compile_all(names, cached):
        with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
            return list(pool.map(lambda name: compile_one(name, cached), names))

    hits = [name for name, hit in zip(units, compile_all(units, True)) if hit]
    if hits:
        _progress(f"{len(hits)} of {len(units)} units' objects from the cache ({unit_cache.cache_dir()})")
    link = [nvcc, "-shared", "-o", os.path.join(out_dir, "libkiec_model.so"), *map(obj_of, units), "-lcudart"]
    r = subprocess.run(link, capture_output=True, text=True)
    if r.returncode and hits:  # (an entry gone bad: the units compiled afresh, and their entries replaced)
        _progress("linking the cached objects failed; compiling those units again")
        compile_all(hits, False)
        r = subprocess.run(link, capture_output=True, text=True)
    if r.returncode:
        raise KiecError(f"linking libkiec_model.so failed:\n{r.stderr[-4000:]}")
    shutil.rmtree(obj_dir)
    r = subprocess.run([nvcc, "-O2", "-std=c++17", os.path.join(TEMPLATES, "kiec_run.cpp"), "-o",
                        os.path.join(out_dir, "kiec-run"), "-L", out_dir, "-lkiec_model", "-Xlinker", "-rpath=$ORIGIN"],  # no shell: $ORIGIN stays literal
                       capture_output=True, text=True)
    if r.returncode:
        raise KiecError(f"building kiec-run failed:\n{r.stderr[-4000:]}")


def make_manifest(model: Model, src: Sources, dtype: str, target: str, arch: str, tp: int, mode: str) -> dict:
    """manifest.json: what the artifact is, how its weights are laid out, and where its tokenizer lives."""
    return dict(
        abi=ABI_VERSION, model=model.name, source=model.source, dtype=dtype, target=target, arch=arch, tp=tp,
        mode=mode, max_seq_len=model.max_seq_len, vocab_size=model.config.vocab_size,
        eos_token_ids=list(model.config.eos_token_ids), bos_token_id=model.config.bos_token_id,
        weight_bytes=src.weight_bytes, kernels=src.kernels, **src.manifest,
        weights=[dict(name=t.name, sources=list(t.sources), shape=list(t.shape), dtype=t.dtype, offset=t.offset,
                      **({"layout": t.layout} if t.layout else {})) for t in src.weights],
        tokenizer=None if model.tokenizer is None else dict(
            kind=model.tokenizer.kind, path=os.path.abspath(model.tokenizer.path),
            chat_template=model.tokenizer.chat_template),
    )


def emit_sources(model: Model, mode: str, dtype: str, params: TargetParams, header: str,
                 ir_dir: str | None = None) -> Sources:
    """The generated sources of `model` (kiec compile's, before nvcc): a KiecError names the model where the
    scheduler or the emitter rejects it. Also for the scripts that compile them without a GPU (scripts/ptxas.py,
    code_size.py, sass.py)."""
    try:
        program = pipeline.run(model.graph, ir_dir)
    except Unscheduled as e:
        raise KiecError(f"{model.source}: {e}") from None
    try:
        return (emit_persistent if mode == "persistent" else emit)(program, dtype, model.max_seq_len, params, header)
    except ModeUnsupported as e:
        raise ModeUnsupported(f"{model.source}: {e}") from None
    except ValueError as e:
        raise KiecError(f"{model.source}: {e}") from None


def write_sources(src: Sources, directory: str) -> None:
    for name, text in src.files.items():
        with open(os.path.join(directory, name), "w") as fh:
            fh.write(text)


def _header(model: Model, dtype: str, arch: str, mode: str, tp: int) -> str:
    return f"kiec {model.name} {dtype} {arch} max_seq_len={model.max_seq_len} mode={mode} tp={tp}"


def check_replaceable(out_dir: str) -> None:
    """compile replaces out_dir whole: only where it is missing, an empty directory or an artifact (a directory whose
    manifest.json names its ABI). Anything else is the user's, and stays (it once went: `-o .` removed the directory's
    files, `-o FILE` moved the file aside)."""
    if not os.path.lexists(out_dir):
        return
    if os.path.islink(out_dir):
        raise KiecError(f"{out_dir}: a symbolic link (kiec compile would replace the link, not what it points to)")
    if not os.path.isdir(out_dir):
        raise KiecError(f"{out_dir}: exists and is not a directory (kiec compile writes an artifact directory there)")
    if os.listdir(out_dir) and "abi" not in (_manifest(out_dir) or {}):
        raise KiecError(f"{out_dir}: a directory that is not a kiec artifact (no manifest.json of one): kiec compile "
                        "replaces only an artifact or an empty directory")


def compile(model: Model, out_dir: str, target: str = "cuda", arch: str = "sm_90", tp: int = 1, mode: str | None = None,
            dtype: str = "bf16", dump_ir: bool = False, weights_like: str | None = None) -> str:
    """Build the artifact directory for `model`; returns its path. mode None: DEFAULT_MODE, or graph mode where
    persistent mode cannot build the model (said on stderr; the manifest records the mode built); a mode named is
    built or refused. weights_like: an artifact built from this same model (the caller vouches for the values: the
    same Model object, or its checkpoint unchanged; the name, source and dtype are checked): its packed tensors are
    copied instead of converted again (write_weights)."""
    fallback = mode is None and DEFAULT_MODE == "persistent"
    mode = DEFAULT_MODE if mode is None else mode
    if mode not in MODES:
        raise KiecError(f"mode {mode!r}: kiec builds graph or persistent")
    if tp != 1:
        raise KiecError(f"tp={tp}: tensor parallel is not built yet (kiec builds tp=1)")
    if dtype not in ("bf16", "f16"):
        raise KiecError(f"dtype {dtype!r}: kiec builds bf16 or f16 weights")
    out_dir = os.path.abspath(out_dir)
    check_replaceable(out_dir)
    nvcc = check_toolchain(target, arch)
    tp_ = target_params(arch)
    tmp = f"{out_dir}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        os.makedirs(os.path.join(tmp, "src"))
    except OSError as e:
        raise KiecError(f"{out_dir}: cannot make the artifact's directory there ({e.filename}: {e.strerror})") from None
    try:
        ir_dir = os.path.join(tmp, "ir") if dump_ir else None
        try:
            src = emit_sources(model, mode, dtype, tp_, _header(model, dtype, arch, mode, tp), ir_dir)
        except ModeUnsupported as e:
            if not fallback:
                raise
            _progress(f"persistent mode cannot build this model ({e}); building it in graph mode")
            mode = "graph"
            src = emit_sources(model, mode, dtype, tp_, _header(model, dtype, arch, mode, tp), ir_dir)
        if mode == "persistent" and tp_.persist_probe_relaxed_signal:
            _progress("warning: persist_probe_relaxed_signal is a timing probe: this artifact's tokens may be wrong")
        if mode == "persistent" and tp_.persist_probe_twice:
            _progress("warning: persist_probe_twice is a timing probe: this artifact is slower on purpose")
        if mode == "persistent" and tp_.persist_probe_mlp_local:
            _progress("warning: persist_probe_mlp_local is a timing probe: this artifact's tokens are wrong")
        if mode == "persistent" and tp_.persist_probe_o_local:
            _progress("warning: persist_probe_o_local is a timing probe: this artifact's tokens are wrong")
        if mode == "persistent" and tp_.persist_probe_attention_idle:
            _progress("warning: persist_probe_attention_idle is a timing probe: this artifact's tokens are wrong")
        write_sources(src, os.path.join(tmp, "src"))
        _progress(f"{len(src.kernels)} kernels, {len(src.files)} source files; compiling with nvcc")
        nvcc_build(nvcc, os.path.join(tmp, "src"), tmp, tp_.gencode)
        _progress(f"writing weights.bin ({src.weight_bytes / 1e9:.2f} GB)")
        write_weights(model, src, os.path.join(tmp, "weights.bin"), dtype, weights_like)
        manifest = make_manifest(model, src, dtype, target, arch, tp, mode)
        with open(os.path.join(tmp, "manifest.json"), "w") as fh:
            json.dump(manifest, fh, indent=1)
        old = f"{out_dir}.old-{os.getpid()}"
        moved = os.path.exists(out_dir)
        if moved:
            os.rename(out_dir, old)
        try:
            os.rename(tmp, out_dir)
        except BaseException:
            if moved:  # the artifact that was there goes back
                os.rename(old, out_dir)
            raise
        shutil.rmtree(old, ignore_errors=True)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError):  # (a full disk, a path gone): named, not a traceback
            raise KiecError(f"{out_dir}: the compile failed on a file ({e.filename or 'unnamed'}: {e.strerror or e}); "
                            "nothing was replaced") from e
        raise
    return out_dir
