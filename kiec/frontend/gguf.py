"""GGUF files (llama.cpp): metadata -> LlamaConfig; tensors dequantized to float on demand."""
from __future__ import annotations

import os

import numpy as np
import torch

from kiec.errors import KiecError
from kiec.models.llama import LlamaConfig, RopeConfig

ARCHS = ("llama", "qwen2", "qwen3")
FLOAT_TYPES = ("F32", "F16", "BF16")

# GGUF tensor name (after "blk.N.") -> HF name (after "model.layers.N.")
_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def hf_name(gguf_name: str) -> str | None:
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    parts = gguf_name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in _LAYER_NAMES:
        return f"model.layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}"
    return None


def _field(reader, key: str, path: str, default=None, required=True):
    f = reader.fields.get(key)
    if f is None:
        if required:
            raise KiecError(f"{path}: missing metadata '{key}'")
        return default
    return f.contents()


def config_from_gguf(reader, path: str) -> LlamaConfig:
    arch = _field(reader, "general.architecture", path)
    if arch not in ARCHS:
        raise KiecError(f"{path}: unsupported architecture '{arch}' (kiec reads {', '.join(ARCHS)} GGUF files)")
    a = lambda key, **kw: _field(reader, f"{arch}.{key}", path, **kw)  # noqa: E731
    heads, hidden = int(a("attention.head_count")), int(a("embedding_length"))
    head_dim = int(a("attention.key_length", required=False, default=hidden // heads))
    if any(t.name == "rope_freqs.weight" for t in reader.tensors):
        raise KiecError(f"{path}: tensor 'rope_freqs.weight' (llama3 rope scaling in GGUF) is not supported yet")
    scaling = a("rope.scaling.type", required=False, default="none")
    if scaling not in ("none", "linear"):
        raise KiecError(f"{path}: metadata '{arch}.rope.scaling.type' = '{scaling}' is not supported")
    factor = float(a("rope.scaling.factor", required=False, default=1.0))
    rope = RopeConfig(float(a("rope.freq_base")), scaling, factor,
                      partial_rotary_factor=int(a("rope.dimension_count", required=False, default=head_dim)) / head_dim)
    vocab = a("vocab_size", required=False) or len(reader.fields["tokenizer.ggml.tokens"].data)
    eos = _field(reader, "tokenizer.ggml.eos_token_id", path, required=False)
    return LlamaConfig(
        arch=arch, vocab_size=int(vocab), hidden_size=hidden, intermediate_size=int(a("feed_forward_length")),
        num_layers=int(a("block_count")), num_heads=heads, num_kv_heads=int(a("attention.head_count_kv")),
        head_dim=head_dim, rms_norm_eps=float(a("attention.layer_norm_rms_epsilon")), rope=rope,
        max_position_embeddings=int(a("context_length")),
        tie_word_embeddings=not any(t.name == "output.weight" for t in reader.tensors),
        qkv_bias=arch == "qwen2", qk_norm=arch == "qwen3",
        bos_token_id=_field(reader, "tokenizer.ggml.bos_token_id", path, required=False),
        eos_token_ids=() if eos is None else (int(eos),),
    )


def _unpermute(w: np.ndarray, n_heads: int) -> np.ndarray:
    # llama.cpp stores Q and K of llama-arch models with each head's rotary halves interleaved (for its
    # interleaved rope); undo that so the half-split rope of the HF layout applies.
    return w.reshape(n_heads, w.shape[0] // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tensor_loader(tensor, path: str, unpermute_heads: int = 0):
    from gguf.quants import dequantize

    def load() -> torch.Tensor:
        kind = tensor.tensor_type.name
        try:
            w = dequantize(tensor.data, tensor.tensor_type)
        except NotImplementedError:
            raise KiecError(f"{path}: tensor '{tensor.name}' has type {kind}, which kiec cannot dequantize") from None
        if not np.issubdtype(w.dtype, np.floating):
            raise KiecError(f"{path}: tensor '{tensor.name}' has type {kind}; a weight must be float or quantized")
        if unpermute_heads:
            w = _unpermute(w, unpermute_heads)
        return torch.from_numpy(np.array(w, dtype=np.float32))  # a writable copy, not a view of the mmap

    return load


def load_gguf(path: str, dtype: str | None, max_seq_len: int | None):
    import gguf

    from kiec.frontend import assemble
    from kiec.model import TokenizerInfo

    if not os.path.isfile(path):
        raise KiecError(f"{path}: no such file")
    try:
        reader = gguf.GGUFReader(path)
    except Exception as e:  # the reader raises ValueError/struct errors on a truncated or foreign file
        raise KiecError(f"{path}: not a readable GGUF file: {e}") from None
    cfg = config_from_gguf(reader, path)
    loaders = {}
    for t in reader.tensors:
        name = hf_name(t.name)
        if name is None:
            continue
        heads = 0
        if cfg.arch == "llama" and t.name.endswith(("attn_q.weight", "attn_k.weight")):
            heads = cfg.num_heads if "attn_q" in t.name else cfg.num_kv_heads
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))  # GGUF lists dims innermost first
        loaders[name] = (shape, tensor_loader(t, path, heads))
    tok = None
    if "tokenizer.ggml.tokens" in reader.fields:
        tok = TokenizerInfo("gguf", path, cfg.bos_token_id, cfg.eos_token_ids,
                            _field(reader, "tokenizer.chat_template", path, required=False))
    name = os.path.splitext(os.path.basename(path))[0]
    return assemble(name, path, cfg, loaders, dtype or "f32", max_seq_len, tok)
