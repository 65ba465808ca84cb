"""persist_x_spread's loads of x (templates/include/kiec/gemv_x.cuh: load_chunk8, chunk_first_half), run on the host
(x_spread.cu, compiled by nvcc): the same floats in the same slots as the loads in order, and each of the two 16-byte
loads of 8 consecutive chunks (a quarter-warp's lanes) on 8 different 16-byte bank groups of shared memory, where in
order chunks 4 apart share one."""
import os
import subprocess

from tests.nvcc_host import nvcc_build


def bank_group(byte_address: int) -> int:
    """The 16-byte group of 4 of shared memory's 32 four-byte banks an aligned 16-byte access takes."""
    return byte_address // 16 % 8


def test_spread_halves_load_the_same_floats_without_bank_conflicts(tmp_path):
    exe = nvcc_build(tmp_path, os.path.join(os.path.dirname(__file__), "x_spread.cu"), "-std=c++17")
    r = subprocess.run([exe], capture_output=True, text=True, check=True, timeout=120)
    rows = [tuple(map(int, line.split())) for line in r.stdout.splitlines()]
    assert len(rows) == 2 * 1024
    assert all(same for _, _, same, _ in rows), [row for row in rows if not row[2]][:4]
    first = {n: h for n, _, _, h in rows}
    assert set(first.values()) == {0, 1}  # (both orders taken: the spread is on)
    for n0 in range(1024 - 7):  # any quarter-warp: 8 consecutive chunks of 32 bytes, each load's half per lane
        quarter = range(n0, n0 + 8)
        loads = ([32 * n + 16 * first[n] for n in quarter], [32 * n + 16 * (1 - first[n]) for n in quarter])
        for load in loads:
            assert len({bank_group(a) for a in load}) == 8, (n0, load)
    in_order = [32 * n for n in range(8)]  # (the loads in order: chunks 4 apart on one group)
    assert len({bank_group(a) for a in in_order}) == 4
