"""Persistent mode's GEMV tiles on the GPU: each field that changes how a GEMV tile gets its x, deals its rows or
sums them computes the same bits as the default (or, where its sums differ, stays within the error budget and
greedy-alike), on tiny models."""
import os
import re
import time

import numpy as np
import pytest

import kiec
from kiec.sampling import SamplingParams
from tests.gpu.persistent_tiny import (FAMILIES, NARROW, WIDE_FIELDS, assert_same_bits, compile_tiny, compile_variant,
                                       gemv_tiles, load_tiny)
from tests.gpu.test_engine import budget_check, check_against_interpreter, greedy_alike, stepped_logits
from tests import table
from tests.tiles import attention_tile_args
from tests.tiny_hf import make_tiny_hf

pytestmark = pytest.mark.gpu


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


def test_tensor_core_shares_dealt_by_the_page_within_budget(tmp_path, monkeypatch):
    # persist_mma_item_shares (gemv_mma.cuh: MmaShare) on every tensor-core GEMV: gate/up's 272 blocks of 4 pages and
    # the LM head's 2048 of 2 over 132 SMs start inside blocks in 24 and 64 of their shares, a lead block's
    # sums handed to the tile before as tagged words; QKV's and the output projection's blocks (96, 64) stay whole.
    # Other bits than whole blocks (a block's sum split in two): the logits over 24 steps within the budget, against
    # the whole blocks' too, the same bits in a second run (the order of a block's two halves is fixed), and graph
    # mode's greedy tokens
    from kiec.ir.passes.persistent import share_items
    make_tiny_hf(tmp_path / "hf", "llama-tied", hidden_size=1024, intermediate_size=4352, num_attention_heads=16,
                 num_key_value_heads=4, vocab_size=32768)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16", max_seq_len=256)
    whole = dict(WIDE_FIELDS, persist_mma_rows="qkv+o+gate_up+down+head", persist_mma_share_excess=10000)
    base = compile_variant(model, tmp_path, monkeypatch, "base", **whole)
    art = compile_variant(model, tmp_path, monkeypatch, persist_mma_item_shares="qkv+o+gate_up+down+head")
    assert sum(a[-3:] == ["true", "kiec::NoConsumerMerge", "true"] for a in gemv_tiles(art)) >= 4  # (SK, MMA)
    eng, ours, r32, r16, tokens = check_against_interpreter(model, art, positions=24)
    budget_check(ours, r32, r16, "tensor-core shares by the page: logits over 24 positions")
    blocks = stepped_logits(kiec.Engine(base), tokens)
    budget_check(ours, r32, blocks, "tensor-core shares by the page against whole blocks' logits")
    assert np.array_equal(stepped_logits(eng, tokens), ours)
    graph = kiec.Engine(kiec.compile(model, str(tmp_path / "graph"), mode="graph"))
    greedy_alike(eng, graph, tokens[:5], 40)
    from kiec.codegen.persistent import _PersistentEmitter  # (the deal the artifact was built with: heads and tails)
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    e = _PersistentEmitter(pipeline.run(model.graph), "bf16", 256, target("sm_90"))
    led = [ins for lst in e.sched.lists for ins in lst if ins.kernel in e.mma_items and ins.head]
    assert len(led) == 2 * 24 + 64 and all(share_items(ins, e.mma_items[ins.kernel], 16) >= 4 for ins in led)


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
    assert_same_bits(model, eng, base, 4, 24, 5)


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
    # 200-token launch (tags turning over) made again the same. Owner merges off (attention's pairs are not taken
    # with them)
    model = load_tiny(tmp_path, family, hidden_size=hidden, intermediate_size=inter, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, vocab_size=1024)
    base = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "base", attn_min_keys=8,
                                       persist_attn_owner_merges=0, **change))
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


def test_spare_even_deals_the_output_projection_a_block_an_sm_with_the_same_bits(tmp_path, monkeypatch):
    # persist_attn_spare_even: hidden 2048 (the output projection's 128 blocks of 16 rows on the tensor cores) and 8 KV
    # heads, whose first splits' SMs spare splits leave out of the projection: by default 124 SMs take its blocks, 4
    # of them two; with it 4 SMs are spared and 128 take one each. Only which SM computes which rows changes: the
    # same bits
    model, art = compile_tiny(tmp_path, "llama", hidden_size=2048, intermediate_size=1024, num_attention_heads=32,
                              num_key_value_heads=8, vocab_size=1024)
    base = kiec.Engine(art)
    even = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "even", persist_attn_spare_even=1))
    assert even.manifest["schedule"] != base.manifest["schedule"]  # (the deal the field changes is this model's)
    assert_same_bits(model, even, base, seed=3, positions=24, prompt=5)
