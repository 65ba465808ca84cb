"""IR: text round-trip (hypothesis), the verifier's rejections, and an interpreter for every op."""
import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kiec.ir import interp, ops
from kiec.ir.builder import Builder
from kiec.ir.text import ParseError, parse_graph, print_graph
from kiec.ir.types import TensorType
from kiec.ir.verify import VerifyError, verify

names = st.text("abcdefghijklmnopqrstuvwxyz0123456789_.-", min_size=1, max_size=12)
floats = st.floats(allow_nan=False, allow_infinity=False, width=64)
dtypes = st.sampled_from(["f32", "bf16", "f16"])
shards = st.sampled_from(["replicated", "rows", "cols"])


@st.composite
def graphs(draw):
    """A random valid decode graph: an embedding followed by a random chain of ops over vectors."""
    head_dim = draw(st.sampled_from([2, 4, 8]))
    heads, kv_heads = draw(st.sampled_from([(1, 1), (2, 1), (4, 2)]))
    d = heads * head_dim
    b = Builder(draw(names))
    pos = b.input("pos", TensorType((), "i32"))
    token = b.input("token", TensorType((), "i32"))

    def param(shape):
        return b.param(b.fresh("w." + draw(names)), shape, draw(dtypes), draw(shards))

    x = b.emit(ops.Embedding, draw(names), table=param((draw(st.integers(1, 50)), d)), index=token)
    live = [x]
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["rms", "ln", "linear", "rope", "act", "add", "mul", "attn"]))
        x = draw(st.sampled_from(live))
        hint = draw(names)
        if kind == "rms":
            group = draw(st.sampled_from([0, head_dim]))
            y = b.emit(ops.RMSNorm, hint, x=x, weight=param((group or d,)), eps=draw(floats), group=group)
        elif kind == "ln":
            bias = param((d,)) if draw(st.booleans()) else None
            y = b.emit(ops.LayerNorm, hint, x=x, weight=param((d,)), bias=bias, eps=draw(floats))
        elif kind == "linear":
            y = b.emit(ops.Linear, hint, x=x, weight=param((d, d)), bias=param((d,)) if draw(st.booleans()) else None)
        elif kind == "rope":
            y = b.emit(ops.Rope, hint, x=x, pos=pos, head_dim=head_dim, rotary_dim=draw(st.sampled_from([2, head_dim])),
                       theta=draw(floats), interleaved=draw(st.booleans()), scaling=draw(st.sampled_from(ops.ROPE_SCALINGS)),
                       factor=draw(floats), low_freq_factor=draw(floats), high_freq_factor=draw(floats),
                       original_max_pos=draw(st.integers(0, 10**6)))
        elif kind == "act":
            y = b.emit(ops.Activation, hint, x=x, fn=draw(st.sampled_from(ops.ACTIVATIONS)))
        elif kind in ("add", "mul"):
            y = b.emit(ops.Add if kind == "add" else ops.Mul, hint, a=x, b=draw(st.sampled_from(live)))
        else:
            cache = b.state(b.fresh("kv." + draw(names)), TensorType((2, kv_heads, 16, head_dim), draw(dtypes)))
            k = x[:] if kv_heads == heads else b.emit(ops.Linear, "k", x=x, weight=param((kv_heads * head_dim, d)))
            kv = b.emit(ops.KVAppend, hint, cache=cache, k=k, v=k, pos=pos)
            y = b.emit(ops.Attention, hint, q=x, cache=kv, pos=pos, n_heads=heads, scale=draw(floats),
                       window=draw(st.integers(0, 64)), softcap=draw(floats))
        live.append(y)
    y = b.emit(ops.AllReduce, draw(names), x=live[-1])
    b.output(y, b.emit(ops.Argmax, draw(names), x=y))
    return b.finish()


@settings(max_examples=200, deadline=None)
@given(graphs())
def test_print_then_parse_gives_an_equal_graph(g):
    text = print_graph(g)
    back = parse_graph(text)
    assert back == g, text
    verify(back)
    assert print_graph(back) == text


def small_graph():
    b = Builder("g")
    tok = b.input("token", TensorType((), "i32"))
    x = b.emit(ops.Embedding, "x", table=b.param("emb", (10, 8), "bf16"), index=tok)
    y = b.emit(ops.Linear, "y", x=x, weight=b.param("w", (4, 8), "bf16"))
    b.output(y)
    return b.finish()


def test_verifier_rejects_a_type_error():
    g = small_graph()
    g.params["w"] = dataclasses.replace(g.params["w"], type=TensorType((4, 7), "bf16"))
    with pytest.raises(VerifyError, match=r"op 1 \(Linear -> %y\).*weight must be \[N, 8\]"):
        verify(g)


def test_verifier_rejects_a_wrong_recorded_type():
    g = small_graph()
    g.types["y"] = TensorType((5,), "f32")
    with pytest.raises(VerifyError, match="recorded as f32\\[5\\] but its inputs give f32\\[4\\]"):
        verify(g, after="pack_weights")
    with pytest.raises(VerifyError, match="after pass pack_weights"):
        verify(g, after="pack_weights")


def test_verifier_rejects_double_assignment_and_use_before_definition():
    g = small_graph()
    g.ops.append(dataclasses.replace(g.ops[1], out="x"))
    with pytest.raises(VerifyError, match="assigns %x, which is already defined"):
        verify(g)
    g = small_graph()
    g.ops.reverse()
    with pytest.raises(VerifyError, match="uses %x before it is defined"):
        verify(g)
    g = small_graph()
    g.params["x"] = g.params.pop("w")
    with pytest.raises(VerifyError):
        verify(g)


def test_verifier_rejects_ops_illegal_at_the_stage():
    with pytest.raises(VerifyError, match="Linear -> %y\\) is not legal at this stage"):
        verify(small_graph(), legal=(ops.Embedding,))


def test_parse_errors_name_the_line():
    text = print_graph(small_graph()).replace("Linear(", "Lineer(")
    with pytest.raises(ParseError, match="line 6: unknown op Lineer"):
        parse_graph(text)


def test_every_op_has_an_interpreter_implementation():
    missing = [name for name, cls in ops.ALL_OPS.items() if cls not in interp.IMPLS]
    assert not missing, f"ops without an interpreter implementation: {missing}"


def test_interpreter_ops_against_direct_formulas():
    torch.manual_seed(0)
    x = torch.randn(8)
    w = torch.randn(4)  # per-group weight
    env = {"x": x, "w": w, "pos": torch.tensor(3, dtype=torch.int32)}
    rms = interp.IMPLS[ops.RMSNorm](ops.RMSNorm("o", "x", "w", 1e-6, group=4), env.__getitem__)
    g = x.view(2, 4)
    assert torch.allclose(rms, (g / g.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt() * w).view(-1))
    rope = ops.Rope("o", "x", "pos", head_dim=4, rotary_dim=4, theta=10000.0, interleaved=True)
    r = interp.IMPLS[ops.Rope](rope, env.__getitem__)
    ang = 3 * torch.tensor([1.0, 1.0 / 100.0])
    expect = torch.stack([x[0::2].view(2, 2) * ang.cos() - x[1::2].view(2, 2) * ang.sin(),
                          x[1::2].view(2, 2) * ang.cos() + x[0::2].view(2, 2) * ang.sin()], -1).reshape(-1)
    assert torch.allclose(r, expect, atol=1e-6)
    # norms of each pair are kept by the rotation
    assert torch.allclose(r.view(-1, 2).norm(dim=-1), x.view(-1, 2).norm(dim=-1), atol=1e-6)


def test_attention_softcap_and_window():
    torch.manual_seed(0)
    cache = torch.randn(2, 1, 8, 4)
    env = {"c": cache, "q": torch.randn(2 * 4), "pos": torch.tensor(5, dtype=torch.int32)}
    op = ops.Attention("o", "q", "c", "pos", n_heads=2, scale=0.5, window=3, softcap=2.0)
    out = interp.IMPLS[ops.Attention](op, env.__getitem__)
    k, v = cache[0, 0, 3:6], cache[1, 0, 3:6]
    s = env["q"].view(2, 4) @ k.T * 0.5
    expect = (2.0 * torch.tanh(s / 2.0)).softmax(-1) @ v
    assert torch.allclose(out, expect.reshape(-1), atol=1e-6)
