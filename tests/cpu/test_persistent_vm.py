"""The persistent schedule on the Python VM: right on any interleaving, and a wrong dependency fails."""
import dataclasses

import pytest

import kiec
from kiec.ir.passes import phases as phases_module
from kiec.ir.passes.persistent import schedule
from kiec.ir.passes.phases import Wait
from kiec.ir.passes.simulate import split_rows
from kiec.ir.passes.vm import VM, ScheduleError
from tests.vm_setup import (assert_reference_logits, assert_vm_computes_the_model, first_attention, residual_gemvs,
                            setup, tagged_schedule)


@pytest.mark.parametrize("policy,seed,min_keys", [("eager", 0, 2), ("random", 1, 2), ("random", 2, 2),
                                                  ("random", 3, 64)])
def test_schedule_computes_the_graph_on_any_interleaving(tmp_path, policy, seed, min_keys):
    m, prog, sched, weights, offsets, floats = setup(tmp_path, min_keys=min_keys)
    assert set(sched.splits.values()) == {3}  # 7 SMs / 2 KV heads
    prompt, steps = [5, 17, 99], 6
    got = VM(sched, weights, offsets, floats).run(prompt, steps, policy, seed)
    assert_reference_logits(m, got, prompt, steps)


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
    assert_reference_logits(m, got, prompt, steps)
    splits = set(sched.splits.values())
    assert splits == {3} and all(n == 3 * steps for n in vm.arrived.values())  # the owners' counts: 3 a token


@pytest.mark.parametrize("policy,seed,tags,most", [("eager", 0, False, 0), ("random", 1, False, 0),
                                                   ("random", 2, False, 1), ("random", 3, True, 1),
                                                   ("eager", 0, True, 3), ("random", 4, True, 0)])
def test_solo_contexts_compute_the_graph_on_any_interleaving(tmp_path, policy, seed, tags, most):
    # persist_attn_solo_keys 6: up to 6 rows of context one split a KV head, then 3 splits of at least 2 rows (7 rows:
    # chunks of 3); with owner merges at 1 the solo positions take the owner's path (it signals, then arrives for
    # all), with 3 every position; without, the last to arrive merges past them
    m, prog, sched, weights, offsets, floats = setup(tmp_path, owner_merges=most, solo_keys=6)
    if tags:  # attention's input and output tagged (persist_tagged 2), its counter then relaxed
        offsets, floats, sched = tagged_schedule(prog, owner_merges=most, solo_keys=6)
    vm = VM(sched, weights, offsets, floats)
    prompt, steps = [5, 17, 99, 4, 8, 1], 10
    got = vm.run(prompt, steps, policy, seed)
    assert_reference_logits(m, got, prompt, steps)
    attn = first_attention(prog)
    assert [vm._in_use(attn, t) for t in range(9)] == [1] * 6 + [3] * 3  # (without solo: 1, 1, 2, 2, 3, ...)
    assert [len(split_rows(prog.kernels[attn], t, 3, 2)) for t in range(6)] == [1, 1, 2, 2, 3, 3]


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
    assert_reference_logits(m, got, prompt, steps)
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
    assert_reference_logits(m, got, prompt, steps)
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
