"""How attention's splits cut the context: common.cuh's split_range_of, which the kernels run, against
simulate.split_rows, which the VM and the schedule's tools run."""
import itertools
import os
import subprocess
from types import SimpleNamespace

from kiec.ir.passes.simulate import split_rows
from tests.nvcc_host import nvcc_build


def test_the_device_split_is_the_simulations(tmp_path):
    # every position up to 600 under windows, split counts, minimums and solo contexts (persist_attn_solo_keys),
    # among them 0 (off), one below and one above the minimum: the same splits in use and the same rows each
    exe = nvcc_build(tmp_path, os.path.join(os.path.dirname(__file__), "split_range.cu"), "-std=c++17")
    cases = list(itertools.product(range(600), (0, 100), (1, 3, 16), (2, 64, 256), (0, 1, 64, 256)))
    r = subprocess.run([exe], input="".join(f"{c[0]} {c[1]} {c[2]} {c[3]} {c[4]}\n" for c in cases),
                       capture_output=True, text=True, check=True)
    lines = r.stdout.splitlines()
    assert len(lines) == len(cases)
    for (pos, window, splits, min_keys, solo), line in zip(cases, lines):
        k = SimpleNamespace(attention=SimpleNamespace(window=window))
        rows = split_rows(k, pos, splits, min_keys, solo)
        got = list(map(int, line.split()))
        assert got == [len(rows), *[x for r in rows for x in r]], (pos, window, splits, min_keys, solo)


def test_a_solo_context_is_one_split_and_a_longer_one_splits_as_before():
    # solo 256 over 16 splits of at least 64 rows: one split up to 256 rows of context, then the minimum's splits
    # (257 rows: 5 of 64, as without solo); a window counts the rows it keeps
    k = SimpleNamespace(attention=SimpleNamespace(window=0))
    assert split_rows(k, 255, 16, 64, 256) == [(0, 256)]
    assert split_rows(k, 255, 16, 64, 0) == [(0, 64), (64, 128), (128, 192), (192, 256)]
    assert split_rows(k, 256, 16, 64, 256) == split_rows(k, 256, 16, 64, 0) == [
        (0, 64), (64, 128), (128, 192), (192, 256), (256, 257)]
    assert split_rows(k, 4095, 16, 64, 256) == split_rows(k, 4095, 16, 64, 0) == [
        (256 * s, 256 * s + 256) for s in range(16)]
    w = SimpleNamespace(attention=SimpleNamespace(window=200))
    assert split_rows(w, 999, 16, 64, 256) == [(800, 1000)]
