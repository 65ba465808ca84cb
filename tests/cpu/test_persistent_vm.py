"""The persistent schedule on the Python VM: right on any interleaving, and a wrong dependency fails."""
import dataclasses

import pytest
import torch

import kiec
from kiec.codegen.buffers import plan_buffers
from kiec.ir.passes import persistent, pipeline
from kiec.ir.passes import phases as phases_module
from kiec.ir.passes.persistent import dependencies, reduce_waits, schedule
from kiec.ir.passes.phases import Wait, phases, reads_writes
from kiec.ir.passes.program import kernel_io
from kiec.ir.passes.simulate import split_rows
from kiec.ir.passes.tags import direct_waits, tag_plan
from kiec.ir.passes.vm import VM, ScheduleError
from tests.tiny_hf import make_tiny_hf


def setup(tmp_path, family="qwen3", sms=7, min_keys=2, previous_first=False, owner_merges=0, spare_splits=0,
          newest_first=False, early_pass=False):
    # min_keys 2: from the 4th token on, attention spreads over 2-3 splits per KV head, merged by the last
    make_tiny_hf(tmp_path, family)
    m = kiec.load(str(tmp_path), max_seq_len=16)
    prog = pipeline.run(m.graph)
    offsets, floats = plan_buffers(prog, {})
    slots = {v: o for v, o in offsets.items()}
    sched = schedule(prog, sms, tile_rows=32, slot_of=slots, min_keys=min_keys, previous_first=previous_first,
                     owner_merges=owner_merges, spare_splits=spare_splits, newest_first=newest_first,
                     early_pass=early_pass)
    weights = {n: m.weights[n].float() for n in m.graph.params}
    return m, prog, sched, weights, offsets, floats


def tagged_schedule(prog, **fields):
    """setup's schedule (7 SMs, 2 keys a split at least) with attention's input and output tagged (persist_tagged 2,
    its counter then relaxed), the buffers laid out for it: (offsets, arena floats, schedule)."""
    plan = tag_plan(prog, attention=True)
    offsets, floats = plan_buffers(prog, {}, frozenset(plan.writer))
    return offsets, floats, schedule(prog, 7, tile_rows=32, slot_of=offsets, min_keys=2, tags=plan, **fields)


def first_attention(prog) -> int:
    """The index of the program's first attention kernel (layer 0's)."""
    return next(k for k, kern in enumerate(prog.kernels) if type(kern).__name__ == "AttentionKernel")


def reference_logits(m, prompt, steps):
    ref = kiec.Reference(m)
    out, seq = [], list(prompt)
    for t in range(steps):
        out.append(torch.from_numpy(ref.step(seq[t], t)))
        if t + 1 >= len(seq):
            seq.append(int(out[-1].argmax()))
    return out


def assert_vm_computes_the_model(m, sched, offsets, floats, seed, prompt=(5, 17, 99), steps=6, policy="random"):
    """The VM's logits over `steps` tokens on a random interleaving (seed; or the eager one) are the reference's."""
    weights = {n: m.weights[n].float() for n in m.graph.params}
    got = VM(sched, weights, offsets, floats).run(list(prompt), steps, policy, seed)
    assert len(got) == steps
    for t, (a, b) in enumerate(zip(got, reference_logits(m, list(prompt), steps))):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=f"token {t}")


@pytest.mark.parametrize("policy,seed,min_keys", [("eager", 0, 2), ("random", 1, 2), ("random", 2, 2),
                                                  ("random", 3, 64)])
def test_schedule_computes_the_graph_on_any_interleaving(tmp_path, policy, seed, min_keys):
    m, prog, sched, weights, offsets, floats = setup(tmp_path, min_keys=min_keys)
    assert set(sched.splits.values()) == {3}  # 7 SMs / 2 KV heads
    prompt, steps = [5, 17, 99], 6
    got = VM(sched, weights, offsets, floats).run(prompt, steps, policy, seed)
    want = reference_logits(m, prompt, steps)
    assert len(got) == steps
    for t, (a, b) in enumerate(zip(got, want)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=f"token {t}")


def test_previous_first_polls_the_same_waits_previous_token_first(tmp_path):
    m, prog, sched, weights, offsets, floats = setup(tmp_path / "a")
    _, _, first, *_ = setup(tmp_path / "b", previous_first=True)
    both = 0
    for lst, lst_first in zip(sched.lists, first.lists):
        for ins, ins_first in zip(lst, lst_first):
            assert set(ins.waits) == set(ins_first.waits) and len(ins.waits) == len(ins_first.waits)  # reordered
            flags = [w.previous for w in ins_first.waits]
            assert flags == sorted(flags, reverse=True)  # every previous-token wait before this token's
            both += len(set(flags)) == 2
    assert both > 0  # some instruction has both kinds (or the order would not matter)
    assert_vm_computes_the_model(m, first, offsets, floats, seed=4)


def test_a_missing_wait_is_caught(tmp_path):
    m, prog, sched, weights, offsets, floats = setup(tmp_path)
    # drop the wait of the first attention instruction on the QKV GEMV before it (read after write)
    attn = first_attention(prog)
    for lst in sched.lists:
        for i, ins in enumerate(lst):
            if ins.kernel == attn:
                lst[i] = dataclasses.replace(ins, waits=tuple(w for w in ins.waits if w.counter != attn - 1))
    with pytest.raises(ScheduleError, match=rf"attention kernel {attn} tile \d+ \(token 0\) read %L0\.attn\.qkv"):
        VM(sched, weights, offsets, floats).run([5, 17, 99], 3, "eager")


def test_a_merge_before_every_split_arrived_is_caught(tmp_path, monkeypatch):
    m, prog, sched, weights, offsets, floats = setup(tmp_path)
    # a KV head's last split merges the partials once all its splits arrived; expecting one arrival fewer
    # lets a split merge before the others wrote theirs
    monkeypatch.setattr(VM, "arrivals", lambda self, kernel: self.s.splits[kernel] - 1)
    with pytest.raises(ScheduleError, match=r"attention kernel \d+ head \d+ \(token \d+\) merged partials stamped "
                                             r"\[.*\]; the dataflow wants"):
        VM(sched, weights, offsets, floats).run([5, 17, 99, 4, 8], 6, "eager")


@pytest.mark.parametrize("policy,seed,tags,most", [("eager", 0, False, 3), ("random", 1, False, 3),
                                                   ("random", 2, False, 2), ("random", 3, True, 3),
                                                   ("eager", 0, True, 2), ("random", 4, True, 2),
                                                   ("random", 5, True, 1), ("eager", 0, False, 1)])
def test_owner_merges_computes_the_graph_on_any_interleaving(tmp_path, policy, seed, tags, most):
    # persist_attn_owner_merges: while at most `most` splits are in use, the split holding the token's row merges
    # once the others' partials came, the others never bump the counter; over 12 tokens the splits in use per KV
    # head go 1, 2, 3 (min_keys 2, 3 splits), so with `most` 2 the last to arrive merges from the 5th token on; with
    # 1 the owner is the only split in use (nothing to merge: it signals, then arrives for all) up to the 3rd
    m, prog, sched, weights, offsets, floats = setup(tmp_path, owner_merges=most)
    if tags:  # attention's input and output tagged (persist_tagged 2), its counter then relaxed
        offsets, floats, sched = tagged_schedule(prog, owner_merges=most)
    vm = VM(sched, weights, offsets, floats)
    prompt, steps = [5, 17, 99, 4, 8, 1], 12
    got = vm.run(prompt, steps, policy, seed)
    for t, (a, b) in enumerate(zip(got, reference_logits(m, prompt, steps))):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=f"token {t}")
    splits = set(sched.splits.values())
    assert splits == {3} and all(n == 3 * steps for n in vm.arrived.values())  # the owners' counts: 3 a token


def test_an_owner_merge_before_the_partials_came_is_caught(tmp_path, monkeypatch):
    m, prog, sched, weights, offsets, floats = setup(tmp_path, owner_merges=3)
    # the owner merges as soon as its own waits are met, without the other splits' partials
    monkeypatch.setattr(VM, "partials_pending", lambda self, ins, token: False)
    with pytest.raises(ScheduleError, match=r"attention kernel \d+ head \d+ \(token \d+\) merged partials stamped "
                                             r"\[.*\]; the dataflow wants"):
        VM(sched, weights, offsets, floats).run([5, 17, 99, 4, 8], 6, "eager")


@pytest.mark.parametrize("policy,seed,most", [("eager", 0, 2), ("random", 1, 2), ("random", 2, 3), ("eager", 0, 3)])
def test_consumer_merges_compute_the_graph_on_any_interleaving(tmp_path, policy, seed, most):
    # persist_attn_consumer_merges: while 2 to `most` splits are in use no split merges; each stores its partial, the
    # owner counts for its KV head and arrives for all, and the output projection merges the partials as its x once
    # they are the token's (tagged attention, as the kernel has it); over 12 tokens the splits in use per KV head
    # go 1, 2, 3 (min_keys 2, 3 splits), so with `most` 2 the last to arrive merges again from the 5th token on
    m, prog, sched, weights, offsets, floats = setup(tmp_path)
    offsets, floats, sched = tagged_schedule(prog, consumer_merges=most)
    vm = VM(sched, weights, offsets, floats)
    merged, merge = [], VM._merged_x

    def counted(self, ins, token, v):
        merged.append(token)
        return merge(self, ins, token, v)

    vm._merged_x = counted.__get__(vm)
    prompt, steps = [5, 17, 99, 4, 8, 1], 12
    got = vm.run(prompt, steps, policy, seed)
    for t, (a, b) in enumerate(zip(got, reference_logits(m, prompt, steps))):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=f"token {t}")
    assert set(sched.splits.values()) == {3} and all(n == 3 * steps for n in vm.arrived.values())
    # the output projections' tiles merged at the tokens with 2 (to `most`) splits in use, and only there
    used = {t: len(split_rows(prog.kernels[first_attention(prog)], t, 3, 2)) for t in range(steps)}
    assert set(merged) == {t for t, n in used.items() if 2 <= n <= most} and len(set(merged)) >= 2


def test_a_consumer_merge_before_the_partials_came_is_caught(tmp_path, monkeypatch):
    # the output projection merges as soon as its counter wait is met (the owners' counts), without the other
    # splits' partials: the VM names the stale partials
    m, prog, sched, weights, offsets, floats = setup(tmp_path)
    offsets, floats, sched = tagged_schedule(prog, consumer_merges=3)
    monkeypatch.setattr(VM, "partials_pending", lambda self, ins, token: False)
    with pytest.raises(ScheduleError, match=r"gemv kernel \d+ tile \d+ \(token \d+\) merged attention kernel \d+'s "
                                            r"partials stamped \[.*\]; the dataflow wants"):
        VM(sched, weights, offsets, floats).run([5, 17, 99, 4, 8], 6, "eager")


@pytest.mark.parametrize("policy,seed,most,newest", [("eager", 0, 0, False), ("random", 1, 0, False),
                                                     ("random", 2, 3, False), ("random", 3, 2, True)])
def test_early_pass_rows_are_there_when_the_sm_reaches_attention(tmp_path, monkeypatch, policy, seed, most, newest):
    # persist_attn_early_pass: a tile loads its split's rows before the previous token's before it waits, so the VM
    # checks them as soon as the SM comes to the instruction; over 12 tokens with 2 keys a split at least, the
    # splits hold rows of earlier tokens from the 4th token on (also with owner merges and newest first)
    m, prog, sched, weights, offsets, floats = setup(tmp_path, owner_merges=most, newest_first=newest,
                                                     early_pass=True)
    early, check = [], VM._check_rows

    def counted(self, ins, token, lo, hi, what):
        if "before the wait" in what:
            early.append(hi - lo)
        return check(self, ins, token, lo, hi, what)

    monkeypatch.setattr(VM, "_check_rows", counted)
    prompt, steps = [5, 17, 99, 4, 8, 1], 12
    got = VM(sched, weights, offsets, floats).run(prompt, steps, policy, seed)
    for t, (a, b) in enumerate(zip(got, reference_logits(m, prompt, steps))):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=f"token {t}")
    assert sum(n > 0 for n in early) > 20  # (rows were checked early, not only empty ranges)


def test_early_pass_rows_of_this_token_are_caught(tmp_path, monkeypatch):
    # loaded before the wait, the rows up to the split's end would take the token's own row before the split that
    # holds it wrote it
    m, prog, sched, weights, offsets, floats = setup(tmp_path, early_pass=True)
    monkeypatch.setattr(phases_module, "early_rows", lambda lo, hi, token: (lo, hi))
    with pytest.raises(ScheduleError, match=r"attention kernel \d+ head \d+ split \d+ at token \d+: a KV row "
                                            r"loaded before the wait is missing or from the wrong token"):
        VM(sched, weights, offsets, floats).run([5, 17, 99, 4, 8], 6, "eager")


def test_an_owner_behind_its_own_split_deadlocks_by_name(tmp_path):
    # an SM whose list holds another split of the owner's KV head after the owner's tile: the owner waits for a
    # partial its own SM has yet to make (why the schedule deals a phase's splits one an SM)
    m, prog, sched, weights, offsets, floats = setup(tmp_path, owner_merges=3)
    attn = first_attention(prog)
    where = {ins.tile: (sm, i) for sm, lst in enumerate(sched.lists) for i, ins in enumerate(lst) if ins.kernel == attn}
    (sm0, i0), (sm1, i1) = where[0], where[1]  # KV head 0's splits 0 and 1 (token 4: 2 in use, split 1 owns)
    moved = sched.lists[sm0].pop(i0)
    sched.lists[sm1].insert(i1 + 1, moved)
    with pytest.raises(ScheduleError, match=rf"deadlock: SM {sm1} at token \d+ waits in attention kernel {attn} tile 1 "
                                            r"on its other splits' partials"):
        VM(sched, weights, offsets, floats).run([5, 17, 99, 4, 8], 6, "eager")


def test_a_missing_wait_on_the_previous_token_is_caught(tmp_path):
    m, prog, sched, weights, offsets, floats = setup(tmp_path)
    # the embedding of token t+1 needs the token token t's select chooses (and it overwrites the residual stream
    # that token t's last kernels still read)
    for lst in sched.lists:
        for i, ins in enumerate(lst):
            if ins.kernel == 0:
                lst[i] = dataclasses.replace(ins, waits=tuple(w for w in ins.waits if not w.previous))
    with pytest.raises(ScheduleError,
                       match=r"embed kernel 0 tile \d+ \(token 1\) read the token before select wrote it"):
        VM(sched, weights, offsets, floats).run([5, 17, 99], 3, "eager")


def test_an_impossible_wait_deadlocks_by_name(tmp_path):
    m, prog, sched, weights, offsets, floats = setup(tmp_path)
    ins = sched.lists[0][0]
    sched.lists[0][0] = dataclasses.replace(ins, waits=ins.waits + (Wait(len(prog.kernels) - 1, 10**6),))
    with pytest.raises(ScheduleError, match="deadlock: SM 0 at token 0 waits in embed kernel 0"):
        VM(sched, weights, offsets, floats).run([5], 2, "random")


def test_instruction_header_and_packing_agree(tmp_path):
    import shutil
    import struct
    import subprocess

    from kiec.codegen.persistent_abi import INSTR_FORMAT, header, pack_schedule
    m, prog, sched, *_ = setup(tmp_path)
    blob, starts = pack_schedule(sched)
    size = struct.calcsize(INSTR_FORMAT)
    assert len(blob) == size * sum(len(lst) for lst in sched.lists) and starts[0] == 0
    first = struct.unpack_from(INSTR_FORMAT, blob, starts[1] * size)
    ins = sched.lists[1][0]
    assert first[:9] == (2 if ins.opcode == "gemv" else first[0], len(ins.waits), ins.head, ins.tail, ins.kernel,
                         ins.tile, ins.lo, ins.hi, ins.counter)
    items = schedule(prog, 7, tile_rows=32, min_keys=2, item_segs=residual_gemvs(prog))  # heads and tails travel too
    blob, starts = pack_schedule(items)
    got = {struct.unpack_from(INSTR_FORMAT, blob, at * size)[2:4] for at in range(len(blob) // size)}
    assert got == {(ins.head, ins.tail) for lst in items.lists for ins in lst} and len(got) > 3
    if shutil.which("nvcc"):  # the generated header's static_asserts hold for the C++ compiler too
        (tmp_path / "abi.h").write_text(header())
        (tmp_path / "t.cu").write_text('#include "abi.h"\n'
                                       'int main() { return sizeof(kiec::Instr) == %d ? 0 : 1; }\n' % size)
        r = subprocess.run(["nvcc", "-o", str(tmp_path / "t"), str(tmp_path / "t.cu")], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert subprocess.run([str(tmp_path / "t")]).returncode == 0


def test_the_vm_samples_like_the_reference_and_stops_at_eos(tmp_path):
    from kiec.sampling import SamplingParams
    m, prog, sched, weights, offsets, floats = setup(tmp_path, "llama")
    prompt, params = [5, 17, 99], SamplingParams(0.8, 0.9, seed=3)
    expect = kiec.Reference(m).generate(prompt, 8, sampling=params)
    vm = VM(sched, weights, offsets, floats)
    vm.run(prompt, len(prompt) + 7, "random", 4, sampling=params)
    assert vm.generated == expect  # the prompt's 3 steps and 7 more choose 8 tokens (the last step's select too)
    eos = expect[3]
    first = expect.index(eos)
    vm = VM(sched, weights, offsets, floats)
    logits = vm.run(prompt, len(prompt) + 7, "eager", sampling=params, eos=(eos,))
    assert vm.generated == expect[:first + 1] and len(logits) == len(prompt) + first


def test_gemv_shares_are_equal_per_sm_and_cover_every_row():
    from kiec.ir.passes.persistent import gemv_shares
    for n, sms, first in ((3072, 132, 0), (576, 132, 17), (10, 132, 130), (128256, 132, 5)):
        tiles = gemv_shares(n, sms, first)
        assert [lo for _, lo, _ in tiles] == [0] + [hi for _, _, hi in tiles[:-1]] and tiles[-1][2] == n
        sizes = [hi - lo for _, lo, hi in tiles]
        assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)  # the longer ones first
        assert len({sm for sm, _, _ in tiles}) == len(tiles) and tiles[0][0] == first


def test_gemv_shares_skip_the_spared_sms():
    from kiec.ir.passes.persistent import gemv_shares
    for n, sms, first, skip in ((2048, 132, 128, {0, 16, 32, 48, 64, 80, 96, 112}), (10, 7, 5, {5, 6}),
                                (3, 7, 0, {1})):
        tiles = gemv_shares(n, sms, first, frozenset(skip))
        assert [lo for _, lo, _ in tiles] == [0] + [hi for _, _, hi in tiles[:-1]] and tiles[-1][2] == n
        sizes = [hi - lo for _, lo, hi in tiles]
        assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
        assert not {sm for sm, _, _ in tiles} & skip and len(tiles) == min(n, sms - len(skip))
    with pytest.raises(ValueError, match="all 3 SMs skipped"):
        gemv_shares(4, 3, 0, frozenset({0, 1, 2}))


@pytest.mark.parametrize("policy,seed", [("eager", 0), ("random", 1), ("random", 2)])
def test_spared_splits_sms_get_no_output_projection_and_the_vm_agrees(tmp_path, policy, seed):
    # persist_attn_spare_splits 1: the GEMV after each attention phase skips the SMs of every KV head's first split
    # (7 SMs, 2 KV heads, 3 splits: 2 of the 7), the other 5 share its rows; the schedule still computes the model
    m, prog, sched, weights, offsets, floats = setup(tmp_path, spare_splits=1)
    splits = sched.splits[first_attention(prog)]
    order = [i for i, _ in sched.phases]
    checked = 0
    for c, (i, opcode) in enumerate(sched.phases[:-1]):
        if opcode != "attention":
            continue
        first = {sm for sm, lst in enumerate(sched.lists) for ins in lst if ins.counter == c and ins.tile % splits == 0}
        after = {sm for sm, lst in enumerate(sched.lists) for ins in lst if ins.counter == c + 1}
        rows = sorted((ins.lo, ins.hi) for lst in sched.lists for ins in lst if ins.counter == c + 1)
        assert sched.phases[c + 1][1] == "gemv" and len(first) == 2 and after and not first & after
        assert rows[0][0] == 0 and all(a[1] == b[0] for a, b in zip(rows, rows[1:]))
        assert rows[-1][1] == prog.kernels[order[c + 1]].n_out
        checked += 1
    assert checked == sum(1 for _, op in sched.phases if op == "attention") > 0
    prompt, steps = [5, 17, 99, 4], 8  # (splits in use per KV head: 1, then 2, then 3)
    got = VM(sched, weights, offsets, floats).run(prompt, steps, policy, seed)
    for t, (a, b) in enumerate(zip(got, reference_logits(m, prompt, steps))):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=f"token {t}")


@pytest.mark.parametrize("policy,seed,most", [("eager", 0, 3), ("random", 1, 3), ("random", 2, 2), ("random", 3, 0)])
def test_newest_first_puts_the_owner_on_the_spared_sm_and_computes_the_graph(tmp_path, policy, seed, most):
    # persist_attn_newest_first: split 0 takes the newest chunk of the context (row `token`) at every token, so with
    # owner merges the owner is split 0, whose SM spare splits leave out of the output projection; the other splits
    # in use take the older chunks, each once (their partials at the chunk's slot: the merge's order is the chunks');
    # over 12 tokens 1 to 3 splits are in use (min_keys 2), and with `most` 2 the last to arrive merges from the 5th
    m, prog, sched, weights, offsets, floats = setup(tmp_path, owner_merges=most, spare_splits=1, newest_first=True)
    vm = VM(sched, weights, offsets, floats)
    attn = first_attention(prog)
    splits = sched.splits[attn]
    ins = [i for lst in sched.lists for i in lst if i.kernel == attn]
    for token in range(12):
        for x in ins:
            s = x.tile % splits
            got = vm._split(x, token)
            assert (got is not None) == (s < vm._in_use(x.kernel, token))
            assert vm._owns(x, token) == (s == 0), (token, x.tile)
        for g in range(2):  # the chunks taken by KV head g's splits in use: each one once, covering [0, token]
            rows = sorted(vm._split(x, token)[2:] for x in ins if x.lo == g and vm._split(x, token) is not None)
            assert rows[0][0] == 0 and rows[-1][1] == token + 1 and all(a[1] == b[0] for a, b in zip(rows, rows[1:]))
    c = next(c for c, (i, _) in enumerate(sched.phases) if i == attn)
    owners = {sm for sm, lst in enumerate(sched.lists) for x in lst if x.counter == c and x.tile % splits == 0}
    projection = {sm for sm, lst in enumerate(sched.lists) for x in lst if x.counter == c + 1}
    assert len(owners) == 2 and not owners & projection
    prompt, steps = [5, 17, 99, 4, 8, 1], 12
    got = vm.run(prompt, steps, policy, seed)
    for t, (a, b) in enumerate(zip(got, reference_logits(m, prompt, steps))):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=f"token {t}")


def test_newest_first_with_the_chunks_of_the_default_double_counts_a_chunk(tmp_path, monkeypatch):
    # the mutation: split 0 holds the newest chunk, but the others keep their default chunks, so at 3 splits in
    # use chunk 2 is taken twice and chunk 0 never: the VM's merge of the partials comes out wrong
    m, prog, sched, weights, offsets, floats = setup(tmp_path, owner_merges=3, newest_first=True)
    real = VM._split

    def split(self, ins, token):
        got = real(self, ins, token)
        if got is None or ins.tile % self.s.splits[ins.kernel] == 0:
            return got
        rows = split_rows(self.p.kernels[ins.kernel], token, self.s.splits[ins.kernel], self.s.min_keys)
        s = ins.tile % self.s.splits[ins.kernel]
        return ins.lo, s, *rows[s]
    monkeypatch.setattr(VM, "_split", split)
    prompt, steps = [5, 17, 99, 4, 8, 1], 12
    with pytest.raises((ScheduleError, AssertionError)):  # (a stale partial's stamp, or the logits)
        got = VM(sched, weights, offsets, floats).run(prompt, steps, "eager")
        for t, (a, b) in enumerate(zip(got, reference_logits(m, prompt, steps))):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=f"token {t}")


def test_no_splits_are_spared_where_they_would_be_most_sms(tmp_path):
    # 7 SMs, 2 KV heads, 3 splits: sparing every split (6 SMs) would leave one SM the whole output projection; the
    # schedule spares none then, and the projection's rows go to all 7 SMs
    _, prog, sched, *_ = setup(tmp_path, spare_splits=3)
    c = next(c for c, (_, op) in enumerate(sched.phases) if op == "attention")
    assert len({sm for sm, lst in enumerate(sched.lists) for ins in lst if ins.counter == c + 1}) == 7


@pytest.mark.parametrize("name,bound", [("llama-3.2-1b", 0.97), ("llama-3.1-8b", 0.97), ("smollm2-135m", 0.93)])
def test_each_kernels_weights_are_dealt_evenly_over_132_sms(name, bound):
    # a kernel lasts as long as its busiest SM: with 64-row tiles dealt round-robin, llama-3.2-1b's QKV
    # (48 tiles) left 84 SMs idle and the bound was 50%
    from kiec.ir.passes import pipeline
    from kiec.ir.passes.persistent import balance
    prog = pipeline.run(kiec.load(name, max_seq_len=256).graph)
    b = balance(schedule(prog, 132))
    assert b["phase_bound"] >= bound and b["token_bound"] >= 0.99 and b["max_waits"] <= 2


@pytest.mark.parametrize("name", ["smollm2-135m", "llama-3.2-1b", "qwen3-1.7b", "llama-3.1-8b"])
def test_the_weight_stream_and_the_gemv_tiles_page_each_share_alike(name):
    # the streaming thread pages a share from its kernel descriptor (row_bytes, item_bytes, flags), the GEMV tile
    # from its template arguments (K, SEGS, the epilogue): both must cut the rows into the same items, and a page
    # must hold one (persistent.cuh: stream_weights, gemv_tile)
    import re
    import struct

    from kiec.codegen.persistent import _PersistentEmitter, walk
    from kiec.codegen.persistent_abi import FLAG_BLOCKS, FLAG_SILU, KERNEL_FIELDS, KERNEL_FORMAT
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    import dataclasses
    prog = pipeline.run(kiec.load(name, max_seq_len=256).graph)
    # (every kind on the tensor cores, the share rule choosing: the FMA tile's GEMVs and the tensor cores' both)
    t = dataclasses.replace(target("sm_90"), persist_mma_rows="qkv+o+gate_up+down+head")
    e = _PersistentEmitter(prog, "bf16", 256, t)
    assert bool(e.mma) == (name != "smollm2-135m")
    src = walk(e, prog, "test")
    stages, page = map(int, re.search(r"Ring<(\d+), (\d+)>", src.files["model.cu"]).groups())
    assert stages >= 4 and page == target("sm_90").persist_page_bytes
    names = [n for n, _, _ in KERNEL_FIELDS]
    streamed = 0
    for k, blob in zip(prog.kernels, e.descs):
        d = dict(zip(names, struct.unpack(KERNEL_FORMAT, blob)))
        body = e.cases[d["spec"]]
        if type(k).__name__ != "GemvKernel":
            assert d["item_bytes"] == 0 and "gemv_tile" not in body
            continue
        K, epi, segs = re.search(r"gemv_tile<T, (\d+), \d+, \w+, ([\w:]+), \w+, (\d+)[,>]", body).groups()
        K, segs = int(K), int(segs)
        silu = d["flags"] & FLAG_SILU
        mma = body.rstrip(");").split("(u, ring")[0].endswith("NoConsumerMerge, true>")  # (persist_mma_rows: MMA)
        assert bool(d["flags"] & FLAG_BLOCKS) == mma == (prog.kernels.index(k) in e.mma)
        if mma:  # a 16-row block of 512 elements (a SiLU-mul's 256: gate and up a page), whole blocks a share
            width = 256 if silu else 512
            assert K == k.k and d["row_bytes"] == 2 * K and d["item_bytes"] == 16 * width * 2 and K % width == 0
        else:
            assert K == k.k and d["row_bytes"] == 2 * K and d["row_bytes"] // d["item_bytes"] == segs
            assert d["row_bytes"] % d["item_bytes"] == 0 and d["item_bytes"] % 16 == 0
        assert bool(silu) == (k.epilogue == "silu_mul") == (epi == "kiec::EPI_SILU_MUL") and d["n"] == k.n_out
        assert page // (d["item_bytes"] * (2 if silu else 1)) >= 1
        streamed += 1
    assert streamed == sum(type(k).__name__ == "GemvKernel" for k in prog.kernels)


def test_each_kind_of_gemv_carries_its_own_pace_where_asked():
    # persist_page_pace_kinds: each GEMV's descriptor carries its kind's pace (qkv, o, gate_up, down, head; 0 where the
    # kind is left out, and on every other kernel); none on an unpaced stream; a malformed list is refused by name
    import dataclasses
    import struct

    from kiec.codegen.persistent import _PersistentEmitter, walk
    from kiec.codegen.persistent_abi import KERNEL_FIELDS, KERNEL_FORMAT
    from kiec.codegen.targets import target
    prog = pipeline.run(kiec.load("llama-3.2-1b", max_seq_len=256).graph)
    names = [n for n, _, _ in KERNEL_FIELDS]

    def paces(kinds: str, **fields) -> list[tuple[str, int]]:
        e = _PersistentEmitter(prog, "bf16", 256,
                               dataclasses.replace(target("sm_90"), persist_page_pace_kinds=kinds, **fields))
        walk(e, prog, "test")
        return [(k.name.split(".")[-1], dict(zip(names, struct.unpack(KERNEL_FORMAT, blob)))["pace"])
                for k, blob in zip(prog.kernels, e.descs)]

    want = dict(qkv=401, x_attn=402, act=403, x_mlp=404, logits=405)
    got = paces("qkv:401+ o:402+gate_up:403+down:404+head:405")
    assert {want.get(n, 0) for n, _ in got} >= {0, 401, 405} and all(p == want.get(n, 0) for n, p in got)
    assert all(p == (460 if n == "x_mlp" else 0) for n, p in paces("down:460"))
    assert all(p == 0 for _, p in paces("")) and all(p == 0 for _, p in paces("down:460", persist_page_pace_ns=0))
    for bad in ("down:0", "mlp:400", "down:fast", "down", "down=460"):
        with pytest.raises(ValueError, match="persist_page_pace_kinds"):
            paces(bad)
    with pytest.raises(ValueError, match="persist_page_pace_ahead_ns"):
        paces("down:460", persist_page_pace_ahead_ns=900)


def test_tag_plan_tags_the_gemv_to_gemv_values_and_relaxes_their_writers(tmp_path):
    # llama: the embedding's x, and per layer the output projection's and the down projection's residual stream and
    # the SiLU-mul's h are read only by GEMVs after their writers; QKV's output, attention's and the logits are not
    make_tiny_hf(tmp_path, "llama")
    prog = pipeline.run(kiec.load(str(tmp_path), max_seq_len=16).graph)
    plan = tag_plan(prog)
    names = {k: prog.kernels[i].name for k, (i, op) in enumerate(phases(prog)) if op != "select"}
    layers = sum(type(k).__name__ == "AttentionKernel" for k in prog.kernels)
    assert len(plan.writer) == 1 + 3 * layers
    assert {names[c].split(".", 1)[-1] for c in plan.relaxed} == {"x", "x_attn", "act", "x_mlp"}
    for i, k in enumerate(prog.kernels):
        if type(k).__name__ == "GemvKernel":
            assert (k.out in plan.writer) == (k.epilogue != "argmax" and not k.name.endswith("qkv"))
            if k.out in plan.writer:
                assert plan.writer[k.out] == next(c for c, (j, op) in enumerate(phases(prog)) if j == i)
        if type(k).__name__ == "AttentionKernel":
            assert k.qkv not in plan.writer and k.attention.out not in plan.writer
    # the residual chain is tagged whole: each residual output aliases a tagged input
    for k in prog.kernels:
        if getattr(k, "epilogue", None) == "residual":
            assert k.out in plan.writer and k.residual in plan.writer


def test_tagged_values_take_two_floats_and_slots_of_their_own(tmp_path):
    m, prog, *_ = setup(tmp_path, family="llama")
    plan = tag_plan(prog)
    tagged = frozenset(plan.writer)
    offsets, floats = plan_buffers(prog, {}, tagged)
    sizes = {}
    for k in prog.kernels:
        for v, n, alias in kernel_io(k)[1]:
            sizes[v] = (n if n >= 0 else prog.graph.types[v].shape[0]) * (2 if v in tagged else 1)
    # a slot's tagged-ness never changes over the program: a tagged and an untagged value never share one
    kind: dict[int, bool] = {}
    for v, off in offsets.items():
        if v in sizes:
            assert kind.setdefault(off, v in tagged) == (v in tagged), v
    assert floats >= max(offsets[v] + sizes[v] for v in sizes)
    # the schedule over this layout (its write-after-read waits follow the slots; untagged reads wait on their
    # writers directly) computes the model on any interleaving
    sched = schedule(prog, 7, tile_rows=32, slot_of=offsets, min_keys=2, tags=plan)
    assert_vm_computes_the_model(m, sched, offsets, floats, seed=5)
    with pytest.raises(ValueError, match="both tagged or neither"):
        res = next(k for k in prog.kernels if getattr(k, "epilogue", None) == "residual")
        plan_buffers(prog, {}, tagged - {res.out})


def test_an_untagged_read_gets_a_direct_wait_on_its_writer(tmp_path):
    # the output projection reads attention's output (untagged): were its wait on attention dropped as implied,
    # direct_waits puts it back; tagged reads (the MLP's x from the output projection) need none
    _, prog, *_ = setup(tmp_path, family="llama")
    plan = tag_plan(prog)
    deps = reduce_waits(dependencies(prog))
    ph = phases(prog)
    o = next(c for c, (i, op) in enumerate(ph) if prog.kernels[i].name.endswith("x_attn"))
    attn = next(c for c, (i, op) in enumerate(ph) if op == "attention")
    assert Wait(attn, 0) in deps[o]
    cut = [list(w) for w in deps]
    cut[o] = [w for w in cut[o] if w != Wait(attn, 0)]
    assert Wait(attn, 0) in direct_waits(prog, cut, plan)[o]
    # the embedding reads the token select wrote in the previous step: that wait too, previous-token
    embed, select = 0, len(ph) - 1
    cut[embed] = [w for w in cut[embed] if w.counter != select]
    assert Wait(select, 0, True) in direct_waits(prog, cut, plan)[embed]
    assert direct_waits(prog, deps, plan) == deps  # nothing else to add on a llama


def test_tag_plan_with_attention_tags_its_input_and_output(tmp_path):
    # persist_tagged 2: QKV's output and attention's output are tagged too, so every phase but the LM head's and
    # select's moves its counter relaxed; the schedule over that layout still computes the model
    m, prog, *_ = setup(tmp_path, family="llama")
    plan = tag_plan(prog, attention=True)
    attn = [k for k in prog.kernels if type(k).__name__ == "AttentionKernel"]
    assert all(k.qkv in plan.writer and k.attention.out in plan.writer for k in attn)
    assert len(plan.relaxed) == len(phases(prog)) - 2
    offsets, floats = plan_buffers(prog, {}, frozenset(plan.writer))
    sched = schedule(prog, 7, tile_rows=32, slot_of=offsets, min_keys=2, tags=plan)
    assert_vm_computes_the_model(m, sched, offsets, floats, seed=6)


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "mistral"])
@pytest.mark.parametrize("level", [1, 2])
def test_with_tags_every_untagged_read_waits_on_its_writer_itself(tmp_path, family, level):
    # the invariant the relaxed counters need, on the instruction lists the kernel runs: every tile that reads an
    # untagged value (not its own state) waits on the phase that wrote it, this token's or the previous one's
    make_tiny_hf(tmp_path, family)
    prog = pipeline.run(kiec.load(str(tmp_path), max_seq_len=16).graph)
    plan = tag_plan(prog, attention=level == 2)
    offsets, _ = plan_buffers(prog, {}, frozenset(plan.writer))
    sched = schedule(prog, 7, tile_rows=32, slot_of=offsets, min_keys=2, tags=plan)
    io = [reads_writes(prog.kernels[i], prog, op) for i, op in sched.phases]
    for lst in sched.lists:
        for ins in lst:
            c = ins.counter
            for v in io[c][0] - set(plan.writer) - io[c][1]:
                same = [j for j in range(c) if v in io[j][1]]
                j, previous = (same[-1], False) if same else (max(j for j in range(len(io)) if v in io[j][1]), True)
                assert any(w.counter == j and w.previous == previous for w in ins.waits), (ins.opcode, c, v)


def test_parity_tags_give_each_tagged_value_its_own_slot_and_each_writer_its_parity(tmp_path):
    # persist_tag_parity: a tagged value takes one float an element in a slot of its own at the arena's end (a
    # residual stream's writes share their input's), and each writer phase gets ((t & W) ^ (k + 1)) & 1's two bits:
    # over three tokens, every read's parity is its writer's generation's and differs from the generation before
    from kiec.codegen.buffers import TAGGED_REGION
    from kiec.ir.passes.tags import tag_parity
    make_tiny_hf(tmp_path, "llama", hidden_size=256, intermediate_size=384, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=300)
    m = kiec.load(str(tmp_path), max_seq_len=16)
    prog = pipeline.run(m.graph)
    plan = tag_plan(prog, attention=True)
    tagged = frozenset(plan.writer)
    offsets, floats = plan_buffers(prog, {"scratch": 100}, tagged, parity=True)
    start = offsets[TAGGED_REGION]
    alias = {v: a for k in prog.kernels for v, _, a in kernel_io(k)[1] if a is not None}

    def root(v):
        while v in alias:
            v = alias[v]
        return v
    spans = {}
    for k in prog.kernels:
        for v, n, a in kernel_io(k)[1]:
            if v in tagged:
                n = n if n >= 0 else prog.graph.types[v].shape[0]
                spans[v] = (offsets[v], offsets[v] + n)  # one float an element
                assert start <= offsets[v] and offsets[v] + n <= floats
    for a in spans:
        for b in spans:
            if a < b and root(a) != root(b):
                assert spans[a][1] <= spans[b][0] or spans[b][1] <= spans[a][0], (a, b)
    assert offsets["scratch"] + 100 <= start and all(off < start for v, off in offsets.items() if v not in tagged
                                                     and v != TAGGED_REGION)
    sched = schedule(prog, 132, slot_of=dict(offsets), tags=plan)
    bits = tag_parity(prog, plan, sched)
    chains = {}
    for v, w in plan.writer.items():
        chains.setdefault(root(v), []).append(w)
    assert max(len(c) for c in chains.values()) == 1 + 2 * m.config.num_layers  # the residual stream
    for order in chains.values():
        order.sort()
        writes = [(t, k, w) for t in range(3) for k, w in enumerate(order)]  # the slot's writes, in time
        for g, (t, k, w) in enumerate(writes, start=1):
            parity = ((t & bits[w]) ^ (bits[w] >> 1)) & 1
            assert parity == g & 1  # what the writer stores is its generation's parity
            assert parity != (g - 1) & 1  # and a reader of it never takes the generation before
    # the schedule over this layout (fewer slots shared, so fewer write-after-read waits) computes the model on any
    # interleaving (the VM: the device's words and their tags are not its business)
    small = schedule(prog, 7, tile_rows=32, slot_of=dict(offsets), tags=plan)
    tag_parity(prog, plan, small)
    assert_vm_computes_the_model(m, small, offsets, floats, seed=5)
    # a narrow model leaves SMs without a share of the GEMVs that read the residual stream: refused, named
    narrow = tmp_path / "narrow"
    make_tiny_hf(narrow, "llama")
    mn = kiec.load(str(narrow), max_seq_len=16)
    pn = pipeline.run(mn.graph)
    plan_n = tag_plan(pn, attention=True)
    off_n, _ = plan_buffers(pn, {}, frozenset(plan_n.writer), parity=True)
    with pytest.raises(ValueError, match=r"parity tags: .* reads .*, which is written \d+ times a token, on \d+ of "
                                         r"132 SMs"):
        tag_parity(pn, plan_n, schedule(pn, 132, slot_of=dict(off_n), tags=plan_n))


def test_the_mlp_local_probe_drops_only_the_down_projections_gate_up_waits_and_the_vm_catches_it(tmp_path):
    # persist_probe_mlp_local times a down projection that waits for none of its gate/up phase: a wrong schedule
    # on purpose (each SM's down tile reads the x other SMs' gate/up tiles may not have written yet)
    m, prog, sched, weights, offsets, floats = setup(tmp_path)
    slots = dict(offsets)
    probe = schedule(prog, 7, tile_rows=32, slot_of=slots, min_keys=2, mlp_local=True)
    ph = phases(prog)
    gate_up = {c for c, (i, op) in enumerate(ph) if op == "gemv" and prog.kernels[i].epilogue == "silu_mul"}
    down = {c + 1 for c in gate_up}
    assert gate_up and all(prog.kernels[ph[c][0]].x == prog.kernels[ph[c - 1][0]].out for c in down)
    for lst, lst_probe in zip(sched.lists, probe.lists):
        for ins, ins_probe in zip(lst, lst_probe):
            if ins.counter in down:  # waits on the output projection (its x_attn) instead of on gate/up
                assert any(w.counter == ins.counter - 1 and not w.previous for w in ins.waits)
                assert not any(w.counter == ins.counter - 1 and not w.previous for w in ins_probe.waits)
                assert any(w.counter == ins.counter - 2 and not w.previous for w in ins_probe.waits)
            else:  # none lost (a later phase may now wait on gate/up itself, which its wait on down implied)
                assert {w for w in ins.waits if not w.previous} <= {w for w in ins_probe.waits if not w.previous}
    down0 = prog.kernels[ph[min(down)][0]]
    with pytest.raises(ScheduleError, match=rf"gemv kernel {ph[min(down)][0]} tile \d+ \(token 0\) read %{down0.x}\["):
        VM(probe, weights, offsets, floats).run([5, 17, 99], 3, "random", 0)


def test_the_o_local_probe_drops_only_the_output_projections_attention_waits_and_the_vm_catches_it(tmp_path):
    # persist_probe_o_local times an output projection that waits for none of attention's tiles: a wrong schedule on
    # purpose (each SM's output-projection tile reads the attention output other SMs' splits may not have merged yet)
    _, prog, sched, weights, offsets, floats = setup(tmp_path)
    probe = schedule(prog, 7, tile_rows=32, slot_of=dict(offsets), min_keys=2, o_local=True)
    ph = phases(prog)
    attention = {c for c, (i, op) in enumerate(ph) if op == "attention"}
    o_proj = {c + 1 for c in attention}
    assert attention and all(ph[c][1] == "gemv" and prog.kernels[ph[c][0]].x
                             in {v for v, _, _ in kernel_io(prog.kernels[ph[c - 1][0]])[1]} for c in o_proj)
    assert {ph[c][0] for c in o_proj} == persistent.output_projections(prog)
    for lst, lst_probe in zip(sched.lists, probe.lists):
        for ins, ins_probe in zip(lst, lst_probe):
            if ins.counter in o_proj:  # waits on QKV (attention's own wait, once implied) instead of on attention
                assert any(w.counter == ins.counter - 1 and not w.previous for w in ins.waits)
                assert not any(w.counter == ins.counter - 1 and not w.previous for w in ins_probe.waits)
                assert any(w.counter == ins.counter - 2 and not w.previous for w in ins_probe.waits)
            else:  # none lost (a later phase may now wait on attention itself, which the projection's implied)
                assert {w for w in ins.waits if not w.previous} <= {w for w in ins_probe.waits if not w.previous}
    o0 = prog.kernels[ph[min(o_proj)][0]]
    with pytest.raises(ScheduleError, match=rf"gemv kernel {ph[min(o_proj)][0]} tile \d+ \(token 0\) read %{o0.x}\["):
        VM(probe, weights, offsets, floats).run([5, 17, 99], 3, "random", 0)
    # with tags (persist_tagged 1: attention's output untagged) the wait direct_waits gives an untagged x's writer is
    # dropped too
    plan = tag_plan(prog)
    assert o0.x not in plan.writer
    tagged, tagged_probe = (schedule(prog, 7, tile_rows=32, slot_of=dict(offsets), min_keys=2, tags=plan, o_local=o)
                            for o in (False, True))
    for lst, lst_probe in zip(tagged.lists, tagged_probe.lists):
        for ins, ins_probe in zip(lst, lst_probe):
            if ins.counter in o_proj:
                assert any(w.counter == ins.counter - 1 and not w.previous for w in ins.waits)
                assert not any(w.counter == ins.counter - 1 and not w.previous for w in ins_probe.waits)


def test_pair_rows_deal_whole_pairs_and_the_vm_computes_the_model(tmp_path):
    # persist_tagged_pairs: a GEMV whose output is handed over two rows a word gets shares of whole pairs (no SM
    # writes half a word), over all its rows; the schedule still computes the model (the VM, every interleaving
    # checked); an odd row count is refused by name
    m, prog, _, _, offsets, floats = setup(tmp_path)
    gate_up = frozenset(i for i, k in enumerate(prog.kernels) if getattr(k, "epilogue", None) == "silu_mul")
    for sms in (7, 132):
        sched = schedule(prog, sms, tile_rows=32, slot_of=dict(offsets), min_keys=2, pair_rows=gate_up)
        for i in gate_up:
            tiles = sorted((ins.lo, ins.hi) for lst in sched.lists for ins in lst if ins.kernel == i)
            assert all(lo % 2 == 0 and hi % 2 == 0 and hi > lo for lo, hi in tiles)
            assert [lo for lo, _ in tiles[1:]] == [hi for _, hi in tiles[:-1]]
            assert tiles[0][0] == 0 and tiles[-1][1] == prog.kernels[i].n_out
        if sms == 7:
            assert_vm_computes_the_model(m, sched, offsets, floats, seed=3)
    make_tiny_hf(tmp_path / "odd", "llama", intermediate_size=97)
    odd_prog = pipeline.run(kiec.load(str(tmp_path / "odd"), max_seq_len=16).graph)
    odd = next(i for i, k in enumerate(odd_prog.kernels) if getattr(k, "epilogue", None) == "silu_mul")
    with pytest.raises(ValueError, match=rf"{odd_prog.kernels[odd].name}: 97 rows dealt in pairs"):
        schedule(odd_prog, 7, tile_rows=32, min_keys=2, pair_rows=frozenset({odd}))


def residual_gemvs(prog) -> dict[int, int]:
    """The residual GEMVs (output and down projections) dealt to the item, 4 segments a row (their K: 64, 96)."""
    return {i: 4 for i, k in enumerate(prog.kernels) if getattr(k, "epilogue", None) == "residual"}


def test_gemv_item_shares_are_equal_to_the_item_and_cover_every_row():
    from kiec.ir.passes.persistent import gemv_item_shares
    for n, segs, sms, first, skip in ((2048, 8, 132, 0, set()), (2048, 8, 132, 128, {0, 16, 32, 48}),
                                      (64, 4, 7, 3, set()), (64, 4, 7, 0, {2}), (10, 4, 132, 5, set())):
        shares = gemv_item_shares(n, segs, sms, first, frozenset(skip))
        items = [(lo * segs + head, (hi - 1) * segs + (tail or segs)) for _, lo, hi, head, tail in shares]
        assert [a for a, _ in items] == [0] + [b for _, b in items[:-1]] and items[-1][1] == n * segs
        sizes = [b - a for a, b in items]
        assert max(sizes) - min(sizes) <= (1 if n >= sms - len(skip) else segs)  # rows below an SM each: whole rows
        assert sizes == sorted(sizes, reverse=True) and min(sizes) >= segs
        assert not {sm for sm, *_ in shares} & skip and shares[0][0] == first
        for (_, lo, hi, head, tail), (_, lo2, _, head2, _) in zip(shares, shares[1:]):
            assert (lo2, head2) == ((hi - 1, tail) if tail else (hi, 0))  # a tail's row is the next tile's head row


@pytest.mark.parametrize("policy,seed,tags", [("eager", 0, 0), ("random", 1, 0), ("random", 2, 1), ("random", 3, 2),
                                              ("eager", 0, 2)])
def test_item_shares_compute_the_graph_on_any_interleaving(tmp_path, policy, seed, tags):
    # persist_item_shares: the residual GEMVs dealt to the row segment; a tile whose share starts mid-row publishes
    # that row's partial, the tile before completes the row with it. The VM runs each tile's segments as dealt (a
    # wrong pairing adds the wrong segments) and holds a tail back until the next tile's partial is this token's;
    # with tagged values and tag waits too (2: the write guards polled late)
    m, prog, _, _, offsets, floats = setup(tmp_path)
    plan = tag_plan(prog) if tags else None
    sched = schedule(prog, 7, tile_rows=32, slot_of=dict(offsets), min_keys=2, tags=plan, tag_waits=tags,
                     item_segs=residual_gemvs(prog))
    split = [ins for lst in sched.lists for ins in lst if ins.kernel in sched.item_segs and ins.tail]
    assert len(split) >= 4  # 64 rows of 4 segments over 7 SMs: 37 or 36 items a share, most ending mid-row
    assert_vm_computes_the_model(m, sched, offsets, floats, seed=seed, steps=5)


def test_a_wrong_item_pairing_is_caught(tmp_path):
    # a tile that trails a row must take the segments the next tile does not: with the next tile's head moved by one
    # segment, the schedule check names it, and the VM (which does not check it) adds a segment twice and the logits
    # are not the model's; two tiles of a phase on one SM are refused; a tail whose row no tile leads deadlocks by name
    from kiec.ir.passes.persistent import check_item_shares
    m, prog, _, weights, offsets, floats = setup(tmp_path)
    sched = schedule(prog, 7, tile_rows=32, slot_of=dict(offsets), min_keys=2, item_segs=residual_gemvs(prog))
    trailing = next(ins for lst in sched.lists for ins in lst if ins.kernel in sched.item_segs and ins.tail > 1)
    bad = dataclasses.replace(sched, lists=[[dataclasses.replace(ins, head=ins.head - 1)
                                             if ins.kernel == trailing.kernel and ins.tile == trailing.tile + 1 else ins
                                             for ins in lst] for lst in sched.lists])
    with pytest.raises(ValueError, match=rf"{prog.kernels[trailing.kernel].name} tile {trailing.tile + 1}: rows"):
        check_item_shares(bad)
    with pytest.raises(AssertionError):
        assert_vm_computes_the_model(m, bad, offsets, floats, seed=0, steps=2)
    # the trailing tile moved onto the SM of the tile it waits for (which would then run after it): refused by name
    after = next(sm for sm, lst in enumerate(sched.lists) for ins in lst
                 if ins.kernel == trailing.kernel and ins.tile == trailing.tile + 1)
    moved = [[ins for ins in lst if ins != trailing] for lst in sched.lists]
    moved[after].insert(0, trailing)
    with pytest.raises(ValueError, match=rf"{prog.kernels[trailing.kernel].name}: two of its tiles on one SM"):
        check_item_shares(dataclasses.replace(sched, lists=moved))
    lone = dataclasses.replace(sched, lists=[[dataclasses.replace(ins, head=0, lo=ins.lo + 1)
                                              if ins.kernel == trailing.kernel and ins.tile == trailing.tile + 1
                                              else ins for ins in lst] for lst in sched.lists])
    with pytest.raises(ScheduleError, match=rf"deadlock: .* tile {trailing.tile} on the next tile's partials of rows "
                                            rf"\[{trailing.hi - 1}, {trailing.hi}\)"):
        VM(lone, weights, offsets, floats).run([5, 17, 99], 2, "eager")


@pytest.mark.parametrize("policy,seed", [("eager", 0), ("random", 1), ("random", 2)])
def test_item_shares_of_pairs_complete_whole_pairs_and_compute_the_graph(tmp_path, policy, seed):
    # the SiLU-mul's output as tagged pairs (persist_tagged_pairs) and dealt to the item: a pair's rows are completed
    # together, by the tile that holds its last item, with the next tile's gate and up partials of both rows; a share
    # that starts at a pair's second row (head 0) leads too. Every share writes whole pairs, all of them once
    from kiec.ir.passes.phases import lead_rows, share_end_rows
    m, prog, _, _, offsets, floats = setup(tmp_path)
    gate_up = {i: 4 for i, k in enumerate(prog.kernels) if getattr(k, "epilogue", None) == "silu_mul"}
    for sms in (7, 5, 13):  # (96 rows of 4 segments: 55 or 54, 77 or 76, 30 or 29 items a share)
        sched = schedule(prog, sms, tile_rows=32, slot_of=dict(offsets), min_keys=2, item_segs=gate_up,
                         pair_rows=frozenset(gate_up))
        for i in gate_up:
            tiles = sorted((ins for lst in sched.lists for ins in lst if ins.kernel == i), key=lambda x: x.tile)
            written = [(ins.lo + lead_rows(ins, 2), share_end_rows(ins, 2)) for ins in tiles]
            assert all(a % 2 == 0 and b % 2 == 0 and b > a for a, b in written)
            assert [a for a, _ in written] == [0] + [b for _, b in written[:-1]] and written[-1][1] == 96
        leads = {(ins.lo % 2, bool(ins.head)) for lst in sched.lists for ins in lst if ins.kernel in gate_up}
        if sms == 7:  # shares from a pair's first row's middle, its second row's start and its middle, and whole
            assert leads == {(0, True), (1, False), (1, True), (0, False)}
            assert_vm_computes_the_model(m, sched, offsets, floats, seed=seed, steps=5, policy=policy)


@pytest.mark.parametrize("policy,seed,tags", [("eager", 0, 0), ("random", 1, 1), ("random", 2, 2)])
def test_every_gemv_dealt_to_the_item_computes_the_graph(tmp_path, policy, seed, tags):
    # persist_item_shares 3: QKV (a norm, a store), the output and down projections, gate/up in pairs and the LM head
    # (an argmax; select's instruction beside it) all dealt to the item, with tags and tag waits
    m, prog, _, _, offsets, floats = setup(tmp_path)
    every = {i: 4 for i, k in enumerate(prog.kernels) if hasattr(k, "epilogue") and k.n_out >= 7}
    assert {prog.kernels[i].epilogue for i in every} == {"store", "residual", "silu_mul", "argmax"}
    plan = tag_plan(prog) if tags else None
    sched = schedule(prog, 7, tile_rows=32, slot_of=dict(offsets), min_keys=2, tags=plan, tag_waits=tags,
                     item_segs=every, pair_rows=frozenset(i for i in every if prog.kernels[i].epilogue == "silu_mul"))
    assert_vm_computes_the_model(m, sched, offsets, floats, seed=seed, steps=5, policy=policy)


def test_item_shares_balance_counts_items(tmp_path):
    from kiec.ir.passes.persistent import balance
    _, prog, *_ = setup(tmp_path)
    items = residual_gemvs(prog)
    rows, by_item = (balance(schedule(prog, 7, tile_rows=32, min_keys=2, item_segs=s)) for s in (None, items))
    assert by_item["phase_bound"] > rows["phase_bound"]  # 64 rows over 7 SMs: 10 or 9; 37 or 36 items
    head = next(i for i, k in enumerate(prog.kernels) if getattr(k, "epilogue", None) == "argmax")
    sched = schedule(prog, 7, tile_rows=32, min_keys=2, item_segs={head: 4})  # (select's instruction is no share)
    assert any(ins.head for lst in sched.lists for ins in lst if ins.kernel == head)
