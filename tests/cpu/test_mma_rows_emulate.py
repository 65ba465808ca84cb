"""bench/mma_rows_emulate.py: the index arithmetic of bench/mma_rows.cu's swizzled tensor-core ways (16 rows, 8 rows,
and the kernel's pages with the warps splitting the items' steps) under PTX's fragment rules sums each row as a direct
dot does, with no two rows of an ldmatrix matrix on one bank group (it exits 1 otherwise)."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_swizzled_ways_sum_each_row_without_bank_conflicts():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "mma_rows_emulate.py")], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("paged, steps split") == 4 and r.stdout.count("paged items 1") == 3, r.stdout
