"""Decoders built with onnx.helper from a tiny HF model's weights, for what no producer installable here writes:
- the standard opset-23 ops (RMSNormalization, RotaryEmbedding, Attention with past and present);
- the same decoder decomposed into primitive ops (style "decomposed"): RMSNorm between fp32 Casts, RoPE as
  Slice/Neg/Concat with cos/sin from the positions, optionally on the first `rotary_dim` features only
  (partial rotary), attention as MatMul/Softmax/MatMul over the GQA-repeated past ++ new."""
from __future__ import annotations

import numpy as np



def tiny_opset23(tmp_path, family: str, max_pos: int = 64, style: str = "opset23", rotary_dim: int = 0,
                 interleaved: bool = False, **overrides) -> str:
    """A tiny random HF model of `family` (tests/tiny_hf.py, with those config overrides) saved in tmp_path / "hf" and
    its decoder built by build_opset23 (the other arguments its) at tmp_path / "m.onnx"; returns that path."""
    from tests.tiny_hf import make_tiny_hf
    make_tiny_hf(tmp_path / "hf", family, **overrides)
    path = str(tmp_path / "m.onnx")
    build_opset23(str(tmp_path / "hf"), path, max_pos=max_pos, style=style, rotary_dim=rotary_dim,
                  interleaved=interleaved)
    return path


def rope_forms(model) -> set[tuple[int, bool]]:
    """The (rotary features, interleaved) of a loaded model's Rope ops: what its RotaryEmbedding nodes became."""
    return {(op.rotary_dim, op.interleaved) for op in model.graph.ops if type(op).__name__ == "Rope"}


def build_opset23(hf_dir: str, path: str, max_pos: int = 64, style: str = "opset23", rotary_dim: int = 0,
                  interleaved: bool = False) -> None:
    """The decoder of the HF model in hf_dir as ONNX at `path`. rotary_dim: the features each head rotates (0: all);
    interleaved (style opset23 only): RotaryEmbedding's interleaved=1, GPT-J's pairs 2i, 2i + 1, on the same weights
    (a different function from the HF model's, which onnxruntime and kiec both compute)."""
    import onnx
    from onnx import TensorProto as TP
    from onnx import helper, numpy_helper

    import kiec
    if interleaved and style != "opset23":
        raise ValueError(f"interleaved rotary: style opset23 only, not {style!r}")
    m = kiec.load(hf_dir, dtype="f32")
    cfg = m.config
    h, kvh, dh = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    inits, nodes = [], []

    def init(name, array):
        inits.append(numpy_helper.from_array(np.ascontiguousarray(np.asarray(array, np.float32)), name))
        return name

    def w(name):  # HF Linear weight [N, K] -> MatMul's [K, N]
        return init(name + ".T", m.weights[name].t().numpy())

    def node(op, ins, outs=None, **attrs):
        outs = outs or [f"{op.lower()}_{len(nodes)}"]
        nodes.append(helper.make_node(op, ins, outs, name=f"/{op}_{len(nodes)}", **attrs))
        return outs[0]

    rope_op = next(o for o in m.graph.ops if type(o).__name__ == "Rope")
    rot = rotary_dim or dh
    inv_freq = np.asarray(rope_op.theta ** (-np.arange(0, rot, 2) / rot), np.float32)
    ang = np.arange(max_pos)[:, None] * inv_freq[None, :]
    cos, sin = init("cos_cache", np.cos(ang)), init("sin_cache", np.sin(ang))
    x = node("Gather", [init("embed", m.weights["model.embed_tokens.weight"].numpy()), "input_ids"])
    eps = cfg.rms_norm_eps

    def ints(name, values):
        inits.append(numpy_helper.from_array(np.asarray(values, np.int64), name))
        return name

    def rmsnorm(x, weight):
        if style == "opset23":
            return node("RMSNormalization", [x, weight], epsilon=eps)
        xc = node("Cast", [x], to=TP.FLOAT)
        var = node("ReduceMean", [node("Pow", [xc, init(f"two_{len(nodes)}", 2.0)]), ints(f"ax_{len(nodes)}", [-1])])
        r = node("Reciprocal", [node("Sqrt", [node("Add", [var, init(f"eps_{len(nodes)}", eps)])])])
        return node("Mul", [weight, node("Cast", [node("Mul", [xc, r])], to=TP.FLOAT)])

    if style == "decomposed":  # cos/sin [1, 1, S, rot] from the positions, as torch.onnx computes them
        freqs = node("Mul", [node("Unsqueeze", [node("Cast", ["position_ids"], to=TP.FLOAT), ints("ax_last", [-1])]),
                             init("inv_freq", inv_freq)])
        emb = node("Concat", [freqs, freqs], axis=-1)
        cos4 = node("Unsqueeze", [node("Cos", [emb]), ints("ax_1", [1])])
        sin4 = node("Unsqueeze", [node("Sin", [emb]), ints("ax_1b", [1])])

    def heads(t, n):  # [1, S, n*dh] -> [1, n, S, dh]
        return node("Transpose", [node("Reshape", [t, ints(f"shape_{len(nodes)}", [1, -1, n, dh])])], perm=[0, 2, 1, 3])

    def last(t, lo, hi):
        return node("Slice", [t, ints(f"s_{len(nodes)}", [lo]), ints(f"e_{len(nodes)}", [hi]), ints(f"a_{len(nodes)}", [-1])])

    def rope(t):  # x * cos + rotate_half(x) * sin on the first `rot` features, the rest passed through
        xr = last(t, 0, rot) if rot < dh else t
        half = node("Concat", [node("Neg", [last(xr, rot // 2, 1 << 30)]), last(xr, 0, rot // 2)], axis=-1)
        out = node("Add", [node("Mul", [xr, cos4]), node("Mul", [half, sin4])])
        return node("Concat", [out, last(t, rot, 1 << 30)], axis=-1) if rot < dh else out

    def repeat(t):  # [1, kvh, T, dh] -> [1, h, T, dh]: each KV head once per query head of its group
        e = node("Expand", [node("Unsqueeze", [t, ints(f"u_{len(nodes)}", [2])]), ints(f"x_{len(nodes)}", [1, 1, h // kvh, 1, 1])])
        return node("Reshape", [e, ints(f"r_{len(nodes)}", [1, h, -1, dh])])

    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        hn = rmsnorm(x, init(p + "ln1", m.weights[p + "input_layernorm.weight"].numpy()))
        proj = {}
        for n in "qkv":
            proj[n] = node("MatMul", [hn, w(p + f"self_attn.{n}_proj.weight")])
            if cfg.qkv_bias:
                proj[n] = node("Add", [proj[n], init(p + f"{n}.bias", m.weights[p + f"self_attn.{n}_proj.bias"].numpy())])
        if cfg.qk_norm:  # Qwen3: RMSNorm over each head, on a [1, S, heads, dh] view
            for n, nh in (("q", h), ("k", kvh)):
                view = node("Reshape", [proj[n], ints(f"qk_{len(nodes)}", [1, -1, nh, dh])])
                normed = rmsnorm(view, init(p + f"{n}_norm", m.weights[p + f"self_attn.{n}_norm.weight"].numpy()))
                proj[n] = node("Reshape", [normed, ints(f"flat_{len(nodes)}", [1, -1, nh * dh])])
        if style == "opset23":
            rot_attrs = dict(interleaved=int(interleaved), **({"rotary_embedding_dim": rot} if rot < dh else {}))
            q = node("RotaryEmbedding", [proj["q"], cos, sin, "position_ids"], num_heads=h, **rot_attrs)
            k = node("RotaryEmbedding", [proj["k"], cos, sin, "position_ids"], num_heads=kvh, **rot_attrs)
            a = node("Attention", [q, k, proj["v"], "", f"past_key_values.{i}.key", f"past_key_values.{i}.value"],
                     [f"attn_{i}", f"present.{i}.key", f"present.{i}.value"], q_num_heads=h, kv_num_heads=kvh,
                     scale=1.0 / np.sqrt(dh))
        else:
            q, k = rope(heads(proj["q"], h)), rope(heads(proj["k"], kvh))
            kc = node("Concat", [f"past_key_values.{i}.key", k], [f"present.{i}.key"], axis=-2)
            vc = node("Concat", [f"past_key_values.{i}.value", heads(proj["v"], kvh)], [f"present.{i}.value"], axis=-2)
            s = init(f"qk_scale_{i}", dh ** -0.25)  # split between q and K^T, as torch writes it
            kt = node("Transpose", [repeat(kc)], perm=[0, 1, 3, 2])
            probs = node("Softmax", [node("MatMul", [node("Mul", [q, s]), node("Mul", [kt, s])])], axis=-1)
            o = node("MatMul", [probs, repeat(vc)])
            a = node("Reshape", [node("Transpose", [o], perm=[0, 2, 1, 3]), ints(f"o_{i}", [1, -1, h * dh])])
        x = node("Add", [x, node("MatMul", [a, w(p + "self_attn.o_proj.weight")])])
        hn = rmsnorm(x, init(p + "ln2", m.weights[p + "post_attention_layernorm.weight"].numpy()))
        gate = node("MatMul", [hn, w(p + "mlp.gate_proj.weight")])
        act = node("Mul", [gate, node("Sigmoid", [gate])])
        x = node("Add", [x, node("MatMul", [node("Mul", [act, node("MatMul", [hn, w(p + "mlp.up_proj.weight")])]),
                                           w(p + "mlp.down_proj.weight")])])
    hn = rmsnorm(x, init("norm", m.weights["model.norm.weight"].numpy()))
    head = "model.embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight"
    node("MatMul", [hn, w(head)], ["logits"])
    ins = [helper.make_tensor_value_info("input_ids", TP.INT64, [1, "s"]),
           helper.make_tensor_value_info("position_ids", TP.INT64, [1, "s"])]
    outs = [helper.make_tensor_value_info("logits", TP.FLOAT, [1, "s", cfg.vocab_size])]
    for i in range(cfg.num_layers):
        for kv in ("key", "value"):
            ins.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kv}", TP.FLOAT, [1, kvh, "p", dh]))
            outs.append(helper.make_tensor_value_info(f"present.{i}.{kv}", TP.FLOAT, [1, kvh, "t", dh]))
    model = helper.make_model(helper.make_graph(nodes, "decoder", ins, outs, inits),
                              opset_imports=[helper.make_opsetid("", 23)])
    onnx.save(model, path)
