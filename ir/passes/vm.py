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
from . import phases
from .phases import TOKEN, Instr, Schedule, item_rows, lead_rows, partials, reads_writes, share_end_rows, unit_rows
from .program import AttentionKernel, ElementwiseKernel, EmbedKernel, GemvKernel
from .simulate import attention_split, gemv_dots, gemv_finish, gemv_rows, merge_splits, split_rows


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
        self.producer = {}  # value -> the phase (counter) that writes it
        for c, (i, opcode) in enumerate(sched.phases):
            for v in reads_writes(self.p.kernels[i], self.p, opcode)[1]:
                self.producer[v] = c
        self.counters = [0] * len(sched.phases)
        # attention partials per layer: o [kv_heads, splits, group, dh], m and l [kv_heads, splits, group]
        self.parts = {}
        for i, s in sched.splits.items():
            k = self.p.kernels[i]
            group = k.n_heads // k.kv_heads
            self.parts[i] = dict(o=torch.full((k.kv_heads, s, group, k.head_dim), float("nan")),
                                 m=torch.full((k.kv_heads, s, group), float("nan")),
                                 l=torch.full((k.kv_heads, s, group), float("nan")),
                                 stamp=torch.full((k.kv_heads, s), -1, dtype=torch.int64))
        # consumer_merges: attention's output value -> its kernel, whose partials its readers merge themselves
        self.merged = ({self.p.kernels[i].attention.out: i for i in sched.splits} if sched.consumer_merges else {})
        self.logits: list[torch.Tensor] = []
        # GEMVs dealt to the item (Schedule.item_segs): per kernel, each row's partial sums (gate and up for a
        # SiLU-mul) a leading tile published (its lead unit's), and their stamp
        self.carry = {i: dict(value=torch.full((self.p.kernels[i].n_out, 2), float("nan")),
                              stamp=torch.full((self.p.kernels[i].n_out,), -1, dtype=torch.int64))
                      for i in sched.item_segs}

    # -- stamps
    def wanted(self, ins: Instr, token: int, v: str) -> int:
        """The stamp a read of v by `ins` at `token` must find: its producer's, this token's (written earlier in it)
        or the last one's (the logits the embedding reads)."""
        prod = self.producer[v]
        return prod * 1_000_000 + (token if prod < ins.counter else token - 1)

    def read(self, ins: Instr, token: int, v: str, n: int, lo: int = 0, hi: int | None = None) -> torch.Tensor:
        hi = n if hi is None else hi
        prod, want = self.producer[v], self.wanted(ins, token, v)
        a, b = self.off[v] + lo, self.off[v] + hi
        got = self.stamp[a:b]
        if not bool((got == want).all()):
            bad = int((got != want).nonzero()[0])
            found = int(got[bad])
            what = (f"written by phase {found // 1_000_000} at token {found % 1_000_000}" if found >= 0
                    else "before anything wrote it")
            raise ScheduleError(f"{ins.opcode} kernel {ins.kernel} tile {ins.tile} (token {token}) read "
                                f"%{v}[{lo + bad}] {what}; the dataflow wants phase {prod} at token "
                                f"{want % 1_000_000}")
        return self.arena[a:b].clone()

    def write(self, ins: Instr, token: int, v: str, lo: int, values: torch.Tensor) -> None:
        a = self.off[v] + lo
        self.arena[a:a + values.numel()] = values
        self.stamp[a:a + values.numel()] = ins.counter * 1_000_000 + token

    # -- instructions
    def first_row(self, ins: Instr) -> int:
        """The first output a GEMV tile writes: its first row's, unless the tile is dealt to the item and starts
        mid-unit (lead_rows: partials it publishes for the tile before)."""
        return ins.lo + (lead_rows(ins, unit_rows(self.s, ins.kernel)) if ins.kernel in self.carry else 0)

    def end_row(self, ins: Instr) -> int:
        """The row after the last output a GEMV tile writes: its last row's, or the end of its last unit where it
        is dealt to the item (share_end_rows: completed with the next tile's partials)."""
        return share_end_rows(ins, unit_rows(self.s, ins.kernel)) if ins.kernel in self.carry else ins.hi

    def trailing_rows(self, ins: Instr) -> range:
        """The rows a GEMV tile dealt to the item completes with the next tile's partials: its last row where it ends
        mid-row (its last block's 16 where its items are block pages), and the rest of its last unit (none where it
        ends with a whole unit)."""
        if ins.kernel not in self.carry or ins.opcode != "gemv":  # (not select's instruction: the LM head holds it)
            return range(0)
        return range(ins.hi - (item_rows(self.s, ins.kernel) if ins.tail else 0), self.end_row(ins))

    def gemv_inputs(self, ins: Instr) -> list[tuple[str, int, int, int]]:
        """What a GEMV tile reads, (value, its length, lo, hi): all of x, and its own rows of the residual stream it
        then overwrites."""
        k = self.p.kernels[ins.kernel]
        n = self.p.graph.types[k.x].shape[0]
        return [(k.x, n, 0, n)] + ([(k.residual, k.n_out, self.first_row(ins), self.end_row(ins))]
                                   if k.residual else [])

    def gemv_reads(self, ins: Instr, token: int) -> torch.Tensor:
        """A GEMV tile's reads and math: its outputs, not yet written. A tile dealt to the item sums only its own
        segments of each row; it publishes its lead unit's here (the device stores each as soon as it is summed),
        and completes its trailing rows with the next tile's partials, which must be this token's (`carry_pending`
        held the tile back until they were)."""
        k = self.p.kernels[ins.kernel]
        env = {}
        for v, n, lo, hi in self.gemv_inputs(ins):
            env[v] = torch.zeros(n)
            env[v][lo:hi] = (self._merged_x(ins, token, v) if self._merges_x(ins, token, v)
                             else self.read(ins, token, v, n, lo, hi))
        env = collections.ChainMap(env, self.w)
        segs = self.s.item_segs.get(ins.kernel)
        if not segs:
            return gemv_rows(k, env, ins.lo, ins.hi)
        if k.epilogue not in ("store", "residual", "silu_mul", "argmax"):
            raise ScheduleError(f"gemv kernel {ins.kernel}: dealt to the item with a {k.epilogue} epilogue")
        width, stamp, carry = k.k // segs, ins.counter * 1_000_000 + token, self.carry[ins.kernel]
        first, end, trailing = self.first_row(ins), self.end_row(ins), self.trailing_rows(ins)
        rows = item_rows(self.s, ins.kernel)  # (an item's rows: its first and last rows start and end alike)
        sums = []  # per row of [first, end): its dot products (gate and up for a SiLU-mul)
        for row in range(ins.lo, end):
            lo = ins.head if row < ins.lo + rows else 0
            hi = ins.tail if ins.hi - rows <= row < ins.hi and ins.tail else segs if row < ins.hi else 0
            own = gemv_dots(k, env, row, row + 1, slice(lo * width, hi * width))  # (none past the share: zeros)
            if row < first:  # the lead unit's: published for the tile before
                carry["value"][row, :len(own)], carry["stamp"][row] = own, stamp
                continue
            if row in trailing:  # the rest of it: the next tile's partials, this token's
                if int(carry["stamp"][row]) != stamp:
                    raise ScheduleError(f"gemv kernel {ins.kernel} tile {ins.tile} (token {token}) completed row "
                                        f"{row} with a partial stamped {int(carry['stamp'][row])}; the dataflow wants "
                                        f"{stamp}")
                own = own + carry["value"][row, :len(own)]
            sums.append(own)
        dots = torch.stack(sums).T.reshape(-1)  # (SiLU-mul: the gate rows, then the up rows)
        return gemv_finish(k, env, first, end, dots)

    def carry_pending(self, ins: Instr, token: int) -> bool:
        """A GEMV tile that ends mid-unit: whether the next tile has yet to publish this token's partials of that unit
        (the device loads their words until they carry the tag)."""
        stamp = ins.counter * 1_000_000 + token
        return any(int(self.carry[ins.kernel]["stamp"][r]) != stamp for r in self.trailing_rows(ins))

    def execute(self, ins: Instr, token: int, prompt: list[int], out: torch.Tensor | None = None) -> bool:
        """Runs one instruction (a GEMV whose outputs `gemv_reads` made earlier: only its writes); whether it bumps
        its phase counter (an attention split only when it is its KV head's last arrival)."""
        k = self.p.kernels[ins.kernel]
        if ins.opcode == "select":
            self._select(ins, token, prompt)
        elif isinstance(k, EmbedKernel):
            tok = prompt[0] if token == 0 else self._token(ins, token)
            self.write(ins, token, k.out, ins.lo, self.w[k.table][tok][ins.lo:ins.hi].float())
        elif isinstance(k, GemvKernel):
            self.write(ins, token, k.out, self.first_row(ins), self.gemv_reads(ins, token) if out is None else out)
        elif ins.opcode == "attention":
            self._attention_split(ins, token, k)
            key, want = (ins.kernel, ins.lo), self.arrivals(ins.kernel)
            before = self.arrived.get(key, 0)
            # the owner merges (ready: the others' partials came), or leaves the merge to attention's readers
            # (consumer_merges); either way it arrives for all and counts for the head
            consumer = self._consumer_merged(ins.kernel, token)
            if self._by_owner(ins, token) or consumer:
                if not self._owns(ins, token):
                    return False
                if before != want * token:
                    raise ScheduleError(f"attention kernel {ins.kernel} head {ins.lo}: token {token}'s owner found "
                                        f"{before} arrivals, not the {want * token} of the tokens before")
                self.arrived[key] = before + want
                if not consumer:
                    self._combine(ins, token, k)
                return True
            if before < want * token:  # the device counts a token's arrivals on top of all the earlier ones
                raise ScheduleError(f"attention kernel {ins.kernel} head {ins.lo} split {ins.tile % want} arrived at "
                                    f"token {token} before the splits of token {token - 1} all had ({before} of "
                                    f"{want * token} arrivals)")
            self.arrived[key] = before + 1
            if self.arrived[key] != want * (token + 1):
                return False
            self._combine(ins, token, k)
        elif isinstance(k, ElementwiseKernel):
            local = {v: self.read(ins, token, v, k.n) for v in k.inputs}
            for op in k.ops:
                local[op.out] = interp.IMPLS[type(op)](op, local.__getitem__)
            self.write(ins, token, k.out, ins.lo, local[k.out][ins.lo:ins.hi])
        return True

    def _select(self, ins: Instr, token: int, prompt: list[int]) -> None:
        """The token after this step: the prompt's next one, or the argmax or seeded draw (kiec.sampling) of
        this step's logits; EOS ends the run (no SM starts a token past this one)."""
        last = self.p.graph.outputs[0]
        logits = self.read(ins, token, last, self.p.graph.types[last].shape[0])
        if token + 1 < len(prompt):
            tok = prompt[token + 1]
        else:
            tok = sample(logits.numpy(), self.sampling, token)
            self.generated.append(tok)
            if tok in self.eos:
                self.stop = token + 1
        self.tokens[token + 1] = (tok, ins.counter * 1_000_000 + token)

    def _token(self, ins: Instr, token: int) -> int:
        tok, stamp = self.tokens.get(token, (None, -1))
        want = self.producer[TOKEN] * 1_000_000 + token - 1
        if stamp != want:
            when = "before select wrote it" if stamp < 0 else f"stamped {stamp}"
            raise ScheduleError(f"{ins.opcode} kernel {ins.kernel} tile {ins.tile} (token {token}) read the token "
                                f"{when}; the dataflow wants {want}")
        return tok

    def _attention_split(self, ins: Instr, token: int, k: AttentionKernel) -> None:
        """KV head g = ins.lo, split s: its rows of the context (none when the context is too short for s);
        the split that holds row `token` appends the new K/V row first."""
        split = self._split(ins, token)
        if split is None:
            return
        g, s, lo, hi = split
        n = (k.n_heads + 2 * k.kv_heads) * k.head_dim
        if k.qkv in self.s.spin:  # as the device: only its query heads' rows, and the new K/V row's if it appends
            qkv = torch.full((n,), float("nan"))
            for a, b in self._qkv_rows(k, g, hi == token + 1):
                qkv[a:b] = self.read(ins, token, k.qkv, n, a, b)
        else:
            qkv = self.read(ins, token, k.qkv, n)
        if hi == token + 1:
            self.cache_stamp[k.append.cache][g, token] = token
        self._check_rows(ins, token, lo, hi, "a KV row is missing or from the wrong token")
        o, m, l = attention_split(k, qkv, self.w, self.cache[k.append.cache], token, g, lo, hi)
        part = self.parts[ins.kernel]
        part["o"][g, s], part["m"][g, s], part["l"][g, s] = o, m, l
        part["stamp"][g, s] = ins.counter * 1_000_000 + token

    @staticmethod
    def _qkv_rows(k: AttentionKernel, g: int, appends: bool) -> list[tuple[int, int]]:
        """The [lo, hi) ranges of the packed qkv a split of KV head g reads: its query heads, and the head's new
        k and v when it appends the position's row."""
        dh, group = k.head_dim, k.n_heads // k.kv_heads
        rows = [(g * group * dh, (g + 1) * group * dh)]
        if appends:
            rows += [((k.n_heads + j) * dh, (k.n_heads + j + 1) * dh) for j in (g, k.kv_heads + g)]
        return rows

    def _split(self, ins: Instr, token: int) -> tuple[int, int, int, int] | None:
        """(KV head g = ins.lo, the chunk c of split_rows this split takes, and its rows [lo, hi) of the context
        at `token`); None when the context is too short for the split. The chunk is the split's, or with
        newest_first the splits' in use counted from the last (split 0 holds the token's row); its partial's slot."""
        splits = self.s.splits[ins.kernel]
        s = ins.tile % splits
        rows = split_rows(self.p.kernels[ins.kernel], token, splits, self.s.min_keys, self.s.solo_keys)
        if s >= len(rows):
            return None
        c = len(rows) - 1 - s if self.s.newest_first else s
        return ins.lo, c, *rows[c]

    def _check_rows(self, ins: Instr, token: int, lo: int, hi: int, what: str) -> None:
        """Cache rows [lo, hi) of the split's KV head hold the tokens of those positions."""
        g, s = ins.lo, ins.tile % self.s.splits[ins.kernel]
        stamps = self.cache_stamp[self.p.kernels[ins.kernel].append.cache]
        if not bool((stamps[g, lo:hi] == torch.arange(lo, hi)).all()):
            raise ScheduleError(f"attention kernel {ins.kernel} head {g} split {s} at token {token}: {what} "
                                f"({stamps[g, lo:hi].tolist()})")

    def reached(self, ins: Instr, token: int) -> None:
        """The SM has come to `ins` (its earlier instructions done, its waits not yet looked at): with early_pass an
        attention tile loads its split's rows of early_rows now, so they must hold their tokens already."""
        if not self.s.early_pass or ins.opcode != "attention" or (split := self._split(ins, token)) is None:
            return
        self._check_rows(ins, token, *phases.early_rows(split[2], split[3], token),
                         "a KV row loaded before the wait is missing or from the wrong token")

    def _owns(self, ins: Instr, token: int) -> bool:
        """Whether this split holds the token's row (the last in use): with owner_merges, the one that merges."""
        split = self._split(ins, token)
        return split is not None and split[3] == token + 1

    def _in_use(self, kernel: int, token: int) -> int:
        """The splits of attention kernel `kernel`'s KV heads in use at `token`."""
        return len(split_rows(self.p.kernels[kernel], token, self.s.splits[kernel], self.s.min_keys,
                              self.s.solo_keys))

    def _consumer_merged(self, kernel: int, token: int) -> bool:
        """Whether attention kernel `kernel` leaves its merge to its output's readers at `token` (consumer_merges: 2
        to that many splits in use)."""
        return 2 <= self._in_use(kernel, token) <= self.s.consumer_merges

    def _partials_stamp(self, k: AttentionKernel, token: int) -> int:
        """The stamp this token's partials of attention kernel k carry (its phase's)."""
        return self.producer[partials(k)] * 1_000_000 + token

    def _by_owner(self, ins: Instr, token: int) -> bool:
        """Whether the owner merges this attention instruction's KV head at `token`: owner_merges on and no more
        splits in use than it says."""
        return bool(self.s.owner_merges) and self._in_use(ins.kernel, token) <= self.s.owner_merges

    def _merges_x(self, ins: Instr, token: int, v: str) -> bool:
        """Whether this GEMV makes its read of v (attention's output) from the attention's partials at `token`."""
        return v in self.merged and self._consumer_merged(self.merged[v], token)

    def _partial_stamps(self, kernel: int, token: int) -> tuple[torch.Tensor, int]:
        """The stamps of attention kernel `kernel`'s partials of the splits in use at `token` (every KV head's), and
        the one this token's carry."""
        k = self.p.kernels[kernel]
        return self.parts[kernel]["stamp"][:, :self._in_use(kernel, token)], self._partials_stamp(k, token)

    def _merged_x(self, ins: Instr, token: int, v: str) -> torch.Tensor:
        """Attention's output v as a consumer merges it (consumer_merges): every KV head's partials of the splits in
        use, which must be this token's (the device loads their words until they carry its tag), merged."""
        i = self.merged[v]
        return self._merged(i, token, slice(None), f"{ins.opcode} kernel {ins.kernel} tile {ins.tile} (token {token}) "
                                                   f"merged attention kernel {i}'s partials")

    def _merged(self, kernel: int, token: int, heads: int | slice, who: str) -> torch.Tensor:
        """KV head `heads` (or every one: a slice) of attention kernel `kernel`: the partials of the splits in use at
        `token`, which must be this token's (else an error naming `who`), merged into its heads' outputs, in order."""
        part = self.parts[kernel]
        got, want = self._partial_stamps(kernel, token)
        got = got[heads]
        if not bool((got == want).all()):
            raise ScheduleError(f"{who} stamped {got.tolist()}; the dataflow wants {want}")
        used = got.shape[-1]
        gs = [heads] if isinstance(heads, int) else range(self.p.kernels[kernel].kv_heads)
        return torch.cat([merge_splits(part["o"][g, :used], part["m"][g, :used], part["l"][g, :used]) for g in gs])

    def arrivals(self, kernel: int) -> int:
        """Arrivals a KV head's last split waits for a token before it merges: one per split (the device's
        SPLITS)."""
        return self.s.splits[kernel]

    def _combine(self, ins: Instr, token: int, k: AttentionKernel) -> None:
        """KV head g's last split: the partials of the splits in use at this token, which must be this token's,
        merged into its heads' outputs (the device skips the merge when one split is in use: that split wrote the
        output)."""
        g = ins.lo
        out = self._merged(ins.kernel, token, g, f"attention kernel {ins.kernel} head {g} (token {token}) merged "
                                                 f"partials")
        self.write(ins, token, k.attention.out, g * (k.n_heads // k.kv_heads) * k.head_dim, out)

    # -- the machine
    def met(self, w, token: int) -> bool:
        return self.counters[w.counter] >= w.tiles * (token if w.previous else token + 1) - w.lead

    def ready(self, ins: Instr, token: int) -> bool:
        """Whether the instruction may start: its waits met but the late ones (late_waits: the device polls them
        before a GEMV's writes; `pending` in run), and its tagged words there (stale_tag)."""
        return (all(self.met(w, token) for w in ins.waits if not w.late) and self.stale_tag(ins, token) is None
                and not self.partials_pending(ins, token) and not self.carry_pending(ins, token))

    def partials_pending(self, ins: Instr, token: int) -> bool:
        """With owner_merges: whether this is a KV head's owner (_owns) whose other splits in use have not yet
        stored this token's partials (the device loads their words until they carry its tag). With consumer_merges:
        whether this is a GEMV that merges attention's partials at `token` (_merges_x) and some split in use has
        not yet stored this token's."""
        k = self.p.kernels[ins.kernel]
        if isinstance(k, GemvKernel) and self._merges_x(ins, token, k.x):
            got, want = self._partial_stamps(self.merged[k.x], token)
            return not bool((got == want).all())
        if ins.opcode != "attention" or not self.s.owner_merges:
            return False
        used = self._in_use(ins.kernel, token)  # (_by_owner's count, made once here: this runs at every ready check)
        if used > self.s.owner_merges or not self._owns(ins, token):
            return False
        want = self._partials_stamp(self.p.kernels[ins.kernel], token)
        return not bool((self.parts[ins.kernel]["stamp"][ins.lo, :used - 1] == want).all())

    def stale_tag(self, ins: Instr, token: int) -> str | None:
        """Tag waits (Schedule.spin): the first tagged value this instruction reads that does not yet carry the
        stamp its read wants (the device loads such words until their tags say so); None when all do."""
        if not self.s.spin:
            return None
        k = self.p.kernels[ins.kernel]
        reads: list[tuple[str, int, int]] = []
        if isinstance(k, GemvKernel):  # (x merged from partials: partials_pending's)
            reads = [(v, lo, hi) for v, _, lo, hi in self.gemv_inputs(ins) if not self._merges_x(ins, token, v)]
        elif ins.opcode == "attention" and (split := self._split(ins, token)) is not None:
            reads = [(k.qkv, lo, hi) for lo, hi in self._qkv_rows(k, split[0], split[3] == token + 1)]
        for v, lo, hi in reads:
            if v in self.s.spin and not bool((self.stamp[self.off[v] + lo:self.off[v] + hi]
                                              == self.wanted(ins, token, v)).all()):
                return v
        return None

    def run(self, prompt: list[int], steps: int, policy: str = "eager", seed: int = 0,
            sampling: SamplingParams | None = None, eos: tuple[int, ...] = ()) -> list[torch.Tensor]:
        """Decode `steps` tokens (the prompt first, then greedy or sampled; an id in `eos` ends the run);
        returns the logits of each step, and leaves the chosen tokens in self.generated.
        policy "eager" always advances the SM that is furthest ahead (it exposes waits that are too weak);
        "random" picks any ready SM."""
        rng = random.Random(seed)
        self.sampling, self.eos, self.stop, self.generated = sampling or SamplingParams(), set(eos), steps, []
        self.tokens: dict[int, tuple[int, int]] = {}  # token index -> (id, stamp of the select that chose it)
        self.arrived: dict[tuple[int, int], int] = {}  # (attention kernel, KV head) -> splits arrived, all tokens
        lists = self.s.lists
        pc = [0] * len(lists)
        tok = [0] * len(lists)
        pending: dict[int, torch.Tensor] = {}  # SM -> a GEMV's outputs, read and computed, its late waits not met
        last = len(self.s.phases) - 1

        def can_step(i: int) -> bool:
            ins = lists[i][pc[i]]
            if i in pending:
                return all(self.met(w, tok[i]) for w in ins.waits if w.late)
            return self.ready(ins, tok[i])

        while True:
            live = [i for i in range(len(lists)) if lists[i] and tok[i] < min(steps, self.stop)]
            if not live:
                return self.logits
            ready = [i for i in live if can_step(i)]
            if not ready:
                i = live[0]
                ins = lists[i][pc[i]]
                blocked = [w for w in ins.waits if not self.met(w, tok[i]) and (i in pending or not w.late)]
                on = (f"counter {blocked[0].counter}" if blocked else "its other splits' partials"
                      if self.partials_pending(ins, tok[i]) else "the next tile's partials of rows "
                      f"[{self.trailing_rows(ins).start}, {self.trailing_rows(ins).stop})"
                      if self.carry_pending(ins, tok[i]) else f"the tags of %{self.stale_tag(ins, tok[i])}")
                raise ScheduleError(f"deadlock: SM {i} at token {tok[i]} waits in {ins.opcode} kernel {ins.kernel} "
                                    f"tile {ins.tile} on {on}")
            i = max(ready, key=lambda j: (tok[j], lists[j][pc[j]].counter)) if policy == "eager" else rng.choice(ready)
            ins = lists[i][pc[i]]
            if i not in pending and any(w.late for w in ins.waits):
                pending[i] = self.gemv_reads(ins, tok[i])  # the device's prologue and dots; its writes come later
                continue
            if self.execute(ins, tok[i], prompt, pending.pop(i, None)):
                self.counters[ins.counter] += 1
            if ins.counter == last and self.counters[last] == self.s.tiles[last] * (tok[i] + 1):
                out = self.p.graph.outputs[0]
                self.logits.append(self.arena[self.off[out]:self.off[out] + self.p.graph.types[out].shape[0]].clone())
            pc[i] += 1
            if pc[i] == len(lists[i]):
                pc[i], tok[i] = 0, tok[i] + 1
            if tok[i] < min(steps, self.stop):
                self.reached(lists[i][pc[i]], tok[i])
