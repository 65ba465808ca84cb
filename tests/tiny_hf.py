"""Tiny random HF models of each Llama-family architecture, saved to a directory by transformers."""
from __future__ import annotations

import torch

COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5, hidden_act="silu")

FAMILIES = {
    "llama": ("LlamaConfig", dict(tie_word_embeddings=False, rope_theta=10000.0)),
    "llama-tied": ("LlamaConfig", dict(tie_word_embeddings=True, rope_theta=10000.0)),
    "llama3-scaled": ("LlamaConfig", dict(tie_word_embeddings=True, rope_theta=500000.0, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 32})),
    "qwen2": ("Qwen2Config", dict(tie_word_embeddings=False, rope_theta=1000000.0)),
    "qwen3": ("Qwen3Config", dict(tie_word_embeddings=True, head_dim=32, rope_theta=1000000.0)),
    "mistral": ("MistralConfig", dict(tie_word_embeddings=False, sliding_window=5, rope_theta=10000.0)),
    # a variant no template covers: its gated MLP goes to plain GEMVs and a TVM-generated kernel
    "llama-gelu": ("LlamaConfig", dict(tie_word_embeddings=True, rope_theta=10000.0, hidden_act="gelu_pytorch_tanh")),
}


def make_tiny_hf(directory, family: str, seed: int = 0, **overrides):
    """Save a random tiny model of `family` to `directory` (fp32 safetensors); returns the HF model."""
    import transformers

    cls_name, extra = FAMILIES[family]
    kw = {**COMMON, **extra, **overrides}  # extra may override COMMON (hidden_act)
    rope = {k: kw.pop(k) for k in ("rope_theta", "rope_scaling") if k in kw}
    params = {"rope_type": "default", **(rope.get("rope_scaling") or {}), "rope_theta": rope["rope_theta"]}
    try:
        config = getattr(transformers, cls_name)(**kw, rope_parameters=params)
    except TypeError:  # transformers < 5 takes rope_theta and rope_scaling
        config = getattr(transformers, cls_name)(**kw, **rope)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").float().eval()
    with torch.no_grad():  # weights large enough that the logits are far from ties
        for name, p in model.named_parameters():
            p.copy_(1.0 + 0.2 * torch.randn_like(p) if "norm" in name else 0.15 * torch.randn_like(p))
    model.save_pretrained(directory, safe_serialization=True)
    return model
