"""scripts/ncu_source.py on a made-up source page: the streaming thread's page loop and the landmarks' samples."""
import gzip

from tests.scripts import load_script

ncu_source = load_script("ncu_source")

HEADER = ["Address", "Source", "# Samples", "Instructions Executed", "stall_barrier", "stall_long_sb",
          "stall_barrier (Not Issued)"]


def page(rows):
    """ncu's CSV: its kernel-name line, the header, then (source, samples, executed, barrier, long_sb) rows."""
    lines = ['"Kernel Name","k",', ",".join(f'"{h}"' for h in HEADER)]
    for k, (src, n, ex, bar, lsb) in enumerate(rows):
        lines.append(",".join(f'"{v}"' for v in (hex(0x1000 + 16 * k), src, n, ex, bar, lsb, 0)))
    return "\n".join(lines) + "\n"


ROWS = [("BAR.SYNC.DEFER_BLOCKING 0x1, 0x100", 1, 10, 0, 0),  # 0: a tile's block barrier
        ("UMOV UR6, 0x400", 30, 10, 30, 0),  # 1: its threads waiting there
        ("SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R1], R2", 2, 400, 0, 0),  # 2: a compute warp's page wait
        ("@!P0 BRA 0x10", 20, 400, 0, 20),  # 3: its loop back
        ("FFMA R1, R2, R3, R1", 7, 4000, 0, 0),  # 4: dots
        *[("MOV R0, R1", 0, 1, 0, 0)] * 17,  # 5-21: code run once (the loop's search stops past 16 of them)
        ("LDG.E R3, desc[UR22][R6.64]", 5, 100, 0, 5),  # 22: the streaming thread's walk, once a page
        ("IMAD R3, R3, 0x2, RZ", 4, 30, 0, 0),  # 23: a rarer branch of it (a gap)
        ("SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R4], R2", 1, 900, 0, 0),  # 24: its wait for a free page
        ("@P0 BRA 0x70", 9, 900, 0, 9),  # 25
        ("UBLKCP.S.G desc[UR10], [UR26], [UR14], UR13", 3, 100, 0, 0),  # 26: its copy
        ("EXIT", 1, 1, 0, 0)]  # 27: past the loop


def test_the_landmarks_split_ring_waits_barriers_and_the_streaming_loop(tmp_path):
    path = tmp_path / "src.csv.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(page(ROWS))
    stalls, ins = ncu_source.load(str(path))
    assert stalls == ["stall_barrier", "stall_long_sb"] and len(ins) == len(ROWS)
    assert ncu_source.page_loop(ins) == range(22, 27)
    marks = ncu_source.landmarks(ins)
    assert marks == {"compute warps' ring waits": 22, "after a block barrier": 30,
                     "streaming thread's page loop": 22, "  of it, waits for a free page": 10}
    assert ncu_source.top_stalls(ins, stalls) == "long_sb:34 barrier:30"  # (most first)


def test_segments_cut_the_listing_at_barriers_signals_and_jump_tables(tmp_path):
    rows = [("S2R R0, SR_TID.X", 1, 8, 0, 0),  # 0: the loop head
            ("BRX R8, -0x100", 2, 8, 0, 2),  # 1: the case's jump
            ("FFMA R1, R2, R3, R1", 40, 64, 0, 0),  # 2: its work
            ("BAR.SYNC.DEFER_BLOCKING 0x1, 0x100", 0, 8, 0, 0),  # 3
            ("UMOV UR4, 0x400", 50, 8, 50, 0),  # 4: waiting at the barrier
            ("REDG.E.ADD.STRONG.GPU desc[UR24][R4.64], R9", 6, 1, 0, 6),  # 5: the signal
            ("@P0 ATOMG.E.ADD.STRONG.GPU PT, R1, desc[UR24][R2.64], R7", 1, 1, 0, 1),  # 6: an arrival
            ("EXIT", 0, 1, 0, 0)]  # 7
    path = tmp_path / "src.csv"
    path.write_text(page(rows))
    stalls, ins = ncu_source.load(str(path))
    segs = ncu_source.segments(ins, stalls, at_least=0.0)
    assert [(a, b) for a, b, *_ in segs] == [(0, 1), (1, 3), (3, 5), (5, 6), (6, 8)]
    assert segs[1][2] == 42.0 and segs[1][3] == 64 and segs[1][4] == "long_sb:2"  # (FFMA's samples stalled on none)
    assert segs[2][2:] == (50.0, 8, "barrier:50")
    # at 2% or more only the case's work, the barrier's wait and the signal are left
    assert [(a, b) for a, b, *_ in ncu_source.segments(ins, stalls, at_least=2.0)] == [(1, 3), (3, 5), (5, 6)]


def test_banks_lists_the_shared_accesses_past_their_ideal_wavefronts(tmp_path):
    # an export with the SourceCounters' shared-memory columns: a load at twice its ideal wavefronts, one at its ideal,
    # a store at 1.5 times; the view's total, its share of the excess and the order (most first); an export without
    # the columns reads as none
    header = ["Address", "Source", "# Samples", "Instructions Executed", "L1 Wavefronts Shared",
              "L1 Wavefronts Shared Excessive", "stall_short_sb"]
    rows = [("LDS.128 R4, [R105+0x10080]", 9, 100, 800, 400, 9),
            ("LDS.128 R8, [R105+0x10480]", 1, 100, 400, 0, 1),
            ("STS [R2], R3", 0, 100, 300, 100, 0),
            ("FFMA R1, R2, R3, R1", 2, 100, 0, 0, 0)]
    lines = ['"Kernel Name","k",', ",".join(f'"{h}"' for h in header)]
    lines += [",".join(f'"{v}"' for v in (hex(0x1000 + 16 * k), *row)) for k, row in enumerate(rows)]
    path = tmp_path / "banks.csv"
    path.write_text("\n".join(lines) + "\n")
    _, ins = ncu_source.load(str(path))
    waves, excess, hit = ncu_source.bank_conflicts(ins)
    assert (waves, excess) == (1500, 500) and [i["index"] for i in hit] == [0, 2]
    plain = tmp_path / "plain.csv"
    plain.write_text(page(ROWS))
    assert ncu_source.bank_conflicts(ncu_source.load(str(plain))[1]) == (0, 0, [])
