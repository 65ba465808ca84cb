"""scripts/item_share_tiles.py on made-up timestamps: each item-dealt tile's dots by its part in the hand-over."""

import numpy as np
import pytest

from tests.scripts import load_script

item_share_tiles = load_script("item_share_tiles")

SLOTS = ["start", "ready", "x_ready", "sums_done", "done", "page_wait_cycles", "cycles", "pages_ready", "stored"]
KERNELS = [{"name": "L0.mlp.x", "family": "gemv"}, {"name": "L0.attn.qkv", "family": "gemv"}]
# one down projection dealt to the item over 4 SMs (rows 0-2, 2-4, 4-6, 6-8 of 8 segments: tile 1 starts at segment
# 3 of row 2 and tile 2 ends at segment 5 of row 5), then a QKV of whole rows; [sm, opcode, kernel, phase, rows, items]
SCHED = [[0, "gemv", 0, 0, 3, 19], [1, "gemv", 0, 0, 2, 13], [2, "gemv", 0, 0, 2, 13], [3, "gemv", 0, 0, 3, 19],
         [0, "gemv", 1, 1, 2, 4], [1, "gemv", 1, 1, 2, 4]]
SHARES = [(0, 3, 0, 3), (2, 4, 3, 0), (4, 6, 0, 5), (5, 8, 5, 0), (0, 2, 0, 0), (2, 4, 0, 0)]


def recording(dots_us, wait_us):
    """Rows whose x is ready at 1 us and whose sums are done dots + wait us later, the wait counted as page waits
    (cycles at a made-up 2 GHz: the columns' clock is the cycles over the ns of start to done)."""
    rows = []
    for d, w in zip(dots_us, wait_us):
        x, s = 1000, 1000 + int((d + w) * 1000)
        rows.append([500, 800, x, s, s + 100, 2 * int(w * 1000), 2 * (s + 100 - 500), 0, 0])
    return np.array(rows, dtype=np.int64)


def test_each_item_dealt_tile_goes_to_its_part_in_the_hand_over():
    ts = recording([4.0, 5.0, 6.0, 7.0, 1.0, 1.0], [0.5, 0.0, 1.0, 0.0, 0.0, 0.0])
    groups = item_share_tiles.roles(ts, SLOTS, SCHED, KERNELS, SHARES)
    # the page waits are taken out; the QKV's whole-row tiles are no item-dealt kind's, so they are left out
    assert groups == {("gemv:x", "-, asks"): pytest.approx([4.0, 6.0]),
                      ("gemv:x", "publishes, -"): pytest.approx([5.0, 7.0])}


def test_a_tile_that_neither_publishes_nor_asks_is_counted_with_its_kind():
    shares = [(0, 3, 0, 3), (2, 4, 3, 0), (4, 6, 0, 0), (6, 8, 0, 0)] + SHARES[4:]
    sched = [row[:4] + [hi - lo, 0] for row, (lo, hi, _, _) in zip(SCHED, shares)]
    groups = item_share_tiles.roles(recording([4.0, 5.0, 6.0, 7.0, 1.0, 1.0], [0.0] * 6), SLOTS, sched, KERNELS,
                                    shares)
    assert groups[("gemv:x", "-, -")] == pytest.approx([6.0, 7.0])
    assert ("gemv:qkv", "-, -") not in groups


def test_a_recording_of_another_schedule_is_refused():
    with pytest.raises(ValueError, match="not the one made again"):
        item_share_tiles.roles(recording([1.0] * 6, [0.0] * 6), SLOTS, SCHED, KERNELS, SHARES[:5])
    other = [SHARES[0], (2, 5, 3, 0)] + SHARES[2:]  # (tile 1 with a row more than the recording's)
    with pytest.raises(ValueError, match="not the one made again"):
        item_share_tiles.roles(recording([1.0] * 6, [0.0] * 6), SLOTS, SCHED, KERNELS, other)
