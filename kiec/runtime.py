"""kiec.Engine: a compiled artifact on a GPU, through libkiec_model.so's C ABI (ctypes)."""
from __future__ import annotations

import ctypes
import itertools
import os
import shutil
import tempfile
import time
from typing import Iterator

import numpy as np

from kiec.build import read_manifest
from kiec.errors import KiecError
from kiec.sampling import SamplingParams, check_request, sample


_LOADS = itertools.count()


def load_library(path: str) -> ctypes.CDLL:
    """The shared library at `path` as the file is now. The dynamic loader hands back a library already loaded
    under the same name without looking at the file again, and ctypes never unloads one: an artifact rebuilt at
    the same path (kiec.compile renames the new one into place) would otherwise run its predecessor's kernels on
    its own weights and manifest. Each load goes through a link whose name this process never used before; the
    loader still shares one copy of a file that is already loaded (it matches files by inode too)."""
    try:
        d = tempfile.mkdtemp(prefix="kiec-lib-")
    except OSError as e:
        raise KiecError(f"{path}: no temporary directory for the link it is loaded through ({e}); set TMPDIR") from e
    try:
        link = os.path.join(d, f"{next(_LOADS)}-{os.path.basename(path)}")
        os.symlink(os.path.abspath(path), link)
        return ctypes.CDLL(link)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def traceable(manifest: dict) -> bool:
    """Whether an artifact's kernel carries the traced step's code (persist_trace_code; Engine.trace needs it):
    its manifest says so, and artifacts from before the field all do."""
    return bool(manifest.get("traceable", True))


class Engine:
    """Same step/generate API as kiec.Reference, plus stream(). Needs the GPU the artifact was built for."""

    # stream(): the first token may take this long more per prompt token (the kernel runs the prompt position by
    # position first), on top of stall_timeout_s
    PROMPT_ALLOWANCE_S = 0.05
    # stream(): how long a hung generation asked to stop may take to end (kiec_wait's limit; past it the runtime asks
    # again and waits 5 s more before it calls the kernel hung)
    STOP_WAIT_S = 5.0

    def __init__(self, artifact_dir: str, device: int = 0, stall_timeout_s: float = 60.0):
        """stall_timeout_s: the longest a token (after the prompt's allowance for the first), a step or a timed run
        may take before it counts as hung: the kernel is then asked to stop and the call raises KiecError."""
        self.manifest = read_manifest(artifact_dir, current=True)
        self.artifact_dir = artifact_dir
        lib = load_library(os.path.join(artifact_dir, "libkiec_model.so"))
        lib.kiec_create.restype = ctypes.c_void_p
        lib.kiec_create.argtypes = [ctypes.c_char_p, ctypes.c_int]
        lib.kiec_last_error.restype = ctypes.c_char_p
        lib.kiec_destroy.argtypes = [ctypes.c_void_p]
        lib.kiec_step.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_float)]
        lib.kiec_launch.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int]
        lib.kiec_host_tokens.restype = ctypes.POINTER(ctypes.c_int)
        lib.kiec_host_tokens.argtypes = [ctypes.c_void_p]
        lib.kiec_wait.argtypes = [ctypes.c_void_p, ctypes.c_double]
        lib.kiec_hung.argtypes = [ctypes.c_void_p]
        lib.kiec_set_stall_timeout.argtypes = [ctypes.c_void_p, ctypes.c_double]
        lib.kiec_time_steps.restype = ctypes.c_float
        lib.kiec_time_steps.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.kiec_time_launches.restype = ctypes.c_float
        lib.kiec_time_launches.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int]
        lib.kiec_configure.argtypes = [ctypes.c_void_p, ctypes.c_float, ctypes.c_float, ctypes.c_ulonglong,
                                       ctypes.POINTER(ctypes.c_int), ctypes.c_int]
        lib.kiec_stop.argtypes = [ctypes.c_void_p]
        lib.kiec_trace.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_ulonglong)]
        self._lib = lib
        self.mode = self.manifest.get("mode", "graph")
        self.vocab_size = self.manifest["vocab_size"]
        self.max_seq_len = self.manifest["max_seq_len"]
        self._h = lib.kiec_create(os.path.join(artifact_dir, "weights.bin").encode(), device)
        if not self._h:
            raise KiecError(f"{artifact_dir}: {self._error()}")
        self.last_ttft_s: float | None = None
        self._hung: str | None = None  # a kernel that did not end when asked to stop: the engine cannot go on
        self.stall_timeout_s = stall_timeout_s

    @property
    def stall_timeout_s(self) -> float:
        return self._stall_s

    @stall_timeout_s.setter
    def stall_timeout_s(self, seconds: float) -> None:
        self._check(self._lib.kiec_set_stall_timeout(self._h, float(seconds)))  # (its check: > 0)
        self._stall_s = float(seconds)

    def _error(self) -> str:
        return self._lib.kiec_last_error().decode()

    def _failure(self) -> str:
        """The last error, remembered when the runtime found the kernel still running after a stop (kiec_hung)."""
        msg = self._error()
        if self._lib.kiec_hung(self._h):
            self._hung = msg
        return msg

    def _check(self, rc: int) -> None:
        if rc != 0:
            raise KiecError(self._failure())

    def _usable(self) -> None:
        if getattr(self, "_hung", None):
            raise KiecError(f"this Engine's kernel did not stop ({self._hung}); open the artifact in a new process")

    def close(self) -> None:
        if getattr(self, "_h", None):
            if not getattr(self, "_hung", None):  # freeing memory a running kernel uses would block for good
                self._lib.kiec_destroy(self._h)
            self._h = None

    __del__ = close

    def step(self, token_id: int, pos: int) -> np.ndarray:
        """One decode step at (token, pos) on the current KV cache; float32 logits [vocab]."""
        self._usable()
        logits = np.empty(self.vocab_size, dtype=np.float32)
        self._check(self._lib.kiec_step(self._h, int(token_id), int(pos),
                                        logits.ctypes.data_as(ctypes.POINTER(ctypes.c_float))))
        return logits

    def stream(self, prompt_ids: list[int], max_new_tokens: int = 256, sampling: SamplingParams | None = None,
               stop_at_eos: bool = False) -> Iterator[int]:
        """Tokens as the GPU makes them, none waiting for the host. Persistent mode chooses every token on the
        device (argmax, or kiec.sampling's draw) and ends at EOS there; closing the iterator early stops the
        kernel. Graph mode queues every greedy step at once; with sampling (temperature > 0) each step's logits
        come back and the host draws, one synchronization per token."""
        self._usable()
        check_request(prompt_ids, max_new_tokens, self.max_seq_len)  # the runtime checks again, in C
        eos = list(self.manifest.get("eos_token_ids") or []) if stop_at_eos else []
        if self.mode != "persistent" and sampling is not None and not sampling.greedy:
            yield from self._sampled(prompt_ids, max_new_tokens, sampling, set(eos))
            return
        if self.mode == "persistent":
            s = sampling or SamplingParams()
            self._check(self._lib.kiec_configure(self._h, s.temperature, s.top_p, s.seed,
                                                 (ctypes.c_int * max(1, len(eos)))(*eos), len(eos)))
        arr = (ctypes.c_int * len(prompt_ids))(*prompt_ids)
        t0 = time.perf_counter()
        self._check(self._lib.kiec_launch(self._h, arr, len(prompt_ids), int(max_new_tokens)))
        out = self._lib.kiec_host_tokens(self._h)
        first = len(prompt_ids) - 1
        done = stalled = False
        limit, since = self.stall_timeout_s + self.PROMPT_ALLOWANCE_S * len(prompt_ids), t0
        try:
            for p in range(first, first + max_new_tokens):
                while out[p] == -1:
                    if time.perf_counter() - since > limit:
                        stalled = True
                        self._lib.kiec_stop(self._h)
                        rc = self._lib.kiec_wait(self._h, self.STOP_WAIT_S)
                        after = "asked to stop, it stopped" if rc == 0 else self._failure()
                        raise KiecError(f"no token at position {p} within {limit:.3g} s: the generation hung ({after})")
                if out[p] == -2:  # the device ended the generation (EOS)
                    break
                if p == first:
                    self.last_ttft_s = time.perf_counter() - t0
                yield out[p]
                if out[p] in eos and self.mode != "persistent":
                    break  # graph mode: the queued steps still run on
                since, limit = time.perf_counter(), self.stall_timeout_s
            done = True
        finally:
            if not stalled:  # (a stall stopped it already)
                if not done:
                    self._lib.kiec_stop(self._h)
                self._check(self._lib.kiec_wait(self._h, self.stall_timeout_s))

    def _sampled(self, prompt_ids: list[int], max_new_tokens: int, sampling: SamplingParams,
                 eos: set[int]) -> Iterator[int]:  # (stream checked the request)
        t0 = time.perf_counter()
        for pos, tok in enumerate(prompt_ids):
            logits = self.step(tok, pos)
        for i in range(max_new_tokens):
            pos = len(prompt_ids) - 1 + i
            nxt = sample(logits, sampling, pos)
            if i == 0:
                self.last_ttft_s = time.perf_counter() - t0
            yield nxt
            if nxt in eos:
                break
            if i < max_new_tokens - 1:
                logits = self.step(nxt, pos + 1)

    def generate(self, prompt_ids: list[int], max_new_tokens: int = 16, sampling: SamplingParams | None = None,
                 stop_at_eos: bool = False) -> list[int]:
        return list(self.stream(prompt_ids, max_new_tokens, sampling, stop_at_eos))

    def time_launches(self, indices: list[int], reps: int = 20) -> float:
        """Milliseconds per pass of the given launches (indices into manifest["kernels"]), run back to back."""
        self._usable()
        arr = (ctypes.c_int * len(indices))(*indices)
        ms = self._lib.kiec_time_launches(self._h, arr, len(indices), reps)
        if ms < 0:
            self._check(-1)
        return ms

    def trace(self, pos: int, steps: int = 4, warm: int = 0) -> np.ndarray:
        """Persistent mode: in-kernel timestamps of the decode step at `pos` (run as the second of `steps` steps
        from pos - 1): [instructions, slots] in the artifact's instruction order, the slots named by
        manifest["trace_slots"] (codegen/persistent_abi.py's TRACE_SLOTS says what each holds). warm: that many
        traced launches first, their recordings dropped (the traced step's own code paths and the recording's
        pages then run a second time, not a first). Needs an artifact built with the traced step's code
        (persist_trace_code 1; the default kernel has none: scripts/trace_summary.py builds such a copy)."""
        if not traceable(self.manifest):
            raise KiecError(f"{self.artifact_dir}: compiled without the trace's code (persist_trace_code 0): "
                            f"Engine.trace needs an artifact compiled with it")
        self._usable()
        n, slots = self.manifest["instructions"], len(self.manifest["trace_slots"])
        for _ in range(warm + 1):
            self._check(self._lib.kiec_trace(self._h, pos, None))
            self.time_steps(pos - 1, steps, warmup=0)
        out = np.zeros((n, slots), dtype=np.uint64)
        self._check(self._lib.kiec_trace(self._h, -1, out.ctypes.data_as(ctypes.POINTER(ctypes.c_ulonglong))))
        return out

    def time_steps(self, pos: int, steps: int, warmup: int = 8) -> float:
        """Milliseconds per decode step (graph replays, or one persistent launch, timed with CUDA events),
        starting at `pos`."""
        self._usable()
        ms = self._lib.kiec_time_steps(self._h, pos, warmup, steps)
        if ms < 0:
            self._check(-1)
        return ms
