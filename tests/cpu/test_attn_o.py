"""Attention inside the output projection (persist_attn_o_below, ir/passes/attn_o.py) on the CPU: the schedule pairs
each projection tile with its own head's attention tile, the VM computes the model on any interleaving below, across
and past the threshold, a wrong schedule fails, the stream walks the head-packed weights, and the kernel compiles."""
import dataclasses
import os
import struct
import subprocess

import pytest
import torch

import kiec
from kiec.codegen.buffers import plan_buffers
from kiec.codegen.persistent import _PersistentEmitter, row_segments, walk
from kiec.codegen.persistent_abi import pack_schedule
from kiec.codegen.targets import target
from kiec.ir.passes import pipeline
from kiec.ir.passes.attn_o import fusable
from kiec.ir.passes.persistent import schedule
from kiec.ir.passes.program import AttentionKernel, GemvKernel
from kiec.ir.passes.vm import VM, ScheduleError
from tests.cpu.test_persistent_vm import reference_logits
from tests.nvcc_host import nvcc_build
from tests.tiny_hf import make_tiny_hf

HERE = os.path.dirname(__file__)
PROMPT, STEPS = [5, 17, 99, 4], 12


def setup(tmp_path, family="qwen3", sms=7, below=5, **kw):
    # min_keys 2: past the threshold attention spreads over 2-3 splits a KV head (7 SMs / 2 KV heads: 3 splits)
    make_tiny_hf(tmp_path, family)
    m = kiec.load(str(tmp_path), max_seq_len=16)
    prog = pipeline.run(m.graph)
    offsets, floats = plan_buffers(prog, {})
    sched = schedule(prog, sms, tile_rows=32, slot_of=dict(offsets), min_keys=2, attn_o_below=below, **kw)
    return m, prog, sched, offsets, floats


def run_vm(m, sched, offsets, floats, policy="random", seed=0):
    weights = {n: m.weights[n].float() for n in m.graph.params}
    return VM(sched, weights, offsets, floats).run(PROMPT, STEPS, policy, seed)


def test_every_layer_fuses_and_each_projection_tile_follows_its_heads_attention_tile(tmp_path):
    m, prog, sched, _, _ = setup(tmp_path)
    attn = [i for i, k in enumerate(prog.kernels) if isinstance(k, AttentionKernel)]
    assert sorted(f.attention for f in sched.attn_o.values()) == attn  # both layers
    for i, f in sched.attn_o.items():
        rows = {h: [] for h in range(f.heads)}
        for sm, lst in enumerate(sched.lists):
            for j, ins in enumerate(lst):
                if ins.kernel == i:
                    before = lst[j - 1]
                    assert ins.opcode == "attn_o" and before.kernel == f.attention and before.lo == ins.tile
                    rows[ins.tile].append((ins.lo, ins.hi))
        for spans in rows.values():  # each head's part covers every row once
            assert sorted(r for lo, hi in spans for r in range(lo, hi)) == list(range(prog.kernels[i].n_out))
    for lst in sched.lists:  # the waits on a fused layer's attention count its long tokens, no others do
        for ins in lst:
            for w in ins.waits:
                assert w.long == sched.long_phase(w.counter)
    o = next(iter(sched.attn_o))
    assert {w.counter for w in sched.lists[0][[x.kernel for x in sched.lists[0]].index(o)].waits if w.long} == {o - 1}


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "mistral"])
@pytest.mark.parametrize("below", [0, 5, 64])
def test_the_vm_computes_the_model_below_across_and_past_the_threshold(tmp_path, family, below):
    # below 5: tokens 0-4 fused, 5-11 split (across); 64: every token fused; 0: none (the old schedule, no attn_o)
    m, prog, sched, offsets, floats = setup(tmp_path, family, below=below)
    assert bool(sched.attn_o) == (below > 0)
    want = reference_logits(m, PROMPT, STEPS)
    for policy, seed in [("eager", 0), ("random", 1), ("random", 2)]:
        got = run_vm(m, sched, offsets, floats, policy, seed)
        for t, (a, b) in enumerate(zip(got, want)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=f"{policy} {seed} token {t}")


def test_the_narrow_models_attention_merges_still_compute_past_the_threshold(tmp_path):
    # smollm2-135m's narrow fields (owner merges 8, newest first, a spared SM) with the fusion below token 5
    m, prog, sched, offsets, floats = setup(tmp_path, owner_merges=2, newest_first=True, spare_splits=1)
    want = reference_logits(m, PROMPT, STEPS)
    for seed in (3, 4):
        for t, (a, b) in enumerate(zip(run_vm(m, sched, offsets, floats, "random", seed), want)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=f"seed {seed} token {t}")


def test_a_projection_tile_after_another_heads_attention_is_caught(tmp_path):
    m, prog, sched, offsets, floats = setup(tmp_path)
    o = next(iter(sched.attn_o))
    for lst in sched.lists:  # every projection tile of layer 0 takes the other KV head
        lst[:] = [dataclasses.replace(x, tile=1 - x.tile) if x.kernel == o else x for x in lst]
    with pytest.raises(ScheduleError, match=r"attn_o kernel \d+ tile \d \(token 0\) on SM \d+ found attention"):
        run_vm(m, sched, offsets, floats, "eager")


def test_a_projection_that_does_not_wait_for_attention_past_the_threshold_is_caught(tmp_path):
    m, prog, sched, offsets, floats = setup(tmp_path)
    o = next(iter(sched.attn_o))
    for lst in sched.lists:
        lst[:] = [dataclasses.replace(x, waits=tuple(w for w in x.waits if not w.long)) if x.kernel == o else x
                  for x in lst]
    with pytest.raises(ScheduleError, match=r"attn_o kernel \d+ tile \d \(token 5\) read %L0\.attn\["):
        run_vm(m, sched, offsets, floats, "eager")


def test_a_wait_on_the_attention_phase_that_counts_every_token_deadlocks(tmp_path):
    m, prog, sched, offsets, floats = setup(tmp_path)
    for lst in sched.lists:  # the long flag dropped: past the threshold the targets count the fused tokens too
        lst[:] = [dataclasses.replace(x, waits=tuple(dataclasses.replace(w, long=False) for w in x.waits))
                  for x in lst]
    with pytest.raises(ScheduleError, match="deadlock"):
        run_vm(m, sched, offsets, floats, "eager")


def test_a_reader_of_the_stream_that_misses_the_parts_is_caught(tmp_path):
    m, prog, sched, offsets, floats = setup(tmp_path)
    o = next(iter(sched.attn_o))  # the gate/up GEMV after layer 0's projection, not waiting for its parts
    for lst in sched.lists:
        lst[:] = [dataclasses.replace(x, waits=tuple(w for w in x.waits if w.counter != o or w.previous))
                  if x.kernel == o + 1 else x for x in lst]
    with pytest.raises(ScheduleError, match=r"gemv kernel \d+ tile \d+ \(token 0\) read %"):
        run_vm(m, sched, offsets, floats, "eager")


def test_fusable_needs_the_projection_right_after_its_attention(tmp_path):
    make_tiny_hf(tmp_path, "llama")
    prog = pipeline.run(kiec.load(str(tmp_path), max_seq_len=16).graph)
    assert len(fusable(prog)) == 2
    prog.kernels.insert(prog.kernels.index(next(k for k in prog.kernels if isinstance(k, AttentionKernel))) + 1,
                        prog.kernels[0])  # (any kernel between them)
    assert len(fusable(prog)) == 1


def test_tagged_values_are_refused(tmp_path):
    from kiec.ir.passes.persistent import tag_plan
    make_tiny_hf(tmp_path, "llama")
    prog = pipeline.run(kiec.load(str(tmp_path), max_seq_len=16).graph)
    with pytest.raises(ValueError, match="takes no tagged values"):
        schedule(prog, 7, tags=tag_plan(prog, attention=True), attn_o_below=8)


def emitter(tmp_path, family="llama", sms=7, page=1024, **fields):
    make_tiny_hf(tmp_path / "hf", family, hidden_size=256, intermediate_size=640)
    prog = pipeline.run(kiec.load(str(tmp_path / "hf"), max_seq_len=64).graph)
    t = dataclasses.replace(target("sm_90"), sms=sms, persist_page_bytes=page, persist_tagged=0, **fields)
    e = _PersistentEmitter(prog, "bf16", 64, t)
    walk(e, prog, "test")
    return e, prog


def test_the_streaming_thread_copies_each_projection_tiles_head_columns(tmp_path):
    # the host page walk (ring.cuh's PageWalk with KIEC_ATTN_O_BELOW) over the fused schedule: a projection tile's
    # pages are its rows of its KV head's block of the head-packed weights ([head][row][K / heads])
    e, prog = emitter(tmp_path, persist_attn_o_below=8)
    blob, starts = pack_schedule(e.sched)
    (tmp_path / "instrs.bin").write_bytes(blob)
    (tmp_path / "starts.bin").write_bytes(struct.pack(f"<{len(starts) + 1}i", *starts, sum(map(len, e.sched.lists))))
    (tmp_path / "kernels.bin").write_bytes(b"".join(e.descs))
    exe = nvcc_build(tmp_path, os.path.join(HERE, "page_walk.cu"), "-std=c++17", "-DKIEC_ATTN_O_BELOW=8")
    lines = subprocess.run([exe, str(tmp_path), "3", "4", "1024", "0"], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    got = [tuple(map(int, x.split())) for x in lines if not x.startswith("kv")]
    want = []
    for sm, lst in enumerate(e.sched.lists):
        for ins in lst:
            k = prog.kernels[ins.kernel]
            if ins.opcode not in ("gemv", "attn_o"):
                continue
            silu = k.epilogue == "silu_mul"
            kk = e.sched.attn_o[ins.kernel].k if ins.opcode == "attn_o" else k.k
            segs = row_segments(kk, e.warps, 1024, silu)
            item, row = kk // 8 // segs * 16, 2 * kk
            per_page, items = 1024 // (item * (2 if silu else 1)), (ins.hi - ins.lo) * segs
            name = "+".join(k.weights) + ("@heads" if ins.opcode == "attn_o" else "")
            first_row = (ins.tile * k.n_out if ins.opcode == "attn_o" else 0) + ins.lo
            base = e.lay.entries[name].offset + first_row * row
            for first in range(0, items, per_page):
                gate = base + first * item
                want.append((sm, gate, gate + k.n_out * row if silu else -1, min(per_page, items - first) * item,
                             per_page * item))
    assert got == want and any(ins.opcode == "attn_o" for lst in e.sched.lists for ins in lst)


def test_the_projection_is_packed_a_heads_columns_after_another(tmp_path):
    from kiec.build import write_weights
    make_tiny_hf(tmp_path / "hf", "llama")
    m = kiec.load(str(tmp_path / "hf"), dtype="bf16", max_seq_len=16)
    prog = pipeline.run(m.graph)
    e = _PersistentEmitter(prog, "bf16", 16, dataclasses.replace(target("sm_90"), sms=7, persist_tagged=0,
                                                                  persist_attn_o_below=8))
    src = walk(e, prog, "test")
    write_weights(m, src, str(tmp_path / "weights.bin"), "bf16")
    raw = (tmp_path / "weights.bin").read_bytes()
    o = prog.kernels[next(iter(e.sched.attn_o))]
    t = next(t for t in src.weights if t.heads)
    got = torch.frombuffer(bytearray(raw[t.offset:t.offset + t.nbytes]), dtype=torch.bfloat16).view(t.shape)
    w = m.weights[o.weights[0]].to(torch.bfloat16)
    for h in range(t.heads):
        assert torch.equal(got[h], w[:, h * t.shape[2]:(h + 1) * t.shape[2]])


def test_the_kernel_compiles_without_spills_for_smollm2(tmp_path):
    # the registry's narrow model with its narrow fields and the fusion on (scripts/ptxas.py's build of it)
    from kiec.build import check_toolchain, emit_sources, nvcc_flags, write_sources
    from kiec.codegen import targets
    try:
        nvcc = check_toolchain("cuda", "sm_90")
    except kiec.KiecError:
        pytest.skip("needs nvcc")
    tp = dataclasses.replace(targets.TARGETS["sm_90"], persist_tagged_min_width=1024, persist_paced_min_width=1024,
                             persist_narrow_width=1024, persist_attn_o_below_narrow=512)
    src = emit_sources(kiec.load("smollm2-135m", dtype="bf16", max_seq_len=512), "persistent", "bf16", tp, "t")
    assert "kiec::attn_o_tile<" in src.files["model.cu"] and "#define KIEC_ATTN_O_BELOW 512" in src.files["model.cu"]
    write_sources(src, str(tmp_path))
    r = subprocess.run([nvcc, *nvcc_flags(tp.gencode), "-Xptxas", "-v", "-c", str(tmp_path / "model.cu"), "-o",
                        str(tmp_path / "m.o")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "0 bytes spill stores, 0 bytes spill loads" in r.stderr, r.stderr[-1500:]
