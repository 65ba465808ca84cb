"""Fusion: the kernel count per layer, and the fused program computes what the graph does."""
import pytest
import torch

import kiec
from kiec.ir import interp
from kiec.ir.passes import pipeline
from kiec.ir.passes.fuse import Unscheduled
from kiec.ir.passes.program import AttentionKernel, EmbedKernel, GemvKernel
from kiec.ir.passes.simulate import simulate
from tests.tiny_hf import FAMILIES, make_tiny_hf


def test_a_llama_layer_is_five_kernels():
    m = kiec.load("llama-3.2-1b")
    prog = pipeline.run(m.graph)
    assert len(prog.kernels) == 1 + 5 * 16 + 1
    layer = prog.kernels[1:6]
    assert [type(k) for k in layer] == [GemvKernel, AttentionKernel, GemvKernel, GemvKernel, GemvKernel]
    assert [k.epilogue for k in layer if isinstance(k, GemvKernel)] == ["store", "residual", "silu_mul", "residual"]
    assert layer[0].norm is not None and layer[3].norm is not None and layer[2].norm is None
    assert isinstance(prog.kernels[0], EmbedKernel) and prog.kernels[-1].epilogue == "argmax"


@pytest.mark.parametrize("family", list(FAMILIES))
def test_fused_program_equals_the_graph(tmp_path, family):
    make_tiny_hf(tmp_path, family)
    m = kiec.load(str(tmp_path))
    prog = pipeline.run(m.graph, dump_dir=str(tmp_path / "ir"))
    assert (tmp_path / "ir" / "00_loaded.kir").exists()
    listing = (tmp_path / "ir" / "01_fuse.txt").read_text().splitlines()
    assert len(listing) == len(prog.kernels) and "GemvKernel[argmax, rmsnorm prologue]" in listing[-1]
    torch.manual_seed(0)
    weights = {n: m.weights[n].float() for n in m.graph.params}
    caches = lambda: {s.name: torch.randn(s.type.shape) for s in m.graph.states.values()}  # noqa: E731
    start = caches()
    for pos, token in ((0, 5), (3, 17), (7, 200)):
        env = {**weights, "token": torch.tensor(token), "pos": torch.tensor(pos)}
        a = interp.run(m.graph, {**env, **{k: v.clone() for k, v in start.items()}})
        b = simulate(prog, {**env, **{k: v.clone() for k, v in start.items()}})
        torch.testing.assert_close(b["logits"], a["logits"], rtol=1e-5, atol=1e-5)


def gelu_variant():
    """smollm2-135m's graph with a tanh-GELU gated MLP: no template covers it, so the fallbacks do."""
    from kiec.ir.ops import Activation
    m = kiec.load("smollm2-135m", max_seq_len=64)
    for i, o in enumerate(m.graph.ops):
        if isinstance(o, Activation):
            m.graph.ops[i] = Activation(o.out, o.x, "gelu_tanh")
    return m


def test_uncovered_ops_fall_back_to_plain_gemvs_and_one_tvm_kernel():
    from kiec.ir.passes.program import ElementwiseKernel
    m = gelu_variant()
    prog = pipeline.run(m.graph)
    layer = prog.kernels[1:8]
    assert [type(k).__name__ for k in layer] == ["GemvKernel", "AttentionKernel", "GemvKernel", "GemvKernel",
                                                  "GemvKernel", "ElementwiseKernel", "GemvKernel"]
    gate, up, act = layer[3], layer[4], layer[5]
    assert gate.norm is not None and up.norm is gate.norm and gate.epilogue == up.epilogue == "store"
    assert isinstance(act, ElementwiseKernel) and [type(o).__name__ for o in act.ops] == ["Activation", "Mul"]
    assert set(act.inputs) == {gate.out, up.out}
    torch.manual_seed(0)
    weights = {n: m.weights[n].float() for n in m.graph.params}
    states = {s.name: torch.randn(s.type.shape) for s in m.graph.states.values()}
    env = {**weights, "token": torch.tensor(7), "pos": torch.tensor(2)}
    a = interp.run(m.graph, {**env, **{k: v.clone() for k, v in states.items()}})
    b = simulate(prog, {**env, **{k: v.clone() for k, v in states.items()}})
    torch.testing.assert_close(b["logits"], a["logits"], rtol=1e-5, atol=1e-5)


def test_an_op_no_rule_covers_is_named():
    from kiec.ir.builder import Builder
    from kiec.ir.ops import Embedding, LayerNorm, Linear
    from kiec.ir.types import TensorType
    b = Builder("ln")
    x = b.emit(Embedding, "x", table=b.param("emb", (16, 8), "bf16"), index=b.input("token", TensorType((), "i32")))
    h = b.emit(LayerNorm, "h", x=x, weight=b.param("w", (8,), "bf16"), bias=None, eps=1e-5)
    b.output(b.emit(Linear, "y", x=h, weight=b.param("o", (4, 8), "bf16")))
    with pytest.raises(Unscheduled, match=r"no fusion rule covers LayerNorm -> %h \(1 ops uncovered\)"):
        pipeline.run(b.finish())
