"""Persistent mode's attention tile on the GPU: each field that changes how a split takes q, walks its keys or
merges with the others computes the same bits as the default over one launch of hundreds of positions (or, where
its sums differ, stays within the error budget), on tiny models."""
import os

import numpy as np
import pytest

import kiec
from tests.gpu.persistent_tiny import (NARROW, WIDE_FIELDS, assert_same_bits, compile_tiny, compile_variant, load_tiny,
                                      narrow_or_wide)
from tests.gpu.test_engine import budget_check, check_against_interpreter, stepped_greedy, stepped_logits
from tests.tiles import attention_tile_args

pytestmark = pytest.mark.gpu


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
    assert_same_bits(model, eng, base, 5, 300, 100)


@pytest.mark.parametrize("hidden,owner", [(256, 1), (256, 0), (64, 0)])
def test_solo_contexts_compute_their_splits_bits(tmp_path, monkeypatch, hidden, owner):
    # persist_attn_solo_keys 48 over splits of at least 8 keys: up to 48 rows of context one split a KV head, the same
    # bits there as attn_min_keys 48 (one split too), and past them the same bits as attn_min_keys 8 alone (the same
    # splits). One layer, so that the cache's rows are the same in the three builds (a second layer's would carry the
    # first's attention). Heads 64 wide (hidden 256: the tensor-core passes), with owner merges at 1 (the one split's
    # owner path) and without, and 16 wide (hidden 64: the FMA passes); 160 positions stepped, and one launch's greedy
    # tokens across the bound against its own stepped ones
    model = load_tiny(tmp_path, "llama", num_hidden_layers=1, hidden_size=hidden, intermediate_size=384)
    many = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "many", attn_min_keys=8,
                                       persist_attn_owner_merges=owner, **WIDE_FIELDS))
    one = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "one", attn_min_keys=48))
    solo = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "solo", attn_min_keys=8,
                                       persist_attn_solo_keys=48))
    assert {a["SOLO"] for a in attention_tile_args(open(tmp_path / "solo" / "src" / "model.cu").read())} == {"48"}
    tokens = np.random.default_rng(13).integers(0, model.config.vocab_size, size=160).tolist()
    got = stepped_logits(solo, tokens)
    assert np.array_equal(got[:48], stepped_logits(one, tokens[:48]))
    assert np.array_equal(got[48:], stepped_logits(many, tokens)[48:])
    assert not np.array_equal(got[48:], stepped_logits(one, tokens)[48:])  # (one split past 48 rows sums otherwise)
    assert solo.generate(tokens[:20], 60) == stepped_greedy(solo, tokens[:20], 60)


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
    assert_same_bits(model, eng, base, 7, 300, 100)


@pytest.mark.parametrize("most,head_dim,heads,kv_heads", [(2, 64, 4, 2), (4, 64, 16, 4), (16, 64, 4, 1),
                                                           (2, 128, 4, 2), (3, 128, 4, 1)])
def test_consumer_merges_compute_the_same_bits(tmp_path, monkeypatch, most, head_dim, heads, kv_heads):
    # persist_attn_consumer_merges: while 2 to `most` splits are in use, the output projection's tiles merge the
    # splits' tagged partials into their x themselves (merge_partials), in the order the last split to arrive did:
    # with 8 keys a split at least, one launch over 300 positions runs 1 to 38 splits in use, so the consumer merges
    # from position 8 on and the last to arrive again past `most` splits; every logit the same bits as without it.
    # 64- and 128-wide heads (a lane's 2 or 4 elements a head), 4 query heads (warps 4-7 with none) or 16, 1 to 4 a
    # KV head (attention's output tagged: the wide fields; owner merges off, which consumer merges refuse)
    model, _ = compile_tiny(tmp_path, "llama", max_position_embeddings=512, hidden_size=head_dim * heads,
                            intermediate_size=384, num_attention_heads=heads, num_key_value_heads=kv_heads)
    fields = dict(WIDE_FIELDS, attn_min_keys=8, persist_tagged=2, persist_attn_owner_merges=0)
    base = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "base", **fields))
    art = compile_variant(model, tmp_path, monkeypatch, persist_attn_consumer_merges=most)
    assert "kiec::ConsumerMerge<" in open(os.path.join(art, "src", "model.cu")).read()
    eng = kiec.Engine(art)
    assert_same_bits(model, eng, base, 11, 300, 100)


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
    assert_same_bits(model, eng, base, 9, 300, 100)


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
    assert_same_bits(model, eng, base, 7, 300, 100)


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
    assert_same_bits(model, eng, base, 11, 600, 300)


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
    assert_same_bits(model, eng, base, 13, 600, 300)


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
    assert_same_bits(model, eng, base, 12, 600, 300)


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
    assert_same_bits(model, eng, base, 13, 600, 300)
