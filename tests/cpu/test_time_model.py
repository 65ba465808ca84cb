"""scripts/time_model.py on a tiny model's real schedule: in the limits it must reduce to the weight stream alone
and to the chain of phases alone."""
import dataclasses
import math

import pytest
from kiec.ir.passes import pipeline
from kiec.ir.passes.persistent import schedule
from kiec.ir.passes.program import GemvKernel

import kiec
from tests.scripts import load_script
from tests.tiny_hf import make_tiny_hf

time_model = load_script("time_model")

INSTANT = dict(compute_gbps=1e12, epilogue_us=0.0, release_us=0.0, hop_us=0.0, poll_us=0.0, prologue_us=0.0,
               prologue_us_per_kfloat=0.0, attention_us=0.0, other_us=0.0, latency_us=0.0)


@pytest.fixture(scope="module")
def sched(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf")
    make_tiny_hf(d, "llama", hidden_size=256, intermediate_size=640)
    prog = pipeline.run(kiec.load(str(d), max_seq_len=128).graph)
    return schedule(prog, 7)


def stream_pages(sched, c) -> list[int]:
    """Each SM's pages of weights a token."""
    pages = [0] * len(sched.lists)
    for s, lst in enumerate(sched.lists):
        for ins in lst:
            k = sched.program.kernels[ins.kernel]
            if isinstance(k, GemvKernel) and ins.opcode == "gemv":
                pages[s] += math.ceil(time_model.share_bytes(sched, ins, c) / c.page_bytes)
    return pages


def test_with_nothing_but_weights_a_token_is_the_busiest_sms_stream(sched):
    c = dataclasses.replace(time_model.Costs(), page_bytes=1024, ring_pages=4, **INSTANT)
    pages = stream_pages(sched, c)
    per_page = c.page_bytes / c.stream_gbps / 1e3
    got = time_model.simulate(sched, c, tokens=2)
    assert got[0] == pytest.approx(max(pages) * per_page, rel=1e-9)  # the first token from an empty ring
    assert sum(got) == pytest.approx(2 * max(pages) * per_page, rel=1e-9)


def test_with_weights_free_a_token_is_its_chain_of_hops(sched):
    # every phase of the tiny llama waits on the one before it (or, for the embedding, on the last token's select),
    # so with nothing else costing a token is a hop a phase
    c = dataclasses.replace(time_model.Costs(), **{**INSTANT, "stream_gbps": 1e12, "hop_us": 1.0})
    got = time_model.simulate(sched, c, tokens=3)
    assert got[-1] == pytest.approx(len(sched.phases), rel=1e-6)
    slower = time_model.simulate(sched, dataclasses.replace(c, epilogue_us=0.5), tokens=3)[-1]
    assert slower > got[-1]


def test_latency_delays_a_stream_once_where_its_ring_never_fills(sched):
    # a ring deeper than a token's pages: the stream asks at its rate throughout, so the latency delays only the first
    # token's last page (and with it every token after by the same), not each page
    c = dataclasses.replace(time_model.Costs(), page_bytes=1024, ring_pages=10 ** 6, **{**INSTANT, "latency_us": 3.0})
    per_page = c.page_bytes / c.stream_gbps / 1e3
    most = max(stream_pages(sched, c))
    got = time_model.simulate(sched, c, tokens=2)
    assert got[0] == pytest.approx(most * per_page + 3.0, rel=1e-9)
    assert sum(got) == pytest.approx(2 * most * per_page + 3.0, rel=1e-9)


def test_latency_costs_each_page_where_the_ring_holds_one(sched):
    # a ring of one page: each page is asked for once the one before it is released (here: once it lands), so the
    # busiest SM's every page costs its time at the stream's rate and its latency
    c = dataclasses.replace(time_model.Costs(), page_bytes=1024, ring_pages=1, **{**INSTANT, "latency_us": 1.0})
    per_page = c.page_bytes / c.stream_gbps / 1e3
    got = time_model.simulate(sched, c, tokens=3)
    assert got[-1] == pytest.approx(max(stream_pages(sched, c)) * (per_page + 1.0), rel=1e-9)


def test_phase_spans_add_up_to_the_steady_token(sched):
    c = time_model.Costs()
    spans = time_model.phase_spans(sched, c)
    assert sum(n for n, _ in spans.values()) == len(sched.phases)
    assert sum(n * us for n, us in spans.values()) == pytest.approx(time_model.token_us(sched, c), rel=1e-9)
    assert {"gemv:qkv", "attention", "gemv:x_attn", "gemv:act", "gemv:x_mlp", "gemv:logits"} <= set(spans)


def test_fma_gemvs_take_their_own_rate(sched):
    # the GEMVs named in `fma` compute at fma_gbps: at compute_gbps' rate nothing changes, slower they take longer
    gemvs = frozenset(i for i, k in enumerate(sched.program.kernels) if isinstance(k, GemvKernel))
    c = dataclasses.replace(time_model.Costs(), fma_gbps=time_model.Costs().compute_gbps)
    assert time_model.token_us(sched, c, gemvs) == pytest.approx(time_model.token_us(sched, c), rel=1e-12)
    slow = dataclasses.replace(c, fma_gbps=c.compute_gbps / 4)
    assert time_model.token_us(sched, slow, gemvs) > time_model.token_us(sched, slow) * 1.01


def test_main_takes_costs_and_table_fields(capsys):
    # a registry model's schedule under the sm_90 table with a field replaced (no GEMV on the tensor cores), the
    # costs with one replaced; a name that is neither is an error naming it
    time_model.main("llama-3.2-1b", ["persist_mma_rows=", "hop_us=0.5"])
    out = capsys.readouterr().out
    assert "on the FMA tile: gemv:act, gemv:logits, gemv:qkv, gemv:x_attn, gemv:x_mlp" in out
    assert "hop_us 0.5 -> 0.25" in out
    with pytest.raises(ValueError, match=r"'hop_uss' is no field of Costs nor of the sm_90 table \(did you mean"):
        time_model.main("llama-3.2-1b", ["hop_uss=0.5"])


def test_a_share_dealt_to_the_item_counts_its_items(tmp_path):
    # dealt to the item (persist_item_shares), a GEMV's shares start and end mid-row: the model streams each share's
    # items, not its rows' whole bytes, so the SMs' bytes add up to the GEMV's weights exactly and no share is more
    # than an item over the mean
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=640)
    prog = pipeline.run(kiec.load(str(tmp_path / "hf"), max_seq_len=128).graph)
    down = next(i for i, k in enumerate(prog.kernels) if isinstance(k, GemvKernel) and k.k == 640)
    sched = schedule(prog, 7, item_segs={down: 5})
    c = time_model.Costs()
    shares = [time_model.share_bytes(sched, ins, c) for lst in sched.lists for ins in lst
              if ins.kernel == down and ins.opcode == "gemv"]
    k = prog.kernels[down]
    assert sum(shares) == k.n_out * k.k * c.element_bytes
    item = k.k // 5 * c.element_bytes
    assert max(shares) - min(shares) <= item
    assert any(ins.head or ins.tail for lst in sched.lists for ins in lst if ins.kernel == down)


def test_a_share_of_block_pages_counts_its_pages(tmp_path):
    # persist_mma_item_shares: a tensor-core GEMV dealt by the page of a 16-row block; a share's bytes are its pages'
    # (16 rows of a K block each), adding up to the GEMV's weights, none a page over another
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=640)
    prog = pipeline.run(kiec.load(str(tmp_path / "hf"), max_seq_len=128).graph)
    o = next(i for i, k in enumerate(prog.kernels) if isinstance(k, GemvKernel) and k.epilogue == "residual")
    sched = schedule(prog, 7, item_segs={o: 4}, block_rows=frozenset({o}), block_items=frozenset({o}))
    c = time_model.Costs()
    shares = [time_model.share_bytes(sched, ins, c) for lst in sched.lists for ins in lst if ins.kernel == o]
    k = prog.kernels[o]
    page = 16 * (k.k // 4) * c.element_bytes
    assert sum(shares) == k.n_out * k.k * c.element_bytes and max(shares) - min(shares) == page
    assert any(ins.head for lst in sched.lists for ins in lst if ins.kernel == o)
