"""scripts/attention_splits.py on a made-up schedule and timestamps: each attention split by its rows."""
from types import SimpleNamespace

import numpy as np
import pytest

from tests.scripts import load_script

attention_splits = load_script("attention_splits")

SLOTS = ["start", "ready", "x_ready", "sums_done", "done", "page_wait_cycles", "cycles", "pages_ready", "stored"]


def fake_emitter(phases: int = 2):
    """Two KV heads of two splits (tiles 0-3, one an SM) in each of `phases` attention phases, then a GEMV; at least
    64 rows a split."""
    attn = SimpleNamespace(attention=SimpleNamespace(window=0))
    lists = [[SimpleNamespace(opcode="attention", kernel=2 * p, counter=2 * p, tile=sm) for p in range(phases)]
             + [SimpleNamespace(opcode="gemv", kernel=2 * phases, counter=2 * phases, tile=sm)] for sm in range(4)]
    sched = SimpleNamespace(lists=lists, splits={2 * p: 2 for p in range(phases)}, min_keys=64, solo_keys=0)
    return SimpleNamespace(sched=sched, p=SimpleNamespace(kernels={2 * p: attn for p in range(phases)}))


def manifest(em):
    return [[sm, ins.opcode, ins.kernel, ins.counter, 1, 0] for sm, lst in enumerate(em.sched.lists) for ins in lst]


def test_each_split_gets_its_rows_and_the_new_row_its_holder():
    em = fake_emitter()
    sched = manifest(em)
    # 65 rows at position 64: split 0 takes 64, split 1 the new row alone; both KV heads alike
    roles = attention_splits.split_roles(em, sched, 64)
    assert [r for r, s in zip(roles, sched) if s[1] == "attention"] == [(64, False), (64, False), (1, True), (1, True)] * 2
    assert [r for r, s in zip(roles, sched) if s[1] == "gemv"] == [None] * 4
    # 11 rows: one split a KV head, which holds the new row; the second has none
    roles = attention_splits.split_roles(em, sched, 10)
    assert [r for r, s in zip(roles, sched) if s[1] == "attention"] == [(11, True), (11, True), None, None] * 2


def test_a_recording_of_another_schedule_is_refused():
    em = fake_emitter()
    sched = manifest(em)
    with pytest.raises(ValueError, match="not the one made again"):
        attention_splits.split_roles(em, sched[:-1], 64)
    other = [row[:] for row in sched]
    other[0][2] = 7  # (another kernel)
    with pytest.raises(ValueError, match="not the one made again"):
        attention_splits.split_roles(em, other, 64)


def test_splits_are_grouped_by_rows_and_the_last_ones_counted():
    em = fake_emitter()
    sched = manifest(em)
    roles = attention_splits.split_roles(em, sched, 64)

    def row(ready, parts):  # (start, ready, x_ready, sums_done, done, ...) with the four cuts' us after ready
        t = [ready + sum(parts[:k]) * 1000 for k in range(5)]  # ready, sums_done, stored, x_ready, done
        return [100, t[0], t[3], t[1], t[4], 0, 2 * (t[4] - 100), 0, t[2]]

    # manifest order is SM by SM: SM k's rows are phase 0, phase 1, the GEMV; SM k holds tile k, so SMs 0 and 2 hold
    # the 64-row splits, SMs 1 and 3 the new row's
    cuts = {0: [1.0, 3.0, 1.5, 2.5], 2: [1.0, 2.0, 1.0, 2.0], 1: [1.5, 2.0, 1.0, 1.0], 3: [1.5, 1.0, 1.0, 1.0]}
    ts = []
    for sm in range(4):
        ts += [row(1000, cuts[sm]), row(20000, cuts[sm] if sm != 1 else [1.5, 9.0, 1.0, 1.0])]
        ts.append([0] * len(SLOTS))  # (the GEMV: not recorded)
    groups = attention_splits.by_role(np.array(ts, dtype=np.int64), SLOTS, sched, roles)
    assert set(groups) == {(64, False), (1, True)}
    wide, new = groups[(64, False)], groups[(1, True)]
    assert np.array(wide["cuts"]).mean(axis=0) == pytest.approx([1.0, 2.5, 1.25, 2.25])
    assert np.array(new["cuts"])[:, 1].max() == pytest.approx(9.0)
    # phase 0: SM 0's 64-row split stores last (at 6.5 us) and signals last (9 us); phase 1: SM 1's new-row split
    # (its 9 us of keys) stores last (31.5 us) and signals last (32.5 us, SM 0 at 28)
    assert (wide["last_partial"], wide["last_signal"], new["last_partial"], new["last_signal"]) == (1, 1, 1, 1)
