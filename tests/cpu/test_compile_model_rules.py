"""kiec compile of the persistent kernel (nvcc, no GPU): the fields a model runs by its width and its attention's
kind (tags, the paced stream, the narrow fields), and the tagged pairs and parity tags those rules allow."""
import os
import re
import shutil

import pytest

import kiec
from tests.persistent_build import tiny_tagged_llama
from tests.tiles import attention_tile_args
from tests.tiny_hf import make_tiny_hf

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


@pytest.mark.parametrize("level", [1, 2])
def test_tagged_words_compile_with_their_flags_per_tile(tmp_path, monkeypatch, level):
    # persist_tagged 1: QKV reads a tagged x and writes plain floats (attention reads them); the output projection
    # reads attention's plain output and writes the tagged stream; the MLP's both tagged; the LM head reads it.
    # 2: QKV's output and attention's tagged too
    import dataclasses

    from kiec.codegen import targets
    make_tiny_hf(tmp_path / "hf", "qwen3")
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    monkeypatch.setitem(targets.TARGETS, "sm_90", dataclasses.replace(targets.TARGETS["sm_90"], persist_tagged=level))
    art = kiec.compile(model, str(tmp_path / "art"), mode="persistent")  # nvcc: the tagged tiles compile
    with open(os.path.join(art, "src", "model.cu")) as fh:
        text = fh.read()
    assert re.search(r"kiec::embed_tile<T, true>", text)
    # gemv_tile<T, K, WARPS, NORM, EPI, BIAS, SEGS[, DIRECT[, TX[, TY]]]>: (TX, TY) of QKV, O, gate/up, down, LM head
    flags = [(a.split(", ")[7:] + ["false"] * 3)[1:3] for a in re.findall(r"kiec::gemv_tile<([^>]*)>", text)]
    two = "true" if level == 2 else "false"
    assert flags == [["true", two], [two, "true"], ["true", "true"], ["true", "true"], ["true", "false"]]
    assert attention_tile_args(text)[0]["TAGGED"] == ("true" if level == 2 else "false")
    assert "#define KIEC_TAGGED 1" in text


def test_narrow_models_get_no_tags(tmp_path):
    # persist_tagged_min_width: a model whose embedding row is narrower than it runs tags 0 (smollm2-135m's 576
    # timed faster without), a wider one the table's level; the emitter's plan follows
    import dataclasses

    from kiec.codegen.persistent import _PersistentEmitter
    from kiec.codegen.persistent_rules import tag_level
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    program = pipeline.run(model.graph)
    for width, want in [(257, 0), (256, 2), (0, 2)]:
        t = dataclasses.replace(target("sm_90"), persist_tagged=2, persist_tagged_min_width=width)
        assert tag_level(program, t) == want
        e = _PersistentEmitter(program, "bf16", model.max_seq_len, t)
        assert (e.tags is None) == (want == 0)
        assert bool(e.tags and e.tagged(next(k.qkv for k in program.kernels if hasattr(k, "qkv")))) == (want == 2)
    assert tag_level(program, dataclasses.replace(target("sm_90"), persist_tagged=1, persist_tagged_min_width=0)) == 1


def test_narrow_models_stream_unpaced_with_the_walk_read_each_page(tmp_path):
    # persist_paced_min_width: a model whose embedding row is narrower than it streams its weights with the walk read
    # each page and no pace (smollm2-135m's 576 timed faster so), whatever the table's walk and pace; a wider one gets
    # them and what hangs on the pace (the ahead pace, paced L2 asks, the reference peak)
    import dataclasses

    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384)
    program = pipeline.run(kiec.load(str(tmp_path / "hf"), dtype="bf16").graph)
    paced = ["#define KIEC_WALK_KEPT 1", "#define KIEC_PAGE_PACE_NS 460", "#define KIEC_PAGE_PACE_AHEAD_NS 900",
             "#define KIEC_L2_AHEAD_PACED 1", "#define KIEC_L2_AHEAD_BURST 1", "#define KIEC_PACE_REF_GBPS 4814",
             "#define KIEC_PACE_REF_POWER_PCT 87"]
    for width, want in [(257, False), (256, True), (0, True)]:
        t = dataclasses.replace(target("sm_90"), persist_walk_kept=1, persist_page_pace_ns=460,
                                persist_page_pace_ahead_ns=900, persist_l2_ahead_paced=1, persist_l2_ahead_burst=1,
                                persist_pace_ref_gbps=4814, persist_paced_min_width=width)
        text = emit_persistent(program, "bf16", 64, t, "x").files["model.cu"]
        assert [line in text for line in paced] == [want] * len(paced), width
    narrow = emit_persistent(program, "bf16", 64, dataclasses.replace(t, persist_paced_min_width=257), "x")
    unpaced = emit_persistent(program, "bf16", 64, dataclasses.replace(t, persist_walk_kept=0, persist_page_pace_ns=0,
                                                                       persist_paced_min_width=0), "x")
    assert narrow.files["model.cu"] == unpaced.files["model.cu"]  # (the measured variant's kernel, exactly)
    # persist_pace_ref_power_pct: 100 (in proportion) emits no power, the ring's own default; outside 1-200 refused
    proportional = emit_persistent(program, "bf16", 64, dataclasses.replace(t, persist_pace_ref_power_pct=100), "x")
    assert "KIEC_PACE_REF_POWER_PCT" not in proportional.files["model.cu"]
    for bad in (0, 201):
        with pytest.raises(ValueError, match=rf"persist_pace_ref_power_pct {bad}: .* 1 to 200 \(100: in proportion\)"):
            emit_persistent(program, "bf16", 64, dataclasses.replace(t, persist_pace_ref_power_pct=bad), "x")


@pytest.mark.parametrize("name, tensor_cores", [("llama-3.2-1b", True), ("llama-3.1-8b", True), ("qwen3-1.7b", False)])
def test_the_pace_is_the_fma_attentions_where_some_attention_keeps_its_fma_passes(name, tensor_cores):
    # persist_page_pace_fma_ns: a model whose attention keeps its FMA passes (qwen3-1.7b: 2 query heads a KV head, 128
    # wide) streams at that pace, the others at persist_page_pace_ns; 0 leaves every model at persist_page_pace_ns, and
    # persist_page_pace_ns 0 leaves every model unpaced
    import dataclasses

    from kiec.codegen.persistent import _PersistentEmitter
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    program = pipeline.run(kiec.load(name, max_seq_len=256).graph)
    t = dataclasses.replace(target("sm_90"), persist_page_pace_ns=440, persist_page_pace_fma_ns=460)
    e = _PersistentEmitter(program, "bf16", 256, t)
    assert all((e.mma_keys(k) > 0) == tensor_cores for k in e.attn)
    assert e.page_pace() == (440 if tensor_cores else 460)
    e = _PersistentEmitter(program, "bf16", 256, dataclasses.replace(t, persist_page_pace_fma_ns=0))
    assert e.page_pace() == 440
    assert _PersistentEmitter(program, "bf16", 256, dataclasses.replace(t, persist_page_pace_ns=0)).page_pace() == 0


def test_the_ahead_pace_from_a_position_is_compiled_only_with_the_ahead_pace(tmp_path):
    # persist_page_pace_ahead_from_pos: the ring's check of the page's position is there with the ahead pace and a
    # position; the ahead pace alone (every position) and the position alone (no ahead pace) compile as before
    import dataclasses

    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384)
    program = pipeline.run(kiec.load(str(tmp_path / "hf"), dtype="bf16").graph)
    base = dataclasses.replace(target("sm_90"), persist_page_pace_ns=460, persist_paced_min_width=0)

    def model_cu(**fields):
        return emit_persistent(program, "bf16", 64, dataclasses.replace(base, **fields), "x").files["model.cu"]
    both = model_cu(persist_page_pace_ahead_ns=1000, persist_page_pace_ahead_from_pos=2048)
    assert "#define KIEC_PAGE_PACE_AHEAD_NS 1000" in both and "#define KIEC_PAGE_PACE_AHEAD_FROM 2048" in both
    assert model_cu(persist_page_pace_ahead_ns=1000) == model_cu(persist_page_pace_ahead_ns=1000,
                                                                 persist_page_pace_ahead_from_pos=0)
    assert model_cu(persist_page_pace_ahead_from_pos=2048) == model_cu()
    assert "KIEC_PAGE_PACE_AHEAD_FROM" not in model_cu(persist_page_pace_ahead_from_pos=2048)


def test_narrow_models_run_x_direct_owner_merges_and_newest_first(tmp_path):
    # persist_narrow_width: a model whose embedding row is narrower than it runs the *_narrow fields' x direct, owner
    # merges, newest first, combine batch, ring depth, attention passes in flight and their first rows loaded before
    # the wait (smollm2-135m's 576 timed faster so), exactly the kernel those fields give a wide model; a wider one
    # the table's own
    import dataclasses

    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.persistent_rules import for_model
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384)
    program = pipeline.run(kiec.load(str(tmp_path / "hf"), dtype="bf16").graph)
    t = dataclasses.replace(target("sm_90"), persist_x_direct=0, persist_attn_owner_merges=0,
                            persist_attn_newest_first=0, persist_combine_batch=0, persist_x_direct_narrow=1,
                            persist_attn_owner_merges_narrow=8, persist_attn_newest_first_narrow=1,
                            persist_combine_batch_narrow=16, persist_stages=12, persist_stages_narrow=4,
                            persist_attn_mma_ahead=2, persist_attn_mma_ahead_narrow=1, persist_attn_mma_first=0,
                            persist_attn_mma_first_narrow=2, persist_tag_waits=0, persist_tag_waits_narrow=0)
    for width, want in [(257, (1, 8, 1, 16, 4, 1, 2)), (256, (0, 0, 0, 0, 12, 2, 0)), (0, (0, 0, 0, 0, 12, 2, 0))]:
        got = for_model(program, dataclasses.replace(t, persist_narrow_width=width))
        assert (got.persist_x_direct, got.persist_attn_owner_merges, got.persist_attn_newest_first,
                got.persist_combine_batch, got.persist_stages, got.persist_attn_mma_ahead,
                got.persist_attn_mma_first) == want, width
    narrow = emit_persistent(program, "bf16", 64, dataclasses.replace(t, persist_narrow_width=257), "x")
    fields = dataclasses.replace(t, persist_narrow_width=0, persist_x_direct=1, persist_attn_owner_merges=8,
                                 persist_attn_newest_first=1, persist_combine_batch=16, persist_stages=4,
                                 persist_attn_mma_ahead=1, persist_attn_mma_first=2,
                                 attn_min_keys=t.persist_attn_min_keys_narrow)  # (its own test below)
    assert narrow.files == emit_persistent(program, "bf16", 64, fields, "x").files
    attention = attention_tile_args(narrow.files["model.cu"])[0]
    assert (attention["OWNER_MAX"], attention["NEWEST_FIRST"], attention["MMA_FIRST"]) == ("8", "true", "2")
    assert "#define KIEC_COMBINE_BATCH 16" in narrow.files["model.cu"]
    wide = emit_persistent(program, "bf16", 64, dataclasses.replace(t, persist_narrow_width=256), "x")
    assert "attention_tile" in wide.files["model.cu"] and wide.files != narrow.files
    assert wide.files == emit_persistent(program, "bf16", 64, dataclasses.replace(t, persist_narrow_width=0), "x").files


def test_narrow_models_run_tag_waits(tmp_path):
    # persist_tag_waits_narrow: a narrow tagged model spins on its tags (smollm2-135m timed faster so, the wide models
    # at noise), exactly the kernel persist_tag_waits gives a wide one; a wider model the table's own
    import dataclasses

    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.persistent_rules import for_model
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384)
    program = pipeline.run(kiec.load(str(tmp_path / "hf"), dtype="bf16").graph)
    t = dataclasses.replace(target("sm_90"), persist_tagged_min_width=0, persist_tag_waits=0,
                            persist_tag_waits_narrow=1)
    assert target("sm_90").persist_tag_waits_narrow == 1 and target("sm_90").persist_tag_waits == 0
    assert [for_model(program, dataclasses.replace(t, persist_narrow_width=w)).persist_tag_waits
            for w in (257, 256, 0)] == [1, 0, 0]
    narrow = emit_persistent(program, "bf16", 64, dataclasses.replace(t, persist_narrow_width=257), "x")
    assert "KIEC_TAG_WAITS" in narrow.files["model.cu"]
    as_wide = dataclasses.replace(for_model(program, dataclasses.replace(t, persist_narrow_width=257)),
                                  persist_narrow_width=0)
    assert narrow.files == emit_persistent(program, "bf16", 64, as_wide, "x").files
    wide = emit_persistent(program, "bf16", 64, dataclasses.replace(t, persist_narrow_width=256), "x")
    assert "KIEC_TAG_WAITS" not in wide.files["model.cu"]


def test_narrow_models_split_attention_by_their_own_min_keys(tmp_path):
    # persist_attn_min_keys_narrow: a narrow model's persistent kernel splits attention's context by it (smollm2-135m:
    # one split a KV head up to 256 rows, timed 8% faster so), the kernel's template argument, its descriptors and the
    # schedule (the VM's and the trace tools' split of the rows) alike; a wider model, and graph mode's kernels, keep
    # attn_min_keys
    import dataclasses

    from kiec.codegen.emit import emit
    from kiec.codegen.persistent import _PersistentEmitter, emit_persistent
    from kiec.codegen.persistent_rules import for_model
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    from kiec.ir.passes.simulate import split_rows
    assert (target("sm_90").persist_attn_min_keys_narrow, target("sm_90").attn_min_keys) == (256, 64)
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384)
    program = pipeline.run(kiec.load(str(tmp_path / "hf"), dtype="bf16").graph)
    t = dataclasses.replace(target("sm_90"), attn_min_keys=16, persist_attn_min_keys_narrow=128)
    for width, keys in [(257, 128), (256, 16), (0, 16)]:
        tw = dataclasses.replace(t, persist_narrow_width=width)
        e = _PersistentEmitter(program, "bf16", 64, tw)
        assert (e.t.attn_min_keys, e.sched.min_keys) == (keys, keys), width
        src = emit_persistent(program, "bf16", 64, tw, "x").files["model.cu"]
        tiles = attention_tile_args(src)
        assert tiles and all(a["MIN_KEYS"] == str(keys) for a in tiles), (width, tiles)
        graph = emit(program, "bf16", 64, tw, "x").files  # (its attention kernel's name ends in m<min keys>)
        assert {m for text in graph.values() for m in re.findall(r"_w\d+s\d+u\d+m(\d+)", text)} == {"16"}, width
    k = next(k for k in program.kernels if hasattr(k, "kv_heads"))
    assert split_rows(k, 200, 8, 128) == [(0, 128), (128, 201)]  # (two of 8 splits in use at position 200)
    narrow = dataclasses.replace(t, persist_narrow_width=257)
    as_wide = dataclasses.replace(for_model(program, narrow), persist_narrow_width=0)  # (its other narrow fields too)
    assert as_wide.attn_min_keys == 128
    assert emit_persistent(program, "bf16", 64, narrow, "x").files == emit_persistent(program, "bf16", 64, as_wide,
                                                                                       "x").files


def test_narrow_models_ask_l2_ahead(tmp_path):
    # persist_l2_ahead_max_width: a model no wider than it asks L2 for persist_l2_ahead_bytes past the ring (the
    # kernel's L2_AHEAD, in pages), a wider one for none; by default smollm2-135m's width (576) does, 2048 does not
    import dataclasses
    import re

    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.persistent_rules import l2_ahead_bytes, model_width
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    program = pipeline.run(model.graph)
    assert model_width(program) == 256
    base = target("sm_90")
    assert 576 <= base.persist_l2_ahead_max_width < 2048 and base.persist_l2_ahead_bytes > 0
    for width, want in [(256, 1 << 18), (255, 0)]:
        t = dataclasses.replace(base, persist_l2_ahead_bytes=1 << 18, persist_l2_ahead_max_width=width)
        assert l2_ahead_bytes(program, t) == want
        src = emit_persistent(program, "bf16", model.max_seq_len, t, "x")
        pages = re.search(r"persistent_kernel<Model, Ring, WARPS, (\d+)>", src.files["model.cu"])
        assert pages and int(pages.group(1)) == want // t.persist_page_bytes


def test_tagged_pairs_take_the_silu_outputs_whose_readers_copy_them(tmp_path, monkeypatch):
    # persist_tagged_pairs: on a tagged model the SiLU-mul's output, whose reader (the down projection) copies it into
    # the scratch (all of it, or a warp's segment: llama-3.1-8b): gate/up's case writes pairs (PY, argument 18), the
    # down projection's reads them (PX, argument 17), gate/up's shares are whole pairs, and the kernel builds (nvcc).
    # None where the down projection reads x straight from memory, with tag waits or parity tags, or without tags
    import dataclasses

    from kiec.codegen import targets
    from kiec.codegen.persistent import _PersistentEmitter
    from kiec.ir.passes import pipeline
    model, program, wide = tiny_tagged_llama(tmp_path)
    wide = dataclasses.replace(wide, persist_attn_owner_merges=0)  # (attention's pairs: not with owner merges)
    silu = {k.out for k in program.kernels if getattr(k, "epilogue", None) == "silu_mul"}

    def paired(**change):
        return _PersistentEmitter(program, "bf16", model.max_seq_len, dataclasses.replace(wide, **change)).paired

    attn = {k.attention.out for k in program.kernels if type(k).__name__ == "AttentionKernel"}
    assert paired(persist_tagged_pairs=0) == frozenset() and paired(persist_tagged_pairs=1) == silu
    assert paired(persist_tagged_pairs=2) == silu | attn and paired(persist_tagged_pairs=2, persist_tagged=1) == silu
    assert paired(persist_tagged_pairs=2, persist_attn_owner_merges=8) == silu
    with pytest.raises(ValueError, match=r"persist_tagged_pairs 3: 0, 1 \(the SiLU-mul's output\) or 2"):
        paired(persist_tagged_pairs=3)
    for other in (dict(persist_x_direct=1), dict(persist_tag_waits=1), dict(persist_tag_parity=1),
                  dict(persist_tagged=0)):
        assert paired(persist_tagged_pairs=1, **other) == frozenset(), other
    big = pipeline.run(kiec.load("llama-3.1-8b", dtype="bf16", max_seq_len=512).graph)  # (its down: a warp's copy)
    big_silu = {k.out for k in big.kernels if getattr(k, "epilogue", None) == "silu_mul"}
    e = _PersistentEmitter(big, "bf16", 512, dataclasses.replace(wide, persist_tagged_pairs=1))
    assert e.paired == big_silu and all(e.x_warp_copy(k) for k in big.kernels if getattr(k, "x", None) in big_silu)
    e = _PersistentEmitter(program, "bf16", model.max_seq_len, dataclasses.replace(wide, persist_tagged_pairs=2))
    for lst in e.sched.lists:
        for ins in lst:
            if getattr(program.kernels[ins.kernel], "out", None) in silu:
                assert ins.lo % 2 == 0 and ins.hi % 2 == 0
    monkeypatch.setitem(targets.TARGETS, "sm_90", dataclasses.replace(wide, persist_tagged_pairs=2))
    art = kiec.compile(model, str(tmp_path / "art"), mode="persistent")
    with open(os.path.join(art, "src", "model.cu")) as fh:
        text = fh.read()
    cases = [c.split(", ") for c in re.findall(r"kiec::gemv_tile<([^>]*)>", text)]
    assert [c[4] for c in cases if len(c) == 19 and c[18] == "true"] == ["kiec::EPI_SILU_MUL"]
    # the output projection (K 256) and the down projection (K 384) read pairs; attention writes them (PAIRED, last)
    assert sorted((c[4], c[1]) for c in cases if len(c) >= 18 and c[17] == "true") == [("kiec::EPI_RESIDUAL", "256"),
                                                                                       ("kiec::EPI_RESIDUAL", "384")]
    assert attention_tile_args(text)[0]["PAIRED"] == "true"


@pytest.mark.parametrize("change", [dict(), dict(persist_tagged=1, persist_x_direct=1)])
def test_parity_tags_compile_with_their_table_and_reset(tmp_path, monkeypatch, change):
    # persist_tag_parity: the kernel defines KIEC_TAG_PARITY, holds each phase's parity bits and zeroes the tagged
    # slots before each launch; it builds (nvcc) with tags 2 and with tags 1 and x slices straight from memory (the
    # table's spared splits are not taken: every SM must read the residual stream). A model too narrow for every SM
    # to read the residual stream is refused by name, nothing left behind
    import dataclasses

    from kiec.codegen import targets
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=300)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    monkeypatch.setitem(targets.TARGETS, "sm_90",
                        dataclasses.replace(targets.TARGETS["sm_90"], persist_tag_parity=1, **change))
    art = kiec.compile(model, str(tmp_path / "art"), mode="persistent")
    with open(os.path.join(art, "src", "model.cu")) as fh:
        text = fh.read()
    assert "#define KIEC_TAG_PARITY 1" in text and "kiec_tag_parity[] = { 3, " in text
    assert "cudaMemsetAsync(c->arena + " in text
    make_tiny_hf(tmp_path / "narrow", "llama")
    with pytest.raises(kiec.KiecError, match=r"parity tags: .* on \d+ of 132 SMs"):
        kiec.compile(kiec.load(str(tmp_path / "narrow"), dtype="bf16"), str(tmp_path / "art2"), mode="persistent")
    assert not os.path.exists(tmp_path / "art2")
