"""item_share.cuh (gemv_pages.cuh's ItemShare arithmetic: where each sum of a share dealt to the item goes, which
words a lead publishes and a trailing tile takes) run on the host (item_share.cu, compiled by nvcc) over the shares
the schedule deals (gemv_item_shares), against the weight stream's items and the rows each tile writes."""
import os
import subprocess

from kiec.ir.passes.persistent import gemv_item_shares
from tests.nvcc_host import nvcc_build


def test_item_shares_sums_and_words_land_where_the_rows_need_them(tmp_path):
    # rows of 1, 2 and 8 segments (residual, QKV: a sum a row's segment; 2 and 8 with gate and up), one at a time or
    # a pair (tagged pairs: gate/up), over 3-132 SMs and row counts that leave every kind of start and end (mid-row,
    # a pair's second row, whole), with skipped SMs too; a share of a few rows and of 1,000
    exe = nvcc_build(tmp_path, os.path.join(os.path.dirname(__file__), "item_share.cu"), "-std=c++17")
    cases, kinds = [], set()
    for segs, unit, rpo in ((1, 1, 1), (2, 1, 1), (8, 1, 1), (2, 1, 2), (1, 2, 2), (2, 2, 2), (4, 2, 2), (8, 2, 2)):
        for n, sms, skip in ((96, 7, ()), (96, 13, ()), (64, 5, (1,)), (2048, 132, ()), (2048, 132, (0, 16, 32)),
                             (8192, 132, ()), (1000, 3, ()), (300, 132, ())):
            shares = gemv_item_shares(n, segs, sms, 0, frozenset(skip), unit)
            lines = [f"{segs} {unit} {rpo} {n} {len(shares)}"] + [f"{lo} {hi} {h} {t}" for _, lo, hi, h, t in shares]
            cases.append("\n".join(lines))
            kinds |= {(lo % unit, h > 0, t > 0) for _, lo, hi, h, t in shares}
    r = subprocess.run([exe], input="\n".join(cases) + "\n", capture_output=True, text=True, check=True)
    bad, tiles = map(int, r.stdout.split()[1:])
    assert bad == 0 and tiles > 1000, r.stdout
    assert kinds >= {(0, True, True), (1, False, True), (1, True, False), (0, False, False)}  # every kind of start
