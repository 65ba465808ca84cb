"""Tagged values in the persistent schedule, run on the Python VM: what the tag plan tags and whose waits it relaxes,
the slots and parities tagged values take, and the probes that drop waits (the VM names the stale read)."""
import pytest

import kiec
from kiec.codegen.buffers import plan_buffers
from kiec.ir.passes import persistent, pipeline
from kiec.ir.passes.persistent import dependencies, reduce_waits, schedule
from kiec.ir.passes.phases import Wait, phases, reads_writes
from kiec.ir.passes.program import kernel_io
from kiec.ir.passes.tags import direct_waits, tag_plan
from kiec.ir.passes.vm import VM, ScheduleError
from tests.tiny_hf import make_tiny_hf
from tests.vm_setup import assert_vm_computes_the_model, setup


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
