"""Helpers of the compile tests (tests/cpu/test_compile*.py): a tiny model, its persistent kernel's generated source
with some of the sm_90 table's fields replaced, and its compile (also the GPU tests': tests/gpu/persistent_tiny.py)."""
import kiec
from tests.tiny_hf import make_tiny_hf


def load_tiny(tmp_path, family, **overrides):
    """A tiny model of `family` (tests/tiny_hf.py, with those config overrides) saved in tmp_path / "hf" and loaded in
    bf16, its KV cache as long as its max_position_embeddings (256 unless overridden)."""
    make_tiny_hf(tmp_path / "hf", family, **overrides)
    return kiec.load(str(tmp_path / "hf"), dtype="bf16", max_seq_len=overrides.get("max_position_embeddings", 256))


def tiny_llama(tmp_path):
    """A tiny llama loaded in bf16 (load_tiny's)."""
    return load_tiny(tmp_path, "llama")


def persistent_cu(model, **fields) -> str:
    """The generated model.cu of `model`'s persistent kernel with those fields of the sm_90 table replaced (nothing
    written, no nvcc)."""
    import dataclasses

    from kiec.build import emit_sources
    from kiec.codegen import targets
    t = dataclasses.replace(targets.TARGETS["sm_90"], **fields)
    return emit_sources(model, "persistent", "bf16", t, "x").files["model.cu"]


def splitting(fields: dict) -> dict:
    """Table fields as a test's build takes them: fields that name attn_min_keys (or persist_attn_min_keys_narrow)
    but not persist_attn_solo_keys turn solo off. A test's small attn_min_keys asks for many splits at a tiny model's
    short contexts, which the table's solo bound (256 rows: one split a KV head) would make one."""
    if fields.keys() & {"attn_min_keys", "persist_attn_min_keys_narrow"} and "persist_attn_solo_keys" not in fields:
        return {**fields, "persist_attn_solo_keys": 0}
    return fields


def compile_persistent(model, path, monkeypatch, **fields) -> str:
    """kiec compile (nvcc) of `model`'s persistent kernel into `path` with those fields of the sm_90 table replaced
    (as `splitting` takes them)."""
    import dataclasses

    from kiec.codegen import targets
    monkeypatch.setitem(targets.TARGETS, "sm_90", dataclasses.replace(targets.TARGETS["sm_90"], **splitting(fields)))
    return kiec.compile(model, str(path), mode="persistent")


def tiny_tagged_llama(tmp_path):
    """A tiny llama (hidden 256, 4 heads on 2 KV heads), its program, and the sm_90 table with the widths under which
    it runs a wide model's fields (tagged words, not a narrow model's)."""
    import dataclasses

    from kiec.codegen import targets
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=300)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    wide = dataclasses.replace(targets.TARGETS["sm_90"], persist_tagged_min_width=0, persist_narrow_width=0)
    return model, pipeline.run(model.graph), wide
