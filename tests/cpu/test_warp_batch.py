"""warp_sum_batch (templates/include/kiec/warp_batch.cuh), the persistent GEMV's batched warp sum, run on the host
with 32 threads as the lanes (warp_batch.cu, compiled by nvcc): each of B values' sums equals warp_sum's
butterfly bit for bit, in every lane the function says holds it (k = lane / (32 / B)); and block_order_sum_squares
(persist_norm_in_warps' sum of squares from one warp's chunks of x) equal to the staged norm's block_sum order."""
import os
import subprocess

from tests.nvcc_host import nvcc_build


def test_batched_warp_sums_equal_warp_sum_bit_for_bit(tmp_path):
    exe = nvcc_build(tmp_path, os.path.join(os.path.dirname(__file__), "warp_batch.cu"), "-std=c++20")
    r = subprocess.run([exe], capture_output=True, text=True, check=True, timeout=120)
    lines = [line.split() for line in r.stdout.splitlines()]
    got = {int(b): int(n) for b, n in (line for line in lines if len(line) == 2)}
    assert got == {1: 0, 2: 0, 4: 0, 8: 0, 16: 0, 32: 0}
    norms = {int(k): int(n) for _, k, n in (line for line in lines if line[0] == "norm")}
    assert norms == {576: 0, 256: 0, 128: 0, 1024: 0}
