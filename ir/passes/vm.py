"""A Python VM for the persistent schedule: each SM runs its instruction list once per token, an
instruction starts only when its counters allow, and every read is checked against the dataflow.

Every arena element and KV-cache row carries a stamp (kernel, token) of its last write. A read must find
the stamp the dataflow promises (its producer, this token or the previous one), whatever order the SMs
ran in; a missing or wrong wait shows as a stamp mismatch (or a deadlock), named with the instruction."""
from __future__ import annotations

import collections
import random

import torch

from kiec.sampling import SamplingParams, sample

from .. import interp
from .persistent import Instr, Schedule, reads_writes
from .program import AttentionKernel, ElementwiseKernel, EmbedKernel, GemvKernel
from .simulate import attention_heads, gemv_rows


class ScheduleError(AssertionError):
    pass


class VM:
    def __init__(self, sched: Schedule, weights: dict[str, torch.Tensor], offsets: dict[str, int], arena_floats: int):
        self.s, self.p, self.w = sched, sched.program, weights
        self.off = offsets
        self.arena = torch.full((arena_floats,), float("nan"))
        self.stamp = torch.full((arena_floats,), -1, dtype=torch.int64)
        g = self.p.graph
        self.cache = {n: torch.full(st.type.shape, float("nan")) for n, st in g.states.items()}
        self.cache_stamp = {n: torch.full((st.type.shape[1], st.type.shape[2]), -1, dtype=torch.int64)
                            for n, st in g.states.items()}
        self.producer = {}
        for i, k in enumerate(self.p.kernels):
            for v in reads_writes(k, self.p)[1]:
                self.producer[v] = i
        self.counters = [0] * len(self.p.kernels)
        self.logits: list[torch.Tensor] = []

    # -- stamps
    def read(self, ins: Instr, token: int, v: str, n: int, lo: int = 0, hi: int | None = None) -> torch.Tensor:
        hi = n if hi is None else hi
        prod = self.producer[v]  # written earlier in this token, or (the logits the embedding reads) in the last
        want = prod * 1_000_000 + (token if prod < ins.kernel else token - 1)
        a, b = self.off[v] + lo, self.off[v] + hi
        got = self.stamp[a:b]
        if not bool((got == want).all()):
            bad = int((got != want).nonzero()[0])
            found = int(got[bad])
            what = (f"written by kernel {found // 1_000_000} at token {found % 1_000_000}" if found >= 0
                    else "before anything wrote it")
            raise ScheduleError(f"{ins.opcode} kernel {ins.kernel} tile {ins.tile} (token {token}) read %{v}[{lo + bad}] "
                                f"{what}; the dataflow wants kernel {prod} at token {want % 1_000_000}")
        return self.arena[a:b].clone()

    def write(self, ins: Instr, token: int, v: str, lo: int, values: torch.Tensor) -> None:
        a = self.off[v] + lo
        self.arena[a:a + values.numel()] = values
        self.stamp[a:a + values.numel()] = ins.kernel * 1_000_000 + token

    # -- instructions
    def execute(self, ins: Instr, token: int, prompt: list[int]) -> None:
        k = self.p.kernels[ins.kernel]
        if isinstance(k, EmbedKernel):
            if token < len(prompt):
                tok = prompt[token]
            else:  # the token the previous step predicts: its argmax, or the seeded draw (kiec.sampling)
                last = self.p.graph.outputs[0]
                logits = self.read(ins, token, last, self.p.graph.types[last].shape[0])
                tok = sample(logits.numpy(), self.sampling, token - 1)
                if ins.tile == 0:
                    self.generated.append(tok)
                    if tok in self.eos:  # the end: no SM starts a token past this one
                        self.stop = token
            self.write(ins, token, k.out, ins.lo, self.w[k.table][tok][ins.lo:ins.hi].float())
        elif isinstance(k, GemvKernel):
            env = {k.x: self.read(ins, token, k.x, self.p.graph.types[k.x].shape[0])}
            if k.residual:  # this tile reads (and then overwrites) only its own rows of the residual stream
                full = torch.zeros(k.n_out)
                full[ins.lo:ins.hi] = self.read(ins, token, k.residual, k.n_out, ins.lo, ins.hi)
                env[k.residual] = full
            out = gemv_rows(k, collections.ChainMap(env, self.w), ins.lo, ins.hi)
            self.write(ins, token, k.out, ins.lo, out)
        elif isinstance(k, AttentionKernel):
            self._attention_tile(ins, token, k)
        elif isinstance(k, ElementwiseKernel):
            local = {v: self.read(ins, token, v, k.n) for v in k.inputs}
            for op in k.ops:
                local[op.out] = interp.IMPLS[type(op)](op, local.__getitem__)
            self.write(ins, token, k.out, ins.lo, local[k.out][ins.lo:ins.hi])

    def _attention_tile(self, ins: Instr, token: int, k: AttentionKernel) -> None:
        """KV head g = ins.lo: its new K/V row, then its query heads over rows 0..token (or the window)."""
        g, group, dh = ins.lo, k.n_heads // k.kv_heads, k.head_dim
        qkv = self.read(ins, token, k.qkv, (k.n_heads + 2 * k.kv_heads) * dh)
        stamps = self.cache_stamp[k.append.cache]
        stamps[g, token] = token
        start = max(0, token + 1 - k.attention.window) if k.attention.window else 0
        rows = stamps[g, start:token + 1]
        if not bool((rows == torch.arange(start, token + 1)).all()):
            raise ScheduleError(f"attention kernel {ins.kernel} head {g} at token {token}: a KV row is missing "
                                f"or from the wrong token ({rows.tolist()})")
        out = attention_heads(k, qkv, self.w, self.cache[k.append.cache], token, g, g + 1)
        self.write(ins, token, k.attention.out, g * group * dh, out)

    # -- the machine
    def ready(self, ins: Instr, token: int) -> bool:
        return all(self.counters[w.counter] >= w.tiles * (token if w.previous else token + 1) for w in ins.waits)

    def run(self, prompt: list[int], steps: int, policy: str = "eager", seed: int = 0,
            sampling: SamplingParams | None = None, eos: tuple[int, ...] = ()) -> list[torch.Tensor]:
        """Decode `steps` tokens (the prompt first, then greedy or sampled; an id in `eos` ends the run);
        returns the logits of each step, and leaves the chosen tokens in self.generated.
        policy "eager" always advances the SM that is furthest ahead (it exposes waits that are too weak);
        "random" picks any ready SM."""
        rng = random.Random(seed)
        self.sampling, self.eos, self.stop, self.generated = sampling or SamplingParams(), set(eos), steps, []
        lists = self.s.lists
        pc = [0] * len(lists)
        tok = [0] * len(lists)
        last = len(self.p.kernels) - 1
        while True:
            live = [i for i in range(len(lists)) if lists[i] and tok[i] < min(steps, self.stop)]
            if not live:
                return self.logits
            ready = [i for i in live if self.ready(lists[i][pc[i]], tok[i])]
            if not ready:
                i = live[0]
                ins = lists[i][pc[i]]
                blocked = [w for w in ins.waits
                           if self.counters[w.counter] < w.tiles * (tok[i] if w.previous else tok[i] + 1)]
                raise ScheduleError(f"deadlock: SM {i} at token {tok[i]} waits in {ins.opcode} kernel {ins.kernel} "
                                    f"tile {ins.tile} on counter {blocked[0].counter}")
            i = max(ready, key=lambda j: (tok[j], lists[j][pc[j]].kernel)) if policy == "eager" else rng.choice(ready)
            ins = lists[i][pc[i]]
            self.execute(ins, tok[i], prompt)
            self.counters[ins.kernel] += 1
            if ins.kernel == last and self.counters[last] == self.s.tiles[last] * (tok[i] + 1):
                out = self.p.graph.outputs[0]
                self.logits.append(self.arena[self.off[out]:self.off[out] + self.p.graph.types[out].shape[0]].clone())
            pc[i] += 1
            if pc[i] == len(lists[i]):
                pc[i], tok[i] = 0, tok[i] + 1
