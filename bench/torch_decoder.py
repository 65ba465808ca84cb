"""The peers kiec is measured against: a gpt-fast-style decoder in plain torch with a static KV cache,
run eagerly and under torch.compile(mode="reduce-overhead", fullgraph=True) (CUDA graphs), on the same
weights as the kiec artifact (read from the same kiec.Model)."""
from __future__ import annotations

import torch
import torch.nn.functional as F


class TorchDecoder(torch.nn.Module):
    def __init__(self, model, max_seq_len: int, device="cuda", dtype=torch.bfloat16):
        super().__init__()
        cfg = self.cfg = model.config
        if cfg.sliding_window or cfg.rope.partial_rotary_factor != 1.0:
            raise NotImplementedError("the torch baseline covers Llama/Qwen2/Qwen3-style layers")
        w = lambda n: model.weights[n].to(device=device, dtype=dtype)  # noqa: E731
        self.embed = w("model.embed_tokens.weight")
        self.lm_head = self.embed if cfg.tie_word_embeddings else w("lm_head.weight")
        self.norm = w("model.norm.weight")
        self.layers = []
        for i in range(cfg.num_layers):
            p = f"model.layers.{i}."
            qkv = torch.cat([w(p + f"self_attn.{n}_proj.weight") for n in "qkv"])
            bias = torch.cat([w(p + f"self_attn.{n}_proj.bias") for n in "qkv"]) if cfg.qkv_bias else None
            self.layers.append(dict(
                ln1=w(p + "input_layernorm.weight"), qkv=qkv, qkv_bias=bias, o=w(p + "self_attn.o_proj.weight"),
                ln2=w(p + "post_attention_layernorm.weight"),
                q_norm=w(p + "self_attn.q_norm.weight") if cfg.qk_norm else None,
                k_norm=w(p + "self_attn.k_norm.weight") if cfg.qk_norm else None,
                gate_up=torch.cat([w(p + "mlp.gate_proj.weight"), w(p + "mlp.up_proj.weight")]),
                down=w(p + "mlp.down_proj.weight")))
        shape = (cfg.num_kv_heads, max_seq_len, cfg.head_dim)
        self.k_cache = [torch.zeros(shape, device=device, dtype=dtype) for _ in self.layers]
        self.v_cache = [torch.zeros(shape, device=device, dtype=dtype) for _ in self.layers]
        from kiec.ir.ops import Rope
        rope = Rope("r", "x", "p", cfg.head_dim, cfg.rotary_dim, cfg.rope.theta, False, cfg.rope.scaling,
                    cfg.rope.factor, cfg.rope.low_freq_factor, cfg.rope.high_freq_factor, cfg.rope.original_max_pos)
        inv = torch.tensor(rope.inv_freq(), device=device)
        ang = torch.arange(max_seq_len, device=device, dtype=torch.float32)[:, None] * inv[None, :]
        self.cos, self.sin = ang.cos().to(dtype), ang.sin().to(dtype)  # [S, Dh/2]
        self.arange = torch.arange(max_seq_len, device=device)

    def _rope(self, x, pos):  # x: [T, H, Dh], pos: [T]
        a, b = x.chunk(2, dim=-1)
        cos, sin = self.cos[pos][:, None], self.sin[pos][:, None]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)

    def forward(self, tokens: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        # tokens, pos: [T] (T = 1 when decoding); returns logits [T, vocab]
        cfg = self.cfg
        hq, hkv, dh = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        x = F.embedding(tokens, self.embed)  # [T, D]
        mask = self.arange[None, :] <= pos[:, None]  # [T, S]
        for i, L in enumerate(self.layers):
            h = F.rms_norm(x, (x.shape[-1],), L["ln1"], cfg.rms_norm_eps)
            qkv = F.linear(h, L["qkv"], L["qkv_bias"])
            q, k, v = qkv.split([hq * dh, hkv * dh, hkv * dh], dim=-1)
            q, k = q.view(-1, hq, dh), k.view(-1, hkv, dh)
            if cfg.qk_norm:
                q = F.rms_norm(q, (dh,), L["q_norm"], cfg.rms_norm_eps)
                k = F.rms_norm(k, (dh,), L["k_norm"], cfg.rms_norm_eps)
            q, k = self._rope(q, pos), self._rope(k, pos)
            self.k_cache[i].index_copy_(1, pos, k.transpose(0, 1))
            self.v_cache[i].index_copy_(1, pos, v.view(-1, hkv, dh).transpose(0, 1))
            o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], self.k_cache[i][None], self.v_cache[i][None],
                                               attn_mask=mask[None, None], enable_gqa=True)
            x = x + F.linear(o[0].transpose(0, 1).reshape(-1, hq * dh), L["o"])
            h = F.rms_norm(x, (x.shape[-1],), L["ln2"], cfg.rms_norm_eps)
            gate, up = F.linear(h, L["gate_up"]).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, L["down"])
        return F.linear(F.rms_norm(x, (x.shape[-1],), self.norm, cfg.rms_norm_eps), self.lm_head)


def decode_fn(dec: TorchDecoder, compiled: bool):
    step = lambda tok, pos: dec(tok, pos).argmax(-1)  # noqa: E731
    return torch.compile(step, mode="reduce-overhead", fullgraph=True) if compiled else step
