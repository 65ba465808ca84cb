"""warp_sum_batch (templates/include/kiec/warp_batch.cuh), the persistent GEMV's batched warp sum, run on the host
with 32 threads as the lanes (warp_batch.cu, compiled by nvcc): each of B values' sums equals warp_sum's
butterfly bit for bit, in every lane the function says holds it (k = lane / (32 / B))."""
import os
import subprocess

from tests.nvcc_host import nvcc_build


def test_batched_warp_sums_equal_warp_sum_bit_for_bit(tmp_path):
    exe = nvcc_build(tmp_path, os.path.join(os.path.dirname(__file__), "warp_batch.cu"), "-std=c++20")
    r = subprocess.run([exe], capture_output=True, text=True, check=True, timeout=120)
    got = dict(tuple(map(int, line.split())) for line in r.stdout.splitlines())
    assert got == {1: 0, 2: 0, 4: 0, 8: 0, 16: 0, 32: 0}
