"""scripts/trace_summary.py on made-up timestamps: the chain view's hops and spans."""
import importlib.util
import os

import numpy as np
import pytest

from tests.scripts import load_script

trace_summary = load_script("trace_summary")

KERNELS = [{"name": "L0.attn.qkv", "family": "gemv"}, {"name": "L0.attn", "family": "attention"},
           {"name": "L0.attn.x", "family": "gemv"}]


SLOTS = ["start", "ready", "x_ready", "sums_done", "done", "page_wait_cycles", "cycles", "pages_ready", "stored"]


def recording(rows, extra=None):
    """(start, ready, x_ready, sums_done, done, page wait ns) rows in ns, at a made-up 2 GHz SM clock; extra:
    (pages ready, stored ns) per row (0 without)."""
    extra = extra or [(0, 0)] * len(rows)
    return np.array([[a, b, x, s, d, 2 * w, 2 * (d - a), r, so]
                     for (a, b, x, s, d, w), (r, so) in zip(rows, extra)], dtype=np.int64)


def stamped(rows, stamps):
    """A recording of `rows` (recording's) and the same with `stamps`, a row's extra slots each, appended."""
    base = recording(rows)
    return base, np.concatenate([base, np.array(stamps)], axis=1)


# two SMs; phase 0 (QKV) ends at 5 us, phase 1 (attention) starts being ready at 7 us and ends at 9 us, phase 2 (O)
# is ready at 12 us on one SM and 13 us on the other and ends at 15 us (times in ns)
CHAIN_SCHED = [[0, "gemv", 0, 0], [1, "gemv", 0, 0], [0, "attention", 1, 1], [1, "attention", 1, 1],
               [0, "gemv", 2, 2], [1, "gemv", 2, 2]]
CHAIN_ROWS = [(1000, 2000, 2500, 3500, 4000, 500), (1000, 2500, 3000, 4500, 5000, 1000), (5000, 7000, 7500, 0, 8000, 0),
              (5500, 7500, 8000, 0, 9000, 0), (8000, 12000, 12500, 13500, 14000, 0), (9000, 13000, 13500, 14500, 15000, 250)]


def test_the_chain_view_splits_a_token_into_hops_and_spans():
    sched, ts = CHAIN_SCHED, recording(CHAIN_ROWS)
    ch = trace_summary.chain(ts, SLOTS, sched, KERNELS)
    assert ch["gemv:qkv"] == (1, 0.0, 3.0)
    assert ch["attention"] == pytest.approx((1, 2.0, 2.0))
    assert ch["gemv:x"] == pytest.approx((1, 3.0, 3.0))
    lines = trace_summary.chain_lines(ch)
    assert lines[-1].split()[1:4] == ["3", "5.0", "8.0"]  # phases, hops, spans
    kinds = trace_summary.per_kind(ts, SLOTS, sched, KERNELS, 2)
    assert kinds[0].startswith("token span 14.0 us over 2 SMs")


def test_the_handover_view_times_each_phases_tiles_from_the_previous_last_signal():
    # CHAIN_ROWS: attention's two splits see their inputs 2 and 2.5 us after QKV's last signal (5 us)
    # and end 3 and 4 us after it; O's two tiles are ready 3 and 4 us after attention's last signal (9 us), their x
    # 3.5 and 4.5, done 5 and 6; the first phase has no previous one and is left out
    sched, ts = CHAIN_SCHED, recording(CHAIN_ROWS)
    h = trace_summary.handover(ts, SLOTS, sched, KERNELS)
    assert set(h) == {"attention", "gemv:x"}
    assert h["gemv:x"] == pytest.approx([3, 3.5, 4, 3.5, 4, 4.5, 5, 5.5, 6])
    assert h["attention"][:3] == pytest.approx([2, 2.25, 2.5]) and all(np.isnan(h["attention"][3:6]))
    assert h["attention"][6:] == pytest.approx([3, 3.5, 4])
    lines = trace_summary.handover_lines(h)
    assert lines[2].split() == ["gemv:x", "3.00", "3.50", "4.00", "3.50", "4.00", "4.50", "5.00", "5.50", "6.00"]
    assert lines[3].split() == ["attention", "2.00", "2.25", "2.50", "3.00", "3.50", "4.00"]  # (no x ready)


def test_the_per_kind_view_splits_working_into_prologue_pages_dots_and_epilogue():
    # QKV on two SMs: waited 1 + 1.5 us, prologues 0.5 + 0.5, page waits 0.5 + 1 (cycles at 2 GHz), dot products
    # 0.5 + 0.5 (sums done 1.5 us after x, less the page waits), epilogues 0.5 + 0.5; an instruction without
    # x_ready and sums_done stamps (0) counts all its working time as epilogue
    sched = [[0, "gemv", 0, 0], [1, "gemv", 0, 0], [0, "select", 1, 1]]
    ts = recording([(1000, 2000, 2500, 3500, 4000, 500), (1000, 2500, 3000, 4500, 5000, 1000),
                    (5000, 6000, 0, 0, 7000, 0)])
    rows = {line.split()[0]: line.split()[1:] for line in trace_summary.per_kind(ts, SLOTS, sched, KERNELS, 2)[2:]}
    assert [float(v) for v in rows["gemv:qkv"][:6]] == pytest.approx([2, 2.5, 1, 1.5, 1, 1])  # count, waiting, ...
    assert [float(v) for v in rows["select"][:6]] == pytest.approx([1, 1, 0, 0, 0, 1])


def test_the_per_kind_view_reports_pages_ready_and_the_release():
    # two QKV tiles found 12 and 4 pages in the ring when x was ready; of the SMs' 9 us (waiting and working), the
    # two GEMVs and the select waited 3.5
    sched = [[0, "gemv", 0, 0], [1, "gemv", 0, 0], [0, "select", 1, 1]]
    ts = recording([(1000, 2000, 2500, 3500, 4000, 500), (1000, 2500, 3000, 4500, 5000, 1000),
                    (5000, 6000, 0, 0, 7000, 0)], [(12, 3800), (4, 4900), (0, 0)])
    lines = trace_summary.per_kind(ts, SLOTS, sched, KERNELS, 2)
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:]}
    assert float(rows["gemv:qkv"][-1]) == pytest.approx(8)  # mean pages ready
    assert rows["select"][-1] == "-"
    # stores issued 0.3 and 0.4 us after the sums: epilogue 0.7 us, release 0.2 + 0.1 us
    assert [float(v) for v in rows["gemv:qkv"][5:7]] == pytest.approx([0.7, 0.3])
    assert lines[-1].endswith("waiting 39% of the SMs' time")
    # a recording from before the two slots reads as zeros
    old = ts[:, :7]  # (and no stores stamp: the whole epilogue is epilogue)
    rows = {line.split()[0]: line.split()[1:] for line in trace_summary.per_kind(old, SLOTS[:7], sched, KERNELS, 2)[2:]}
    assert float(rows["gemv:qkv"][-1]) == 0 and [float(v) for v in rows["gemv:qkv"][5:7]] == [1, 0]


def test_the_tails_view_names_the_slowest_tiles():
    # two GEMV phases on three SMs: phase 0 ends at 4, 5, 9 us (median 5: a 4 us tail, SM 2 last), phase 2 at
    # 14, 15, 15.5 us (median 15: 0.5 us, SM 1 last); the attention phase between does not count
    sched = [[0, "gemv", 0, 0], [1, "gemv", 0, 0], [2, "gemv", 0, 0], [0, "attention", 1, 1],
             [0, "gemv", 2, 2], [1, "gemv", 2, 2], [2, "gemv", 2, 2]]
    ts = recording([(1000, 2000, 2500, 3500, 4000, 0), (1000, 2000, 2500, 3500, 5000, 0), (1000, 2000, 2500, 3500, 9000, 0),
                    (9000, 9500, 10000, 0, 11000, 0), (11000, 12000, 12500, 13500, 14000, 0),
                    (11000, 12000, 12500, 13500, 15500, 0), (11000, 12000, 12500, 13500, 15000, 0)])
    t, last = trace_summary.tails(ts, SLOTS, sched, KERNELS)
    assert t == pytest.approx({"gemv:qkv": 4.0, "gemv:x": 0.5}) and last == {2: 1, 1: 1}
    lines = trace_summary.tail_lines(t, last)
    assert lines[1] == "  gemv:qkv 4.00, gemv:x 0.50" and lines[2].startswith("  the SMs most often last (2 phases): SM 2 1x")


# three SMs, each tile with its rows: QKV's shares 16, 15, 16, attention's split, the output projection's 4, 4, 4;
# the long-share view's recording of them (SM 2's QKV tile last)
SHARES_SCHED = [[0, "gemv", 0, 0, 16], [1, "gemv", 0, 0, 15], [2, "gemv", 0, 0, 16], [0, "attention", 1, 1, 1],
                [0, "gemv", 2, 2, 4], [1, "gemv", 2, 2, 4], [2, "gemv", 2, 2, 4]]
SHARES_ROWS = [(1000, 2000, 2500, 3500, 4000, 0), (1000, 2000, 2500, 3500, 5000, 0), (1000, 2000, 2500, 3500, 9000, 0),
               (9000, 9500, 10000, 0, 11000, 0), (11000, 12000, 12500, 13500, 14000, 0),
               (11000, 12000, 12500, 13500, 15500, 0), (11000, 12000, 12500, 13500, 15000, 0)]


def test_the_long_share_view_counts_the_phases_a_longer_share_ended():
    # the tails view's recording, each tile with its rows: phase 0's shares 16, 15, 16 (SM 2, last, holds a longest),
    # phase 2's 4, 4, 4 (even: not counted); a recording without the rows gives nothing
    sched = SHARES_SCHED
    ts = recording(SHARES_ROWS)
    ll = trace_summary.long_last(ts, SLOTS, sched, KERNELS)
    assert ll == {"gemv:qkv": (1, 1, 15, 16), "gemv:x": (0, 0, 4, 4)}
    assert trace_summary.long_last_lines(ll)[1:] == ["  gemv:qkv               1 of 1 (15-16 rows)"]
    assert trace_summary.long_last(ts, SLOTS, [x[:4] for x in sched], KERNELS) == {}
    # with each tile's items (a sixth field, the forty-first session on), their counts: shares dealt to the item
    items = [x + [8 * x[4] - (3 if i == 2 else 0)] for i, x in enumerate(sched)]  # SM 2's, last, 3 items short
    ll = trace_summary.long_last(ts, SLOTS, items, KERNELS)
    assert ll == {"gemv:qkv": (0, 1, 120, 128), "gemv:x": (0, 0, 32, 32)}
    assert trace_summary.long_last_lines(ll, "items")[1:] == ["  gemv:qkv               0 of 1 (120-128 items)"]
    # the other views read the fifth field past
    assert trace_summary.tails(ts, SLOTS, sched, KERNELS)[1] == {2: 1, 1: 1}
    assert "the slowest tile held its phase's longest share" in trace_summary.summary_of(
        ts, {"trace_slots": SLOTS, "schedule": sched, "kernels": KERNELS, "sms": 3}, 64)


def test_the_slowest_parts_view_says_where_the_last_tile_lost():
    # phase 0 (QKV) ends at 5 us; phase 2 (O) on three SMs: two were waiting (ready 5.5 and 5.6 us) and take 3 us to
    # done; the third was busy until 6 us (its attention split), is ready at 6.4 and its pages and dots take 0.5 us
    # longer: it is 0.8 us later at ready (against the median 5.6), 0.5 in pages and dots, 1.3 at done, and started
    # after phase 0 ended (the attention phase between, not a GEMV, is left out)
    sched = [[0, "gemv", 0, 0], [1, "gemv", 0, 0], [2, "gemv", 0, 0], [2, "attention", 1, 1],
             [0, "gemv", 2, 2], [1, "gemv", 2, 2], [2, "gemv", 2, 2]]
    rows = [(1000, 2000, 2500, 3500, 4000, 0), (1000, 2000, 2500, 3500, 5000, 0), (1000, 2000, 2500, 3500, 4500, 0),
            (4500, 4600, 4700, 0, 5000, 0),
            (4200, 5500, 6000, 8000, 8500, 0), (4300, 5600, 6100, 8100, 8600, 0), (6000, 6400, 6900, 9400, 9900, 0)]
    sp = trace_summary.slowest_parts(recording(rows), SLOTS, sched, KERNELS)
    assert set(sp) == {"gemv:x"}
    parts, late, n = sp["gemv:x"]
    assert parts == pytest.approx([0.8, 0.0, 0.5, 0.0, 1.3]) and (late, n) == (1, 1)
    lines = trace_summary.slowest_lines(sp)
    assert lines[2].split() == ["gemv:x", "0.80", "0.00", "0.50", "0.00", "1.30", "1", "of", "1"]


def test_the_views_keep_nanoseconds_at_globaltimers_magnitude():
    # %globaltimer counts ns since 1970 (~1.7e18), where a float64 steps by 256 ns: the views subtract before any
    # float, so the same recording shifted there reads the same
    sched = [[0, "gemv", 0, 0], [1, "gemv", 0, 0], [2, "gemv", 0, 0], [0, "gemv", 2, 2], [1, "gemv", 2, 2],
             [2, "gemv", 2, 2]]
    rows = [(1000, 2000, 2500, 3500, 4000, 0), (1000, 2000, 2500, 3500, 5000, 0), (1000, 2000, 2500, 3500, 4501, 0),
            (4200, 5503, 6011, 8000, 8517, 0), (4300, 5600, 6100, 8100, 8633, 0), (6000, 6437, 6900, 9400, 9931, 0)]
    base = 1_764_000_000_000_000_000
    shifted = [tuple(v + base if i < 5 else v for i, v in enumerate(r)) for r in rows]
    for view in (trace_summary.slowest_parts, trace_summary.tails, trace_summary.handover, trace_summary.chain):
        assert view(recording(shifted), SLOTS, sched, KERNELS) == view(recording(rows), SLOTS, sched, KERNELS)
    assert trace_summary.tails(recording(shifted), SLOTS, sched, KERNELS)[0]["gemv:qkv"] == pytest.approx(0.499)


def test_the_ready_pages_view_gives_their_spread():
    sched = [[s, "gemv", 0, 0] for s in range(5)] + [[0, "attention", 1, 1]]
    ts = recording([(1000, 2000, 2500, 3500, 4000, 0)] * 6, [(r, 0) for r in (12, 0, 3, 7, 12, 0)])
    assert trace_summary.ready_pages(ts, SLOTS, sched, KERNELS) == {"gemv:qkv": [0, 0, 7, 12, 12]}


def test_a_saved_recording_summarizes_the_same_without_a_gpu(tmp_path):
    sched = [[0, "gemv", 0, 0], [1, "gemv", 0, 0], [0, "attention", 1, 1], [1, "attention", 1, 1]]
    ts = recording([(1000, 2000, 2500, 3500, 4000, 500), (1000, 2500, 3000, 4500, 5000, 1000),
                    (5000, 7000, 7500, 0, 8000, 0), (5500, 7500, 8000, 0, 9000, 0)],
                   [(3, 3800), (5, 4700), (0, 0), (0, 0)])
    manifest = {"trace_slots": SLOTS, "schedule": sched, "kernels": KERNELS, "sms": 2, "instructions": 4}
    trace_summary.save(str(tmp_path / "t.npz"), ts, manifest, 64)
    got_ts, got_manifest, pos = trace_summary.load(str(tmp_path / "t.npz"))
    assert pos == 64 and np.array_equal(got_ts, ts) and got_manifest["schedule"] == sched
    text = trace_summary.summary_of(got_ts, got_manifest, pos)
    assert text == trace_summary.summary_of(ts, manifest, 64) and text.startswith("position 64: token span 8.0 us")


def load_variants(monkeypatch):
    """scripts/variants.py as a module (it imports trace_summary from beside it)."""
    sys_path = os.path.join(os.path.dirname(__file__), "..", "..", "scripts")
    monkeypatch.syspath_prepend(sys_path)
    monkeypatch.setitem(__import__("sys").modules, "trace_summary", trace_summary)
    vspec = importlib.util.spec_from_file_location("variants", os.path.join(sys_path, "variants.py"))
    variants = importlib.util.module_from_spec(vspec)
    vspec.loader.exec_module(variants)
    return variants


def test_variants_reads_its_lists_trace_and_rounds(monkeypatch):
    # scripts/variants.py's command line: each model's list between lone slashes, --trace=POS and --rounds=N (two
    # rounds unless given: gpu_run.sh's VARIANTS_ROUNDS), anything else refused by name before a kernel is built
    variants = load_variants(monkeypatch)
    lists, pos, rounds = variants.parse(["--rounds=4", "smollm2-135m", "mode=persistent", "/", "llama-3.2-1b:8192",
                                         "mode=persistent", "mode=persistent,persist_page_pace_ns=440", "--trace=64"])
    assert lists == [("smollm2-135m", ["mode=persistent"]),
                     ("llama-3.2-1b:8192", ["mode=persistent", "mode=persistent,persist_page_pace_ns=440"])]
    assert (pos, rounds) == (64, 4)
    assert variants.parse(["llama-3.2-1b", "base"]) == ([("llama-3.2-1b", ["base"])], None, 2)
    for bad, said in ((["--round=3", "x"], "--round=3"), (["--rounds=0", "x"], "at least 1")):
        with pytest.raises(SystemExit, match=said):
            variants.parse(bad)


def test_variants_trace_puts_the_persistent_variants_side_by_side(monkeypatch, capsys, tmp_path):
    # scripts/variants.py --trace: two persistent variants' recordings (the second's attention 1 us longer) and a
    # graph-mode one, which has no in-kernel trace and is left out
    variants = load_variants(monkeypatch)
    sched, rows = CHAIN_SCHED, CHAIN_ROWS
    slower = [r if i != 3 else (5500, 7500, 8000, 0, 10000, 0) for i, r in enumerate(rows)]
    manifest = dict(mode="persistent", trace_slots=SLOTS, schedule=sched, kernels=KERNELS, sms=2)

    class Eng:
        def __init__(self, ts, mode="persistent"):
            self.ts, self.manifest = ts, dict(manifest, mode=mode)

        def trace(self, pos):
            assert pos == 64
            return self.ts

    engines = {"a": Eng(recording(rows)), "b": Eng(recording(slower)), "g": Eng(None, "graph")}
    monkeypatch.setattr(variants, "engine", lambda art: engines[art])
    monkeypatch.setenv("VARIANTS_TRACE_DIR", str(tmp_path / "traces"))  # (gpu_run.sh: $OUT/traces)
    variants.traces({"mode=persistent": "a", "mode=persistent,x=1": "b", "mode=graph": "g"}, 64)
    # each persistent recording kept, named by its artifact and variant without "=" or "," (the device tool leaves
    # such names behind), and read back as it was
    assert sorted(os.listdir(tmp_path / "traces")) == ["a_mode_persistent.npz", "b_mode_persistent_x_1.npz"]
    got_ts, got_manifest, pos = trace_summary.load(str(tmp_path / "traces" / "b_mode_persistent_x_1.npz"))
    assert pos == 64 and np.array_equal(got_ts, recording(slower)) and got_manifest["schedule"] == sched
    out = capsys.readouterr().out.splitlines()
    # the same model at another context in the same call (main's prefix) keeps its own files beside these
    variants.traces({"mode=persistent": "a"}, 64, "ctx8192_")
    assert sorted(os.listdir(tmp_path / "traces")) == ["a_mode_persistent.npz", "b_mode_persistent_x_1.npz",
                                                       "ctx8192_a_mode_persistent.npz"]
    capsys.readouterr()
    assert out[1].split() == ["[0]", "mode=persistent"] and out[2].split() == ["[1]", "mode=persistent,x=1"]
    table = {line.split()[0]: line.split()[1:] for line in out[4:8]}
    assert table["attention"] == ["2.00", "+", "2.00", "2.00", "+", "3.00"]  # hop + span, per variant
    assert table["gemv:x"] == ["3.00", "+", "3.00", "2.00", "+", "3.00"]  # its hop starts after the later end
    assert table["token"] == ["us", "14.0", "14.0"]
    assert "mode=graph" not in "\n".join(out)
    assert sum(line.startswith("position 64:") for line in out) == 2  # each whole summary follows


def test_attention_parts_cut_a_split_at_its_stamps():
    # persist_trace_attention: two splits with rows stamp q rotated (sums_done) and keys done (stored); an idle
    # split (no stamps) and a recording without them give nothing
    sched = [[0, "attention", 1, 1], [1, "attention", 1, 1], [2, "attention", 1, 1]]
    ts = recording([(500, 1000, 5000, 2000, 6000, 0), (500, 1000, 4000, 1500, 9000, 0), (500, 1000, 1200, 0, 1500, 0)],
                   [(0, 4000), (0, 3500), (0, 0)])
    lines = trace_summary.attention_parts(ts, SLOTS, sched)
    assert lines[0] == "attention splits with rows (2), inputs ready to done, us (mean, max):"
    parts = {line[:26].strip(): [float(v) for v in line[26:].split()] for line in lines[1:]}
    assert parts == {"q, rope, new row": pytest.approx([0.75, 1.0]), "keys": pytest.approx([2.0, 2.0]),
                     "warps merged, stored": pytest.approx([0.75, 1.0]),
                     "arrive, merge, signal": pytest.approx([3.0, 5.0])}
    assert trace_summary.attention_parts(ts[2:], SLOTS, sched[2:]) == []


def test_dot_parts_cut_a_tiles_dots_at_its_stamps():
    # persist_trace_dots: two GEMV tiles of one kind stamp x sliced, first item, warps' last items (earliest,
    # latest) between x ready and sums done (the dots cut at the latest's, the spread beside them); a tile without
    # the stamps, an attention row and a recording from before these slots give nothing
    slots = SLOTS + ["x_sliced", "first_item", "warp_done_min", "warp_done_max"]
    sched = [[0, "gemv", 0, 0], [1, "gemv", 0, 0], [2, "gemv", 0, 0], [0, "attention", 1, 1]]
    base, ts = stamped([(500, 1000, 2000, 9000, 9500, 0), (500, 1000, 2000, 7000, 7500, 0),
                        (500, 1000, 2000, 3000, 3500, 0), (500, 1000, 2000, 0, 2500, 0)],
                       [[2100, 3100, 6000, 8000], [2300, 3300, 5000, 6000], [0, 0, 0, 0], [0, 0, 0, 0]])
    lines = trace_summary.dot_parts(ts, slots, sched, [{"family": "gemv", "name": "qkv"}, {"name": "attn"}])
    assert lines[0] == "a GEMV tile's dot products cut at its stamps, us (mean over its tiles):"
    assert lines[2].split()[:2] == ["gemv:qkv", "2"]
    assert [float(v) for v in lines[2].split()[2:]] == pytest.approx([0.2, 1.0, 3.8, 1.0, 6.0, 1.5])
    assert len(lines) == 3
    assert trace_summary.dot_parts(base, SLOTS, sched, [{"family": "gemv", "name": "qkv"}, {"name": "attn"}]) == []
    # with the first items' earliest stamp and the latest's warp: their spread and the warp most often last
    more = np.concatenate([ts, np.array([[2900, 7], [3000, 7], [0, 0], [0, 0]])], axis=1)
    lines = trace_summary.dot_parts(more, slots + ["first_item_min", "first_item_warp"], sched,
                                    [{"family": "gemv", "name": "qkv"}, {"name": "attn"}])
    assert lines[2].split()[2:] == ["0.20", "1.00", "3.80", "1.00", "6.00", "1.50", "0.25", "7", "(100%)"]


def test_stream_parts_give_the_rings_full_waits_per_kind_and_per_sm():
    # persist_trace_stream: three GEMV tiles of one kind on two SMs, the stream's first page, last copy, full and
    # paced waits stamped; SM 0's two tiles waited 1.0 + 0.5 us on a full ring, SM 1's 0.2 (mean 0.85 of 12 us); an
    # attention row and a recording without these slots give nothing
    slots = SLOTS + ["stream_first", "stream_last", "stream_full_ns", "stream_pace_ns"]
    sched = [[0, "gemv", 0, 0], [1, "gemv", 0, 0], [0, "gemv", 0, 1], [0, "attention", 1, 1]]
    base, ts = stamped([(500, 1000, 2000, 9000, 9500, 0), (500, 1000, 2000, 7000, 7500, 0),
                        (9500, 10000, 11000, 12000, 12500, 0), (500, 1000, 2000, 0, 2500, 0)],
                       [[1000, 4000, 1000, 300], [1500, 2500, 200, 100], [10000, 11500, 500, 0], [0, 0, 0, 0]])
    lines = trace_summary.stream_parts(ts, slots, sched, KERNELS, 2)
    assert lines[2].split()[:2] == ["gemv:qkv", "3"]
    # means: full (1.0 + 0.2 + 0.5) / 3, paced 0.4 / 3, lead (1.0 + 0.5 + 1.0) / 3, last (2.0 + 0.5 + 0.5) / 3; 1.7
    assert [float(v) for v in lines[2].split()[2:]] == pytest.approx([0.57, 0.13, 0.83, 1.0, 1.7], abs=0.005)
    assert lines[3] == ("the ring full, summed over an SM's tiles: mean 0.8 us (min 0.2, max 1.5) of the 12.0 us "
                        "token span (7%)")
    # the full waits as (x ready - full, x ready): SM 0 [1.0, 2.0] and [10.5, 11.0] us, SM 1 [1.8, 2.0]: one SM or
    # more (half of 2) 1.5 us of 12 (12.5%), both (90% of 2 rounds up to 2) 0.2 us (1.7%)
    assert lines[4] == ("rings full at once (a tile's full wait taken as ending at its x ready): half the SMs or more "
                        "12.5% of the span, 90% or more 1.7%")
    assert trace_summary.stalled_at_once([(0, 10), (5, 20), (30, 40)], 2) == 5
    assert trace_summary.stream_parts(base, SLOTS, sched, KERNELS, 2) == []


def test_attention_critical_takes_each_phases_last_split():
    # two attention phases of two splits: the slice of the split whose partial came last (2 and 4 us), the tail of
    # the one that signalled last (1 and 6 us) and the last partial to that signal (1 and 3 us: in the second phase
    # the signaller's own partial came 3 us before the other's, as the owner merge's does); the first phase's next
    # phase (a GEMV of 3 tiles, x ready at 5, 6 and 9 us) has its median x 3 us after the last partial (the second
    # phase's next is not recorded: that line's mean is the first's alone)
    sched = [[0, "attention", 1, 1], [1, "attention", 1, 1], [0, "attention", 1, 3], [1, "attention", 1, 3],
             [0, "gemv", 2, 2], [1, "gemv", 2, 2], [2, "gemv", 2, 2]]
    ts = recording([(500, 1000, 3000, 0, 4000, 0), (500, 1000, 1500, 0, 2000, 0),
                    (9000, 10000, 14000, 0, 15000, 0), (9000, 10000, 11000, 0, 17000, 0),
                    (4000, 4500, 5000, 0, 7000, 0), (4000, 4500, 6000, 0, 7000, 0), (4000, 4500, 9000, 0, 9500, 0)])
    lines = trace_summary.attention_critical(ts, SLOTS, sched)
    assert lines[0] == "attention, per phase (2), us (mean, min, max):"
    assert [float(v) for v in lines[1][26:].split()] == pytest.approx([3.0, 2.0, 4.0])
    assert [float(v) for v in lines[2][26:].split()] == pytest.approx([3.5, 1.0, 6.0])
    assert lines[3].startswith("  last partial to signal")
    assert [float(v) for v in lines[3][26:].split()] == pytest.approx([2.0, 1.0, 3.0])
    assert lines[4].startswith("  last partial to next x")
    assert [float(v) for v in lines[4][26:].split()] == pytest.approx([3.0, 3.0, 3.0])


def test_variants_summary_gives_each_variants_rounds_and_its_mean_against_the_first(monkeypatch):
    variants = load_variants(monkeypatch)
    lines = variants.summary_lines({"mode=persistent": [0.741, 0.741], "mode=persistent,x=1": [0.736, 0.738],
                                    "mode=persistent,y=2": [0.875, 0.875]})
    assert lines[1].split() == ["mode=persistent", "0.741", "/", "0.741"]
    assert lines[2].split() == ["mode=persistent,x=1", "0.736", "/", "0.738", "-0.5%"]
    assert lines[3].split() == ["mode=persistent,y=2", "0.875", "/", "0.875", "+18.1%"]


def test_variants_leave_out_what_may_not_fit_the_disk_before_writing_it(monkeypatch):
    # scripts/variants.py: five llama-3.1-8b variants (16 GB of weights each) ran out of the lent machine's disk at the
    # third's weights after minutes (sixteenth session); each variant's room is looked at before it is compiled
    variants = load_variants(monkeypatch)
    assert variants.no_room("llama-3.1-8b", 3, 16 * 10**9, 20 * 10**9) is None
    msg = variants.no_room("llama-3.1-8b", 3, 16 * 10**9, 12 * 10**9)
    assert msg == "llama-3.1-8b: 3 variants left out: one may take 16 GB of weights, the disk has 12 GB free"
    assert variants.no_room("llama-3.1-8b", 1, 16 * 10**9, 12 * 10**9).startswith("llama-3.1-8b: 1 variant left out")


def test_an_artifact_without_the_trace_code_is_traced_through_a_copy_built_with_it(tmp_path, monkeypatch):
    # traceable_engine: an artifact compiled without the traced step's code (persist_trace_code 0, the default) is
    # compiled again from its manifest's model with the code (nvcc here; the Engine, which needs the GPU, is a stand-in
    # that reads the manifest), at ARTIFACT-traceable, and the table's entry is left as it was; a traceable artifact
    # is opened as it is, nothing compiled
    import json

    import kiec
    from kiec.codegen import targets
    from tests.tiny_hf import make_tiny_hf

    class Engine:
        def __init__(self, path):
            self.path = path
            with open(os.path.join(path, "manifest.json")) as fh:
                self.manifest = json.load(fh)

        def close(self):
            pass

    make_tiny_hf(tmp_path / "hf", "llama")
    art = kiec.compile(kiec.load(str(tmp_path / "hf"), dtype="bf16"), str(tmp_path / "art"), mode="persistent")
    monkeypatch.setattr(kiec, "Engine", Engine)
    before = targets.TARGETS["sm_90"]
    eng = trace_summary.traceable_engine(art)
    assert eng.path == art + "-traceable" and eng.manifest["traceable"] is True
    assert "#define KIEC_TRACE_CODE 1 " in open(os.path.join(eng.path, "src", "model.cu")).read()
    assert targets.TARGETS["sm_90"] is before and not before.persist_trace_code
    again = trace_summary.traceable_engine(eng.path)
    assert again.path == eng.path


def test_the_idle_probes_splits_without_a_done_stamp_end_when_their_inputs_are_ready():
    # persist_probe_attention_idle: a head's first split stamps its inputs ready and its done (zeros stored, no
    # partial), the others their inputs ready alone. CHAIN_SCHED's attention as the probe records it: split 0 ready at
    # 7 us, done at 7.5; split 1 ready at 7.5 us, no done. Split 1 counts as done at 7.5 us: no negative time in any
    # view, and the attention phase's last signal is 7.5 us (O's tiles ready 4.5 and 5.5 us after it); the phase
    # stored no partial, so attention_critical has nothing to say of it
    rows = list(CHAIN_ROWS)
    rows[2], rows[3] = (5000, 7000, 0, 0, 7500, 0), (5500, 7500, 0, 0, 0, 0)
    sched, ts = CHAIN_SCHED, recording(rows)
    sums = trace_summary.kind_sums(trace_summary.columns(ts, SLOTS), sched, KERNELS)
    assert all(v >= 0 for c in sums.values() for v in c.values())
    assert sums["attention"]["epilogue"] == pytest.approx(0.5)  # split 0's 7 -> 7.5 us, split 1's none
    assert trace_summary.chain(ts, SLOTS, sched, KERNELS)["attention"] == pytest.approx((1, 2.0, 0.5))
    assert trace_summary.handover(ts, SLOTS, sched, KERNELS)["gemv:x"][:3] == pytest.approx([4.5, 5.0, 5.5])
    assert trace_summary.attention_critical(ts, SLOTS, sched) == []


def test_the_dots_by_share_view_gives_each_share_sizes_median_dots():
    # three QKV tiles of 16, 15 and 16 rows whose dots (x ready to sums, less page waits) take 1.0, 0.5 and 2.0 us,
    # the 16-row ones waiting 0.5 us on pages each; the output projection's three of 4 rows 1.0 us each; a recording
    # without the rows gives nothing
    sched = SHARES_SCHED
    ts = recording([(1000, 2000, 2500, 4000, 4500, 500), (1000, 2000, 2500, 3000, 5000, 0),
                    (1000, 2000, 2500, 5000, 9000, 500)] + SHARES_ROWS[3:])
    ds = trace_summary.dots_by_share(ts, SLOTS, sched, KERNELS)
    assert ds == {"gemv:qkv": {15: (1, 0.5, 0.0), 16: (2, 1.5, 0.5)}, "gemv:x": {4: (3, 1.0, 0.0)}}
    assert trace_summary.dots_by_share_lines(ds)[1:] == [
        "  gemv:qkv               15 rows: 1 tiles, 0.50 + 0.00; 16 rows: 2 tiles, 1.50 + 0.50",
        "  gemv:x                 4 rows: 3 tiles, 1.00 + 0.00"]
    assert trace_summary.dots_by_share(ts, SLOTS, [x[:4] for x in sched], KERNELS) == {}
    assert "a GEMV tile's dots by its rows" in trace_summary.summary_of(
        ts, {"trace_slots": SLOTS, "schedule": sched, "kernels": KERNELS, "sms": 3}, 64)
