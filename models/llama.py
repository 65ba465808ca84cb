"""The Llama family: Llama 2/3, Qwen2/2.5 (qkv bias), Qwen3 (q/k norm), Mistral (sliding window), SmolLM.

One config dataclass, the named configs of the registry, and the decode-step graph. Parameter names are
the Hugging Face checkpoint's, so that a checkpoint loads without renaming.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from kiec.ir.builder import Builder
from kiec.ir.graph import Graph
from kiec.ir.interp import attention_scale
from kiec.ir.ops import Activation, Add, Argmax, Attention, Embedding, KVAppend, Linear, Mul, RMSNorm, Rope
from kiec.ir.types import TensorType


@dataclass(frozen=True)
class RopeConfig:
    theta: float
    scaling: str = "none"  # none | linear | llama3
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 1.0
    original_max_pos: int = 0
    partial_rotary_factor: float = 1.0


@dataclass(frozen=True)
class LlamaConfig:
    arch: str  # llama | qwen2 | qwen3 | mistral
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope: RopeConfig
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_bias: bool = False
    qk_norm: bool = False
    sliding_window: int = 0  # 0: full attention
    hidden_act: str = "silu"
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = field(default_factory=tuple)

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.rope.partial_rotary_factor)

    def param_shapes(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """Every parameter: HF name -> (shape, shard)."""
        d, q, kv, f = self.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim, \
            self.intermediate_size
        shapes = {"model.embed_tokens.weight": ((self.vocab_size, d), "replicated")}
        for i in range(self.num_layers):
            p = f"model.layers.{i}."
            shapes[p + "input_layernorm.weight"] = ((d,), "replicated")
            for name, n in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
                shapes[p + f"self_attn.{name}.weight"] = ((n, d), "rows")
                if self.qkv_bias:
                    shapes[p + f"self_attn.{name}.bias"] = ((n,), "rows")
            if self.qk_norm:
                shapes[p + "self_attn.q_norm.weight"] = ((self.head_dim,), "replicated")
                shapes[p + "self_attn.k_norm.weight"] = ((self.head_dim,), "replicated")
            shapes[p + "self_attn.o_proj.weight"] = ((d, q), "cols")
            shapes[p + "post_attention_layernorm.weight"] = ((d,), "replicated")
            shapes[p + "mlp.gate_proj.weight"] = ((f, d), "rows")
            shapes[p + "mlp.up_proj.weight"] = ((f, d), "rows")
            shapes[p + "mlp.down_proj.weight"] = ((d, f), "cols")
        shapes["model.norm.weight"] = ((d,), "replicated")
        if not self.tie_word_embeddings:
            shapes["lm_head.weight"] = ((self.vocab_size, d), "rows")
        return shapes


def build_graph(cfg: LlamaConfig, name: str, dtype: str, max_seq_len: int) -> Graph:
    """The decode step: (token, pos) -> logits [vocab], next token (greedy)."""
    b = Builder(name)
    token = b.input("token", TensorType((), "i32"))
    pos = b.input("pos", TensorType((), "i32"))
    for pname, (shape, shard) in cfg.param_shapes().items():
        b.param(pname, shape, dtype, shard)
    rope = dict(head_dim=cfg.head_dim, rotary_dim=cfg.rotary_dim, theta=cfg.rope.theta, scaling=cfg.rope.scaling,
                factor=cfg.rope.factor, low_freq_factor=cfg.rope.low_freq_factor,
                high_freq_factor=cfg.rope.high_freq_factor, original_max_pos=cfg.rope.original_max_pos)
    eps = cfg.rms_norm_eps

    x = b.emit(Embedding, "x", table="model.embed_tokens.weight", index=token)  # x: [D]
    for i in range(cfg.num_layers):
        p, L = f"model.layers.{i}.", f"L{i}."
        cache = b.state(f"kv.{i}", TensorType((2, cfg.num_kv_heads, max_seq_len, cfg.head_dim), dtype))
        h = b.emit(RMSNorm, L + "attn_in", x=x, weight=p + "input_layernorm.weight", eps=eps)
        qkv = {}
        for n in ("q", "k", "v"):
            bias = p + f"self_attn.{n}_proj.bias" if cfg.qkv_bias else None
            qkv[n] = b.emit(Linear, L + n, x=h, weight=p + f"self_attn.{n}_proj.weight", bias=bias)  # [H*Dh]
        q, k, v = qkv["q"], qkv["k"], qkv["v"]
        if cfg.qk_norm:
            q = b.emit(RMSNorm, L + "q_normed", x=q, weight=p + "self_attn.q_norm.weight", eps=eps, group=cfg.head_dim)
            k = b.emit(RMSNorm, L + "k_normed", x=k, weight=p + "self_attn.k_norm.weight", eps=eps, group=cfg.head_dim)
        q = b.emit(Rope, L + "q_rot", x=q, pos=pos, **rope)
        k = b.emit(Rope, L + "k_rot", x=k, pos=pos, **rope)
        kv = b.emit(KVAppend, L + "kv", cache=cache, k=k, v=v, pos=pos)
        a = b.emit(Attention, L + "attn", q=q, cache=kv, pos=pos, n_heads=cfg.num_heads,
                   scale=attention_scale(cfg.head_dim), window=cfg.sliding_window)
        o = b.emit(Linear, L + "o", x=a, weight=p + "self_attn.o_proj.weight")
        x = b.emit(Add, L + "x_attn", a=x, b=o)
        h = b.emit(RMSNorm, L + "mlp_in", x=x, weight=p + "post_attention_layernorm.weight", eps=eps)
        gate = b.emit(Linear, L + "gate", x=h, weight=p + "mlp.gate_proj.weight")  # [F]
        up = b.emit(Linear, L + "up", x=h, weight=p + "mlp.up_proj.weight")
        act = b.emit(Mul, L + "act", a=b.emit(Activation, L + "gate_act", x=gate, fn=cfg.hidden_act), b=up)
        down = b.emit(Linear, L + "down", x=act, weight=p + "mlp.down_proj.weight")
        x = b.emit(Add, L + "x_mlp", a=x, b=down)
    h = b.emit(RMSNorm, "final_norm", x=x, weight="model.norm.weight", eps=eps)
    head = "model.embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight"
    logits = b.emit(Linear, "logits", x=h, weight=head)  # [vocab]
    b.output(logits, b.emit(Argmax, "next", x=logits))
    return b.finish()


def _llama3(theta, factor, original_max_pos):
    return RopeConfig(theta, "llama3", factor, 1.0, 4.0, original_max_pos)


# Real shapes of the registry's models (random weights, generated on demand).
CONFIGS: dict[str, LlamaConfig] = {
    "smollm2-135m": LlamaConfig("llama", 49152, 576, 1536, 30, 9, 3, 64, 1e-5, RopeConfig(100000.0), 8192, True,
                                bos_token_id=1, eos_token_ids=(2,)),
    "llama-3.2-1b": LlamaConfig("llama", 128256, 2048, 8192, 16, 32, 8, 64, 1e-5, _llama3(500000.0, 32.0, 8192),
                                131072, True, bos_token_id=128000, eos_token_ids=(128001, 128008, 128009)),
    "llama-3.1-8b": LlamaConfig("llama", 128256, 4096, 14336, 32, 32, 8, 128, 1e-5, _llama3(500000.0, 8.0, 8192),
                                131072, False, bos_token_id=128000, eos_token_ids=(128001, 128008, 128009)),
    "qwen2.5-1.5b": LlamaConfig("qwen2", 151936, 1536, 8960, 28, 12, 2, 128, 1e-6, RopeConfig(1000000.0), 32768,
                                True, qkv_bias=True, eos_token_ids=(151645, 151643)),
    "qwen3-1.7b": LlamaConfig("qwen3", 151936, 2048, 6144, 28, 16, 8, 128, 1e-6, RopeConfig(1000000.0), 40960,
                              True, qk_norm=True, eos_token_ids=(151645, 151643)),
}
