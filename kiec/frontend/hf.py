"""Hugging Face directories: config.json + *.safetensors (+ tokenizer files) of the Llama family."""
from __future__ import annotations

import json
import os

from safetensors import safe_open

from kiec.errors import KiecError
from kiec.models.llama import LlamaConfig, RopeConfig

ARCHS = {  # model_type -> architectures class name
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "mistral": "MistralForCausalLM",
}


class _Fields:
    """Reads config.json fields; a missing one is an error naming the file and field, never a default."""

    def __init__(self, cfg: dict, path: str):
        self.cfg, self.path = cfg, path

    def need(self, key: str, typ=None):
        if key not in self.cfg or self.cfg[key] is None:
            raise KiecError(f"{self.path}: missing field '{key}'")
        v = self.cfg[key]
        if typ is not None and not isinstance(v, typ):
            raise KiecError(f"{self.path}: field '{key}' is {v!r}, expected {typ.__name__ if isinstance(typ, type) else typ}")
        return v

    def get(self, key: str, default):
        v = self.cfg.get(key)
        return default if v is None else v


def _rope(f: _Fields, notes: list[str]) -> RopeConfig:
    # transformers >= 5 writes rope_parameters (theta inside); older configs write rope_theta + rope_scaling.
    params = dict(f.cfg.get("rope_parameters") or f.cfg.get("rope_scaling") or {})
    if "rope_theta" in params:
        theta = params["rope_theta"]
    else:
        theta = f.need("rope_theta", (int, float))
    kind = params.get("rope_type", params.get("type", "default"))
    partial = float(f.get("partial_rotary_factor", params.get("partial_rotary_factor", 1.0)))
    where = f"{f.path}: rope_type '{kind}'"
    if kind == "default":
        return RopeConfig(float(theta), partial_rotary_factor=partial)
    if kind == "linear":
        return RopeConfig(float(theta), "linear", float(_req(params, "factor", where)), partial_rotary_factor=partial)
    if kind == "llama3":
        return RopeConfig(float(theta), "llama3", float(_req(params, "factor", where)),
                          float(_req(params, "low_freq_factor", where)), float(_req(params, "high_freq_factor", where)),
                          int(_req(params, "original_max_position_embeddings", where)), partial)
    raise KiecError(f"{where} is not supported (kiec has default, linear, llama3)")


def _req(d: dict, key: str, where: str):
    if d.get(key) is None:
        raise KiecError(f"{where} needs '{key}'")
    return d[key]


# HF hidden_act -> kiec Activation.fn
ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh",
               "gelu_new": "gelu_tanh", "relu": "relu"}


def config_from_hf(cfg: dict, path: str) -> tuple[LlamaConfig, list[str]]:
    f, notes = _Fields(cfg, path), []
    model_type = cfg.get("model_type")
    if model_type not in ARCHS:
        archs = cfg.get("architectures")
        raise KiecError(f"{path}: unsupported architecture model_type={model_type!r} architectures={archs} "
                        f"(kiec supports {', '.join(ARCHS)})")
    hidden, heads = f.need("hidden_size", int), f.need("num_attention_heads", int)
    if cfg.get("head_dim") is not None:
        head_dim = f.need("head_dim", int)
    elif model_type in ("llama", "mistral", "qwen2"):  # these architectures define head_dim = hidden / heads
        head_dim = hidden // heads
        notes.append(f"head_dim = hidden_size / num_attention_heads = {head_dim} (not in config.json)")
    else:
        head_dim = f.need("head_dim", int)
    for key in ("mlp_bias",) + (("attention_bias",) if model_type != "qwen2" else ()):
        if cfg.get(key):
            raise KiecError(f"{path}: {key}=true is not supported for {model_type}")
    if cfg.get("use_sliding_window") or "sliding_attention" in (cfg.get("layer_types") or []):
        raise KiecError(f"{path}: per-layer sliding window (use_sliding_window / layer_types) is not supported")
    eos = cfg.get("eos_token_id")
    eos = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
    return LlamaConfig(
        arch=model_type,
        vocab_size=f.need("vocab_size", int),
        hidden_size=hidden,
        intermediate_size=f.need("intermediate_size", int),
        num_layers=f.need("num_hidden_layers", int),
        num_heads=heads,
        num_kv_heads=f.get("num_key_value_heads", heads),
        head_dim=head_dim,
        rms_norm_eps=float(f.need("rms_norm_eps", (int, float))),
        rope=_rope(f, notes),
        max_position_embeddings=f.need("max_position_embeddings", int),
        tie_word_embeddings=bool(f.get("tie_word_embeddings", False)),
        qkv_bias=model_type == "qwen2",
        qk_norm=model_type == "qwen3",
        sliding_window=int(f.get("sliding_window", 0)) if model_type == "mistral" else 0,
        hidden_act=_activation(f.need("hidden_act", str), path),
        bos_token_id=cfg.get("bos_token_id"),
        eos_token_ids=eos,
    ), notes


_ST_DTYPES = {"F32": "f32", "BF16": "bf16", "F16": "f16"}


def _activation(name: str, path: str) -> str:
    if name not in ACTIVATIONS:
        raise KiecError(f"{path}: hidden_act '{name}' is not supported (kiec has {', '.join(ACTIVATIONS)})")
    return ACTIVATIONS[name]


def safetensors_index(directory: str) -> dict[str, tuple[str, tuple[int, ...], str]]:
    """tensor name -> (file, shape, kiec dtype or the safetensors one), read from the headers only."""
    files = sorted(fn for fn in os.listdir(directory) if fn.endswith(".safetensors"))
    if not files:
        raise KiecError(f"{directory}: no *.safetensors files")
    index = {}
    for fn in files:
        path = os.path.join(directory, fn)
        try:
            with safe_open(path, "pt") as st:
                for name in st.keys():
                    sl = st.get_slice(name)
                    index[name] = (path, tuple(sl.get_shape()), _ST_DTYPES.get(sl.get_dtype(), sl.get_dtype()))
        except Exception as e:  # safetensors raises its own error types for a bad header
            raise KiecError(f"{path}: cannot read safetensors header: {e}") from None
    return index


def tensor_loader(path: str, name: str):
    def load():
        with safe_open(path, "pt") as st:
            return st.get_tensor(name)
    return load


def read_config(directory: str) -> dict:
    path = os.path.join(directory, "config.json")
    if not os.path.isfile(path):
        raise KiecError(f"{directory}: no config.json (an HF model directory needs config.json + *.safetensors)")
    try:
        with open(path) as fh:
            return json.load(fh)
    except json.JSONDecodeError as e:
        raise KiecError(f"{path}: not valid JSON: {e}") from None


def load_hf(directory: str, dtype: str | None, max_seq_len: int | None):
    from kiec.frontend import assemble
    from kiec.model import TokenizerInfo

    raw = read_config(directory)
    cfg, notes = config_from_hf(raw, os.path.join(directory, "config.json"))
    index = safetensors_index(directory)
    loaders = {n: (shape, tensor_loader(path, n)) for n, (path, shape, _) in index.items()}
    embed = index.get("model.embed_tokens.weight")
    native = embed[2] if embed else "f32"
    tok = None
    if os.path.isfile(os.path.join(directory, "tokenizer.json")):
        template = None
        tc = os.path.join(directory, "tokenizer_config.json")
        if os.path.isfile(tc):
            with open(tc) as fh:
                template = json.load(fh).get("chat_template")
        tok = TokenizerInfo("hf", directory, cfg.bos_token_id, cfg.eos_token_ids, template)
    name = os.path.basename(os.path.normpath(directory))
    return assemble(name, directory, cfg, loaders, dtype or (native if native in ("f32", "bf16", "f16") else "f32"),
                    max_seq_len, tok, notes)
