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
    torch.manual_seed(0)
    weights = {n: m.weights[n].float() for n in m.graph.params}
    caches = lambda: {s.name: torch.randn(s.type.shape) for s in m.graph.states.values()}  # noqa: E731
    start = caches()
    for pos, token in ((0, 5), (3, 17), (7, 200)):
        env = {**weights, "token": torch.tensor(token), "pos": torch.tensor(pos)}
        a = interp.run(m.graph, {**env, **{k: v.clone() for k, v in start.items()}})
        b = simulate(prog, {**env, **{k: v.clone() for k, v in start.items()}})
        torch.testing.assert_close(b["logits"], a["logits"], rtol=1e-5, atol=1e-5)


def test_an_op_no_rule_covers_is_named(tmp_path):
    from kiec.ir.ops import Activation
    m = kiec.load("smollm2-135m")
    g = m.graph
    i = next(i for i, o in enumerate(g.ops) if isinstance(o, Activation))
    g.ops[i] = Activation(g.ops[i].out, g.ops[i].x, "gelu_tanh")
    with pytest.raises(Unscheduled, match=r"no fusion rule covers RMSNorm -> %L0\.mlp_in \(5 ops uncovered\)"):
        pipeline.run(g)
