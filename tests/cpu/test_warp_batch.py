"""warp_sum_batch (templates/include/kiec/warp_batch.cuh), the persistent GEMV's batched warp sum, run on the host
with 32 threads as the lanes (warp_batch.cu, compiled by nvcc): each of B values' sums equals warp_sum's
butterfly bit for bit, in every lane the function says holds it (k = lane / (32 / B))."""
import os
import subprocess

import pytest

import kiec
from kiec.build import check_toolchain

HERE = os.path.dirname(__file__)
INCLUDE_DIR = os.path.join(HERE, "..", "..", "templates", "include")


def test_batched_warp_sums_equal_warp_sum_bit_for_bit(tmp_path):
    try:
        nvcc = check_toolchain("cuda", "sm_90")
    except kiec.KiecError:
        pytest.skip("needs nvcc")
    exe = tmp_path / "warp_batch"
    r = subprocess.run([nvcc, "-std=c++20", "-I", INCLUDE_DIR, os.path.join(HERE, "warp_batch.cu"), "-o", str(exe)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run([str(exe)], capture_output=True, text=True, check=True, timeout=120)
    got = dict(tuple(map(int, line.split())) for line in r.stdout.splitlines())
    assert got == {1: 0, 2: 0, 4: 0, 8: 0, 16: 0, 32: 0}
