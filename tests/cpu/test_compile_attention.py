"""kiec compile of the persistent kernel (nvcc, no GPU): the attention tile's fields reach its template arguments
where they apply (rotation pairs, passes a split, the tensor-core passes, the output projection's merges), and
are refused by name where they cannot."""
import os
import shutil

import pytest

import kiec
from tests.persistent_build import tiny_tagged_llama
from tests.tiles import attention_tile_args
from tests.tiny_hf import make_tiny_hf

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def test_early_rope_and_kv_first_set_their_flags_after_the_short_pass(tmp_path):
    # persist_attn_early_rope, persist_attn_kv_first: attention_tile's EARLY_ROPE and KV_FIRST after U_SHORT; off,
    # the tail stops before them; KV_FIRST only with a short pass (persist_attn_short_keys)
    import dataclasses

    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    program = pipeline.run(model.graph)
    base = dataclasses.replace(target("sm_90"), persist_attn_pipeline=0, persist_tagged=0, persist_attn_short_keys=2,
                               persist_attn_lean=0, persist_attn_mma=0)  # (the flags after them at their defaults)
    args = {}
    for early, first, short in [(0, 0, 2), (1, 0, 2), (0, 1, 2), (1, 1, 2), (0, 1, 0)]:
        t = dataclasses.replace(base, persist_attn_early_rope=early, persist_attn_kv_first=first,
                                persist_attn_short_keys=short)
        text = emit_persistent(program, "bf16", model.max_seq_len, t, "x").files["model.cu"]
        a = attention_tile_args(text)[0]
        args[early, first, short] = a["U_SHORT"], a["EARLY_ROPE"], a["KV_FIRST"]
    assert args == {(0, 0, 2): ("2", "false", "false"), (1, 0, 2): ("2", "true", "false"),
                    (0, 1, 2): ("2", "false", "true"), (1, 1, 2): ("2", "true", "true"),
                    (0, 1, 0): ("0", "false", "false")}


def test_attention_tiles_parameters_are_named_as_persistent_cuh_declares_them(tmp_path):
    # codegen's ATTENTION_TILE_HEAD and ATTENTION_TILE_TAIL: attention_tile's template parameters in persistent.cuh's
    # order, the tail's defaults its defaults, so that the emitter's named values land where the kernel reads them
    # and attention_tile_args reads a call back by name (a default filled in where the call leaves it out)
    import re

    from kiec.codegen.emit import INCLUDE_DIR
    from kiec.codegen.persistent import ATTENTION_TILE_HEAD, ATTENTION_TILE_TAIL, emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    with open(os.path.join(INCLUDE_DIR, "kiec", "persistent.cuh")) as fh:
        decl = re.search(r"template <([^>]*)>\s*__device__ __forceinline__ bool attention_tile\(", fh.read()).group(1)
    params = [re.fullmatch(r"(?:typename|bool|int) (\w+)(?: = (\w+))?", p.strip()).groups() for p in decl.split(",")]
    assert [n for n, _ in params] == list(ATTENTION_TILE_HEAD) + [n for n, _ in ATTENTION_TILE_TAIL]
    assert [d for _, d in params[len(ATTENTION_TILE_HEAD):]] == [str(d).lower() for _, d in ATTENTION_TILE_TAIL]
    assert all(d is None for _, d in params[:len(ATTENTION_TILE_HEAD)])
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    text = emit_persistent(pipeline.run(model.graph), "bf16", model.max_seq_len, target("sm_90"), "x").files["model.cu"]
    calls = attention_tile_args(text)
    written = [a.strip() for a in re.search(r"kiec::attention_tile<([^>]*)>", text).group(1).split(",")]
    assert len(calls) == 1 and list(calls[0].values())[:len(written)] == written
    assert (calls[0]["HEAD_DIM"], calls[0]["GROUP"], calls[0]["TAGGED"]) == ("64", "2", "true")
    with pytest.raises(ValueError, match="9 template arguments"):
        attention_tile_args("kiec::attention_tile<T, 64, 2, 64, false, false, 8, 4, 8>(u")


def test_q_pairs_set_attentions_flag_only_where_they_apply(tmp_path):
    # persist_attn_q_pairs (1, 2: the coefficients after the wait, 3: read from the step's table): attention_tile's
    # Q_PAIRS (its last template argument) on a tagged llama whose every dim is rotated; not on qwen3 (head norms
    # before the rotation) nor where attention's words are untagged; off, the tail stops before it. 3 defines the
    # table (KIEC_ROPE_TABLE: a pair for every two dims of a head, the frequencies' offset) and counts its bytes in
    # the static shared memory; where the layers rotate by different frequencies it falls back to 2 and defines no
    # table. Another value is a ValueError naming the field
    import dataclasses
    import re

    from kiec.codegen.persistent import _PersistentEmitter, emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    from kiec.ir.passes.program import AttentionKernel
    base = dataclasses.replace(target("sm_90"), persist_narrow_width=0, persist_tagged_min_width=0)
    found, tables = {}, {}
    for family in ("llama", "qwen3"):
        make_tiny_hf(tmp_path / family, family, hidden_size=256, intermediate_size=384)
        model = kiec.load(str(tmp_path / family), dtype="bf16")
        program = pipeline.run(model.graph)
        for pairs, tagged in [(0, 2), (1, 2), (2, 2), (3, 2), (1, 0), (3, 0)]:
            t = dataclasses.replace(base, persist_attn_q_pairs=pairs, persist_tagged=tagged)
            text = emit_persistent(program, "bf16", model.max_seq_len, t, "x").files["model.cu"]
            found[family, pairs, tagged] = attention_tile_args(text)[0]["Q_PAIRS"]
            table = re.search(r"#define KIEC_ROPE_TABLE (\d+)", text)
            tables[family, pairs, tagged] = table and int(table.group(1))
        with pytest.raises(ValueError, match="persist_attn_q_pairs 4"):
            emit_persistent(program, "bf16", model.max_seq_len, dataclasses.replace(base, persist_attn_q_pairs=4), "x")
    assert found == {("llama", 0, 2): "0", ("llama", 1, 2): "1", ("llama", 2, 2): "2", ("llama", 3, 2): "3",
                     ("llama", 1, 0): "0", ("llama", 3, 0): "0",
                     ("qwen3", 0, 2): "0", ("qwen3", 1, 2): "0", ("qwen3", 2, 2): "0", ("qwen3", 3, 2): "0",
                     ("qwen3", 1, 0): "0", ("qwen3", 3, 0): "0"}
    llama = pipeline.run(kiec.load(str(tmp_path / "llama"), dtype="bf16").graph)
    head_dim = next(k.head_dim for k in llama.kernels if isinstance(k, AttentionKernel))
    assert {k: v for k, v in tables.items() if v} == {("llama", 3, 2): head_dim // 2}
    three = dataclasses.replace(base, persist_attn_q_pairs=3)
    two = dataclasses.replace(base, persist_attn_q_pairs=2)
    # (the table lies in the room STATIC_SMEM leaves, so the ring keeps its pages: one fewer on llama-3.2-1b when it
    # was counted on top)
    assert (_PersistentEmitter(llama, "bf16", 1024, three).static_smem
            == _PersistentEmitter(llama, "bf16", 1024, two).static_smem)
    # one layer rotating by another base: no table, every attention back to 2
    i = next(i for i, k in enumerate(llama.kernels) if isinstance(k, AttentionKernel))
    llama.kernels[i] = dataclasses.replace(llama.kernels[i], rope=dataclasses.replace(llama.kernels[i].rope,
                                                                                     theta=1234.0))
    text = emit_persistent(llama, "bf16", 1024, three, "x").files["model.cu"]
    assert "KIEC_ROPE_TABLE" not in text
    assert {a["Q_PAIRS"] for a in attention_tile_args(text)} == {"2"}


def test_q_pairs_normed_set_head_norm_attentions_flag_only_where_they_apply(tmp_path):
    # persist_attn_q_pairs_normed: persist_attn_q_pairs on attentions with q and k head norms too (qwen3: a warp a
    # head), where heads are a multiple of 64 wide and the model has no tag waits (whose words the tile would load
    # before its wait a pair a thread); on by default; off, qwen3's attention_tile keeps no Q_PAIRS. A llama's
    # kernel is the same text with it or without
    import dataclasses
    import re

    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    base = dataclasses.replace(target("sm_90"), persist_narrow_width=0, persist_tagged_min_width=0, persist_tagged=2,
                               persist_tag_waits=0, persist_attn_q_pairs=3)

    def q_pairs(family, head_dim, **change):
        make_tiny_hf(tmp_path / f"{family}{head_dim}", family, hidden_size=256, intermediate_size=384,
                     **({"head_dim": head_dim} if family == "qwen3" else {}))
        model = kiec.load(str(tmp_path / f"{family}{head_dim}"), dtype="bf16")
        text = emit_persistent(pipeline.run(model.graph), "bf16", model.max_seq_len,
                               dataclasses.replace(base, **change), "x").files["model.cu"]
        table = re.search(r"#define KIEC_ROPE_TABLE (\d+)", text)
        return attention_tile_args(text)[0]["Q_PAIRS"], table and int(table.group(1)), text

    assert q_pairs("qwen3", 64)[:2] == ("3", 32)  # (the default: on)
    assert q_pairs("qwen3", 64, persist_attn_q_pairs_normed=0)[:2] == ("0", None)
    assert q_pairs("qwen3", 128, persist_attn_q_pairs_normed=1)[:2] == ("3", 64)
    assert q_pairs("qwen3", 128, persist_attn_q_pairs_normed=1, persist_attn_q_pairs=2)[:2] == ("2", None)
    assert q_pairs("qwen3", 128, persist_attn_q_pairs_normed=1, persist_attn_q_pairs=0)[:2] == ("0", None)
    assert q_pairs("qwen3", 32, persist_attn_q_pairs_normed=1)[:2] == ("0", None)  # (32 wide: a lane, half a pair)
    assert q_pairs("qwen3", 64, persist_attn_q_pairs_normed=1, persist_tag_waits=1)[:2] == ("0", None)
    assert q_pairs("qwen3", 64, persist_attn_q_pairs_normed=1, persist_tagged=0)[:2] == ("0", None)
    assert q_pairs("llama", 0, persist_attn_q_pairs_normed=0)[2] == q_pairs("llama", 0)[2]


@pytest.mark.parametrize("tagged", [0, 2])
def test_attention_pipeline_halves_the_keys_a_pass_and_sets_its_flag(tmp_path, tagged):
    # persist_attn_pipeline: attention_tile's PIPE after TAGGED, U halved (two passes' rows in registers at once);
    # SOFTCAP false after them (a model without a logit softcap leaves tanhf out of the unrolled step)
    import dataclasses

    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    program = pipeline.run(model.graph)
    args = {}
    for pipe in (0, 1):
        t = dataclasses.replace(target("sm_90"), persist_attn_pipeline=pipe, persist_tagged=tagged,
                                persist_attn_short_keys=0, persist_attn_lean=0, persist_attn_mma=0)
        text = emit_persistent(program, "bf16", model.max_seq_len, t, "x").files["model.cu"]
        args[pipe] = attention_tile_args(text)[0]
    assert int(args[1]["U"]) == int(args[0]["U"]) // 2
    on = "true" if tagged else "false"
    assert (args[1]["TAGGED"], args[1]["PIPE"], args[1]["SOFTCAP"]) == (on, "true", "false")
    assert (args[0]["TAGGED"], args[0]["PIPE"], args[0]["SOFTCAP"]) == (on, "false", "false")
    # with a softcap (Gemma-style; no frontend makes one yet), SOFTCAP keeps its default: tanhf stays
    from kiec.ir.passes.program import AttentionKernel
    capped = dataclasses.replace(program, kernels=[
        dataclasses.replace(k, attention=dataclasses.replace(k.attention, softcap=30.0))
        if isinstance(k, AttentionKernel) else k for k in program.kernels])
    t = dataclasses.replace(target("sm_90"), persist_tagged=tagged, persist_attn_pipeline=0, persist_attn_short_keys=0,
                            persist_attn_lean=0, persist_attn_mma=0)
    text = emit_persistent(capped, "bf16", model.max_seq_len, t, "x").files["model.cu"]
    capped_args = attention_tile_args(text)[0]
    assert (capped_args["TAGGED"], capped_args["SOFTCAP"]) == (on, "true")


def test_attention_keys_a_pass_can_be_set(tmp_path):
    # persist_attn_keys: attention's U (the step's unrolled keys) set instead of derived; halved with the pipeline
    import dataclasses

    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    program = pipeline.run(model.graph)

    base = dataclasses.replace(target("sm_90"), persist_attn_pipeline=0, persist_tagged=0, persist_attn_lean=0,
                               persist_attn_mma=0)  # not the defaults'

    def u(**change):
        t = dataclasses.replace(base, **change)
        text = emit_persistent(program, "bf16", model.max_seq_len, t, "x").files["model.cu"]
        return int(attention_tile_args(text)[0]["U"])
    assert (u(), u(persist_attn_keys=2), u(persist_attn_keys=2, persist_attn_pipeline=1)) == (8, 2, 1)
    # persist_attn_short_keys: U_SHORT after TAGGED, PIPE and SOFTCAP; none where it is not below U
    t = dataclasses.replace(base, persist_attn_short_keys=2)
    text = emit_persistent(program, "bf16", model.max_seq_len, t, "x").files["model.cu"]
    assert attention_tile_args(text)[0]["U_SHORT"] == "2"
    t = dataclasses.replace(base, persist_attn_short_keys=8)
    text = emit_persistent(program, "bf16", model.max_seq_len, t, "x").files["model.cu"]
    assert attention_tile_args(text)[0]["U_SHORT"] == "0"


def test_consumer_merges_reach_both_cases_or_are_refused_by_name(tmp_path, monkeypatch):
    # persist_attn_consumer_merges: the attention case takes the most splits the consumer merges (CONSUMER, its
    # 27th argument) and the output projection's case a ConsumerMerge of the attention's geometry with the partials'
    # regions as its descriptor's a[2] and a[3] (8-byte words: twice the floats) and the attention's window; the
    # kernel builds (nvcc). Refused by name without tagged attention, with owner merges, tag waits, parity tags, newest
    # first or the idle probe, heads not a multiple of 64 wide, attention's output read by more than the output
    # projection, or a count below 2
    import dataclasses

    from kiec.codegen import targets
    from kiec.codegen.persistent import _PersistentEmitter, emit_persistent
    from kiec.ir.passes import pipeline
    from kiec.ir.passes.phases import partials
    model, program, wide = tiny_tagged_llama(tmp_path)
    wide = dataclasses.replace(wide, persist_attn_owner_merges=0, persist_attn_solo_keys=0)  # (refused: below)
    on = dataclasses.replace(wide, persist_attn_consumer_merges=2)
    e = _PersistentEmitter(program, "bf16", model.max_seq_len, on)
    assert e.consumer_merges == 2 and e.sched.consumer_merges == 2
    off = _PersistentEmitter(program, "bf16", model.max_seq_len, wide)
    attn = [k for k in program.kernels if type(k).__name__ == "AttentionKernel"]
    for k in attn:  # the partials as words
        assert e.scratch()[partials(k) + ".o"] == 2 * off.scratch()[partials(k) + ".o"]
    src = emit_persistent(program, "bf16", model.max_seq_len, on, "x")
    text = src.files["model.cu"]
    splits = e.splits[attn[0].name]
    assert attention_tile_args(text)[0]["CONSUMER"] == "2"
    assert (f"kiec::ConsumerMerge<{attn[0].head_dim}, 2, {splits}, {on.attn_min_keys}, 2>>(u, ring" in text
            and "smem, nullptr, nullptr, A(d.a[2]), A(d.a[3]))" in text)
    assert "ConsumerMerge" not in emit_persistent(program, "bf16", model.max_seq_len, wide, "x").files["model.cu"]
    for change, why in ((dict(persist_tagged=1), "attention's output is not tagged words"),
                        (dict(persist_attn_owner_merges=8), "persist_attn_owner_merges"),
                        (dict(persist_tag_waits=1),
                         r"persist_tag_waits \(persist_tag_waits_narrow on a narrow model\) is on"),
                        (dict(persist_tag_parity=1), "persist_tag_parity is on"),
                        (dict(persist_attn_newest_first=1), "persist_attn_newest_first"),
                        (dict(persist_probe_attention_idle=1), "persist_probe_attention_idle is on")):
        with pytest.raises(ValueError, match=rf"persist_attn_consumer_merges 2: {why}"):
            _PersistentEmitter(program, "bf16", model.max_seq_len, dataclasses.replace(on, **change))
    program.graph.outputs.append(attn[0].attention.out)  # (read by the host too: at merged positions never written)
    with pytest.raises(ValueError, match=r"persist_attn_consumer_merges 2: attention's output is read other than as a "
                                         r"GEMV's x"):
        _PersistentEmitter(program, "bf16", model.max_seq_len, on)
    program.graph.outputs.pop()
    make_tiny_hf(tmp_path / "narrow", "llama")  # (hidden 64 over 4 heads: 16 wide)
    narrow = pipeline.run(kiec.load(str(tmp_path / "narrow"), dtype="bf16").graph)
    with pytest.raises(ValueError, match=r"persist_attn_consumer_merges 2: a head is not a multiple of 64 wide"):
        _PersistentEmitter(narrow, "bf16", 64, on)
    with pytest.raises(ValueError, match=r"persist_attn_consumer_merges 1: 0 \(off\) or the most splits in use"):
        _PersistentEmitter(program, "bf16", model.max_seq_len, dataclasses.replace(on, persist_attn_consumer_merges=1))
    monkeypatch.setitem(targets.TARGETS, "sm_90", on)
    art = kiec.compile(model, str(tmp_path / "art"), mode="persistent")
    with open(os.path.join(art, "src", "model.cu")) as fh:
        assert "kiec::ConsumerMerge<" in fh.read()


def test_attention_on_the_tensor_cores_takes_the_models_its_passes_can(tmp_path, monkeypatch):
    # persist_attn_mma: attention_tile's MMA_KEYS (its 23rd template argument) where heads are 64 wide (128 wide:
    # persist_attn_mma_wide, where 4 or more share a KV head) and at most 8 query heads share a KV head (2 and 4
    # here); the FMA passes (no argument) with heads 16 wide, with 9 query heads a KV head, with the early pass; a
    # value other than 0, 16 or 32 is refused by name. The kernel builds (nvcc) with 16 rows a pass, heads 64 and 128
    # wide (64: with 2 passes in flight, their rows loaded beside q's)
    import dataclasses

    from kiec.build import emit_sources
    from kiec.codegen import targets

    def tile_args(name, family="llama", change=None, **shape):  # (the model, its MMA_KEYS, MMA_AHEAD, MMA_FIRST)
        make_tiny_hf(tmp_path / name, family, **shape)
        model = kiec.load(str(tmp_path / name), dtype="bf16")
        t = dataclasses.replace(targets.TARGETS["sm_90"], **(change or dict(persist_attn_mma=16)))
        text = emit_sources(model, "persistent", "bf16", t, "x").files["model.cu"]
        (args,) = attention_tile_args(text)
        return model, (args["MMA_KEYS"], args["MMA_AHEAD"], args["MMA_FIRST"])

    def mma(name, family="llama", change=None, **shape):  # (the model, MMA_KEYS, MMA_AHEAD)
        model, (keys, ahead, _) = tile_args(name, family, change, **shape)
        return model, int(keys), int(ahead)

    wide = dict(hidden_size=256, intermediate_size=384)
    model, keys, _ = mma("g2", **wide)
    assert keys == 16
    assert mma("g4", num_key_value_heads=1, **wide)[1] == 16
    assert mma("g2-32", change=dict(persist_attn_mma=32), **wide)[1] == 32
    assert mma("off", change=dict(persist_attn_mma=0), **wide)[1] == 0
    assert mma("h128-default", "qwen3", change=dict(persist_attn_mma=16, persist_attn_mma_wide=0), head_dim=128,
               **wide)[1] == 0  # (128 wide: persist_attn_mma_wide's)
    # 128 wide, by default where 4 or more query heads share a KV head (persist_attn_mma_wide_min_group)
    assert mma("h128-g2", "qwen3", head_dim=128, **wide)[1] == 0
    wide_heads, keys, _ = mma("h128", "qwen3", change=dict(), head_dim=128, num_key_value_heads=1, **wide)
    assert keys == 16
    assert mma("h128-g2-min2", "qwen3", change=dict(persist_attn_mma_wide_min_group=2), head_dim=128, **wide)[1] == 16
    assert mma("h16")[1] == 0  # (the tiny model's heads: 64 / 4)
    assert mma("g9", hidden_size=576, intermediate_size=384, num_attention_heads=9, num_key_value_heads=1)[1] == 0
    assert mma("early", change=dict(persist_attn_mma=16, persist_attn_early_pass=1), **wide)[1] == 0
    with pytest.raises(kiec.KiecError, match="persist_attn_mma 24: rows a warp a pass"):
        mma("bad", change=dict(persist_attn_mma=24), **wide)
    with pytest.raises(kiec.KiecError, match="persist_attn_mma_wide 8: rows a warp a pass"):
        mma("bad-wide", change=dict(persist_attn_mma_wide=8), **wide)
    # persist_attn_mma_ahead: MMA_AHEAD where the tensor cores take heads 64 wide (1, the template's default); heads
    # 128 wide and the FMA passes keep 1; a value other than 1-3 is refused by name
    assert mma("ahead", change=dict(persist_attn_mma=16, persist_attn_mma_ahead=2), **wide)[1:] == (16, 2)
    assert mma("ahead1", change=dict(persist_attn_mma=16, persist_attn_mma_ahead=1), **wide)[2] == 1
    assert mma("ahead-off", change=dict(persist_attn_mma=0, persist_attn_mma_ahead=3), **wide)[2] == 1
    assert mma("ahead-h128", "qwen3", change=dict(persist_attn_mma_ahead=2), head_dim=128, num_key_value_heads=1,
               **wide)[1:] == (16, 1)
    with pytest.raises(kiec.KiecError, match="persist_attn_mma_ahead 4: passes in flight"):
        mma("bad-ahead", change=dict(persist_attn_mma_ahead=4), **wide)
    # persist_attn_mma_first: MMA_FIRST where the tensor cores take heads 64 wide: 1 (beside q's words) or 2 (before
    # the tile's wait); heads 128 wide (no passes in flight) and the FMA passes keep 0; any other value is refused by
    # name
    first = dict(persist_attn_mma=16, persist_attn_mma_first=1)
    assert tile_args("first", change=dict(first, persist_attn_mma_ahead=2), **wide)[1] == ("16", "2", "1")
    assert tile_args("first1", change=dict(first, persist_attn_mma_ahead=1), **wide)[1] == ("16", "1", "1")
    assert tile_args("first2", change=dict(first, persist_attn_mma_first=2), **wide)[1] == ("16", "2", "2")
    assert tile_args("first-off", change=dict(first, persist_attn_mma=0), **wide)[1] == ("0", "1", "0")
    assert tile_args("first-h128", "qwen3", change=first, head_dim=128, num_key_value_heads=1,
                     **wide)[1] == ("16", "1", "0")
    assert tile_args("first2-h128", "qwen3", change=dict(first, persist_attn_mma_first=2), head_dim=128,
                     num_key_value_heads=1, **wide)[1] == ("16", "1", "0")
    with pytest.raises(kiec.KiecError, match="persist_attn_mma_first 3: 0, 1"):
        tile_args("bad-first", change=dict(first, persist_attn_mma_first=3), **wide)
    monkeypatch.setitem(targets.TARGETS, "sm_90", dataclasses.replace(targets.TARGETS["sm_90"], persist_attn_mma=16,
                                                                      persist_attn_mma_wide=16,
                                                                      persist_attn_mma_ahead=2,
                                                                      persist_attn_mma_first=1))
    kiec.compile(model, str(tmp_path / "art"), mode="persistent")  # (2 passes in flight, loaded beside q)
    kiec.compile(wide_heads, str(tmp_path / "art128"), mode="persistent")  # (one pass's rows at a time)
    monkeypatch.setitem(targets.TARGETS, "sm_90", dataclasses.replace(targets.TARGETS["sm_90"],
                                                                      persist_attn_mma_first=2))
    kiec.compile(model, str(tmp_path / "art2"), mode="persistent")  # (2 passes in flight, loaded before the wait)


def test_solo_keys_reach_the_attention_tile_and_the_schedule_or_are_refused_by_name(tmp_path):
    # persist_attn_solo_keys: the attention case takes it (SOLO, attention_tile's last argument, left out at 0) and
    # the schedule too (the VM's split count); refused below 0, with attn_l2_prefetch 2 (the weight stream's asks for
    # a split's rows split by the descriptor's min_keys alone) and with consumer merges (their count of splits in use)
    import dataclasses

    from kiec.codegen.persistent import _PersistentEmitter, emit_persistent
    model, program, wide = tiny_tagged_llama(tmp_path)

    def args(**change):
        t = dataclasses.replace(wide, **change)
        return attention_tile_args(emit_persistent(program, "bf16", model.max_seq_len, t, "x").files["model.cu"])

    assert {a["SOLO"] for a in args(persist_attn_solo_keys=0)} == {"0"}
    assert {a["SOLO"] for a in args()} == {str(wide.persist_attn_solo_keys)} == {"256"}  # (the table's)
    assert {a["SOLO"] for a in args(persist_attn_solo_keys=96)} == {"96"}
    assert {a["SOLO"] for a in args(persist_attn_solo_keys=256, persist_attn_owner_merges=1)} == {"256"}
    e = _PersistentEmitter(program, "bf16", model.max_seq_len, dataclasses.replace(wide, persist_attn_solo_keys=96))
    assert (e.sched.solo_keys, e.sched.min_keys) == (96, wide.attn_min_keys)
    for change, why in ((dict(persist_attn_solo_keys=-1), r"persist_attn_solo_keys -1: 0 \(off\) or the most rows"),
                        (dict(persist_attn_solo_keys=256, attn_l2_prefetch=2),
                         r"persist_attn_solo_keys 256 with attn_l2_prefetch 2: the weight stream's asks"),
                        (dict(persist_attn_solo_keys=256, persist_attn_consumer_merges=2, persist_attn_owner_merges=0),
                         r"persist_attn_consumer_merges 2: persist_attn_solo_keys is on")):
        with pytest.raises(ValueError, match=why):
            _PersistentEmitter(program, "bf16", model.max_seq_len, dataclasses.replace(wide, **change))
