"""Persistent mode's trace on the GPU (Engine.trace, scripts/trace_summary.py): a traced step stamps every
instruction's moments, and the parts asked for; a kernel without the trace's code computes the same bits."""
import ctypes
import os

import numpy as np
import pytest

import kiec
from tests.gpu.persistent_tiny import compile_tiny, compile_variant, load_tiny, traced_variant
from tests.gpu.test_engine import budget_check, check_against_interpreter, stepped_logits
from tests.scripts import load_script

pytestmark = pytest.mark.gpu

trace_summary = load_script("trace_summary")  # (its views read a recording)


def test_a_kernel_without_the_trace_code_computes_the_same_bits(tmp_path, monkeypatch):
    # persist_trace_code 0 (the default: the kernel without the traced step's code) against 1: within the budget, the
    # same logits' bits and tokens, and Engine.trace refused by name without the code (until the fifty-first session
    # 1 was the default: 7de685a's run of this test compared them the other way round)
    model = load_tiny(tmp_path, "llama", hidden_size=2048, intermediate_size=8192, num_attention_heads=32,
                      num_key_value_heads=8, vocab_size=2048)
    traced = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, "traced", persist_trace_code=1))
    art = compile_variant(model, tmp_path, monkeypatch, persist_trace_code=0)
    assert "#define KIEC_TRACE_CODE 0 " in open(os.path.join(art, "src", "model.cu")).read()
    eng, ours, r32, r16, tokens = check_against_interpreter(model, art, positions=24)
    budget_check(ours, r32, r16, "without the trace's code: logits over 24 positions")
    assert np.array_equal(ours, stepped_logits(traced, tokens))
    assert eng.generate(tokens[:5], 40) == traced.generate(tokens[:5], 40)
    with pytest.raises(kiec.KiecError, match="persist_trace_code 0"):
        eng.trace(8)
    assert traced.trace(8).shape[0] == traced.manifest["instructions"]


@pytest.mark.parametrize("warm", [0, 1])
def test_trace_times_every_instruction_of_one_step(tmp_path, monkeypatch, warm):
    # warm 1: a traced launch first, its recording written over by the second's, which is whole: one step's span,
    # not more (against a plain trace's, with room for the spread). (The traced step's code: persist_trace_code.)
    model, _ = compile_tiny(tmp_path, "qwen3")
    eng = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, persist_trace_code=1))
    ts = eng.trace(10, warm=warm).astype(np.int64)
    if warm:
        plain = eng.trace(10).astype(np.int64)
        at = eng.manifest["trace_slots"].index
        span = [t[:, at("done")].max() - t[:, at("start")].min() for t in (ts, plain)]
        assert span[0] < 1.5 * span[1] + 5_000, span
    slots = eng.manifest["trace_slots"]
    assert ts.shape == (eng.manifest["instructions"], len(slots))
    start, ready, x, sums, done, page_wait, cycles = (
        ts[:, slots.index(n)] for n in ("start", "ready", "x_ready", "sums_done", "done", "page_wait_cycles", "cycles"))
    assert (start > 0).all() and (ready >= start).all() and (done >= ready).all()
    assert done.max() - start.min() < 10_000_000  # one step, not a whole run: under 10 ms
    gemv = np.array([op == "gemv" for _, op, *_ in eng.manifest["schedule"]])
    assert ((x >= ready) & (sums >= x) & (sums <= done))[gemv].all()  # every GEMV stamps its prologue and sums
    assert (page_wait <= cycles).all() and (cycles > 0).all()
    # pages already in the ring when x was ready (a GEMV's, at most a ring's)
    stored = ts[:, slots.index("stored")]  # a GEMV's stores issued: after its sums, before its signal
    assert ((stored >= sums) & (stored <= done))[gemv].all()
    ready_pages = ts[:, slots.index("pages_ready")]
    assert (ready_pages[~gemv] == 0).all() and (ready_pages[gemv] <= 32).all() and (ready_pages[gemv] > 0).any()
    assert (ready_pages >= 0).all()  # (warp 0's count: never the -1 of a ballot's first unset bit gone wrong)
    # read out, the recording is disarmed: a generation through position 10 stamps nothing over it
    last = plain if warm else ts
    eng.generate([1, 2, 3], 16)
    again = np.zeros(last.shape, dtype=np.uint64)
    assert eng._lib.kiec_trace(eng._h, -1, again.ctypes.data_as(ctypes.POINTER(ctypes.c_ulonglong))) == 0
    assert (again.astype(np.int64) == last).all()


@pytest.mark.parametrize("owner", [0, 64])
def test_trace_stamps_attentions_parts_when_asked(tmp_path, monkeypatch, owner):
    # persist_trace_attention: every attention split with rows (8 keys a split: several at position 40) stamps q
    # rotated (sums_done) and its keys done (stored) between its inputs and its partial; splits without rows none;
    # trace_summary.py cuts them. With the owner merge, the owner's x_ready is its slice's end, before its merge
    model, _ = compile_tiny(tmp_path, "qwen3")
    eng = kiec.Engine(compile_variant(model, tmp_path, monkeypatch, persist_trace_attention=1, attn_min_keys=8,
                                      persist_attn_owner_merges=owner))
    ts = eng.trace(40).astype(np.int64)
    slots, sched = eng.manifest["trace_slots"], eng.manifest["schedule"]
    ready, x, sums, stored, done = (ts[:, slots.index(n)] for n in ("ready", "x_ready", "sums_done", "stored", "done"))
    attn = np.array([op == "attention" for _, op, *_ in sched])
    stamped = attn & (sums > 0)
    assert stamped.sum() >= 2 * 2 * 2  # 2 layers, 2 KV heads, at least 2 splits with rows each
    assert ((ready <= sums) & (sums <= stored) & (stored <= x) & (x <= done))[stamped].all()
    lines = trace_summary.attention_parts(ts, slots, sched)
    assert lines[0].startswith(f"attention splits with rows ({stamped.sum()})")


def test_trace_stamps_the_dot_products_parts_when_asked(tmp_path, monkeypatch):
    # persist_trace_dots: every GEMV tile of the traced step stamps its x slice loaded, the latest warp's first item
    # and the latest warp's last, in that order between its x ready and its sums done, and the earliest warp's last
    # between x ready and the latest's (a warp may end before another's first), the earliest warp's first item
    # between x ready and the latest's, and the latest's warp (one of 8); other instructions none; the tokens are the
    # default's; trace_summary.py cuts them
    eng, ts, slots, sched = traced_variant(tmp_path, monkeypatch, persist_trace_dots=1)
    names = ("x_ready", "x_sliced", "first_item", "warp_done_max", "sums_done", "warp_done_min")
    moments = np.stack([ts[:, slots.index(n)] for n in names])
    gemv = np.array([op == "gemv" for _, op, *_ in sched])
    assert (moments[1:, gemv] > 0).all() and (moments[1:, ~gemv] == 0).all()
    assert (np.diff(moments[:5, gemv], axis=0) >= 0).all()
    assert ((moments[0] <= moments[5]) & (moments[5] <= moments[3]))[gemv].all()
    first_min, late = ts[:, slots.index("first_item_min")], ts[:, slots.index("first_item_warp")]
    assert ((moments[0] <= first_min) & (first_min <= moments[2]) & (late >= 0) & (late < 8))[gemv].all()
    lines = trace_summary.dot_parts(ts, slots, sched, eng.manifest["kernels"])
    assert lines[0].startswith("a GEMV tile's dot products") and len(lines) > 2


def test_trace_stamps_the_weight_streams_pages_when_asked(tmp_path, monkeypatch):
    # persist_trace_stream: the streaming thread stamps every GEMV share of the traced step: it came to the first
    # page before the tile's dots were done and issued the last page's copy at or after that and before them, its
    # full-ring and pace waits within that stretch; other instructions none; the tokens are the default's;
    # trace_summary.py gives the stream's view
    eng, ts, slots, sched = traced_variant(tmp_path, monkeypatch, persist_trace_stream=1)
    first, last, full, paced, sums = (ts[:, slots.index(n)] for n in ("stream_first", "stream_last", "stream_full_ns",
                                                                       "stream_pace_ns", "sums_done"))
    gemv = np.array([op == "gemv" for _, op, *_ in sched])
    assert (first[gemv] > 0).all() and (np.stack([first, last, full, paced])[:, ~gemv] == 0).all()
    assert ((first <= last) & (last <= sums) & (full >= 0) & (paced >= 0) & (full + paced <= last - first))[gemv].all()
    lines = trace_summary.stream_parts(ts, slots, sched, eng.manifest["kernels"], eng.manifest["sms"])
    assert lines[0].startswith("the weight stream in the traced step") and lines[-2].startswith("the ring full")
    assert lines[-1].startswith("rings full at once")
