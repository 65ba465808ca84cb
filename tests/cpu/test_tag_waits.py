"""Tag waits (persist_tag_waits): tiles that read tagged values spin on the words' tags instead of waiting for their
writers' counters where nothing else needs the wait. The schedule drops only what tags cover, the VM (whose tagged
reads block until the words carry the stamp they want) computes the model on any interleaving, and the kernel
builds with it or refuses what it cannot serve."""
import dataclasses
import os

import pytest

import kiec
from kiec.codegen.buffers import plan_buffers
from kiec.ir.passes import pipeline
from kiec.ir.passes.persistent import schedule
from kiec.ir.passes.phases import phases, reads_writes
from kiec.ir.passes.tags import tag_plan
from kiec.ir.passes.vm import VM, ScheduleError
from tests.tiny_hf import make_tiny_hf
from tests.vm_setup import assert_vm_computes_the_model, first_attention, setup


def tag_waits_setup(tmp_path, family, level):
    make_tiny_hf(tmp_path, family)
    m = kiec.load(str(tmp_path), max_seq_len=16)
    prog = pipeline.run(m.graph)
    plan = tag_plan(prog, attention=level == 2)
    offsets, floats = plan_buffers(prog, {}, frozenset(plan.writer))
    return m, prog, plan, offsets, floats


@pytest.mark.parametrize("family", ["llama", "qwen3", "mistral"])
@pytest.mark.parametrize("level", [1, 2])
def test_tag_waits_drop_only_waits_tags_cover_and_compute_the_model(tmp_path, family, level):
    # persist_tag_waits: a tile that reads tagged values does not wait on their writer's counter where the read is
    # the pair's only conflict; it spins on the words (the VM: the instruction is not ready until the values it
    # reads carry their writer's stamp). The dropped pairs are read-after-write through tagged values alone, never a
    # slot the reader writes; every untagged read still waits on its writer; the model comes out on any interleaving
    from kiec.ir.passes.tags import tag_covered
    m, prog, plan, offsets, floats = tag_waits_setup(tmp_path, family, level)
    ph = phases(prog)
    io = [reads_writes(prog.kernels[i], prog, op) for i, op in ph]
    covered = tag_covered(prog, plan, offsets)
    names = {(prog.kernels[ph[c][0]].name, prog.kernels[ph[j][0]].name) for c, j in covered}
    # the residual stream into each QKV, the output projection's result into the MLP (layer 1's: in layer 0 the slot
    # plan may give gate/up's output a slot the output projection reads, a conflict that keeps the wait), the last
    # down projection's into the LM head
    assert {("L0.attn.qkv", "x"), ("L1.attn.qkv", "L0.x_mlp"), ("L1.act", "L1.x_attn"), ("logits", "L1.x_mlp")} <= names
    # the down projection writes the stream gate/up read (in place): its wait stays
    assert ("L0.x_mlp", "L0.act") not in names
    assert (("L0.attn", "L0.attn.qkv") in names) == (level == 2)  # attention's input is tagged only at level 2
    for c, j in covered:
        slot = lambda vs: {offsets.get(v, v) for v in vs}  # noqa: E731
        assert io[c][0] & io[j][1] <= set(plan.writer) and not slot(io[c][1]) & slot(io[j][0] | io[j][1])
    sched = schedule(prog, 7, tile_rows=32, slot_of=offsets, min_keys=2, tags=plan, tag_waits=True)
    assert sched.spin == frozenset(plan.writer)
    for lst in sched.lists:
        for ins in lst:
            assert not any((ins.counter, w.counter) in covered for w in ins.waits if not w.previous), ins
            for v in io[ins.counter][0] - set(plan.writer) - io[ins.counter][1]:  # untagged reads: direct waits
                same = [j for j in range(ins.counter) if v in io[j][1]]
                if same:
                    assert any(w.counter == same[-1] and not w.previous for w in ins.waits), (ins.opcode, v)
    for seed in (7, 8):
        assert_vm_computes_the_model(m, sched, offsets, floats, seed=seed)


def test_with_tag_waits_a_missing_wait_on_an_untagged_writer_is_caught(tmp_path):
    # tags 1: attention reads QKV's output as plain floats, so with tag waits its wait on QKV stays, and without it
    # the VM finds a read of words QKV has not written (the tags cover only tagged values)
    m, prog, plan, offsets, floats = tag_waits_setup(tmp_path, "llama", 1)
    sched = schedule(prog, 7, tile_rows=32, slot_of=offsets, min_keys=2, tags=plan, tag_waits=True)
    attn = first_attention(prog)
    assert all(any(w.counter == attn - 1 and not w.previous for w in x.waits)
               for lst in sched.lists for x in lst if x.kernel == attn)
    for lst in sched.lists:
        lst[:] = [dataclasses.replace(x, waits=tuple(w for w in x.waits if x.kernel != attn or w.counter != attn - 1))
                  for x in lst]
    with pytest.raises(ScheduleError, match=rf"attention kernel {attn} tile \d+ \(token 0\) read %L0\.attn\.qkv"):
        VM(sched, {n: m.weights[n].float() for n in m.graph.params}, offsets, floats).run([5, 17, 99], 3, "eager")


def test_with_tag_waits_words_nobody_writes_deadlock_by_name(tmp_path):
    # a tile spinning on words whose writer never runs never finds their tag: the VM names the value (SM 0's
    # embedding tiles taken out: layer 0's QKV waits on no counter of theirs, only on the words)
    m, prog, plan, offsets, floats = tag_waits_setup(tmp_path, "llama", 2)
    sched = schedule(prog, 7, tile_rows=32, slot_of=offsets, min_keys=2, tags=plan, tag_waits=True)
    vm = VM(sched, {n: m.weights[n].float() for n in m.graph.params}, offsets, floats)
    sched.lists[0][:] = [ins for ins in sched.lists[0] if ins.kernel != 0]
    with pytest.raises(ScheduleError, match=r"deadlock: SM \d+ at token 0 waits in gemv kernel \d+ tile \d+ on the "
                                            r"tags of %x"):
        vm.run([5, 17, 99], 2, "eager")


@pytest.mark.parametrize("lead", [0, 34])
def test_tag_waits_with_a_lead_wait_for_most_of_the_writer_and_compute_the_model(tmp_path, lead):
    # persist_tag_lead below 100: each dropped pair comes back as a wait for all but that share (rounded up) of the
    # writer's tiles (0: the whole writer, the words then loaded once it is done), packed in the Wait's `previous`
    # field above its two lowest bits; the model comes out on any interleaving either way
    import struct

    from kiec.codegen.persistent_abi import INSTR_FIELDS, INSTR_FORMAT, WAIT_FORMAT, pack
    from kiec.ir.passes.tags import tag_covered
    m, prog, plan, offsets, floats = tag_waits_setup(tmp_path, "llama", 2)
    sched = schedule(prog, 7, tile_rows=32, slot_of=offsets, min_keys=2, tags=plan, tag_waits=True, tag_lead=lead)
    covered = tag_covered(prog, plan, offsets)
    seen = 0
    for lst in sched.lists:
        for ins in lst:
            for w in ins.waits:
                if (ins.counter, w.counter) in covered and not w.previous:
                    assert w.lead == -(-w.tiles * lead // 100) < w.tiles or w.lead == 0
                    seen += 1
                else:
                    assert w.lead == 0
            packed = struct.unpack(INSTR_FORMAT, pack(ins))[len(INSTR_FIELDS):]  # (the waits, after the fields)
            n = len(WAIT_FORMAT) - 1
            assert [packed[n * j + 1] for j in range(len(ins.waits))] == [int(w.previous) | w.lead << 2
                                                                          for w in ins.waits]
    assert seen > 0 and (lead == 0 or any(w.lead for lst in sched.lists for x in lst for w in x.waits))
    for seed in (11, 12):
        assert_vm_computes_the_model(m, sched, offsets, floats, seed=seed)


def test_tag_waits_need_tags(tmp_path):
    _, prog, *_ = setup(tmp_path)
    with pytest.raises(ValueError, match="tag waits need tagged values"):
        schedule(prog, 7, tag_waits=True)


def test_tag_waits_compile_drop_waits_and_refuse_what_they_cannot_serve(tmp_path, monkeypatch):
    # persist_tag_waits: the kernel builds with KIEC_TAG_WAITS (nvcc) and no instruction waits on a writer its tags
    # cover (the same schedule without does); a model without tags (below the minimum width) gets neither; parity
    # tags and x read straight from memory are refused by name
    from kiec.codegen import targets
    from kiec.codegen.persistent import _PersistentEmitter
    from kiec.ir.passes import pipeline
    from kiec.ir.passes.tags import tag_covered
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    program = pipeline.run(model.graph)
    base = dataclasses.replace(targets.TARGETS["sm_90"], persist_tagged=2, persist_tagged_min_width=0)

    def covered_waits(t):
        e = _PersistentEmitter(program, "bf16", model.max_seq_len, t)
        covered = tag_covered(program, e.tags, dict(e.arena)) if e.tags else set()
        return e, sum(1 for lst in e.sched.lists for ins in lst for w in ins.waits
                      if not w.previous and (ins.counter, w.counter) in covered)
    on = dataclasses.replace(base, persist_tag_waits=1)
    (e_off, n_off), (e_on, n_on) = covered_waits(base), covered_waits(on)
    assert e_on.sched.spin and not e_off.sched.spin and n_off > 0 and n_on == 0
    narrow = dataclasses.replace(on, persist_tagged_min_width=257)
    assert not covered_waits(narrow)[0].sched.spin
    for field, name in [("persist_tag_parity", "persist_tag_parity"), ("persist_x_direct", "persist_x_direct")]:
        with pytest.raises(ValueError, match=f"persist_tag_waits with {name}"):
            _PersistentEmitter(program, "bf16", model.max_seq_len, dataclasses.replace(on, **{field: 1}))
    with pytest.raises(ValueError, match="persist_tag_lead 101: a percentage"):
        _PersistentEmitter(program, "bf16", model.max_seq_len, dataclasses.replace(on, persist_tag_lead=101))
    led = covered_waits(dataclasses.replace(on, persist_tag_lead=10))[0]  # the covered pairs back, with a lead
    assert any(w.lead for lst in led.sched.lists for ins in lst for w in ins.waits)
    with pytest.raises(ValueError, match="persist_tag_waits 3: 0, 1"):
        _PersistentEmitter(program, "bf16", model.max_seq_len, dataclasses.replace(on, persist_tag_waits=3))
    for level in (1, 2):  # (2: late write guards, wait_writes)
        monkeypatch.setitem(targets.TARGETS, "sm_90", dataclasses.replace(on, persist_tag_waits=level))
        art = kiec.compile(model, str(tmp_path / f"art{level}"), mode="persistent")
        with open(os.path.join(art, "src", "model.cu")) as fh:
            assert f"#define KIEC_TAG_WAITS {level}" in fh.read()
    monkeypatch.setitem(targets.TARGETS, "sm_90", base)
    with open(os.path.join(kiec.compile(model, str(tmp_path / "base"), mode="persistent"), "src", "model.cu")) as fh:
        assert "KIEC_TAG_WAITS" not in fh.read()


@pytest.mark.parametrize("family", ["llama", "qwen3", "mistral"])
@pytest.mark.parametrize("level", [1, 2])
def test_late_waits_guard_only_writes_and_compute_the_model(tmp_path, family, level):
    # persist_tag_waits 2: a GEMV's waits on writers it reads only tagged values of are late (polled before its
    # epilogue): the down projection's on gate/up (it overwrites the stream gate/up read) among them; its untagged
    # reads' waits stay early (tags 1: the output projection's on attention); no other opcode has late waits; packed
    # in bit 1 of the Wait's `previous` field; the VM (a GEMV's reads first, its writes once its late waits are
    # met) computes the model on any interleaving
    import struct

    from kiec.codegen.persistent_abi import INSTR_FIELDS, INSTR_FORMAT, WAIT_FORMAT, pack
    m, prog, plan, offsets, floats = tag_waits_setup(tmp_path, family, level)
    sched = schedule(prog, 7, tile_rows=32, slot_of=offsets, min_keys=2, tags=plan, tag_waits=2, previous_first=True)
    ph = phases(prog)
    io = [reads_writes(prog.kernels[i], prog, op) for i, op in ph]
    name = {c: prog.kernels[i].name for c, (i, _) in enumerate(ph)}
    late = set()
    for lst in sched.lists:
        for ins in lst:
            for w in ins.waits:
                if w.late:
                    assert ins.opcode == "gemv" and not w.lead
                    rc, wj = io[ins.counter][0], io[w.counter][1]
                    slots = {offsets.get(v, v) for v in rc} & {offsets.get(v, v) for v in wj}
                    assert slots <= {offsets.get(v, v) for v in rc & wj if plan.writer.get(v) == w.counter}
                    late.add((name[ins.counter], name[w.counter]))
            n = len(WAIT_FORMAT) - 1
            packed = struct.unpack(INSTR_FORMAT, pack(ins))[len(INSTR_FIELDS):]
            assert [packed[n * j + 1] & 3 for j in range(len(ins.waits))] == [int(w.previous) | int(w.late) << 1
                                                                               for w in ins.waits]
    assert ("L0.x_mlp", "L0.act") in late
    attn = next(c for c, n in name.items() if n == "L0.attn")
    o = next(c for c, n in name.items() if n == "L0.x_attn")
    o_waits = {w for lst in sched.lists for x in lst if x.counter == o for w in x.waits if w.counter == attn}
    assert (level == 1) == bool(o_waits) and not any(w.late for w in o_waits)
    for seed in (21, 22, 23):
        assert_vm_computes_the_model(m, sched, offsets, floats, seed=seed)


def test_a_read_wait_made_late_is_caught(tmp_path):
    # tags 1: the output projection reads attention's output as plain floats; were its wait on attention polled
    # before its epilogue only, its reads would come first: the VM finds the words unwritten
    m, prog, plan, offsets, floats = tag_waits_setup(tmp_path, "llama", 1)
    sched = schedule(prog, 7, tile_rows=32, slot_of=offsets, min_keys=2, tags=plan, tag_waits=2)
    attn = first_attention(prog)
    o = attn + 1
    for lst in sched.lists:
        lst[:] = [dataclasses.replace(x, waits=tuple(dataclasses.replace(w, late=True) if w.counter == attn else w
                                                     for w in x.waits)) if x.kernel == o else x for x in lst]
    with pytest.raises(ScheduleError, match=rf"gemv kernel {o} tile \d+ \(token 0\) read %L0\.attn"):
        VM(sched, {n: m.weights[n].float() for n in m.graph.params}, offsets, floats).run([5, 17, 99], 3, "eager")
