"""half_warp_steps (templates/include/kiec/item_deal.cuh), the half-warp deal of a persistent GEMV tile's items
(persist_dot_half_warps), run on the host (item_deal.cu, compiled by nvcc) for every half-warp of 8 warps over many
share and page sizes: every item taken once by the half-warp its slot gives, from its own page; every thread waits
for each page of the share before releasing it, releases them all in order, and never looks past the page after the
oldest one it holds."""
import os
import subprocess

from tests.nvcc_host import nvcc_build


def test_half_warp_deal_takes_every_item_once_and_keeps_the_ring_order(tmp_path):
    exe = nvcc_build(tmp_path, os.path.join(os.path.dirname(__file__), "item_deal.cu"), "-std=c++17")
    r = subprocess.run([exe], capture_output=True, text=True, check=True, timeout=120)
    word, bad, cases = r.stdout.split()
    assert (word, int(bad), int(cases)) == ("deal", 0, 80 * 16)
