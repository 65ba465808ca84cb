"""scripts/trace_summary.py on made-up timestamps: the chain view's hops and spans."""
import importlib.util
import os

import numpy as np
import pytest

spec = importlib.util.spec_from_file_location(
    "trace_summary", os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "trace_summary.py"))
trace_summary = importlib.util.module_from_spec(spec)
spec.loader.exec_module(trace_summary)

KERNELS = [{"name": "L0.attn.qkv", "family": "gemv"}, {"name": "L0.attn", "family": "attention"},
           {"name": "L0.attn.x", "family": "gemv"}]


def test_the_chain_view_splits_a_token_into_hops_and_spans():
    # two SMs; phase 0 (QKV) ends at 5 us, phase 1 (attention) starts being ready at 7 us and ends at 9 us,
    # phase 2 (O) is ready at 12 us on one SM and 13 us on the other and ends at 15 us (times in ns)
    sched = [[0, "gemv", 0, 0], [1, "gemv", 0, 0], [0, "attention", 1, 1], [1, "attention", 1, 1],
             [0, "gemv", 2, 2], [1, "gemv", 2, 2]]
    ts = np.array([[1000, 2000, 4000], [1000, 2500, 5000], [5000, 7000, 8000], [5500, 7500, 9000],
                   [8000, 12000, 14000], [9000, 13000, 15000]], dtype=np.int64)
    ch = trace_summary.chain(ts, sched, KERNELS)
    assert ch["gemv:qkv"] == (1, 0.0, 3.0)
    assert ch["attention"] == pytest.approx((1, 2.0, 2.0))
    assert ch["gemv:x"] == pytest.approx((1, 3.0, 3.0))
    lines = trace_summary.chain_lines(ch)
    assert lines[-1].split()[1:4] == ["3", "5.0", "8.0"]  # phases, hops, spans
    kinds = trace_summary.per_kind(ts, sched, KERNELS, 2)
    assert kinds[0].startswith("token span 14.0 us over 2 SMs")
