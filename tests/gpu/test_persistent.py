"""Persistent mode (one kernel runs whole generations) on the GPU: logits within DESIGN.md's error budget of
the interpreter, the same greedy tokens as graph mode (up to a near-tie: test_engine.py's greedy_alike), the device's
draw equal to kiec.sampling's over its own logits, and generations that end at EOS or when the host stops them."""
import ctypes
import os
import re
import time

import numpy as np
import pytest

import kiec
from kiec.codegen import targets
from kiec.sampling import SamplingParams
from tests.gpu.test_engine import (budget_check, check_against_interpreter, greedy_alike, host_draws, stepped_greedy,
                                   stepped_logits)
from tests import table
from tests.tiles import attention_tile_args
from tests.tiny_hf import make_tiny_hf

pytestmark = pytest.mark.gpu

FAMILIES = ["llama", "qwen2", "qwen3", "mistral"]

# the tiny models are narrower than persist_narrow_width, persist_tagged_min_width and persist_paced_min_width,
# whose rules would replace many of the fields below (tags, x direct, the ring's depth, the pace): tests of those
# fields compile their base and variants with the fields the large models get (scripts/tiny_model.py's way); a CPU
# test (tests/cpu/test_compile.py) checks that every TABLE_VARIANTS entry changes the kernel it builds. Until
# 2026-12-02 the narrow rules applied there, and many variants built their base's kernel
WIDE_FIELDS = dict(persist_narrow_width=0, persist_tagged_min_width=0, persist_paced_min_width=0)
# a narrow case of a test marks itself table_tags (pytest.param): the autouse fixture (tests/conftest.py) then keeps
# the table's widths, under which a tiny model (hidden 256) runs a narrow model's fields (unpaced, a 4-page ring, the
# combine batch, one attention pass ahead, tag waits: smollm2-135m's way; until the forty-seventh session also
# untagged, owner merges, newest first and x direct)
NARROW = pytest.mark.table_tags


def narrow_or_wide(tmp_path, wide):
    """Checks that the base build of a test given WIDE_FIELDS or marked NARROW took those rules: its ring's depth is
    the narrow models' (persist_stages_narrow) only without WIDE_FIELDS, and so are its tag waits. (Until the
    forty-eighth session this looked at the owner merges, which the narrow fields no longer change.)"""
    t = targets.TARGETS["sm_90"]
    assert t.persist_stages_narrow != t.persist_stages and t.persist_tag_waits_narrow != t.persist_tag_waits, \
        "the narrow fields no longer differ from the wide ones in the ring's depth and tag waits: tell them apart " \
        "by another"
    src = open(tmp_path / "base" / "src" / "model.cu").read()
    stages = re.search(r"kiec::Ring<(\d+), ", src).group(1)
    assert (stages == str(t.persist_stages_narrow)) != wide, stages
    assert ("#define KIEC_TAG_WAITS" in src) != wide


def gemv_tiles(art) -> list[list[str]]:
    """The template arguments of each gemv_tile the artifact's kernel instantiates (persistent_gemv.cuh's order: T, K,
    WARPS, NORM, EPI, BIAS, SEGS, DIRECT, TX, TY, TWICE, WNORM, BATCH, HALF, ...; those left out are their defaults)."""
    src = open(os.path.join(art, "src", "model.cu")).read()
    return [m.split(", ") for m in re.findall(r"kiec::gemv_tile<([^>]*)>", src)]


def load_tiny(tmp_path, family, **overrides):
    make_tiny_hf(tmp_path / "hf", family, **overrides)
    return kiec.load(str(tmp_path / "hf"), dtype="bf16", max_seq_len=overrides.get("max_position_embeddings", 256))


def compile_tiny(tmp_path, family, mode="persistent", **overrides):
    model = load_tiny(tmp_path, family, **overrides)
    return model, kiec.compile(model, str(tmp_path / mode), mode=mode)


def compile_variant(model, tmp_path, monkeypatch, name="variant", **change):
    """The model's persistent artifact with the sm_90 table's fields replaced (scripts/variants.py's A/B), on top
    of earlier replacements in the same test."""
    import dataclasses

    from kiec.codegen import targets
    monkeypatch.setitem(targets.TARGETS, "sm_90", dataclasses.replace(targets.TARGETS["sm_90"], **change))
    return kiec.compile(model, str(tmp_path / name), mode="persistent")


@pytest.mark.parametrize("family", FAMILIES)
def test_persistent_logits_within_budget_and_greedy_tokens_equal_graph_mode(tmp_path, family):
    model, art = compile_tiny(tmp_path, family)
    eng, ours, r32, r16, tokens = check_against_interpreter(model, art, positions=24)
    budget_check(ours, r32, r16, f"{family} persistent: logits over 24 positions")
    graph = kiec.Engine(kiec.compile(model, str(tmp_path / "graph"), mode="graph"))
    greedy_alike(eng, graph, tokens[:5], 40)


def test_persistent_wide_rows_within_budget(tmp_path, monkeypatch):
    # rows long enough to be cut into segments (K = 1536: 2, K = 6144: 8, each warp's slice of x in registers),
    # many pages a share and SiLU-mul pages of gate and up halves; the down projection's tagged x (K 6144: 12 loads a
    # thread) copied in two batches (persist_copy_batch 8, the default) and in one (16), or loaded by each warp
    # straight from memory (persist_x_direct 2: its warps hold a segment each), with a 13-page ring: the same bits
    model, art = compile_tiny(tmp_path, "llama", hidden_size=1536, intermediate_size=6144, num_attention_heads=12,
                              num_key_value_heads=4, vocab_size=1024)
    eng, ours, r32, r16, tokens = check_against_interpreter(model, art, positions=24)
    budget_check(ours, r32, r16, "wide llama persistent: logits over 24 positions")
    graph = kiec.Engine(kiec.compile(model, str(tmp_path / "graph"), mode="graph"))
    greedy_alike(eng, graph, tokens[:5], 40)
    direct = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "direct", persist_x_direct=2,
                                         persist_stages=13))
    assert np.array_equal(stepped_logits(direct, tokens), ours)
    assert direct.generate(tokens[:5], 40) == eng.generate(tokens[:5], 40)  # (the same bits as the default's)
    one = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, persist_x_direct=0, persist_stages=12,
                                      persist_copy_batch=16))
    assert np.array_equal(stepped_logits(one, tokens), ours)


@pytest.mark.parametrize("inter,change", [(6144, {}), (4352, dict(persist_tagged=0))], ids=["tagged", "untagged-68"])
def test_warp_copy_of_x_computes_the_same_bits(tmp_path, monkeypatch, inter, change):
    # persist_x_warp_copy_min_k (1): the down projection (K 6144: 8 segments of 96 chunks, 3 full rounds a lane; K
    # 4352: 68 chunks, the third round 4 chunks of 32) copies x a warp at a time through 1 KB of the scratch each, as
    # tagged words and as plain floats, with a 13-page ring: within the budget and the same bits as the block's copy
    model = load_tiny(tmp_path, "llama", hidden_size=1536, intermediate_size=inter, num_attention_heads=12,
                      num_key_value_heads=4, vocab_size=1024)
    base = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "base", **change))
    art = compile_variant(model, tmp_path, monkeypatch, persist_x_warp_copy_min_k=1, persist_stages=13)
    src = open(os.path.join(art, "src", "model.cu")).read()
    assert f"gemv_tile<T, {inter}, 8, false, kiec::EPI_RESIDUAL" in src and re.search(r", 1, true>\(u, ring", src)
    eng, ours, r32, r16, tokens = check_against_interpreter(model, art, positions=24)
    budget_check(ours, r32, r16, f"warp copy {change}: logits over 24 positions")
    assert np.array_equal(ours, stepped_logits(base, tokens))
    assert eng.generate(tokens[:5], 40) == base.generate(tokens[:5], 40)


def test_a_kernel_without_the_trace_code_computes_the_same_bits(tmp_path, monkeypatch):
    # persist_trace_code 0 (the default: the kernel without the traced step's code) against 1: within the budget, the
    # same logits' bits and tokens, and Engine.trace refused by name without the code (until the fifty-first session
    # 1 was the default: 7de685a's run of this test compared them the other way round)
    model = load_tiny(tmp_path, "llama", hidden_size=2048, intermediate_size=8192, num_attention_heads=32,
                      num_key_value_heads=8, vocab_size=2048)
    traced = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "traced", persist_trace_code=1))
    art = compile_variant(model, tmp_path, monkeypatch, persist_trace_code=0)
    assert "#define KIEC_TRACE_CODE 0 " in open(os.path.join(art, "src", "model.cu")).read()
    eng, ours, r32, r16, tokens = check_against_interpreter(model, art, positions=24)
    budget_check(ours, r32, r16, "without the trace's code: logits over 24 positions")
    assert np.array_equal(ours, stepped_logits(traced, tokens))
    assert eng.generate(tokens[:5], 40) == traced.generate(tokens[:5], 40)
    with pytest.raises(kiec.KiecError, match="persist_trace_code 0"):
        eng.trace(8)
    assert traced.trace(8).shape[0] == traced.manifest["instructions"]


def test_loads_at_once_compute_the_same_bits(tmp_path, monkeypatch):
    # llama-3.1-8b's widths (hidden 4096: a norm's 16 tagged words a thread; intermediate 14336: each warp's own copy
    # of the down projection's x, 7 rounds of tagged pairs a lane): the norm's words all at once (persist_norm_batch
    # 16, not two batches of 8) and the copy's 7 rounds at once (persist_warp_copy_rounds 7, not 4 + 3) load the same
    # words in other groups and sum them in the same order: within the budget and the same bits as the default
    model = load_tiny(tmp_path, "llama", hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                      num_key_value_heads=8, vocab_size=1024)
    base = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "base"))
    art = compile_variant(model, tmp_path, monkeypatch, persist_norm_batch=16, persist_warp_copy_rounds=7)
    src = open(os.path.join(art, "src", "model.cu")).read()
    assert "#define KIEC_NORM_BATCH 16 " in src and "#define KIEC_WARP_COPY_ROUNDS 7 " in src
    assert "gemv_tile<T, 14336, 8, false, kiec::EPI_RESIDUAL" in src and "gemv_tile<T, 4096, 8, true" in src
    eng, ours, r32, r16, tokens = check_against_interpreter(model, art, positions=24)
    budget_check(ours, r32, r16, "norm words and copy rounds at once: logits over 24 positions")
    assert np.array_equal(ours, stepped_logits(base, tokens))
    assert eng.generate(tokens[:5], 40) == base.generate(tokens[:5], 40)


@pytest.mark.parametrize("hidden,inter,heads,kv_heads,change,level", [
    (1536, 6144, 12, 4, {}, 1),
    (1536, 4352, 12, 4, dict(persist_tagged=0), 1),
    (1536, 6144, 12, 4, dict(persist_x_warp_copy_min_k=1, persist_stages=13), 1),
    (1536, 6144, 12, 4, dict(persist_x_direct=2, persist_tagged=1, persist_stages=13), 1),
    pytest.param(576, 1536, 9, 3, {}, 1, marks=NARROW),
    (1536, 6144, 12, 4, {}, 2), (1536, 4352, 12, 4, dict(persist_tagged=0), 3), (1536, 6144, 12, 4, {}, 3)],
    ids=["tagged", "untagged-68", "warp-copy", "direct", "narrow", "gate-up-pairs", "every-untagged", "every"])
def test_item_shares_compute_the_same_bits(tmp_path, monkeypatch, hidden, inter, heads, kv_heads, change, level):
    # persist_item_shares: the output and down projections dealt to the row segment. K 1536: 2 segments a row, the
    # output projection's 3,072 items 24 or 23 a share; the down projection's 8 (K 6144: 3 rounds a lane; 4352: the
    # third round 4 chunks of 32) 12,288 items 94 or 93 a share, nearly every share from a row's middle to another's.
    # A share's first segments are published as tagged words, the tile before adds them to its last row's: in segment
    # order, as a whole row's sums, so the same bits as whole-row shares: tagged (x as tagged words and pairs),
    # untagged, each warp copying its own segment of x, x slices straight from memory, and smollm2-135m's shapes
    # under the narrow rules (tagged, tag waits; its output projection one segment a row: whole rows). 2: gate/up
    # too, its output tagged pairs completed a pair at a time (gate and up partials of up to two rows handed over);
    # 3: every GEMV (QKV's norm, its scale applied to the row sums; the LM head's argmax), tagged and untagged, where
    # an EOS and the host's stop end a generation as without (4,096 positions for the host's stop of a long one)
    model = load_tiny(tmp_path, "llama", hidden_size=hidden, intermediate_size=inter, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, vocab_size=1024, max_position_embeddings=4096)
    base = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "base", **change))
    art = compile_variant(model, tmp_path, monkeypatch, persist_item_shares=level)
    with open(os.path.join(art, "src", "model.cu")) as fh:
        src = fh.read()
    assert "#define KIEC_ITEM_SHARES 1" in src
    assert src.count("nullptr, A(d.a[3]))") == {1: 2, 2: 3, 3: 5}[level]  # the SK cases: o, down; gate/up; QKV, head
    eng, ours, r32, r16, tokens = check_against_interpreter(model, art, positions=24)
    budget_check(ours, r32, r16, f"item shares {change}: logits over 24 positions")
    assert np.array_equal(ours, stepped_logits(base, tokens))
    assert eng.generate(tokens[:5], 40) == base.generate(tokens[:5], 40)
    params = SamplingParams(0.9, 0.8, seed=5)
    assert eng.generate(tokens[:5], 24, sampling=params) == base.generate(tokens[:5], 24, sampling=params)
    if level == 3:  # a stop (EOS, or the host's) ends a tile waiting for the next tile's partials too
        free = eng.generate(tokens[:5], 30)
        eng.manifest["eos_token_ids"] = [free[9]]
        assert eng.generate(tokens[:5], 30, stop_at_eos=True) == free[:free.index(free[9]) + 1]
        it = eng.stream(tokens[:5], 3000)
        assert [next(it) for _ in range(3)] == free[:3]
        began = time.perf_counter()
        it.close()
        assert time.perf_counter() - began < 0.5  # (3,000 tokens would take seconds)
        out = eng._lib.kiec_host_tokens(eng._h)
        made = [out[p] for p in range(4, 3004)]
        assert -2 in made and made.index(-2) < 1000
        eng.manifest["eos_token_ids"] = []
        assert eng.generate(tokens[:5], 30) == free  # the next generation starts clean


@pytest.mark.table_tags
@pytest.mark.parametrize("hidden,inter,heads,kv_heads,late", [(576, 1536, 9, 3, 1), (576, 1536, 9, 3, 0),
                                                              (256, 384, 4, 2, 1)])
def test_norm_in_warps_computes_the_same_bits(tmp_path, monkeypatch, hidden, inter, heads, kv_heads, late):
    # persist_norm_in_warps on narrow models (the table's narrow rules, untagged: the norm in the warps reads an
    # untagged x, and narrow models are tagged since the forty-seventh session, which left this test building its
    # base's kernel until the forty-eighth): QKV, gate/up and the LM head normalize x in each warp's registers, K 576
    # (smollm2-135m's: 3 rounds a lane, the last with 8 lanes of 32) and 256 (one full round); every logit over 24
    # steps within the budget and the same bits as the staged norm's, and a 40-token generation the same tokens, with
    # the norm's scale applied to the row sums (persist_norm_late_scale 1, the default: the warps keep it for the
    # epilogue) and to x (0)
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=hidden, intermediate_size=inter, num_attention_heads=heads,
                 num_key_value_heads=kv_heads)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16", max_seq_len=256)
    base = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "staged", persist_tagged_min_width=4096,
                                       persist_norm_in_warps=0, persist_norm_late_scale=late))
    art = compile_variant(model, tmp_path, monkeypatch, persist_norm_in_warps=1, persist_norm_late_scale=late)
    assert sum(len(a) > 11 and a[11] == "true" for a in gemv_tiles(art)) == 3  # (WNORM: QKV, gate/up, the LM head)
    eng, ours, r32, r16, tokens = check_against_interpreter(model, art, positions=24)
    budget_check(ours, r32, r16, f"norm in warps (K {hidden}): logits over 24 positions")
    assert np.array_equal(ours, stepped_logits(base, tokens))
    assert eng.generate(tokens[:5], 40) == base.generate(tokens[:5], 40)


@pytest.mark.parametrize("family,hidden,inter,heads,kv_heads,vocab,more", [
    ("llama-tied", 1024, 4096, 16, 4, 2048, {}), ("qwen3", 512, 1536, 8, 2, 2048, dict(head_dim=64)),
    ("llama-tied", 1024, 4096, 16, 4, 32768, {})])
def test_tensor_core_rows_within_budget(tmp_path, monkeypatch, family, hidden, inter, heads, kv_heads, vocab, more):
    # persist_mma_rows (gemv_mma.cuh) on every kind of GEMV, with the wide models' fields: K 1024 (2 pages a QKV, O
    # or LM-head block, 4 a gate/up block, 8 a down block) and K 512 (1 page a block), a tied LM head (its blocks a
    # copy beside the embedding's rows); a vocabulary of 32768 gives an LM-head tile 16 blocks, whose sums take the
    # two staging slots in turn (as llama-3.2-1b's 61 blocks an LM-head tile do). Other bits than the FMA
    # tile's (x to 16 significant bits): the logits over 24 steps within the budget, against the FMA build too, and
    # graph mode's greedy tokens
    make_tiny_hf(tmp_path / "hf", family, hidden_size=hidden, intermediate_size=inter, num_attention_heads=heads,
                 num_key_value_heads=kv_heads, vocab_size=vocab, **more)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16", max_seq_len=256)
    base = compile_variant(model, tmp_path, monkeypatch, "base", **WIDE_FIELDS)
    art = compile_variant(model, tmp_path, monkeypatch, persist_mma_rows="qkv+o+gate_up+down+head",
                          persist_mma_share_excess=10000)  # (a tiny model's blocks cannot deal evenly)
    assert sum(a[-1] == "true" and "NoConsumerMerge" in a[-2] for a in gemv_tiles(art)) == 5  # (MMA, every kind)
    eng, ours, r32, r16, tokens = check_against_interpreter(model, art, positions=24)
    budget_check(ours, r32, r16, f"tensor-core rows {family}: logits over 24 positions")
    fma = stepped_logits(kiec.Engine(base), tokens)
    budget_check(ours, r32, fma, f"tensor-core rows {family} against the FMA tile's logits")
    graph = kiec.Engine(kiec.compile(model, str(tmp_path / "graph"), mode="graph"))
    greedy_alike(eng, graph, tokens[:5], 40)


def test_the_default_table_puts_evenly_dealt_gemvs_on_the_tensor_cores(tmp_path, monkeypatch):
    # the table's own persist_mma_rows and share rule (the fixture pins "" for the other tests): gate/up (4224 rows,
    # 264 blocks: 2 a SM) and the LM head (16384 rows: 128 a tile against 125 by the row, +2.4%) take the tensor cores,
    # the QKV, output and down projections (n 768 and 512: 16 rows on a few SMs against 4-6 by the row) keep the FMA
    # tile; the logits over 24 steps within the budget and graph mode's greedy tokens, as a model compiled with the
    # defaults gets them (tiny models' GEMVs elsewhere never pass the share rule at the default)
    default = table.SM90.persist_mma_rows  # (the table as written, not the fixture's)
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=512, intermediate_size=4224, num_attention_heads=8,
                 num_key_value_heads=2, vocab_size=16384)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16", max_seq_len=256)
    art = compile_variant(model, tmp_path, monkeypatch, persist_mma_rows=default, **WIDE_FIELDS)
    tiles = gemv_tiles(art)
    mma = {a[4] for a in tiles if a[-1] == "true" and "NoConsumerMerge" in a[-2]}  # (their epilogues)
    assert mma == {"kiec::EPI_SILU_MUL", "kiec::EPI_ARGMAX"} and len(tiles) == 5, tiles  # (gate/up, the LM head)
    eng, ours, r32, r16, tokens = check_against_interpreter(model, art, positions=24)
    budget_check(ours, r32, r16, "the default table's tensor-core rows: logits over 24 positions")
    graph = kiec.Engine(kiec.compile(model, str(tmp_path / "graph"), mode="graph"))
    greedy_alike(eng, graph, tokens[:5], 40)


@pytest.mark.table_tags
@pytest.mark.parametrize("change", [dict(persist_dot_half_warps=1),
                                    dict(persist_dot_half_warps=1, persist_norm_in_warps=1)])
def test_dot_half_warps_within_budget(tmp_path, monkeypatch, change):
    # persist_dot_half_warps on smollm2-135m's shapes (the table's narrow rules, untagged: half-warp items read an
    # untagged x, and narrow models are tagged since the forty-seventh session, which left this test without half-warp
    # items until the forty-eighth): gate/up (12 items a tile: 6 half-warp pairs, one straddling its 2 pages), the
    # down projection (2 segments, a half each) and the LM head (a vocabulary of 8192: 63 items, odd, so a last half
    # takes none) an item a half-warp, alone and with the norm in the warps (its sums over 16 lanes). Other sums, other
    # bits: logits over 24 steps within the budget, and a 40-token generation graph mode's tokens
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=576, intermediate_size=1536, num_attention_heads=9,
                 num_key_value_heads=3, vocab_size=8192)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16", max_seq_len=256)
    art = compile_variant(model, tmp_path, monkeypatch, persist_tagged_min_width=4096, **change)
    assert any(len(a) > 13 and a[13] == "true" for a in gemv_tiles(art))  # (HALF)
    eng, ours, r32, r16, tokens = check_against_interpreter(model, art, positions=24)
    budget_check(ours, r32, r16, f"half-warp dots {change}: logits over 24 positions")
    graph = kiec.Engine(kiec.compile(model, str(tmp_path / "graph"), mode="graph"))
    greedy_alike(eng, graph, tokens[:5], 40)


@pytest.mark.parametrize("waits,lead", [(1, 100), (1, 10), (2, 100)])
def test_tag_waits_on_wide_rows_compute_the_same_bits(tmp_path, monkeypatch, waits, lead):
    # tag waits where the prologues load words before the wait (preload: 4 of a K 1536 norm's 6 words a thread, the
    # output projection's 3 pairs) and spin on them after, over 24 steps and a 40-token generation: the default's bits
    model, art = compile_tiny(tmp_path, "llama", hidden_size=1536, intermediate_size=6144, num_attention_heads=12,
                              num_key_value_heads=4, vocab_size=1024)
    base = kiec.Engine(art)
    eng = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, persist_tag_waits=waits, persist_tag_lead=lead))
    tokens = np.random.default_rng(4).integers(0, model.config.vocab_size, size=24).tolist()
    assert np.array_equal(stepped_logits(eng, tokens), stepped_logits(base, tokens))
    assert eng.generate(tokens[:5], 40) == base.generate(tokens[:5], 40)


@pytest.mark.parametrize("family,window", [("llama", None), ("mistral", 200),
                                           pytest.param("llama", None, marks=NARROW, id="llama-narrow")])
def test_persistent_long_context_within_budget(tmp_path, request, family, window):
    # 600 positions: attention goes from one split a KV head to many merged by the last, over a sliding window too;
    # narrow: the table's rules for a narrow model with heads 64 wide (smollm2-135m's attention: the tensor-core
    # passes, one ahead, the first rows before the wait, tag waits, a 4-page ring), one split up to 256 rows
    # (persist_attn_min_keys_narrow), then two and three merged
    narrow = request.node.get_closest_marker("table_tags") is not None
    extra = dict({"sliding_window": window} if window else {},
                 **dict(hidden_size=256, intermediate_size=384) if narrow else {})
    model, art = compile_tiny(tmp_path, family, max_position_embeddings=1024, **extra)
    if narrow:
        src = open(os.path.join(art, "src", "model.cu")).read()
        (tile,) = attention_tile_args(src)
        assert tile["MIN_KEYS"] == str(targets.TARGETS["sm_90"].persist_attn_min_keys_narrow) == "256", tile
        assert (tile["MMA_KEYS"], tile["MMA_AHEAD"], tile["MMA_FIRST"]) == ("16", "1", "2"), tile  # (smollm2-135m's)
    eng, ours, r32, r16, tokens = check_against_interpreter(model, art, positions=600)
    budget_check(ours, r32, r16, f"{family} persistent (window {window}): logits over 600 positions")
    assert eng.generate(tokens[:280], 20) == stepped_greedy(eng, tokens[:280], 20)  # one launch, a launch a step


@pytest.mark.parametrize("family,window", [("llama", None), ("mistral", 200)])
def test_attention_pipeline_long_context_within_budget(tmp_path, monkeypatch, family, window):
    # persist_attn_pipeline: a split's next K/V pass loaded while this one computes; heads 64 wide (a pass: 128
    # keys) and 512 keys a split at least, so splits run up to 4 passes and, past 512 positions, two merge; the
    # passes' key order differs from the default's, so the check is the interpreter's budget, not equal bits
    extra = {"sliding_window": window} if window else {}
    model, _ = compile_tiny(tmp_path, family, max_position_embeddings=1024, hidden_size=256, intermediate_size=384,
                            **extra)
    art = compile_variant(model, tmp_path, monkeypatch, persist_attn_pipeline=1, attn_min_keys=512)
    eng, ours, r32, r16, tokens = check_against_interpreter(model, art, positions=600)
    budget_check(ours, r32, r16, f"{family} persistent, attention pipelined (window {window}): 600 positions")
    assert eng.generate(tokens[:280], 20) == stepped_greedy(eng, tokens[:280], 20)


def test_attention_short_pass_computes_the_same_bits(tmp_path, monkeypatch):
    # persist_attn_short_keys 2: heads 64 wide and 128 keys a split at least, so positions below 64 run the short
    # pass (2 keys a lane group) and later ones the 8-key passes, one launch over 300 positions: every logit the
    # same bits as without it (the short pass takes the same rows in the same order)
    model, _ = compile_tiny(tmp_path, "llama", max_position_embeddings=512, hidden_size=256, intermediate_size=384)
    base = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "base", attn_min_keys=128,
                                       persist_attn_short_keys=0))
    eng = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, persist_attn_short_keys=2))
    tokens = np.random.default_rng(5).integers(0, model.config.vocab_size, size=300).tolist()
    assert np.array_equal(stepped_logits(eng, tokens), stepped_logits(base, tokens))
    assert eng.generate(tokens[:100], 40) == base.generate(tokens[:100], 40)


@pytest.mark.parametrize("tags,most,heads,kv_heads,newest", [(0, 64, 4, 2, 0), (2, 64, 4, 2, 0), (2, 8, 4, 2, 0),
                                                              (0, 8, 4, 2, 0), (0, 64, 8, 1, 0), (0, 8, 4, 2, 1),
                                                              (2, 64, 4, 2, 1), (0, 0, 4, 2, 1), (2, 1, 4, 2, 0)])
def test_owner_merges_computes_the_same_bits(tmp_path, monkeypatch, tags, most, heads, kv_heads, newest):
    # persist_attn_owner_merges: the split holding the position's row merges its KV head's splits from their tagged
    # partials, in the same order as the last split to arrive did: with 8 keys a split at least, one launch over 300
    # positions runs 1 to 38 splits in use (several batches of 4 partials), every logit the same bits as without it;
    # with attention's input and output tagged too (tags 2); at most 8 in use: from position 64 on the last to
    # arrive merges again, in the same launch (also untagged, a narrow model's way). 8 query heads on one KV head:
    # 512 outputs, two a thread. newest: persist_attn_newest_first (split 0 takes the newest chunk and is the owner;
    # the partials at their chunks' slots, so the same bits), also with the last to arrive merging (most 0). At most
    # 1: the owner the only split in use (positions below 8: it signals, then arrives for all), then the last to arrive
    model, _ = compile_tiny(tmp_path, "llama", max_position_embeddings=512, hidden_size=64 * heads,
                            intermediate_size=384, num_attention_heads=heads, num_key_value_heads=kv_heads)
    # (the wide fields: else a model this narrow takes owner merges 8 and newest first in both builds)
    fields = dict(WIDE_FIELDS, attn_min_keys=8, persist_tagged=tags)
    base = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "base", **fields))
    eng = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, persist_attn_owner_merges=most,
                                      persist_attn_newest_first=newest))
    tokens = np.random.default_rng(7).integers(0, model.config.vocab_size, size=300).tolist()
    assert np.array_equal(stepped_logits(eng, tokens), stepped_logits(base, tokens))
    assert eng.generate(tokens[:100], 40) == base.generate(tokens[:100], 40)


@pytest.mark.parametrize("most,head_dim,heads,kv_heads", [(2, 64, 4, 2), (4, 64, 16, 4), (16, 64, 4, 1),
                                                           (2, 128, 4, 2), (3, 128, 4, 1)])
def test_consumer_merges_compute_the_same_bits(tmp_path, monkeypatch, most, head_dim, heads, kv_heads):
    # persist_attn_consumer_merges: while 2 to `most` splits are in use, the output projection's tiles merge the
    # splits' tagged partials into their x themselves (merge_partials), in the order the last split to arrive did:
    # with 8 keys a split at least, one launch over 300 positions runs 1 to 38 splits in use, so the consumer merges
    # from position 8 on and the last to arrive again past `most` splits; every logit the same bits as without it.
    # 64- and 128-wide heads (a lane's 2 or 4 elements a head), 4 query heads (warps 4-7 with none) or 16, 1 to 4 a
    # KV head (attention's output tagged: the wide fields)
    model, _ = compile_tiny(tmp_path, "llama", max_position_embeddings=512, hidden_size=head_dim * heads,
                            intermediate_size=384, num_attention_heads=heads, num_key_value_heads=kv_heads)
    fields = dict(WIDE_FIELDS, attn_min_keys=8, persist_tagged=2)
    base = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "base", **fields))
    art = compile_variant(model, tmp_path, monkeypatch, persist_attn_consumer_merges=most)
    assert "kiec::ConsumerMerge<" in open(os.path.join(art, "src", "model.cu")).read()
    eng = kiec.Engine(art)
    tokens = np.random.default_rng(11).integers(0, model.config.vocab_size, size=300).tolist()
    assert np.array_equal(stepped_logits(eng, tokens), stepped_logits(base, tokens))
    assert eng.generate(tokens[:100], 40) == base.generate(tokens[:100], 40)


@pytest.mark.parametrize("batch,tags,staged", [(4, 0, 0), (16, 0, 0), (16, 2, 0), (0, 0, 1), (0, 2, 1)])
def test_combine_batch_computes_the_same_bits(tmp_path, monkeypatch, batch, tags, staged):
    # persist_combine_batch: the last split to arrive loads `batch` splits' partials at once and folds them in split
    # order: with 8 keys a split at least, 300 positions run 1 to 38 splits in use (batches with and without a
    # remainder), every logit the same bits as the loop unrolled by 8; also with attention's output tagged.
    # persist_combine_staged: all the partials copied into shared memory at once, then folded from there. The tiny
    # model is narrower than persist_narrow_width and persist_tagged_min_width, so both are 0 here: else its narrow
    # fields (combine batch 16, owner merges, no tags) would replace the ones under test (until 2026-12-02 they did)
    model, _ = compile_tiny(tmp_path, "llama", max_position_embeddings=512)
    fields = dict(WIDE_FIELDS, attn_min_keys=8, persist_tagged=tags)
    base = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "base", **fields))
    eng = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, persist_combine_batch=batch,
                                      persist_combine_staged=staged))
    src = {n: open(tmp_path / n / "src" / "model.cu").read() for n in ("base", "variant")}
    attn = {n: attention_tile_args(t)[0] for n, t in src.items()}
    assert "#define KIEC_COMBINE_BATCH" not in src["base"] and attn["base"]["TAGGED"] == ("true" if tags else "false")
    assert (f"#define KIEC_COMBINE_BATCH {batch}" in src["variant"]) == bool(batch)
    assert (attn["variant"]["STAGED"] == "true") == bool(staged)
    tokens = np.random.default_rng(9).integers(0, model.config.vocab_size, size=300).tolist()
    assert np.array_equal(stepped_logits(eng, tokens), stepped_logits(base, tokens))
    assert eng.generate(tokens[:100], 40) == base.generate(tokens[:100], 40)


@pytest.mark.parametrize("family", ["llama3-scaled", "qwen3", "mistral"])
def test_early_rope_and_kv_first_compute_the_same_bits(tmp_path, monkeypatch, family):
    # persist_attn_early_rope: the rotation's coefficients made before the wait (scaled frequencies, q/k norms
    # before the rotation, a window); persist_attn_kv_first: a short pass's earlier rows loaded before q, the new
    # row from shared memory. 8 keys a split at least, so that several splits a head rotate q and take rows and the
    # one holding the new row rotates its key and takes it, past 64 keys a split (300 positions) the long passes
    # too: every logit the same bits as without, step by step and in one launch (each knob alone: the variants)
    model, _ = compile_tiny(tmp_path, family, max_position_embeddings=512)
    base = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "base", attn_min_keys=8))
    eng = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, persist_attn_early_rope=1, persist_attn_kv_first=1))
    tokens = np.random.default_rng(7).integers(0, model.config.vocab_size, size=300).tolist()
    assert np.array_equal(stepped_logits(eng, tokens), stepped_logits(base, tokens))
    assert eng.generate(tokens[:100], 40) == base.generate(tokens[:100], 40)


@pytest.mark.parametrize("family,window,min_keys,wide", [("llama", None, 512, True), ("mistral", 200, 128, True),
                                                         ("qwen3", None, 8, True),
                                                         pytest.param("llama", None, 8, False, marks=NARROW)])
@pytest.mark.parametrize("knob", ["persist_attn_early_pass", "persist_attn_lean"])
def test_attention_early_pass_and_lean_compute_the_same_bits(tmp_path, monkeypatch, family, window, min_keys, wide,
                                                             knob):
    # persist_attn_early_pass: a split's first K/V pass, its rows before the previous step's, loaded before the
    # tile's wait; the previous step's row after it, the new row from shared memory. persist_attn_lean: the slice's
    # rows widened with widen8 and each score's weight taken without a test of the score (masked slots in partial
    # passes: the splits' last, the short ones). Heads 64 wide (a pass: 128 keys
    # with the pipeline), 600 positions: with 512 keys a split at least, splits of up to 4 passes where the previous
    # row and the new one are in the last; with 128 over a window of 200, the window's start moving; with 8, many
    # splits and the one-pass short splits, whose only pass holds both rows. Wide: the large models' fields (tags
    # 2); else a narrow model's (a 4-page ring, tag waits), smollm2-135m's way. Every logit the same bits
    # as without it, step by step and in one launch
    extra = {"sliding_window": window} if window else {}
    model = load_tiny(tmp_path, family, max_position_embeddings=1024, hidden_size=256, intermediate_size=384, **extra)
    fields = dict(WIDE_FIELDS if wide else {}, attn_min_keys=min_keys, persist_attn_min_keys_narrow=min_keys,
                  persist_attn_lean=0, persist_attn_mma=0)
    base = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "base", **fields))  # (the FMA passes)
    narrow_or_wide(tmp_path, wide)
    eng = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, **{knob: 1}))
    tile = attention_tile_args(open(tmp_path / "variant" / "src" / "model.cu").read())[0]
    assert tile[{"persist_attn_early_pass": "EARLY_PASS", "persist_attn_lean": "LEAN"}[knob]] == "true"
    tokens = np.random.default_rng(11).integers(0, model.config.vocab_size, size=600).tolist()
    assert np.array_equal(stepped_logits(eng, tokens), stepped_logits(base, tokens))
    assert eng.generate(tokens[:300], 40) == base.generate(tokens[:300], 40)


@pytest.mark.parametrize("family,window,min_keys,wide,mma,head_dim", [
    ("llama3-scaled", None, 8, True, 16, None), ("mistral", 200, 128, True, 16, None),
    ("llama", None, 64, True, 0, None), pytest.param("llama", None, 8, False, 16, None, marks=NARROW),
    ("qwen3", None, 8, True, 16, 64), ("qwen3", None, 8, True, 0, 128)])
@pytest.mark.parametrize("pairs", [1, 2, 3])
def test_attention_q_pairs_compute_the_same_bits(tmp_path, monkeypatch, family, window, min_keys, wide, mma, head_dim,
                                                 pairs):
    # persist_attn_q_pairs: q's and the new k's words taken a rotation pair a thread, rotated in registers with the
    # coefficients made before the wait, the new row written to the cache by those threads, one block barrier where
    # there were three. 600 positions: with 8 keys a split at least, many splits a head rotate q and the one holding
    # the new row (a different split as the context grows) rotates and writes it; scaled frequencies (llama3); a
    # window of 200 moving its start; the FMA passes (mma 0) beside the tensor cores'; wide (tags 2, no tag waits:
    # the words loaded after the wait) and narrow (tag waits: loaded before it, QkvPairs through `pre`). Every
    # logit the same bits as without, step by step and in one launch; 2: the rotation's coefficients made after the
    # wait from frequencies loaded before it; 3: read after the wait from the table each SM makes at a step's start
    # (RopeTable; llama3's scaled frequencies in it too). qwen3 (persist_attn_q_pairs_normed: q and k head norms, a
    # warp a head norming and rotating it in registers, the new key's warp writing the new row, one block barrier
    # where there were four), heads 64 wide on the tensor cores and 128 wide on the FMA passes
    extra = dict({"sliding_window": window} if window else {}, **{"head_dim": head_dim} if head_dim else {})
    model = load_tiny(tmp_path, family, max_position_embeddings=1024, hidden_size=256, intermediate_size=384, **extra)
    fields = dict(WIDE_FIELDS if wide else {}, attn_min_keys=min_keys, persist_attn_min_keys_narrow=min_keys,
                  persist_attn_mma=mma, persist_attn_mma_wide=mma, persist_attn_q_pairs=0,
                  persist_attn_q_pairs_normed=1)
    base = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "base", **fields))
    narrow_or_wide(tmp_path, wide)
    eng = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, persist_attn_q_pairs=pairs))
    tiles = {n: attention_tile_args(open(tmp_path / n / "src" / "model.cu").read())[0] for n in ("base", "variant")}
    assert (tiles["base"]["Q_PAIRS"], tiles["variant"]["Q_PAIRS"]) == ("0", str(pairs))
    assert ("#define KIEC_ROPE_TABLE" in open(tmp_path / "variant" / "src" / "model.cu").read()) == (pairs == 3)
    tokens = np.random.default_rng(13).integers(0, model.config.vocab_size, size=600).tolist()
    assert np.array_equal(stepped_logits(eng, tokens), stepped_logits(base, tokens))
    assert eng.generate(tokens[:300], 40) == base.generate(tokens[:300], 40)


@pytest.mark.parametrize("family,window,min_keys,wide,kv_heads,head_dim", [
    ("llama", None, 512, True, 2, None), ("mistral", 200, 128, True, 2, None), ("llama", None, 8, True, 1, None),
    pytest.param("llama", None, 8, False, 2, None, marks=NARROW), ("qwen3", None, 512, True, 2, 128),
    pytest.param("qwen3", None, 8, False, 1, 128, marks=NARROW)])
@pytest.mark.parametrize("keys", [16, 32])
def test_attention_on_tensor_cores_within_budget_of_the_fma_passes(tmp_path, monkeypatch, family, window, min_keys,
                                                                    wide, kv_heads, head_dim, keys):
    # persist_attn_mma: the slice's passes as mmas (q and the weights split in two bf16 halves), heads 64 wide (and
    # 128, persist_attn_mma_wide, qwen3 with its q/k norm: one pass's rows loaded at a time), 2 or 4 query heads a
    # KV head, 600 positions: a split's last pass cut short at every length (rows past its end zeros and masked),
    # with 512 keys a split at least up to 2 splits of many passes; a window of 200 whose start moves; with 8 keys,
    # many splits of one pass or less and warps with no rows; a narrow model's fields (a 4-page ring, tag
    # waits). Logits within the interpreter's budget and at most twice as far from the fp32
    # interpreter's as the FMA passes' (their bits differ: 16 significant bits of q and the weights; either's
    # distance is mostly the bf16 cache's rounding of rows the difference moved: 1.1-1.3e-3 of the largest logit
    # between the two, 2026-12-03), and one launch's greedy tokens a step-by-step run's
    extra = dict({"sliding_window": window} if window else {}, **{"head_dim": head_dim} if head_dim else {})
    model = load_tiny(tmp_path, family, max_position_embeddings=1024, hidden_size=256, intermediate_size=384,
                      num_key_value_heads=kv_heads, **extra)
    fields = dict(WIDE_FIELDS if wide else {}, attn_min_keys=min_keys, persist_attn_min_keys_narrow=min_keys,
                  persist_attn_mma=0, persist_attn_mma_wide=0)
    base = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "base", **fields))
    narrow_or_wide(tmp_path, wide)
    art = compile_variant(model, tmp_path, monkeypatch, persist_attn_mma=keys, persist_attn_mma_wide=keys,
                          persist_attn_mma_wide_min_group=2)  # (qwen3's 2 heads a KV head too)
    assert attention_tile_args(open(tmp_path / "variant" / "src" / "model.cu").read())[0]["MMA_KEYS"] == str(keys)
    eng, ours, r32, r16, tokens = check_against_interpreter(model, art, positions=600)
    budget_check(ours, r32, r16, f"persist_attn_mma={keys} {family}: logits over 600 positions")
    fma = stepped_logits(base, tokens)
    ours_err, fma_err = np.abs(ours - r32).max(), np.abs(fma - r32).max()
    assert ours_err <= 2 * fma_err, f"{ours_err:.3g} from the fp32 interpreter's logits, the FMA passes {fma_err:.3g}"
    assert eng.generate(tokens[:300], 40) == stepped_greedy(eng, tokens[:300], 40)


@pytest.mark.parametrize("family,window,min_keys", [("llama", None, 512), ("mistral", 200, 128), ("llama", None, 8)])
@pytest.mark.parametrize("ahead", [2, 3])
def test_attention_on_tensor_cores_ahead_computes_the_same_bits(tmp_path, monkeypatch, family, window, min_keys,
                                                                ahead):
    # persist_attn_mma_ahead: the tensor cores' passes (16 rows a warp a pass, heads 64 wide) with 2 (the default)
    # or 3 passes' rows in flight against the next one's alone (1): the same passes in the same order, so every
    # logit the same bits, step by step over 600 positions (512 keys a split at least: up to 4 passes a warp, the
    # last cut short; a window of 200 whose start moves; 8 keys: many splits, warps with no rows), and one launch's
    # greedy tokens
    extra = {"sliding_window": window} if window else {}
    model = load_tiny(tmp_path, family, max_position_embeddings=1024, hidden_size=256, intermediate_size=384, **extra)
    base = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "base", attn_min_keys=min_keys,
                                       persist_attn_mma=16, persist_attn_mma_ahead=1))
    eng = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, persist_attn_mma_ahead=ahead))
    for name, want in [("base", ("16", "1")), ("variant", ("16", str(ahead)))]:
        tile = attention_tile_args(open(tmp_path / name / "src" / "model.cu").read())[0]
        assert (tile["MMA_KEYS"], tile["MMA_AHEAD"]) == want, name
    tokens = np.random.default_rng(12).integers(0, model.config.vocab_size, size=600).tolist()
    assert np.array_equal(stepped_logits(eng, tokens), stepped_logits(base, tokens))
    assert eng.generate(tokens[:300], 40) == base.generate(tokens[:300], 40)


@pytest.mark.parametrize("family,window,min_keys,ahead,first", [
    ("llama", None, 512, 2, 1), ("mistral", 200, 128, 2, 1), ("llama", None, 8, 2, 1), ("llama", None, 8, 1, 1),
    pytest.param("llama", None, 8, 1, 1, marks=NARROW, id="narrow"),
    pytest.param("llama", None, 512, 2, 2, id="before-wait"),
    pytest.param("mistral", 200, 128, 2, 2, id="before-wait-window"),
    pytest.param("llama", None, 8, 2, 2, id="before-wait-splits"),
    pytest.param("llama", None, 8, 1, 2, marks=NARROW, id="before-wait-narrow")])
def test_attention_on_tensor_cores_first_rows_beside_q_compute_the_same_bits(tmp_path, monkeypatch, family, window,
                                                                             min_keys, ahead, first):
    # persist_attn_mma_first: the tensor cores' first passes' rows (those in flight) loaded beside q's words (1), or
    # before the tile's wait but row pos - 1, which is loaded beside q's (2), the new row put in from shared memory as
    # the cache has it, against the rows loaded after the new row's write: the same rows, so every logit the same
    # bits, step by step over 600 positions (up to 4 passes a warp; a moving window; 8 keys a split: many splits,
    # the one holding the new row, the one holding row pos - 1 alone and warps with no rows), one launch's greedy
    # tokens; also a narrow model's fields (a 4-page ring, tag waits)
    extra = {"sliding_window": window} if window else {}
    model = load_tiny(tmp_path, family, max_position_embeddings=1024, hidden_size=256, intermediate_size=384, **extra)
    base = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "base", attn_min_keys=min_keys,
                                       persist_attn_min_keys_narrow=min_keys,
                                       persist_attn_mma=16, persist_attn_mma_ahead=ahead,
                                       persist_attn_mma_ahead_narrow=ahead, persist_attn_mma_first=0,
                                       persist_attn_mma_first_narrow=0))
    eng = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, persist_attn_mma_first=first,
                                      persist_attn_mma_first_narrow=first))
    for name, want in [("base", ("16", "0")), ("variant", ("16", str(first)))]:
        tile = attention_tile_args(open(tmp_path / name / "src" / "model.cu").read())[0]
        assert (tile["MMA_KEYS"], tile["MMA_FIRST"]) == want, name
    tokens = np.random.default_rng(13).integers(0, model.config.vocab_size, size=600).tolist()
    assert np.array_equal(stepped_logits(eng, tokens), stepped_logits(base, tokens))
    assert eng.generate(tokens[:300], 40) == base.generate(tokens[:300], 40)


@pytest.mark.parametrize("temperature,top_p", [(1.0, 0.9), (0.7, 1.0), (60.0, 0.5)])
def test_device_draw_is_kiec_sampling_over_its_own_logits(tmp_path, temperature, top_p):
    # vocabulary 4096: at temperature 60 the distribution is flat, more than 1,024 tokens are candidates and
    # the kernel finds top-p's threshold by bisection instead of sorting in shared memory
    model, art = compile_tiny(tmp_path, "llama", vocab_size=4096)
    eng = kiec.Engine(art)
    prompt, params = [3, 1, 4, 1, 5], SamplingParams(temperature, top_p, seed=11)
    got = eng.generate(prompt, 24, sampling=params)
    assert got == eng.generate(prompt, 24, sampling=params)
    assert host_draws(eng, prompt, got, params) == got
    assert eng.generate(prompt, 24, sampling=SamplingParams(temperature, top_p, seed=12)) != got


@pytest.mark.parametrize("change", [{}, dict(persist_waits_together=0, persist_tagged=2, attn_min_keys=8),
                                    pytest.param(dict(persist_tag_waits=1, attn_min_keys=8), id="tag_waits"),
                                    pytest.param(dict(persist_tag_waits=2, attn_min_keys=8), id="tag_waits2"),
                                    pytest.param(dict(persist_attn_owner_merges=8, persist_tagged_min_width=0,
                                                      attn_min_keys=8), id="owner_merges"),
                                    pytest.param(dict(persist_attn_owner_merges=64, attn_min_keys=8),
                                                 id="owner_merges_untagged"),
                                    pytest.param(dict(persist_select_host_late=0), id="select_host_early")])
def test_generation_ends_at_eos_and_when_the_host_stops_it(tmp_path, monkeypatch, change):
    # also with waits polled one after the other and attention's arrivals as an `extra` wait (tags 2, several
    # splits a head), and with tag waits (tiles spin on their words' tags, not on counters): a stop must end every
    # spin, or an SM waits for a producer that stopped first; and with select's host read and write on the chain (the
    # stop flag read after its wait, the token and the end mark written before its signal: the default before the
    # thirty-sixth session)
    model, art = compile_tiny(tmp_path, "qwen3", max_position_embeddings=4096)
    if change:
        art = compile_variant(model, tmp_path, monkeypatch, **change)
    eng = kiec.Engine(art)
    prompt = [7, 7, 2]
    free = eng.generate(prompt, 30)
    eos = free[9]
    eng.manifest["eos_token_ids"] = [eos]
    assert eng.generate(prompt, 30, stop_at_eos=True) == free[:free.index(eos) + 1]
    # the host stops a long generation after 3 tokens: the kernel ends within a few tokens, later ones never come
    it = eng.stream(prompt, 3000)
    first = [next(it) for _ in range(3)]
    began = time.perf_counter()
    it.close()  # the host's stop, then the wait for the kernel's end
    assert time.perf_counter() - began < 0.5  # no spin waits for a producer that stopped (a few tokens take ~ms)
    out = eng._lib.kiec_host_tokens(eng._h)
    made = [out[p] for p in range(len(prompt) - 1, len(prompt) + 2999)]
    assert first == free[:3]
    assert -2 in made and made.index(-2) < 1000 and set(made[made.index(-2) + 1:]) <= {-1}
    assert eng.generate(prompt, 30) == free  # the next generation starts clean


@pytest.mark.parametrize("mode", ["persistent", "graph"])
def test_a_hung_generation_or_timed_run_is_stopped_and_reported(tmp_path, mode):
    # a stall limit far below one token's time stands in for a kernel that hangs: stream() stops the generation and
    # names the position; a timed run and a step fail at the runtime's deadline (runtime.cuh: finish), which asks
    # the kernel to stop; with the limit back, the same engine's next generation is the one it made before
    model, art = compile_tiny(tmp_path, "llama", mode=mode)
    eng = kiec.Engine(art)
    want = eng.generate([3, 1, 4], 40)
    eng.stall_timeout_s, eng.PROMPT_ALLOWANCE_S = 1e-6, 0.0
    # (the position is the first one the host looked for too late: tokens made before its first look pass)
    with pytest.raises(kiec.KiecError, match=r"no token at position \d+ within 1e-06 s: the generation hung \(asked "
                                             r"to stop, it stopped\)"):
        eng.generate([3, 1, 4], 200)
    with pytest.raises(kiec.KiecError, match=r"the timed run did not end within 0\.0 s \(hung; asked to stop"):
        eng.time_steps(8, 64, warmup=0)
    with pytest.raises(kiec.KiecError, match=r"the step did not end within 0\.0 s"):
        eng.step(3, 0)
    eng.stall_timeout_s = 60.0
    assert eng.generate([3, 1, 4], 40) == want
    with pytest.raises(kiec.KiecError, match=r"stall timeout 0 s must be > 0"):
        eng.stall_timeout_s = 0


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_parity_tags_within_budget_and_the_same_tokens(tmp_path, monkeypatch, family):
    # persist_tag_parity: tagged values as 4-byte words, their tag the parity of their slot's write (a model wide
    # enough that every SM reads the residual stream): logits within the interpreter's budget, greedy tokens those
    # of the 32-bit tags' kernel, and a 200-token launch (the parities turning over every token) made again the
    # same by the next launch (its slots zeroed first)
    model, art = compile_tiny(tmp_path, family, hidden_size=256, intermediate_size=384, num_attention_heads=4,
                              num_key_value_heads=2, vocab_size=300)
    base = kiec.Engine(art)
    eng, ours, r32, r16, tokens = check_against_interpreter(
        model, compile_variant(model, tmp_path, monkeypatch, persist_tag_parity=1), positions=24)
    budget_check(ours, r32, r16, f"{family} persistent, parity tags: logits over 24 positions")
    prompt = tokens[:5]
    assert eng.generate(prompt, 40) == base.generate(prompt, 40)
    long = eng.generate(prompt, 200)
    assert long[:40] == base.generate(prompt, 40) and eng.generate(prompt, 200) == long


@pytest.mark.parametrize("family,hidden,inter,heads,kv_heads,level,change",
                         [(f, 256, 384, 4, 2, 2, {}) for f in FAMILIES]
                         + [("qwen3", 1536, 6144, 12, 4, 1, {}), ("qwen3", 1536, 6144, 12, 4, 2, {}),
                            pytest.param("llama", 1536, 6144, 12, 4, 1, dict(persist_x_warp_copy_min_k=6144),
                                         id="warp-copy")])
def test_tagged_pairs_within_budget_and_greedy_alike(tmp_path, monkeypatch, family, hidden, inter, heads, kv_heads,
                                                     level, change):
    # persist_tagged_pairs (the other tests' tiny models keep floats: tests/conftest.py): the SiLU-mul's output (1),
    # and attention's (2), as tagged pairs (two bf16 elements a word), the SiLU-mul's rows dealt in pairs; the down
    # projection's K 384 (a 16-byte load for 96 of the 256 threads) and 6144 (6 loads a thread, one batch); 8 keys a
    # split, so that attention's output comes from one split's store and from the last arrival's merge; K 6144 also
    # copied by each warp for itself (3 rounds of its segment, loaded at once), llama-3.1-8b's way: logits within
    # the interpreter's budget over 24 positions, greedy tokens those of floats and of graph mode up to a near-tie, a
    # 200-token launch (tags turning over) made again the same
    model = load_tiny(tmp_path, family, hidden_size=hidden, intermediate_size=inter, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, vocab_size=1024)
    base = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "base", attn_min_keys=8, **change))
    variant = compile_variant(model, tmp_path, monkeypatch, persist_tagged_pairs=level)
    with open(os.path.join(variant, "src", "model.cu")) as fh:  # gate/up's PY (argument 18), the down's PX (17)
        text = fh.read()
    cases = gemv_tiles(variant)
    assert any(len(c) == 19 and c[4] == "kiec::EPI_SILU_MUL" and c[18] == "true" for c in cases), cases
    paired_x = sorted(int(c[1]) for c in cases if len(c) >= 18 and c[4] == "kiec::EPI_RESIDUAL" and c[17] == "true")
    attn_width = model.config.num_heads * model.config.head_dim  # (the output projection's K; qwen3's heads are 32)
    assert paired_x == sorted([inter] + ([attn_width] if level == 2 else [])), cases
    attention = attention_tile_args(text)[0]
    assert (attention["PAIRED"] == "true") == (level == 2), attention
    eng, ours, r32, r16, tokens = check_against_interpreter(model, variant, positions=24)
    budget_check(ours, r32, r16, f"{family} persistent, tagged pairs: logits over 24 positions")
    prompt = tokens[:5]
    greedy_alike(eng, base, prompt, 40)
    greedy_alike(eng, kiec.Engine(kiec.compile(model, str(tmp_path / "graph"), mode="graph")), prompt, 40)
    long = eng.generate(prompt, 200)
    assert eng.generate(prompt, 200) == long


@pytest.mark.table_tags
@pytest.mark.parametrize("min_width", [None, 4096])
def test_smollm2_persistent_greedy_tokens_equal_graph_mode(tmp_path, monkeypatch, min_width):
    # SmolLM2 (width 576) as the table compiles it (tagged since the forty-seventh session), and untagged (a
    # persist_tagged_min_width above its width)
    from tests.smollm2 import smollm2_gguf
    model = kiec.load(smollm2_gguf(), dtype="bf16")
    change = {} if min_width is None else dict(persist_tagged_min_width=min_width)
    persistent = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "p", **change))
    graph = kiec.Engine(kiec.compile(model, str(tmp_path / "g"), mode="graph"))
    rng = np.random.default_rng(0)
    for _ in range(4):
        prompt = rng.integers(0, model.config.vocab_size, size=16).tolist()
        assert persistent.generate(prompt, 64) == graph.generate(prompt, 64)


@pytest.mark.parametrize("warm", [0, 1])
def test_trace_times_every_instruction_of_one_step(tmp_path, monkeypatch, warm):
    # warm 1: a traced launch first, its recording written over by the second's, which is whole: one step's span,
    # not more (against a plain trace's, with room for the spread). (The traced step's code: persist_trace_code.)
    model, _ = compile_tiny(tmp_path, "qwen3")
    eng = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, persist_trace_code=1))
    ts = eng.trace(10, warm=warm).astype(np.int64)
    if warm:
        plain = eng.trace(10).astype(np.int64)
        at = eng.manifest["trace_slots"].index
        span = [t[:, at("done")].max() - t[:, at("start")].min() for t in (ts, plain)]
        assert span[0] < 1.5 * span[1] + 5_000, span
    slots = eng.manifest["trace_slots"]
    assert ts.shape == (eng.manifest["instructions"], len(slots))
    start, ready, x, sums, done, page_wait, cycles = (
        ts[:, slots.index(n)] for n in ("start", "ready", "x_ready", "sums_done", "done", "page_wait_cycles", "cycles"))
    assert (start > 0).all() and (ready >= start).all() and (done >= ready).all()
    assert done.max() - start.min() < 10_000_000  # one step, not a whole run: under 10 ms
    gemv = np.array([op == "gemv" for _, op, *_ in eng.manifest["schedule"]])
    assert ((x >= ready) & (sums >= x) & (sums <= done))[gemv].all()  # every GEMV stamps its prologue and sums
    assert (page_wait <= cycles).all() and (cycles > 0).all()
    # pages already in the ring when x was ready (a GEMV's, at most a ring's)
    stored = ts[:, slots.index("stored")]  # a GEMV's stores issued: after its sums, before its signal
    assert ((stored >= sums) & (stored <= done))[gemv].all()
    ready_pages = ts[:, slots.index("pages_ready")]
    assert (ready_pages[~gemv] == 0).all() and (ready_pages[gemv] <= 32).all() and (ready_pages[gemv] > 0).any()
    assert (ready_pages >= 0).all()  # (warp 0's count: never the -1 of a ballot's first unset bit gone wrong)
    # read out, the recording is disarmed: a generation through position 10 stamps nothing over it
    last = plain if warm else ts
    eng.generate([1, 2, 3], 16)
    again = np.zeros(last.shape, dtype=np.uint64)
    assert eng._lib.kiec_trace(eng._h, -1, again.ctypes.data_as(ctypes.POINTER(ctypes.c_ulonglong))) == 0
    assert (again.astype(np.int64) == last).all()


def trace_summary():
    """scripts/trace_summary.py as a module (its views read a recording)."""
    import importlib.util
    import os
    spec = importlib.util.spec_from_file_location("trace_summary", os.path.join(os.path.dirname(__file__), "..", "..",
                                                                                "scripts", "trace_summary.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("owner", [0, 64])
def test_trace_stamps_attentions_parts_when_asked(tmp_path, monkeypatch, owner):
    # persist_trace_attention: every attention split with rows (8 keys a split: several at position 40) stamps q
    # rotated (sums_done) and its keys done (stored) between its inputs and its partial; splits without rows none;
    # trace_summary.py cuts them. With the owner merge, the owner's x_ready is its slice's end, before its merge
    model, _ = compile_tiny(tmp_path, "qwen3")
    eng = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, persist_trace_attention=1, attn_min_keys=8,
                                      persist_attn_owner_merges=owner))
    ts = eng.trace(40).astype(np.int64)
    slots, sched = eng.manifest["trace_slots"], eng.manifest["schedule"]
    ready, x, sums, stored, done = (ts[:, slots.index(n)] for n in ("ready", "x_ready", "sums_done", "stored", "done"))
    attn = np.array([op == "attention" for _, op, *_ in sched])
    stamped = attn & (sums > 0)
    assert stamped.sum() >= 2 * 2 * 2  # 2 layers, 2 KV heads, at least 2 splits with rows each
    assert ((ready <= sums) & (sums <= stored) & (stored <= x) & (x <= done))[stamped].all()
    summary = trace_summary()
    assert summary.attention_parts(ts, slots, sched)[0].startswith(f"attention splits with rows ({stamped.sum()})")


def traced_variant(tmp_path, monkeypatch, **change):
    """A tiny llama's persistent engine with those table fields, its 12 greedy tokens checked against the default's,
    and its recording of the step at position 20: (engine, recording, slots, schedule)."""
    model, _ = compile_tiny(tmp_path, "llama")
    base = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "base"))
    eng = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, **change))
    assert eng.generate([1, 2, 3, 4], 12) == base.generate([1, 2, 3, 4], 12)
    return eng, eng.trace(20).astype(np.int64), eng.manifest["trace_slots"], eng.manifest["schedule"]


def test_trace_stamps_the_dot_products_parts_when_asked(tmp_path, monkeypatch):
    # persist_trace_dots: every GEMV tile of the traced step stamps its x slice loaded, the latest warp's first item
    # and the latest warp's last, in that order between its x ready and its sums done, and the earliest warp's last
    # between x ready and the latest's (a warp may end before another's first), the earliest warp's first item
    # between x ready and the latest's, and the latest's warp (one of 8); other instructions none; the tokens are the
    # default's; trace_summary.py cuts them
    eng, ts, slots, sched = traced_variant(tmp_path, monkeypatch, persist_trace_dots=1)
    names = ("x_ready", "x_sliced", "first_item", "warp_done_max", "sums_done", "warp_done_min")
    moments = np.stack([ts[:, slots.index(n)] for n in names])
    gemv = np.array([op == "gemv" for _, op, *_ in sched])
    assert (moments[1:, gemv] > 0).all() and (moments[1:, ~gemv] == 0).all()
    assert (np.diff(moments[:5, gemv], axis=0) >= 0).all()
    assert ((moments[0] <= moments[5]) & (moments[5] <= moments[3]))[gemv].all()
    first_min, late = ts[:, slots.index("first_item_min")], ts[:, slots.index("first_item_warp")]
    assert ((moments[0] <= first_min) & (first_min <= moments[2]) & (late >= 0) & (late < 8))[gemv].all()
    summary = trace_summary()
    lines = summary.dot_parts(ts, slots, sched, eng.manifest["kernels"])
    assert lines[0].startswith("a GEMV tile's dot products") and len(lines) > 2


def test_trace_stamps_the_weight_streams_pages_when_asked(tmp_path, monkeypatch):
    # persist_trace_stream: the streaming thread stamps every GEMV share of the traced step: it came to the first
    # page before the tile's dots were done and issued the last page's copy at or after that and before them, its
    # full-ring and pace waits within that stretch; other instructions none; the tokens are the default's;
    # trace_summary.py gives the stream's view
    eng, ts, slots, sched = traced_variant(tmp_path, monkeypatch, persist_trace_stream=1)
    first, last, full, paced, sums = (ts[:, slots.index(n)] for n in ("stream_first", "stream_last", "stream_full_ns",
                                                                       "stream_pace_ns", "sums_done"))
    gemv = np.array([op == "gemv" for _, op, *_ in sched])
    assert (first[gemv] > 0).all() and (np.stack([first, last, full, paced])[:, ~gemv] == 0).all()
    assert ((first <= last) & (last <= sums) & (full >= 0) & (paced >= 0) & (full + paced <= last - first))[gemv].all()
    lines = trace_summary().stream_parts(ts, slots, sched, eng.manifest["kernels"], eng.manifest["sms"])
    assert lines[0].startswith("the weight stream in the traced step") and lines[-2].startswith("the ring full")
    assert lines[-1].startswith("rings full at once")


@pytest.mark.parametrize("level,tag_waits", [(1, 0), (2, 0), pytest.param(2, 1, id="2-tag_waits"),
                                             pytest.param(2, 2, id="2-tag_waits2")])
def test_tagged_words_compute_the_same_bits_over_long_launches(tmp_path, monkeypatch, level, tag_waits):
    # hidden 4608: the norm's x (18 words a thread) is past what the prologue holds in registers, the down
    # projection's (K 6144) is copied in batches; 8 keys a split from the 4th token on, so that one launch of 200
    # steps runs attention tiles that must acquire the cache rows earlier steps wrote (the arrivals), through
    # counters that release nothing (level 2: attention's own input and output tagged too; tag waits: the tiles spin
    # on the words without waiting for their writers' counters)
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=4608, intermediate_size=6144, num_attention_heads=36,
                 num_key_value_heads=4, vocab_size=1024)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16", max_seq_len=256)
    base = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "base", attn_min_keys=8))
    eng = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, persist_tagged=level, persist_tag_waits=tag_waits))
    rng = np.random.default_rng(3)
    prompt = rng.integers(0, model.config.vocab_size, size=150).tolist()
    assert eng.generate(prompt, 50) == base.generate(prompt, 50)
    tokens = prompt[:24]
    assert np.array_equal(stepped_logits(eng, tokens), stepped_logits(base, tokens))


def test_the_relaxed_signal_probe_runs_to_the_end(tmp_path, monkeypatch):
    # persist_probe_relaxed_signal is timed by scripts/variants.py, never checked: its tokens may be wrong, but every
    # counter still reaches its target, so it must neither hang nor stop early
    model, _ = compile_tiny(tmp_path, "llama")
    eng = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, persist_probe_relaxed_signal=1))
    out = eng.generate([1, 2, 3, 4], 24)
    assert len(out) == 24 and all(0 <= t < model.config.vocab_size for t in out)


TABLE_VARIANTS = [dict(persist_warps=12), dict(persist_counter_stride=32),
    dict(persist_page_bytes=1024, persist_stages=2),
    dict(persist_page_bytes=1024, persist_stages=2, persist_l2_ahead_bytes=8192),
    dict(persist_stop_poll_every=1), dict(persist_poll_sleep_ns=100),
    dict(persist_evict_first=0),
    pytest.param(dict(persist_walk_kept=0, persist_page_pace_ns=0),
                 id="walk_each_page"),
    pytest.param(dict(persist_page_pace_ns=0), id="walk_kept-unpaced"),
    pytest.param(dict(persist_page_bytes=1024, persist_stages=2,
                      persist_page_pace_ns=200), id="walk_kept-paced-1k"),
    pytest.param(dict(persist_page_pace_ahead_ns=900), id="paced-ahead"),
    pytest.param(dict(persist_page_pace_ahead_ns=900, persist_page_pace_ahead_from_pos=12), id="paced-ahead-from12"),
    pytest.param(dict(persist_page_bytes=1024, persist_stages=2,
                      persist_l2_ahead_bytes=8192, persist_page_pace_ns=200,
                      persist_l2_ahead_paced=1), id="l2-ahead-paced-1k"),
    pytest.param(dict(persist_page_bytes=1024, persist_stages=2,
                      persist_l2_ahead_bytes=8192, persist_page_pace_ns=200,
                      persist_l2_ahead_paced=1, persist_l2_ahead_burst=1), id="l2-ahead-burst-1k"),
    pytest.param(dict(persist_pace_ref_gbps=4916), id="pace-scaled"),
    pytest.param(dict(persist_pace_ref_gbps=0), id="pace-unscaled"),
    pytest.param(dict(persist_attn_spare_splits=0, attn_min_keys=8),
                 id="spare-none"),
    pytest.param(dict(persist_attn_spare_splits=2, attn_min_keys=8),
                 id="spare-splits2"),
    dict(attn_l2_prefetch=1, attn_min_keys=8),
    dict(attn_l2_prefetch=2, attn_min_keys=8),
    dict(persist_x_direct=1), dict(persist_x_direct=1, persist_stages=13),
    dict(persist_waits_previous_first=0), dict(persist_waits_together=0),
    dict(persist_waits_together=0, persist_poll_sleep_ns=100),
    dict(persist_attn_keys=2), dict(persist_attn_short_keys=0, attn_min_keys=8),
    dict(persist_tagged=0), dict(persist_tagged=1), dict(persist_attn_pipeline=0),
    dict(persist_tagged=0, persist_waits_together=0, persist_attn_pipeline=0,
         persist_attn_short_keys=0),
    dict(persist_tagged=1, persist_attn_short_keys=0),
    dict(persist_tagged=1, attn_min_keys=8), dict(persist_tagged=0, attn_min_keys=8),
    dict(persist_tagged=0, persist_waits_previous_first=0),
    dict(persist_tagged=1, persist_x_direct=1, persist_stages=13),
    pytest.param(dict(persist_tagged=0, persist_x_direct=1), id="direct-untagged"),
    pytest.param(dict(persist_norm_in_warps=1, persist_tagged=0),
                 id="norm-in-warps-untagged"),
    pytest.param(dict(persist_reduce_batch=2), id="reduce-batch2"),
    pytest.param(dict(persist_reduce_batch=8), id="reduce-batch8"),
    pytest.param(dict(persist_reduce_batch_head=8), id="reduce-batch-head8"),
    pytest.param(dict(persist_dot_half_warps=1, persist_tagged=0),
                 id="half-warps-untagged"),
    dict(persist_attn_early_rope=1), dict(persist_attn_kv_first=1, attn_min_keys=8),
    dict(persist_attn_early_pass=1), dict(persist_attn_early_pass=1, attn_min_keys=8),
    dict(persist_attn_lean=0), dict(persist_attn_lean=0, attn_min_keys=8),
    dict(persist_probe_twice=3), dict(persist_probe_twice=6),
    pytest.param(dict(persist_tag_waits=1), id="tag_waits"),
    pytest.param(dict(persist_tag_waits=1, attn_min_keys=8), id="tag_waits-splits"),
    pytest.param(dict(persist_tag_waits=1, persist_tagged=1), id="tag_waits-tags1"),
    pytest.param(dict(persist_tag_waits=1, persist_poll_sleep_ns=100),
                 id="tag_waits-sleep"),
    pytest.param(dict(persist_tag_waits=1, persist_tag_lead=10, attn_min_keys=8),
                 id="tag_waits-lead"),
    pytest.param(dict(persist_tag_waits=2), id="tag_waits2"),
    pytest.param(dict(persist_tag_waits=2, attn_min_keys=8, persist_tagged=1),
                 id="tag_waits2-tags1"),
    pytest.param(dict(persist_tag_waits=2, persist_waits_together=0),
                 id="tag_waits2-serial"),
    pytest.param(dict(persist_probe_warm_code=1), id="warm-code"),
    pytest.param(dict(persist_probe_warm_code=1, persist_tagged=0, persist_stages=2, persist_page_bytes=1024),
                 id="warm-code-untagged-small-pages"),
    pytest.param(dict(persist_page_look=1), id="page-look"),
    pytest.param(dict(persist_page_look=1, persist_stages=2, persist_page_bytes=1024), id="page-look-small-pages"),
    pytest.param(dict(persist_dot_items=2), id="dot-items2"),
    pytest.param(dict(persist_dot_items=4), id="dot-items4"),
    pytest.param(dict(persist_dot_items=8, persist_dot_item_chunks=64), id="dot-items8"),
    pytest.param(dict(persist_dot_items=4, persist_stages=6, persist_page_bytes=1024), id="dot-items4-small-pages"),
    pytest.param(dict(persist_dot_items=4, persist_tagged=0, persist_trace_dots=1), id="dot-items4-untagged-traced"),
    pytest.param(dict(persist_dot_items=2, persist_dot_items_min_share=8), id="dot-items2-long-shares"),
    pytest.param(dict(persist_trace_code=1), id="traceable"),
    pytest.param(dict(persist_stage_instrs=0), id="unstaged-instrs"),
    pytest.param(dict(persist_stage_instrs=0, attn_min_keys=8, persist_trace_dots=1), id="unstaged-instrs-splits-traced"),
    pytest.param(dict(persist_norm_w_raw=0), id="norm-w-converted"),
    pytest.param(dict(persist_norm_late_scale=0), id="norm-scale-first"),
    pytest.param(dict(persist_norm_late_scale=0, persist_tagged=0, persist_norm_w_raw=0),
                 id="norm-scale-first-untagged"),
    pytest.param(dict(persist_select_host_late=0), id="select-host-early"),
    pytest.param(dict(persist_page_pace_kinds="down:460+head:300+qkv:500"), id="pace-kinds"),
    pytest.param(dict(persist_stage_instrs=0, persist_norm_w_raw=0, persist_tagged=0), id="unstaged-converted-untagged"),
    pytest.param(dict(attn_min_keys=8, persist_trace_attention=1), id="staged-splits-traced"),
    pytest.param(dict(attn_min_keys=8, persist_trace_dots=1, persist_trace_stream=1), id="staged-dots-stream-traced")]


@pytest.mark.parametrize("change", TABLE_VARIANTS)
def test_target_table_variants_compute_the_same(tmp_path, monkeypatch, change):
    # the A/B knobs of the persistent kernel (scripts/variants.py) change its speed, never its tokens; 12 warps also run
    # the sampler's scan over a block that is not a power of two; a ring of two 1 KB pages makes every share many pages
    # and the weight stream wait on the compute warps all the time (with L2 lookahead, asking L2 for the 8 pages after
    # the ring meanwhile); the weight copies with L2's default policy; the weight stream's page walk read again each
    # page (the default before 2026-12-01's fifteenth session), the kept walk unpaced, paced 200 ns a page with the two
    # 1 KB pages, paced 900 ns while 2+ instructions past the compute warps, with the 8 pages asked of L2 past the two 1
    # KB pages paced too (and also their copies into the ring off the pace), and the paces scaled to the GPU's peak
    # bandwidth; the output projection's rows kept off the
    # SMs of each KV head's first split (with 8 keys a split, so that more than one is in use); a vocabulary of 16384
    # gives each SM's LM-head share about 124 rows; attention's rows asked of L2 by the split before its wait or by the
    # weight stream, with 8 keys a split (the base too) so that several splits ask; x slices loaded straight from memory
    # where there is no norm, with the ring deeper for the room; the previous token's waits polled after this token's
    # (the old order); an instruction's waits polled one after the other by one thread (the default polls them at once;
    # with a sleep between polls too); attention's step unrolled over 2 keys a pass instead of 8 (a quarter of its
    # code), or (the default) only for splits one such pass covers, or not at all; attention without its K/V pipeline;
    # values as plain stores behind counters (tags 0, a narrow model's default, with several splits and with the old
    # wait order too) or only GEMV-to-GEMV values tagged (1; with x slices loaded straight from them; with several
    # splits; untagged, x slices loaded straight from plain floats, a narrow model's way) where the default tags
    # attention's too (2); warp sums of 2 or 8 items at once (warp_batch.cuh: the same additions), or 8 in the LM head alone; an item a half-warp (untagged; the LM head's 124 rows a tile); the norm in each warp's registers
    # (untagged: tagged x keeps the staged norm); the defaults before 2026-11-30's seventh session (no tags,
    # waits one at a time, no pipeline, no short pass) and before its eighth (tags 1, no short pass); RoPE's
    # coefficients made before the wait; a short pass's rows loaded before q; a split's first pass loaded before the
    # wait (also with several splits); the FMA passes without LEAN (the default before 2026-12-03; also with several
    # splits); the timing probe that runs each GEMV's
    # dots and prologue twice, or the prologues and the dots of the GEMVs beside attention; tag waits (tiles spinning on
    # their tagged words, not on the writers' counters), with several splits, with tags 1, with a sleep between spins,
    # and waiting for 90% of the writer's tiles first; with the waits that guard only writes polled before the epilogue
    # (2; also with tags 1 and with waits polled one at a time); the probe that runs each GEMV's dot code dry over
    # its first page before its wait (also untagged, over two 1 KB pages, so that the page it reads is often not yet
    # landed and the dry pass skipped); each warp looking at its share's first pages at once (also over two 1 KB
    # pages, so that most of a share's pages are waited on one by one after the look); a warp's items 2, 4 or 8 at
    # once (8 with room in the registers for them), 4 over six 1 KB pages (a step's items on several pages, waited for
    # while the ring is still filling), untagged with the dots' trace stamps, and 2 only in the GEMVs whose warps have 8
    # items or more (the LM head's); each tile's instruction and descriptor read from global memory, not copied into
    # shared memory ahead (the default before 2026-12-04's thirty-third session; also with several splits and the
    # dots' trace stamps, and untagged with the norm weights converted at their load); the norm weights converted at
    # their load; the norm's scale applied to x before the dot products (the default before the fortieth session; also
    # untagged, its weights converted at their load); the staged default with several splits and attention's trace
    # stamps, and with the dots' and the weight stream's; select's read of the host's stop flag after its wait and its
    # write of the host's token before its signal (the default before the thirty-sixth session); some kinds of GEMV's
    # pages at paces of their own. Knobs that leave the math alone leave the bits alone
    model = load_tiny(tmp_path, "qwen3", vocab_size=16384)
    base_fields = dict(WIDE_FIELDS, **{k: v for k, v in change.items() if k == "attn_min_keys"})
    base = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "base", **base_fields))
    art = compile_variant(model, tmp_path, monkeypatch, **change)  # (on top of the base's fields)
    eng, ours, r32, r16, tokens = check_against_interpreter(model, art, positions=24)
    budget_check(ours, r32, r16, f"persistent {change}: logits over 24 positions")
    params = SamplingParams(0.9, 0.8, seed=5)
    if change.keys() <= {"persist_counter_stride", "persist_stop_poll_every", "persist_evict_first", "attn_l2_prefetch",
                         "attn_min_keys", "persist_x_direct", "persist_stages", "persist_poll_sleep_ns",
                         "persist_waits_previous_first", "persist_waits_together",
                         "persist_attn_short_keys", "persist_tagged", "persist_attn_early_rope",
                         "persist_attn_kv_first", "persist_probe_twice", "persist_tag_waits", "persist_tag_lead",
                         "persist_walk_kept", "persist_page_pace_ns", "persist_page_pace_ahead_ns",
                         "persist_page_pace_ahead_from_pos",
                         "persist_pace_ref_gbps", "persist_reduce_batch", "persist_norm_in_warps",
                         "persist_reduce_batch_head", "persist_attn_early_pass",
                         "persist_attn_lean", "persist_probe_warm_code", "persist_page_look",
                         "persist_dot_items", "persist_dot_item_chunks", "persist_dot_items_min_share",
                         "persist_trace_dots", "persist_stage_instrs", "persist_norm_w_raw",
                         "persist_trace_attention", "persist_select_host_late", "persist_page_pace_kinds"}:
        assert np.array_equal(ours, stepped_logits(base, tokens))
        assert eng.generate(tokens[:5], 24) == base.generate(tokens[:5], 24)
        assert eng.generate(tokens[:5], 24, sampling=params) == base.generate(tokens[:5], 24, sampling=params)
    else:
        # other bits (other sums' orders: 12 warps, the norm's scale applied first): the greedy tokens the base's up to
        # a near-tie, and a seeded sampling repeatable. Not the base's sampled tokens: top-p 0.8 over a tiny random
        # model's near-flat 16384 logits keeps thousands of candidates, and a last-bit change to them moves the
        # seeded draw to a neighbour now and then (fortieth session: 12 warps parted at the first sampled token with
        # the same greedy tokens and logits within the budget)
        greedy_alike(eng, base, tokens[:5], 24)
        assert eng.generate(tokens[:5], 24, sampling=params) == eng.generate(tokens[:5], 24, sampling=params)
