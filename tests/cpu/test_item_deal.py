"""half_warp_steps (templates/include/kiec/item_deal.cuh), the half-warp deal of a persistent GEMV tile's items
(persist_dot_half_warps), run on the host (item_deal.cu, compiled by nvcc) for every half-warp of 8 warps over many
share and page sizes: every item taken once by the half-warp its slot gives, from its own page; every thread waits
for each page of the share before releasing it, releases them all in order, and never looks past the page after the
oldest one it holds. Then warp_item_steps (persist_dot_items: 2, 4, 8 of a warp's items at once) over the same shares
and rings of 2-16 pages where items_at_once allows the step: every item once, by its warp, in order, from its page,
never STAGES or more pages past the oldest one held."""
import os
import subprocess

from tests.nvcc_host import nvcc_build


def test_half_warp_and_several_items_deals_take_every_item_once_and_keep_the_ring_order(tmp_path):
    exe = nvcc_build(tmp_path, os.path.join(os.path.dirname(__file__), "item_deal.cu"), "-std=c++17")
    r = subprocess.run([exe], capture_output=True, text=True, check=True, timeout=120)
    (word, bad, cases), (word2, bad2, cases2) = (line.split() for line in r.stdout.splitlines())
    assert (word, int(bad), int(cases)) == ("deal", 0, 80 * 16)
    assert (word2, int(bad2)) == ("steps", 0) and int(cases2) > 30000  # (the cases items_at_once allows)
