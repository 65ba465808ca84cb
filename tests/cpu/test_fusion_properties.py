"""Hypothesis over Llama-family shapes and variants: the fused program, and the persistent schedule run by the
VM on a random interleaving, compute what the graph computes."""
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kiec.codegen.buffers import plan_buffers
from kiec.ir import interp
from kiec.ir.passes import pipeline
from kiec.ir.passes.persistent import schedule
from kiec.ir.passes.simulate import simulate
from kiec.ir.passes.vm import VM
from kiec.models.llama import LlamaConfig, RopeConfig, build_graph
from kiec.weights import random_loader


@st.composite
def configs(draw):
    kv = draw(st.sampled_from([1, 2]))
    heads = kv * draw(st.sampled_from([1, 2, 3]))
    head_dim = draw(st.sampled_from([8, 16]))
    rope = RopeConfig(draw(st.sampled_from([10000.0, 500000.0])),
                      partial_rotary_factor=draw(st.sampled_from([1.0, 0.5])))
    return LlamaConfig(
        arch="llama", vocab_size=64, hidden_size=draw(st.sampled_from([16, 32])), intermediate_size=24,
        num_layers=draw(st.integers(1, 3)), num_heads=heads, num_kv_heads=kv, head_dim=head_dim, rms_norm_eps=1e-5,
        rope=rope, max_position_embeddings=64, tie_word_embeddings=draw(st.booleans()), qkv_bias=draw(st.booleans()),
        qk_norm=draw(st.booleans()), sliding_window=draw(st.sampled_from([0, 2])),
        hidden_act=draw(st.sampled_from(["silu", "gelu_tanh"])))


def weights_of(graph, seed):
    return {n: random_loader(n, p.type.shape, seed)().float() * (5 if "norm" not in n else 1)
            for n, p in graph.params.items()}


@settings(max_examples=25, deadline=None)
@given(configs(), st.integers(0, 10**6))
def test_fused_program_equals_the_graph(cfg, seed):
    g = build_graph(cfg, "h", "f32", 8)
    prog = pipeline.run(g)
    w = weights_of(g, seed)
    states = {s.name: torch.randn(s.type.shape) for s in g.states.values()}
    for pos, tok in ((0, 3), (4, 60)):
        env = {**w, "token": torch.tensor(tok), "pos": torch.tensor(pos)}
        a = interp.run(g, {**env, **{k: v.clone() for k, v in states.items()}})
        b = simulate(prog, {**env, **{k: v.clone() for k, v in states.items()}})
        torch.testing.assert_close(b["logits"], a["logits"], rtol=1e-4, atol=1e-4)


@settings(max_examples=15, deadline=None)
@given(configs(), st.integers(0, 10**6), st.integers(1, 9))
def test_persistent_schedule_on_a_random_interleaving(cfg, seed, sms):
    g = build_graph(cfg, "h", "f32", 8)
    prog = pipeline.run(g)
    offsets, floats = plan_buffers(prog, {})
    w = weights_of(g, seed)
    got = VM(schedule(prog, sms, tile_rows=8, slot_of=offsets, min_keys=1), w, offsets, floats).run([1, 2], 4, "random", seed)
    env = {s.name: torch.full(s.type.shape, float("nan")) for s in g.states.values()}
    tokens = [1, 2]
    for t in range(4):
        out = interp.run(g, {**w, **env, "token": torch.tensor(tokens[t]), "pos": torch.tensor(t)})
        torch.testing.assert_close(got[t], out["logits"], rtol=1e-4, atol=1e-4, msg=f"token {t}")
        if t + 1 >= len(tokens):
            tokens.append(int(out["logits"].argmax()))
