"""The peers kiec is measured against: a gpt-fast-style decoder in plain torch with a static KV cache,
run eagerly and under torch.compile(mode="reduce-overhead", fullgraph=True) (CUDA graphs), on the same
weights as the kiec artifact (read from the same kiec.Model)."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def _layer_kernels(graph):
    """The parameters of each layer, read off the fused program (so any frontend's names work): per layer
    the QKV GEMV, the attention, the O GEMV, the gate/up GEMV and the down GEMV."""
    from kiec.ir.passes import pipeline
    from kiec.ir.passes.program import AttentionKernel, EmbedKernel, GemvKernel

    ks = pipeline.run(graph).kernels
    pattern = [GemvKernel, AttentionKernel, GemvKernel, GemvKernel, GemvKernel]
    body = ks[1:-1]
    if not (isinstance(ks[0], EmbedKernel) and getattr(ks[-1], "epilogue", "") == "argmax" and len(body) % 5 == 0
            and all(isinstance(k, pattern[i % 5]) for i, k in enumerate(body))
            and all(body[i + 3].epilogue == "silu_mul" for i in range(0, len(body), 5))):
        raise NotImplementedError("the torch baseline covers Llama-style layers (RMSNorm, GQA, SwiGLU)")
    layers = [tuple(body[i:i + 5]) for i in range(0, len(body), 5)]
    return layers, dict(embed=ks[0].table, head=ks[-1].weights[0], norm=ks[-1].norm.weight)


class TorchDecoder(torch.nn.Module):
    def __init__(self, model, max_seq_len: int, device="cuda", dtype=torch.bfloat16):
        super().__init__()
        cfg = self.cfg = model.config
        if cfg.sliding_window or cfg.rope.partial_rotary_factor != 1.0:
            raise NotImplementedError("the torch baseline covers Llama/Qwen2/Qwen3-style layers")
        w = lambda n: model.weights[n].to(device=device, dtype=dtype)  # noqa: E731
        layers, final = _layer_kernels(model.graph)
        self.embed = w(final["embed"])
        self.lm_head = self.embed if final["head"] == final["embed"] else w(final["head"])
        self.norm = w(final["norm"])
        self.layers = []
        for qkv, attn, o, mlp, down in layers:
            self.layers.append(dict(
                ln1=w(qkv.norm.weight), qkv=torch.cat([w(n) for n in qkv.weights]),
                qkv_bias=torch.cat([w(n) for n in qkv.biases]) if qkv.biases else None, o=w(o.weights[0]),
                ln2=w(mlp.norm.weight), q_norm=w(attn.q_norm.weight) if attn.q_norm else None,
                k_norm=w(attn.k_norm.weight) if attn.k_norm else None,
                gate_up=torch.cat([w(n) for n in mlp.weights]), down=w(down.weights[0])))
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
