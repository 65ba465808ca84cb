"""Bad input: each rejection is one line that names the file, field or tensor."""
import json
import os

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import kiec
from kiec.errors import KiecError
from tests.tiny_hf import make_tiny_hf


def one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg, msg
    return msg


def edit_config(directory, **changes):
    path = os.path.join(directory, "config.json")
    with open(path) as fh:
        cfg = json.load(fh)
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    with open(path, "w") as fh:
        json.dump(cfg, fh)


def edit_weights(directory, fn):
    path = os.path.join(directory, "model.safetensors")
    tensors = load_file(path)
    fn(tensors)
    save_file(tensors, path)
    return path


def test_directory_without_config(tmp_path):
    with pytest.raises(KiecError) as e:
        kiec.load(str(tmp_path))
    assert one_line(e) == f"{tmp_path}: no config.json (an HF model directory needs config.json + *.safetensors)"


def test_unsupported_architecture(tmp_path):
    make_tiny_hf(tmp_path, "llama")
    edit_config(tmp_path, model_type="gpt2", architectures=["GPT2LMHeadModel"])
    with pytest.raises(KiecError) as e:
        kiec.load(str(tmp_path))
    assert "config.json: unsupported architecture model_type='gpt2'" in one_line(e)


def test_missing_config_field_is_not_defaulted(tmp_path):
    make_tiny_hf(tmp_path, "llama")
    edit_config(tmp_path, rms_norm_eps=None)
    with pytest.raises(KiecError) as e:
        kiec.load(str(tmp_path))
    assert one_line(e).endswith("config.json: missing field 'rms_norm_eps'")
    edit_config(tmp_path, rms_norm_eps=1e-5, rope_parameters=None, rope_theta=None)
    with pytest.raises(KiecError, match="missing field 'rope_theta'"):
        kiec.load(str(tmp_path))


def test_unknown_rope_type(tmp_path):
    make_tiny_hf(tmp_path, "llama")
    edit_config(tmp_path, rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0})
    with pytest.raises(KiecError, match="rope_type 'yarn' is not supported"):
        kiec.load(str(tmp_path))


def test_missing_weight(tmp_path):
    make_tiny_hf(tmp_path, "llama")
    path = edit_weights(tmp_path, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(KiecError) as e:
        kiec.load(str(tmp_path))
    assert one_line(e) == f"{tmp_path}: missing weight 'model.layers.1.mlp.up_proj.weight' (expected shape [96, 64])"
    assert os.path.isfile(path)


def test_weight_of_the_wrong_shape(tmp_path):
    make_tiny_hf(tmp_path, "llama")
    edit_weights(tmp_path, lambda t: t.update({"model.layers.0.self_attn.k_proj.weight": torch.zeros(16, 60)}))
    with pytest.raises(KiecError) as e:
        kiec.load(str(tmp_path))
    assert one_line(e) == (f"{tmp_path}: weight 'model.layers.0.self_attn.k_proj.weight' has shape [16, 60], "
                           f"expected [32, 64] from the config")


def write_gguf(path, arch="llama", weight_dtype=np.float32):
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(32)
    shapes = {"token_embd.weight": (32, 8), "output_norm.weight": (8,), "blk.0.attn_norm.weight": (8,),
              "blk.0.attn_q.weight": (8, 8), "blk.0.attn_k.weight": (4, 8), "blk.0.attn_v.weight": (4, 8),
              "blk.0.attn_output.weight": (8, 8), "blk.0.ffn_norm.weight": (8,), "blk.0.ffn_gate.weight": (16, 8),
              "blk.0.ffn_up.weight": (16, 8), "blk.0.ffn_down.weight": (8, 16)}
    for name, shape in shapes.items():
        dt = weight_dtype if name == "blk.0.ffn_up.weight" else np.float32
        w.add_tensor(name, (np.random.default_rng(0).standard_normal(shape) * 10).astype(dt))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def test_gguf_roundtrip_of_a_writer_file(tmp_path):
    m = kiec.load(write_gguf(tmp_path / "ok.gguf"))
    ref = kiec.Reference(m)
    assert np.isfinite(ref.step(3, 0)).all()


def test_gguf_of_an_unsupported_architecture(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", arch="mamba")
    with pytest.raises(KiecError) as e:
        kiec.load(path)
    assert one_line(e) == f"{path}: unsupported architecture 'mamba' (kiec reads llama, qwen2, qwen3 GGUF files)"


def test_gguf_tensor_of_an_unsupported_type(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", weight_dtype=np.int32)
    m = kiec.load(path)  # the header is fine; the tensor is read when needed
    with pytest.raises(KiecError) as e:
        kiec.Reference(m)
    assert one_line(e).startswith(f"{path}: tensor 'blk.0.ffn_up.weight' has type I32")


def test_truncated_gguf(tmp_path):
    good = write_gguf(tmp_path / "m.gguf")
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(open(good, "rb").read()[:100])
    with pytest.raises(KiecError, match=f"{bad}: not a readable GGUF file"):
        kiec.load(str(bad))


def test_token_and_position_out_of_range(tmp_path):
    make_tiny_hf(tmp_path, "llama")
    ref = kiec.Reference(kiec.load(str(tmp_path), max_seq_len=8))
    with pytest.raises(KiecError, match=r"token id 256 is out of range \[0, 256\)"):
        ref.step(256, 0)
    with pytest.raises(KiecError, match="position 8 is past max_seq_len 8"):
        ref.step(1, 8)
    with pytest.raises(KiecError, match="exceeds max_seq_len 8"):
        ref.generate([1, 2, 3], max_new_tokens=6)


@pytest.mark.parametrize("n", [0, -3, 2.5, True])
def test_max_new_tokens_below_one_or_not_an_integer_is_refused(tmp_path, n):
    # 0 and negatives once returned [] from Reference.generate (and the graph-mode host draws) while the runtime
    # refused them: kiec.sampling.check_request is the one check every generate path makes first
    make_tiny_hf(tmp_path, "llama")
    ref = kiec.Reference(kiec.load(str(tmp_path), max_seq_len=8))
    with pytest.raises(KiecError) as e:
        ref.generate([1, 2, 3], max_new_tokens=n)
    assert one_line(e) == f"max_new_tokens must be an integer of at least 1, got {n!r}"
    assert ref.generate([1, 2, 3], max_new_tokens=1) == ref.generate([1, 2, 3], max_new_tokens=2)[:1]


@pytest.mark.parametrize("seq", [0, -5])
def test_a_max_seq_len_below_one_is_refused_by_every_frontend_and_the_cli(tmp_path, seq):
    # 0 once fell through `max_seq_len or default` and built the default's 4096-row cache
    make_tiny_hf(tmp_path / "hf", "llama")
    for path in ("smollm2-135m", str(tmp_path / "hf"), write_gguf(tmp_path / "m.gguf")):
        with pytest.raises(KiecError) as e:
            kiec.load(path, max_seq_len=seq)
        assert one_line(e) == f"max_seq_len must be positive, got {seq}"
    from click.testing import CliRunner
    from kiec.cli import main
    out = tmp_path / "art"
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "hf"), "-o", str(out), "--max-seq-len", str(seq)])
    assert r.exit_code != 0 and f"max_seq_len must be positive, got {seq}" in r.output, r.output
    assert not out.exists()
