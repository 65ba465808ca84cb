"""A tiny model's persistent builds for the GPU tests (tests/gpu/test_persistent*.py): the fields a test's base and
variants compile with, and what the tests read of an artifact's source and trace."""
import os
import re

import numpy as np
import pytest

import kiec
from kiec.codegen import targets
from tests.gpu.test_engine import stepped_logits
from tests.persistent_build import compile_persistent, load_tiny


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


def compile_tiny(tmp_path, family, mode="persistent", **overrides):
    model = load_tiny(tmp_path, family, **overrides)
    return model, kiec.compile(model, str(tmp_path / mode), mode=mode)


def compile_variant(model, tmp_path, monkeypatch, name="variant", **change):
    """The model's persistent artifact in tmp_path / name with the sm_90 table's fields replaced (scripts/variants.py's
    A/B), on top of earlier replacements in the same test (tests/persistent_build.py: compile_persistent)."""
    return compile_persistent(model, tmp_path / name, monkeypatch, **change)


def assert_same_bits(model, eng, base, seed, positions, prompt, n=40):
    """A variant's engine computes its base's bits: each logit of `positions` random tokens (from seed), one
    Engine.step a token, and one launch's n greedy tokens after the first `prompt` of them."""
    tokens = np.random.default_rng(seed).integers(0, model.config.vocab_size, size=positions).tolist()
    assert np.array_equal(stepped_logits(eng, tokens), stepped_logits(base, tokens))
    assert eng.generate(tokens[:prompt], n) == base.generate(tokens[:prompt], n)


def traced_variant(tmp_path, monkeypatch, **change):
    """A tiny llama's persistent engine with those table fields, its 12 greedy tokens checked against the default's,
    and its recording of the step at position 20: (engine, recording, slots, schedule)."""
    model, _ = compile_tiny(tmp_path, "llama")
    base = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "base"))
    eng = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, **change))
    assert eng.generate([1, 2, 3, 4], 12) == base.generate([1, 2, 3, 4], 12)
    return eng, eng.trace(20).astype(np.int64), eng.manifest["trace_slots"], eng.manifest["schedule"]
