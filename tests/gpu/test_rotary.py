"""Rotary forms that no HF config of the other GPU tests makes, on the GPU in both modes: GPT-J's interleaved pairs
(ONNX RotaryEmbedding interleaved=1) and partial rotary (rotary_embedding_dim below the head), loaded from hand-built
opset-23 decoders (tests/onnx_opset23.py; tests/cpu/test_onnx.py checks the interpreter against onnxruntime on
them) and checked against the interpreter's budget over hundreds of positions."""
import os
import re

import pytest

import kiec
from tests.gpu.persistent_tiny import WIDE_FIELDS, assert_same_bits, compile_variant
from tests.gpu.test_engine import budget_check, check_against_interpreter, stepped_greedy
from tests.onnx_opset23 import rope_forms, tiny_opset23
from tests.tiles import attention_tile_args

pytestmark = pytest.mark.gpu


def onnx_tiny(tmp_path, family, rotary, interleaved, max_pos=512, **overrides):
    """A tiny HF model of `family` as an opset-23 ONNX decoder rotating `rotary` features a head (0: all), its pairs
    interleaved or halves, loaded in bf16 for max_pos positions."""
    path = tiny_opset23(tmp_path, family, max_pos=max_pos, rotary_dim=rotary, interleaved=interleaved,
                        max_position_embeddings=max_pos, **overrides)
    model = kiec.load(path, dtype="bf16", max_seq_len=max_pos)
    assert rope_forms(model) == {(rotary or model.config.head_dim, interleaved)}, rope_forms(model)
    return model


# (family, rotary features, interleaved, hidden): llama's hidden 256 over 4 heads is 64 a head (the persistent tile's
# tensor cores), the default 64 is 16 a head (its FMA passes); qwen3 (heads 32 wide) norms q and k before the
# rotation. The persistent tile rotates q's pairs in registers only with every feature rotated (Q_PAIRS), and
# not with head norms and interleaved pairs together: the other cases take the shared-memory rotation
CASES = [("llama", 0, True, 256), ("llama", 32, True, 256), ("llama", 32, False, 256), ("qwen3", 0, True, 256),
         ("llama", 0, True, 64), ("llama", 8, True, 64)]


@pytest.mark.parametrize("mode", ["graph", "persistent"])
@pytest.mark.parametrize("family,rotary,interleaved,hidden", CASES)
def test_rotary_forms_within_budget(tmp_path, family, rotary, interleaved, hidden, mode):
    # 300 positions, each step's logits within the interpreter's budget (a pair rotated the wrong way, or a feature
    # past rotary_dim rotated, moves every logit after the first position far past it), and one launch's greedy
    # tokens a step-by-step run's
    model = onnx_tiny(tmp_path, family, rotary, interleaved, hidden_size=hidden, intermediate_size=384)
    art = kiec.compile(model, str(tmp_path / mode), mode=mode)
    want = (str(rotary or model.config.head_dim), "true" if interleaved else "false")
    if mode == "persistent":
        tile = attention_tile_args(open(os.path.join(art, "src", "model.cu")).read())[0]
        assert (tile["ROTARY"], tile["INTERLEAVED"]) == want, tile
    else:  # graph mode's attention kernel names its rotary: r<features>, i when interleaved
        names = [n for n in os.listdir(os.path.join(art, "src")) if n.startswith("attention_")]
        assert [re.search(r"_r(\d+)(i?)_", n).groups() for n in names] == [(want[0], "i" * interleaved)], names
    eng, ours, r32, r16, tokens = check_against_interpreter(model, art, positions=300)
    what = f"{mode} {family}, {rotary or 'all'} features rotated" + (", interleaved" if interleaved else "")
    budget_check(ours, r32, r16, f"{what}: logits over 300 positions")
    assert eng.generate(tokens[:100], 40) == stepped_greedy(eng, tokens[:100], 40)


@pytest.mark.parametrize("mma", [16, 0])
@pytest.mark.parametrize("pairs", [1, 2, 3])
def test_interleaved_q_pairs_compute_the_same_bits(tmp_path, monkeypatch, mma, pairs):
    # persist_attn_q_pairs with GPT-J's pairs: a thread's pair is two adjacent words, not a word and the one half a
    # head on (QkvPairs' INTERLEAVED). 8 keys a split at least, 600 positions: many splits a head rotate q, the one
    # holding the new row rotates and writes it; the tensor cores' passes and the FMA passes; every logit the same
    # bits as the shared-memory rotation's (q_pairs 0), step by step and in one launch
    model = onnx_tiny(tmp_path, "llama", 0, True, max_pos=1024, hidden_size=256, intermediate_size=384)
    assert model.max_seq_len >= 600
    fields = dict(WIDE_FIELDS, attn_min_keys=8, persist_attn_mma=mma, persist_attn_mma_wide=mma,
                  persist_attn_q_pairs=0)
    base = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "base", **fields))
    eng = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, persist_attn_q_pairs=pairs))
    tiles = {n: attention_tile_args(open(tmp_path / n / "src" / "model.cu").read())[0] for n in ("base", "variant")}
    assert [(t["INTERLEAVED"], t["Q_PAIRS"], t["MMA_KEYS"]) for t in tiles.values()] == \
        [("true", "0", str(mma)), ("true", str(pairs), str(mma))], tiles
    assert_same_bits(model, eng, base, 17, 600, 300)
