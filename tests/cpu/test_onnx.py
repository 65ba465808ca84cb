"""The ONNX frontend against onnxruntime (the oracle), and against the HF frontend's graph of the same model."""

import numpy as np
import pytest
import torch

import kiec
from kiec.errors import KiecError
from tests.onnx_export import genai_export
from tests.tiny_hf import make_tiny_hf

GENAI_FAMILIES = ["llama", "llama-tied", "qwen2", "qwen3", "mistral"]


def ort_steps(path, tokens, kv_heads, head_dim, layers):
    """Logits of each step of onnxruntime decoding `tokens` one at a time, present fed back as past."""
    import onnxruntime as ort
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    wanted = {i.name for i in sess.get_inputs()}
    kv_type = np.float16 if "float16" in next(i.type for i in sess.get_inputs() if i.name.startswith("past")) \
        else np.float32
    past = {f"past_key_values.{i}.{kv}": np.zeros((1, kv_heads, 0, head_dim), kv_type)
            for i in range(layers) for kv in ("key", "value")}
    out = []
    for pos, tok in enumerate(tokens):
        feeds = {"input_ids": np.array([[tok]], np.int64), "attention_mask": np.ones((1, pos + 1), np.int64),
                 "position_ids": np.array([[pos]], np.int64), **past}
        feeds = {k: v for k, v in feeds.items() if k in wanted}
        res = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        out.append(res["logits"][0, -1].astype(np.float32))
        past = {k: res[k.replace("past_key_values", "present")] for k in past}
    return np.stack(out)


def check_against_onnxruntime(path, what):
    m = kiec.load(path)
    cfg = m.config
    ref = kiec.Reference(m)
    rng = np.random.default_rng()
    prompt = rng.integers(0, cfg.vocab_size, size=9).tolist()
    ids = ref.generate(prompt, max_new_tokens=16)
    seq = prompt + ids
    theirs = ort_steps(path, seq, cfg.num_kv_heads, cfg.head_dim, cfg.num_layers)
    ref.reset()
    ours = np.stack([ref.step(t, p) for p, t in enumerate(seq)])
    diff = np.abs(ours - theirs)
    worst = np.unravel_index(diff.argmax(), diff.shape)
    assert diff.max() <= 1e-4 * np.abs(theirs).max(), f"{what}: max |diff| {diff.max():.3g} at {worst}"
    assert ids == theirs[len(prompt) - 1:-1].argmax(-1).tolist()  # the same greedy tokens


def check_fp16_against_onnxruntime(m, path):
    """Teacher-forced logits over 25 random tokens; onnxruntime computes an fp16 graph in fp16, so its
    rounding, not kiec's, sets the tolerance."""
    cfg = m.config
    seq = np.random.default_rng().integers(0, cfg.vocab_size, size=25).tolist()
    theirs = ort_steps(path, seq, cfg.num_kv_heads, cfg.head_dim, cfg.num_layers)
    ref = kiec.Reference(m)
    ours = np.stack([ref.step(t, p) for p, t in enumerate(seq)])
    assert np.abs(ours - theirs).max() <= 1e-2 * np.abs(theirs).max()
    assert (ours.argmax(-1) == theirs.argmax(-1)).mean() >= 0.9


@pytest.mark.parametrize("family", GENAI_FAMILIES)
def test_genai_export_matches_onnxruntime(tmp_path, family):
    make_tiny_hf(tmp_path / "hf", family)
    check_against_onnxruntime(genai_export(tmp_path / "hf", tmp_path / "onnx"), family)


# MatMulNBits: 4-bit weights, block sizes 32/64/128, symmetric (no zero points) and not. accuracy_level=1
# keeps onnxruntime's product in fp32 over the dequantized weights, so the two must agree as in fp32.
def test_genai_gqa_without_do_rotary_matches_onnxruntime(tmp_path):
    # the builder for DirectML rotates q and k with com.microsoft RotaryEmbedding nodes (no num_heads, fp16
    # caches) and runs GroupQueryAttention with do_rotary 0 on separate q, k, v; onnxruntime's CPU runs it in fp16
    import onnx
    make_tiny_hf(tmp_path / "hf", "llama")
    path = genai_export(tmp_path / "hf", tmp_path / "onnx", precision="fp16", ep="dml")
    gqa = [n for n in onnx.load(path).graph.node if n.op_type == "GroupQueryAttention"]
    assert gqa and all(onnx.helper.get_attribute_value(a) == 0 for n in gqa for a in n.attribute
                       if a.name == "do_rotary")
    m = kiec.load(path)
    assert m.graph.op_counts() == kiec.load(str(tmp_path / "hf")).graph.op_counts() and m.config.rope.theta == 10000.0
    check_fp16_against_onnxruntime(m, path)


@pytest.mark.parametrize("block,symmetric", [(32, "true"), (64, "false"), (128, "false")])
def test_genai_int4_export_matches_onnxruntime(tmp_path, block, symmetric):
    import onnx
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=128, intermediate_size=256)
    path = genai_export(tmp_path / "hf", tmp_path / "onnx", "int4", block_size=block, is_symmetric=symmetric,
                       accuracy_level=1)
    nbits = [n for n in onnx.load(path, load_external_data=False).graph.node if n.op_type == "MatMulNBits"]
    assert nbits and all(onnx.helper.get_attribute_value(a) == block for n in nbits for a in n.attribute
                         if a.name == "block_size")
    assert all((len(n.input) > 3 and n.input[3] != "") == (symmetric == "false") for n in nbits)
    check_against_onnxruntime(path, f"int4 block {block} symmetric={symmetric}")


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3"])
def test_lifted_graph_equals_the_hf_frontends_op_by_op(tmp_path, family):
    make_tiny_hf(tmp_path / "hf", family)
    ours = kiec.load(genai_export(tmp_path / "hf", tmp_path / "onnx"))
    hf = kiec.load(str(tmp_path / "hf"))
    assert len(ours.graph.ops) == len(hf.graph.ops)
    for a, b in zip(ours.graph.ops, hf.graph.ops):
        assert type(a) is type(b), (a, b)
        attrs = lambda op: {f.name: getattr(op, f.name) for f in op.attr_fields()}  # noqa: E731
        for (k, va), vb in zip(attrs(a).items(), attrs(b).values()):
            assert va == pytest.approx(vb, rel=1e-6), (type(a).__name__, k, va, vb)
        for fa, fb in zip(a.inputs(), b.inputs()):
            if fa in ours.graph.params:  # the same weights, transposed and sliced from the packed MatMul
                torch.testing.assert_close(ours.weights[fa], hf.weights[fb], rtol=0, atol=0)


def test_not_a_decoder_names_what_is_missing(tmp_path):
    import onnx
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    onnx.save(helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])),
              str(tmp_path / "relu.onnx"))
    with pytest.raises(KiecError, match="relu.onnx: not a decoder with a KV cache"):
        kiec.load(str(tmp_path / "relu.onnx"))


def test_unliftable_node_is_named_and_nothing_written(tmp_path):
    import onnx
    make_tiny_hf(tmp_path / "hf", "llama")
    path = genai_export(tmp_path / "hf", tmp_path / "onnx")
    m = onnx.load(path, load_external_data=False)
    sig = next(n for n in m.graph.node if n.op_type == "Sigmoid")
    sig.op_type = "HardSigmoid"
    bad = tmp_path / "onnx" / "bad.onnx"
    onnx.save(m, str(bad))
    with pytest.raises(KiecError, match=r"no rule lifts node '/model/layers.0/mlp/act_fn/Sigmoid' \(HardSigmoid, "
                                        r"domain ai.onnx\)"):
        kiec.load(str(bad))
    out = tmp_path / "art"
    from click.testing import CliRunner

    from kiec.cli import main
    r = CliRunner().invoke(main, ["compile", str(bad), "-o", str(out)])
    assert r.exit_code != 0 and "HardSigmoid" in r.output and not out.exists()
    r = CliRunner().invoke(main, ["inspect", str(bad)])
    assert r.exit_code != 0 and "1 nodes no rule lifts:\n  node '/model/layers.0/mlp/act_fn/Sigmoid'" in r.output


def test_truncated_file_and_missing_external_data(tmp_path):
    import os
    make_tiny_hf(tmp_path / "hf", "llama")
    path = genai_export(tmp_path / "hf", tmp_path / "onnx")
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(open(path, "rb").read()[:200])
    with pytest.raises(KiecError, match="cut.onnx: not a readable ONNX model"):
        kiec.load(str(cut))
    os.rename(path + ".data", path + ".data.moved")
    with pytest.raises(KiecError, match=r"needs external data file model.onnx.data, which is missing"):
        kiec.load(path)


def test_scaled_rope_caches_are_refused_by_name(tmp_path):
    make_tiny_hf(tmp_path / "hf", "llama3-scaled")
    path = genai_export(tmp_path / "hf", tmp_path / "onnx")
    with pytest.raises(KiecError, match=r"GroupQueryAttention.*scaled RoPE from ONNX is not supported yet"):
        kiec.load(path)




def test_inspect_and_compile_accept_onnx_paths(tmp_path):
    import shutil

    from click.testing import CliRunner

    from kiec.cli import main
    make_tiny_hf(tmp_path / "hf", "llama")
    path = genai_export(tmp_path / "hf", tmp_path / "onnx")
    r = CliRunner().invoke(main, ["inspect", path])
    assert r.exit_code == 0, r.output
    assert "2 layers, hidden 64, 4 heads / 2 KV heads x 16" in r.output and "12 fused kernels per token" in r.output
    if shutil.which("nvcc"):
        r = CliRunner().invoke(main, ["compile", path, "-o", str(tmp_path / "art")])
        assert r.exit_code == 0, r.output
        assert (tmp_path / "art" / "libkiec_model.so").exists()


@pytest.mark.parametrize("family,style,rotary,interleaved", [(f, s, 0, False) for s in ("opset23", "decomposed")
                                                              for f in ("llama", "llama-tied", "qwen2", "qwen3")]
                         + [("llama", "decomposed", 8, False), ("llama", "opset23", 8, False)]  # 8 of head_dim 16
                         + [("llama", "opset23", 0, True), ("qwen3", "opset23", 0, True),
                            ("llama", "opset23", 8, True)])
def test_hand_built_decoders_match_onnxruntime(tmp_path, family, style, rotary, interleaved):
    # rotary 8: partial rotary (rotary_embedding_dim in the opset-23 op); interleaved: RotaryEmbedding's interleaved=1
    # (GPT-J's pairs), whose rotation kiec's interpreter must compute as onnxruntime does
    from tests.onnx_opset23 import rope_forms, tiny_opset23
    path = tiny_opset23(tmp_path, family, style=style, rotary_dim=rotary, interleaved=interleaved)
    m = kiec.load(path)
    assert m.graph.op_counts() == kiec.load(str(tmp_path / "hf")).graph.op_counts()
    norms = 9 if family == "qwen3" else 5
    assert (f"folded from primitive ops: {norms} RMSNormalization, 4 RotaryEmbedding, 2 Attention" in m.notes) == \
        (style == "decomposed")
    assert rope_forms(m) == {(rotary or m.config.head_dim, interleaved)}
    check_against_onnxruntime(path, f"hand-built {style} {family}" + " interleaved" * interleaved)


@pytest.mark.parametrize("family", ["llama", "llama-tied", "qwen2", "qwen3"])  # mistral: below
def test_optimum_export_matches_onnxruntime(tmp_path, family):
    # Optimum's text-generation-with-past (TorchScript exporter, opset 18): RMSNorm with Div(1, Sqrt), slice
    # bounds and reshape targets computed from shapes, cos/sin from a MatMul of inv_freq and the positions
    from tests.onnx_export import optimum_export
    hf, path = optimum_export(family, tmp_path)
    m = kiec.load(path)
    assert m.graph.op_counts() == kiec.load(hf).graph.op_counts()
    assert any(n.startswith("folded from primitive ops") for n in m.notes)
    check_against_onnxruntime(path, f"optimum {family}")


def test_optimum_fp16_export_matches_onnxruntime(tmp_path):
    # fp16: RMSNorm and the softmax computed in fp32 between Casts; onnxruntime runs it in fp16, so its
    # rounding sets the tolerance
    from tests.onnx_export import optimum_export
    hf, path = optimum_export("llama", tmp_path, dtype="fp16")
    m = kiec.load(path)
    assert {p.type.dtype for p in m.graph.params.values()} == {"f16"}
    assert m.graph.op_counts() == kiec.load(hf).graph.op_counts()
    check_fp16_against_onnxruntime(m, path)


def test_optimum_sliding_window_is_read_from_the_mask(tmp_path):
    from tests.onnx_export import optimum_export
    hf, path = optimum_export("mistral", tmp_path)
    m = kiec.load(path)
    assert m.config.sliding_window == 5 and m.graph.op_counts() == kiec.load(hf).graph.op_counts()
    check_against_onnxruntime(path, "optimum mistral")


def test_kv_inputs_named_as_torch_export_flattens_a_dynamic_cache_load_the_same(tmp_path):
    # past_key_values_key_cache_N / _value_cache_N: the names torch.export gives a flattened DynamicCache
    # (exporting an HF model that way fails with this torch; the names are applied to a torch.onnx export)
    import onnx
    from tests.onnx_export import torch_export
    make_tiny_hf(tmp_path / "hf", "llama")
    path = torch_export(tmp_path / "hf", tmp_path / "m.onnx", opset=18)
    model = onnx.load(path)
    rename = {f"past_key_values.{i}.{k}": f"past_key_values_{k}_cache_{i}" for i in range(2) for k in ("key", "value")}
    for i in model.graph.input:
        i.name = rename.get(i.name, i.name)
    for n in model.graph.node:
        for j, name in enumerate(n.input):
            n.input[j] = rename.get(name, name)
    onnx.save(model, str(tmp_path / "renamed.onnx"))
    a, b = kiec.Reference(kiec.load(path)), kiec.Reference(kiec.load(str(tmp_path / "renamed.onnx")))
    assert [a.step(t, p) for p, t in enumerate([3, 1, 4])][-1].tolist() == \
        [b.step(t, p) for p, t in enumerate([3, 1, 4])][-1].tolist()


def test_inconsistent_kv_shapes_and_unknown_rotary_modes_are_named(tmp_path):
    import onnx
    from tests.onnx_opset23 import tiny_opset23
    path = tiny_opset23(tmp_path, "llama")
    model = onnx.load(path)
    key = next(i for i in model.graph.input if i.name == "past_key_values.1.key")
    key.type.tensor_type.shape.dim[1].dim_value = 3  # the graph's attention has 2 KV heads
    onnx.save(model, str(tmp_path / "kv.onnx"))
    with pytest.raises(KiecError, match=r"input past_key_values.1.key declares 3 on axis 1 \(KV heads\), but the "
                                        r"graph's attention uses 2: inconsistent KV shapes"):
        kiec.load(str(tmp_path / "kv.onnx"))
    model = onnx.load(path)
    rope = next(n for n in model.graph.node if n.op_type == "RotaryEmbedding")
    rope.attribute.append(onnx.helper.make_attribute("interleaved", 2))
    onnx.save(model, str(tmp_path / "rot.onnx"))
    with pytest.raises(KiecError, match=rf"node '{rope.name}' \(RotaryEmbedding, domain ai.onnx\) with interleaved=2"):
        kiec.load(str(tmp_path / "rot.onnx"))


def test_a_decomposition_that_does_not_match_is_named_not_folded(tmp_path):
    import onnx
    from onnx import numpy_helper
    from tests.onnx_opset23 import tiny_opset23
    path = tiny_opset23(tmp_path, "llama", style="decomposed")
    model = onnx.load(path)
    mean = next(n for n in model.graph.node if n.op_type == "ReduceMean")
    axes = next(i for i in model.graph.initializer if i.name == mean.input[1])
    axes.CopyFrom(numpy_helper.from_array(np.array([0], np.int64), axes.name))  # the norm over another axis
    onnx.save(model, path)
    with pytest.raises(KiecError, match=r"node '/(Pow|ReduceMean)_\d+' \((Pow|ReduceMean), domain ai.onnx\)"):
        kiec.load(path)


@pytest.mark.parametrize("opset", [23, 18])  # 18: torch.onnx's default, RMSNorm/RoPE/attention decomposed
@pytest.mark.parametrize("family", ["llama", "llama-tied", "qwen2", "qwen3"])
def test_torch_onnx_export_matches_onnxruntime(tmp_path, family, opset):
    from tests.onnx_export import torch_export
    make_tiny_hf(tmp_path / "hf", family)
    path = torch_export(tmp_path / "hf", tmp_path / "m.onnx", opset=opset)
    assert kiec.load(path).graph.op_counts() == kiec.load(str(tmp_path / "hf")).graph.op_counts()
    check_against_onnxruntime(path, f"torch.onnx opset {opset} {family}")


def test_torch_onnx_fp16_export_folds_rmsnorm_with_its_fp32_casts(tmp_path):
    from kiec.frontend.onnx_fold import fold_decompositions
    from tests.onnx_export import torch_export
    make_tiny_hf(tmp_path / "hf", "llama")
    path = torch_export(tmp_path / "hf", tmp_path / "m.onnx", opset=18, dtype="float16")
    m = kiec.load(path)
    assert {p.type.dtype for p in m.graph.params.values()} == {"f16"}  # the export's own dtype
    assert m.graph.op_counts() == kiec.load(str(tmp_path / "hf")).graph.op_counts()
    import onnx
    from kiec.frontend.onnx_read import _Initializers
    model = onnx.load(path)
    nodes, counts = fold_decompositions(list(model.graph.node), _Initializers(model, str(tmp_path), path), {},
                                        {o.name for o in model.graph.output})
    assert counts == {"RMSNormalization": 5, "RotaryEmbedding": 4, "Attention": 2}
    left = {n.op_type for n in nodes}
    assert not left & {"Pow", "ReduceMean", "Sqrt", "Reciprocal", "Neg", "Softmax", "IsNaN"}  # nothing of them left


@pytest.mark.parametrize("opset", [23, 18])
def test_torch_onnx_sliding_window_is_read_from_the_mask(tmp_path, opset):
    # Mistral's window (5 rows here) exists only as key > query - 5 in the mask; 25 positions cross it
    from tests.onnx_export import torch_export
    make_tiny_hf(tmp_path / "hf", "mistral")
    path = torch_export(tmp_path / "hf", tmp_path / "m.onnx", opset=opset)
    m = kiec.load(path)
    assert m.config.sliding_window == 5
    assert m.graph.op_counts() == kiec.load(str(tmp_path / "hf")).graph.op_counts()
    assert {op.window for op in m.graph.ops if type(op).__name__ == "Attention"} == {5}
    check_against_onnxruntime(path, f"torch.onnx opset {opset} mistral")


def test_a_mask_kiec_cannot_read_is_refused_by_name(tmp_path):
    import onnx
    from tests.onnx_export import torch_export
    make_tiny_hf(tmp_path / "hf", "mistral")
    path = torch_export(tmp_path / "hf", tmp_path / "m.onnx", opset=18)
    model = onnx.load(path)
    next(n for n in model.graph.node if n.op_type == "Greater").op_type = "Less"  # key < query - 5: no window
    onnx.save(model, path)
    with pytest.raises(KiecError, match=r"Attention, domain ai.onnx\) with an attn_mask that is not the plain causal"):
        kiec.load(path)
