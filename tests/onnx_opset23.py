"""A decoder written with the standard opset-23 ops (RMSNormalization, RotaryEmbedding, Attention with past and
present), built with onnx.helper from a tiny HF model's weights: no producer installable here writes these."""
from __future__ import annotations

import numpy as np



def build_opset23(hf_dir: str, path: str, max_pos: int = 64) -> None:
    import onnx
    from onnx import TensorProto as TP
    from onnx import helper, numpy_helper

    import kiec
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
    ang = np.arange(max_pos)[:, None] * np.asarray(rope_op.inv_freq(), np.float32)[None, :]
    cos, sin = init("cos_cache", np.cos(ang)), init("sin_cache", np.sin(ang))
    x = node("Gather", [init("embed", m.weights["model.embed_tokens.weight"].numpy()), "input_ids"])
    eps = cfg.rms_norm_eps
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        hn = node("RMSNormalization", [x, init(p + "ln1", m.weights[p + "input_layernorm.weight"].numpy())], epsilon=eps)
        proj = {}
        for n in "qkv":
            proj[n] = node("MatMul", [hn, w(p + f"self_attn.{n}_proj.weight")])
            if cfg.qkv_bias:
                proj[n] = node("Add", [proj[n], init(p + f"{n}.bias", m.weights[p + f"self_attn.{n}_proj.bias"].numpy())])
        q = node("RotaryEmbedding", [proj["q"], cos, sin, "position_ids"], num_heads=h)
        k = node("RotaryEmbedding", [proj["k"], cos, sin, "position_ids"], num_heads=kvh)
        a = node("Attention", [q, k, proj["v"], "", f"past_key_values.{i}.key", f"past_key_values.{i}.value"],
                 [f"attn_{i}", f"present.{i}.key", f"present.{i}.value"], q_num_heads=h, kv_num_heads=kvh,
                 scale=1.0 / np.sqrt(dh))
        x = node("Add", [x, node("MatMul", [a, w(p + "self_attn.o_proj.weight")])])
        hn = node("RMSNormalization", [x, init(p + "ln2", m.weights[p + "post_attention_layernorm.weight"].numpy())],
                  epsilon=eps)
        gate = node("MatMul", [hn, w(p + "mlp.gate_proj.weight")])
        act = node("Mul", [gate, node("Sigmoid", [gate])])
        x = node("Add", [x, node("MatMul", [node("Mul", [act, node("MatMul", [hn, w(p + "mlp.up_proj.weight")])]),
                                           w(p + "mlp.down_proj.weight")])])
    hn = node("RMSNormalization", [x, init("norm", m.weights["model.norm.weight"].numpy())], epsilon=eps)
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



def ort_steps_opset23(path, tokens, kv_heads, head_dim, layers):
    import onnxruntime as ort
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    past = {f"past_key_values.{i}.{kv}": np.zeros((1, kv_heads, 0, head_dim), np.float32)
            for i in range(layers) for kv in ("key", "value")}
    out = []
    for pos, tok in enumerate(tokens):
        res = dict(zip([o.name for o in sess.get_outputs()],
                       sess.run(None, {"input_ids": np.array([[tok]]), "position_ids": np.array([[pos]]), **past})))
        out.append(res["logits"][0, -1])
        past = {k: res[k.replace("past_key_values", "present")] for k in past}
    return np.stack(out)
