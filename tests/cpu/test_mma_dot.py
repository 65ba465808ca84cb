"""MmaX (templates/include/kiec/mma_dot.cuh), the persistent GEMV's dot products on the tensor cores
(persist_dot_mma), run on the host with 32 threads as the lanes and ldmatrix.x4 / mma.m16n8k16 emulated by PTX's
fragment rules (mma_dot.cu, compiled by nvcc), with 1, 2 and 4 chains of mmas an item (persist_dot_mma_chains): for
segments of 8 to 224 chunks, with and without the up row, the lanes' parts add up to a double-precision dot of the
same weights and x's two bf16 pieces, only the diagonal lanes hold anything, and nothing past the item or outside
the warp's segment of x is read."""
import os
import subprocess

import pytest

from tests.nvcc_host import nvcc_build


@pytest.mark.parametrize("chains", [1, 2, 4])
def test_tensor_core_dots_sum_each_item_from_its_own_chunks(tmp_path, chains):
    exe = nvcc_build(tmp_path, os.path.join(os.path.dirname(__file__), "mma_dot.cu"), "-std=c++20",
                     f"-DKIEC_MMA_CHAINS={chains}")
    r = subprocess.run([exe], capture_output=True, text=True, check=True, timeout=300)
    got = {(int(c), int(s)): (int(bad), int(n)) for c, s, bad, n in (line.split() for line in r.stdout.splitlines())}
    assert got == {case: (0, 20) for case in [(8, 0), (16, 0), (32, 1), (72, 0), (72, 1), (96, 1), (128, 0),
                                               (128, 1), (224, 0)]}, got
