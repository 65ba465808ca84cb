"""kiec compile of the persistent kernel (nvcc, no GPU): the GEMV tile's fields (x's copy and norm, the dots' deal,
batches and paces, item shares) and the waits' reach the tiles they apply to, and bad values are refused by name."""
import os
import re
import shutil

import pytest

import kiec
from tests.persistent_build import compile_persistent, persistent_cu, tiny_llama
from tests.tiny_hf import make_tiny_hf

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def test_waits_polled_together_compile_and_poll_a_lane_a_wait(tmp_path, monkeypatch):
    # persist_waits_together: warp 0's lanes poll an instruction's waits at once (wait_inputs); the kernel builds
    import dataclasses

    from kiec.codegen import targets
    from kiec.codegen.emit import INCLUDE_DIR
    make_tiny_hf(tmp_path / "hf", "llama")
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    monkeypatch.setitem(targets.TARGETS, "sm_90",
                        dataclasses.replace(targets.TARGETS["sm_90"], persist_waits_together=1))
    art = kiec.compile(model, str(tmp_path / "art"), mode="persistent")
    with open(os.path.join(art, "src", "model.cu")) as fh:
        assert "#define KIEC_WAITS_TOGETHER 1" in fh.read()
    with open(os.path.join(INCLUDE_DIR, "kiec", "persistent_tile.cuh")) as fh:
        together = fh.read().split("if (KIEC_WAITS_TOGETHER && threadIdx.x < 32) {")[1].split("} else if")[0]
    assert "u.ins->waits[lane]" in together and "__all_sync" in together


def test_copy_batch_reaches_the_kernel(tmp_path):
    # persist_copy_batch, persist_norm_batch, persist_warp_copy_rounds and persist_merge_loads: a tagged x's loads in
    # flight a thread (copied, normed, a warp's own copy, merged from attention's partials), defines of the persistent
    # source
    import dataclasses

    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama")
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    program = pipeline.run(model.graph)
    for copy, norm, rounds, merge in ((8, 8, 4, 8), (16, 12, 5, 6)):
        t = dataclasses.replace(target("sm_90"), persist_copy_batch=copy, persist_norm_batch=norm,
                                persist_warp_copy_rounds=rounds, persist_merge_loads=merge)
        text = emit_persistent(program, "bf16", 64, t, "x").files["model.cu"]
        assert f"#define KIEC_COPY_BATCH {copy} " in text
        assert f"#define KIEC_NORM_BATCH {norm} " in text
        assert f"#define KIEC_WARP_COPY_ROUNDS {rounds} " in text
        assert f"#define KIEC_MERGE_LOADS {merge} " in text


def test_x_direct_2_takes_only_the_gemvs_whose_warps_hold_a_segment_each(tmp_path):
    # persist_x_direct 2: the down projection (K 8192: 8 segments, one a warp) loads its x slices from memory, the
    # output projection (K 256: one segment all 8 warps load) keeps its scratch; 1 takes both. The scratch left is
    # the K-256 GEMVs', so 13 pages fit where the 8192 floats of x left room for 12
    import dataclasses
    import re

    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=8192)
    program = pipeline.run(kiec.load(str(tmp_path / "hf"), dtype="bf16").graph)

    def direct(x_direct):  # each norm-less GEMV case's (K, DIRECT), and the ring's pages
        t = dataclasses.replace(target("sm_90"), persist_x_direct=x_direct, persist_stages=13)
        text = emit_persistent(program, "bf16", 64, t, "x").files["model.cu"]
        cases = [(int(k), d == "true") for k, d in re.findall(
            r"gemv_tile<T, (\d+), \d+, false, kiec::EPI_\w+, \w+, \d+, (\w+)", text)]
        return cases, int(re.search(r"Ring<(\d+), \d+>", text).group(1))
    assert direct(0) == ([(256, False), (8192, False)], 12)
    assert direct(2) == ([(256, False), (8192, True)], 13)
    assert direct(1) == ([(256, True), (8192, True)], 13)
    with pytest.raises(ValueError, match="persist_x_direct 3: 0, 1"):
        direct(3)


def test_x_warp_copy_takes_the_gemvs_whose_warps_hold_a_segment_each_and_frees_their_scratch(tmp_path):
    # persist_x_warp_copy_min_k: the down projection (K 8192: 8 segments, one a warp) copies x a warp at a time through
    # 1 KB of the scratch each from a min K of 8192, not past it; the output projection (K 256: one segment all 8 warps
    # read) keeps the block's copy; the scratch then 8 KB where x took 32 KB, so a 13th page fits. With x direct,
    # direct wins (no scratch at all)
    import dataclasses
    import re

    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=8192)
    program = pipeline.run(kiec.load(str(tmp_path / "hf"), dtype="bf16").graph)

    def cases(**change):  # each norm-less GEMV case's (K, DIRECT, WCOPY), the ring's pages and the scratch's bytes
        t = dataclasses.replace(target("sm_90"), persist_stages=13, **change)
        text = emit_persistent(program, "bf16", 64, t, "x").files["model.cu"]
        found = []
        for k, tail in re.findall(r"gemv_tile<T, (\d+), \d+, false, kiec::EPI_\w+, \w+, \d+((?:, \w+)*)>", text):
            args = tail.split(", ")[1:]
            found.append((int(k), args[:1] == ["true"], len(args) == 10 and args[9] == "true"))
        return (sorted(found), int(re.search(r"Ring<(\d+), \d+>", text).group(1)),
                int(re.search(r"KIEC_SCRATCH_BYTES (\d+)", text).group(1)))
    assert cases(persist_x_warp_copy_min_k=0)[:2] == ([(256, False, False), (8192, False, False)], 12)
    assert cases(persist_x_warp_copy_min_k=8200)[:2] == ([(256, False, False), (8192, False, False)], 12)
    got, pages, scratch = cases(persist_x_warp_copy_min_k=8192)
    assert (got, pages) == ([(256, False, False), (8192, False, True)], 13)
    assert scratch < 8192 * 4 and scratch >= 8 * 256 * 4
    assert cases(persist_x_warp_copy_min_k=1, persist_x_direct=2)[0] == [(256, False, False), (8192, True, False)]
    with pytest.raises(ValueError, match="persist_x_warp_copy_min_k -1: 0 .never."):
        cases(persist_x_warp_copy_min_k=-1)


@pytest.mark.table_tags
def test_norm_in_warps_takes_the_gemvs_with_a_norm_whose_warps_hold_all_of_x(tmp_path, monkeypatch):
    # persist_norm_in_warps: QKV, gate/up and the LM head (K 576: one segment of 3 rounds a lane, untagged) normalize
    # x in each warp's registers, none of it staged in the scratch; the norm-less GEMVs are untouched, and so is a
    # model whose rows are cut into segments (K 1536: 2) or whose x is tagged. The kernel builds (nvcc)
    import dataclasses
    import re

    from kiec.build import emit_sources
    from kiec.codegen import targets

    def cases(model, **change):  # each GEMV case's (epilogue, K, WNORM), and the tiles' scratch
        t = dataclasses.replace(targets.TARGETS["sm_90"], **change)
        text = emit_sources(model, "persistent", "bf16", t, "x").files["model.cu"]
        got = [(epi, int(k), len(rest.split(", ")) > 5 and rest.split(", ")[5] == "true")  # (SEGS .. WNORM: 6th)
               for k, epi, rest in re.findall(r"gemv_tile<T, (\d+), \d+, \w+, kiec::EPI_(\w+), \w+, ([^>]*)>", text)]
        return got, int(re.search(r"#define KIEC_SCRATCH_BYTES (\d+)", text).group(1))

    make_tiny_hf(tmp_path / "narrow", "llama", hidden_size=576, intermediate_size=1536, num_attention_heads=9,
                 num_key_value_heads=3)
    narrow = kiec.load(str(tmp_path / "narrow"), dtype="bf16")
    untagged = dict(persist_tagged_min_width=1024)  # (the table tags every model since the forty-seventh session)
    off, scratch_off = cases(narrow, persist_norm_in_warps=0, **untagged)
    on, scratch_on = cases(narrow, persist_norm_in_warps=1, **untagged)
    assert [w for *_, w in off] == [False] * 5
    assert on == [("STORE", 576, True), ("RESIDUAL", 576, False), ("SILU_MUL", 576, True), ("RESIDUAL", 1536, False),
                  ("ARGMAX", 576, True)]
    assert scratch_on <= scratch_off  # (attention's scratch is the largest here either way)
    make_tiny_hf(tmp_path / "wide", "llama", hidden_size=1536, intermediate_size=4096, num_attention_heads=12,
                 num_key_value_heads=4)
    wide = kiec.load(str(tmp_path / "wide"), dtype="bf16")
    assert [w for *_, w in cases(wide, persist_norm_in_warps=1)[0]] == [False] * 5  # 2 segments a row
    assert [w for *_, w in cases(narrow, persist_norm_in_warps=1, persist_tagged_min_width=0)[0]] == [False] * 5
    monkeypatch.setitem(targets.TARGETS, "sm_90",
                        dataclasses.replace(targets.TARGETS["sm_90"], persist_norm_in_warps=1, **untagged))
    kiec.compile(narrow, str(tmp_path / "art"), mode="persistent")


@pytest.mark.table_tags
def test_dot_half_warps_takes_the_gemvs_that_give_a_warp_several_items(tmp_path, monkeypatch):
    # persist_dot_half_warps on an untagged K-576 model (smollm2-135m's shapes, 132 SMs, 8 warps): gate/up (12 items
    # a tile), the down projection (K 1536, 2 segments: 10) and the LM head (a vocabulary of 49152: 372) take an item
    # a half-warp; QKV (8 items) and the output projection (5) keep a warp an item; with tagged x none does. The
    # kernel builds (nvcc) alone and with the norm in the warps
    import dataclasses
    import re

    from kiec.build import emit_sources
    from kiec.codegen import targets

    def halves(model, **change):  # each GEMV case's (epilogue, K, HALF: the 7th template argument after SEGS)
        t = dataclasses.replace(targets.TARGETS["sm_90"], **change)
        text = emit_sources(model, "persistent", "bf16", t, "x").files["model.cu"]
        return [(epi, int(k), rest.count(",") >= 7 and rest.split(", ")[7] == "true")
                for k, epi, rest in re.findall(r"gemv_tile<T, (\d+), \d+, \w+, kiec::EPI_(\w+), \w+, ([^>]*)>", text)]

    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=576, intermediate_size=1536, num_attention_heads=9,
                 num_key_value_heads=3, vocab_size=49152)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    untagged = dict(persist_tagged_min_width=1024)  # (the table tags every model since the forty-seventh session)
    assert [h for *_, h in halves(model, **untagged)] == [False] * 5
    assert halves(model, persist_dot_half_warps=1, **untagged) == [("STORE", 576, False), ("RESIDUAL", 576, False),
                                                                   ("SILU_MUL", 576, True), ("RESIDUAL", 1536, True),
                                                                   ("ARGMAX", 576, True)]
    assert [h for *_, h in halves(model, persist_dot_half_warps=1)] == [False] * 5
    for change in (dict(persist_dot_half_warps=1, **untagged),
                   dict(persist_dot_half_warps=1, persist_norm_in_warps=1, **untagged)):
        monkeypatch.setitem(targets.TARGETS, "sm_90", dataclasses.replace(targets.TARGETS["sm_90"], **change))
        kiec.compile(model, str(tmp_path / f"art{len(change)}"), mode="persistent")


def test_reduce_batch_head_takes_the_lm_head_alone(tmp_path):
    # persist_reduce_batch_head: the LM head's tiles (the argmax GEMV) sum their items over the warp in batches of
    # its own; the other GEMVs keep the table's persist_reduce_batch (KIEC_REDUCE_BATCH); a batch warp_sum_batch cannot
    # take is refused by name
    import dataclasses
    import re

    from kiec.build import emit_sources
    from kiec.codegen import targets
    make_tiny_hf(tmp_path / "hf", "llama")
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")

    def batches(head):  # each GEMV case's (epilogue, BATCH: its last template argument where there are 6 after SEGS)
        t = dataclasses.replace(targets.TARGETS["sm_90"], persist_reduce_batch_head=head)
        text = emit_sources(model, "persistent", "bf16", t, "x").files["model.cu"]
        return [(epi, int(rest.split(", ")[6]) if rest.count(",") >= 6 else 0)
                for epi, rest in re.findall(r"gemv_tile<T, \d+, \d+, \w+, kiec::EPI_(\w+), \w+, ([^>]*)>", text)]
    assert batches(0) == [("STORE", 0), ("RESIDUAL", 0), ("SILU_MUL", 0), ("RESIDUAL", 0), ("ARGMAX", 0)]
    assert batches(8) == [("STORE", 0), ("RESIDUAL", 0), ("SILU_MUL", 0), ("RESIDUAL", 0), ("ARGMAX", 8)]
    with pytest.raises(kiec.KiecError, match="persist_reduce_batch_head 3: 0 or a power of two"):
        batches(3)


def test_paces_of_their_own_compile_where_asked_and_paced(tmp_path, monkeypatch):
    # persist_page_pace_kinds: the kernel defines KIEC_PAGE_PACE_KINDS where the stream is paced and some kind has a
    # pace (none by default, none with persist_page_pace_ns 0: unpaced), and builds (nvcc) with it
    model = tiny_llama(tmp_path)
    paced = dict(persist_paced_min_width=0)
    assert "KIEC_PAGE_PACE_KINDS" not in persistent_cu(model, **paced)
    assert "#define KIEC_PAGE_PACE_KINDS 1" in persistent_cu(model, persist_page_pace_kinds="down:460", **paced)
    assert "KIEC_PAGE_PACE_KINDS" not in persistent_cu(model, persist_page_pace_kinds="down:460",
                                                       persist_page_pace_ns=0, **paced)  # (unpaced)
    compile_persistent(model, tmp_path / "art", monkeypatch, persist_page_pace_kinds="down:460+head:300", **paced)


def test_several_items_a_warp_at_once_compile_and_bad_counts_are_refused(tmp_path, monkeypatch):
    # persist_dot_items: each GEMV tile takes its count as gemv_tile's ITEMS (its 16th template argument; 1, the
    # default, left out), only where a warp of its tiles has at least persist_dot_items_min_share items; the kernel
    # defines KIEC_DOT_ITEM_CHUNKS and builds (nvcc) with 4 at once; a count that is not 1, 2, 4 or 8, or no chunks, is
    # refused by name (the model's and the field's) before anything is written
    from kiec.codegen import targets
    model = tiny_llama(tmp_path)

    def items(**fields):  # each GEMV case's ITEMS, in the order of the cases
        text = persistent_cu(model, **fields)
        chunks = fields.get("persist_dot_item_chunks", targets.TARGETS["sm_90"].persist_dot_item_chunks)
        assert f"#define KIEC_DOT_ITEM_CHUNKS {chunks}" in text
        args = [a.split(", ") for a in re.findall(r"gemv_tile<(T, [^>]*)>", text)]
        return [int(a[15]) if len(a) > 15 else 1 for a in args]
    assert items() == [1] * 5
    assert items(persist_dot_items=4, persist_dot_item_chunks=32) == [4] * 5
    assert items(persist_dot_items=4, persist_dot_items_min_share=1 << 20) == [1] * 5
    for n, chunks in ((3, 16), (16, 16), (0, 16), (2, 0)):
        with pytest.raises(kiec.KiecError, match=f"persist_dot_items {n}: 1, 2, 4 or 8"):
            persistent_cu(model, persist_dot_items=n, persist_dot_item_chunks=chunks)
    compile_persistent(model, tmp_path / "art", monkeypatch, persist_dot_items=4)


def test_staged_instructions_and_raw_norm_weights_compile_where_asked(tmp_path, monkeypatch):
    # persist_stage_instrs, persist_norm_w_raw: the kernel defines KIEC_STAGE_INSTRS and KIEC_NORM_W_RAW (1 by
    # default) and builds (nvcc) with both; the staged slots' shared memory is kept out of the ring's room
    from kiec.codegen import persistent
    model = tiny_llama(tmp_path)
    for on in (0, 1):
        text = persistent_cu(model, persist_stage_instrs=on, persist_norm_w_raw=on)
        assert f"#define KIEC_STAGE_INSTRS {on}" in text and f"#define KIEC_NORM_W_RAW {on}" in text
        smem = int(re.search(r"SMEM_BYTES = (\d+)", text).group(1))
        assert smem + persistent.STATIC_SMEM + (persistent.STAGE_SMEM if on else 0) <= persistent.SMEM_LIMIT
    compile_persistent(model, tmp_path / "art", monkeypatch, persist_stage_instrs=1, persist_norm_w_raw=1)


def test_spread_x_loads_compile_where_asked(tmp_path, monkeypatch):
    # persist_x_spread: the kernel defines KIEC_X_SPREAD (0 by default) and builds (nvcc) with it; its loads' floats
    # and banks are tests/cpu/test_x_spread.py's
    model = tiny_llama(tmp_path)
    assert "#define KIEC_X_SPREAD 0" in persistent_cu(model)
    assert "#define KIEC_X_SPREAD 1" in persistent_cu(model, persist_x_spread=1)
    compile_persistent(model, tmp_path / "art", monkeypatch, persist_x_spread=1)


def test_late_norm_scale_compiles_where_asked(tmp_path, monkeypatch):
    # persist_norm_late_scale: the kernel defines KIEC_NORM_LATE_SCALE (1 by default) and builds (nvcc) without it
    model = tiny_llama(tmp_path)
    assert "#define KIEC_NORM_LATE_SCALE 1" in persistent_cu(model)
    assert "#define KIEC_NORM_LATE_SCALE 0" in persistent_cu(model, persist_norm_late_scale=0)
    compile_persistent(model, tmp_path / "art", monkeypatch, persist_norm_late_scale=0)


def test_select_host_late_compiles_where_asked(tmp_path, monkeypatch):
    # persist_select_host_late: the kernel defines KIEC_SELECT_HOST_LATE (0 by default) and builds (nvcc) with select's
    # host read before its wait and its host write after its signal
    model = tiny_llama(tmp_path)
    for on in (0, 1):
        assert f"#define KIEC_SELECT_HOST_LATE {on}" in persistent_cu(model, persist_select_host_late=on)
    compile_persistent(model, tmp_path / "art", monkeypatch, persist_select_host_late=1)


def test_item_shares_compile_where_asked(tmp_path, monkeypatch):
    # persist_item_shares: the kernel defines KIEC_ITEM_SHARES, the residual GEMVs (K 1536: 2 segments a row; K 4352:
    # 8) take the item-share tile with their partials' region, one item a warp at a time even where the table asks for
    # several or for half-warps, and every GEMV at 3 builds (nvcc) tagged; off, nothing of it. A value that is not 0
    # to 3, or the knob with parity tags or a probe that runs the dots twice, is refused by name before anything is
    # written
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=1536, intermediate_size=4352, num_attention_heads=12,
                 num_key_value_heads=4, vocab_size=1024, num_hidden_layers=1)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    off = persistent_cu(model)
    assert "#define KIEC_ITEM_SHARES 0" in off and "nullptr, A(d.a[3]))" not in off
    text = persistent_cu(model, persist_item_shares=1, persist_dot_items=4, persist_dot_half_warps=1)
    assert "#define KIEC_ITEM_SHARES 1" in text
    sk = re.findall(r"gemv_tile<T, (\d+), 8, false, kiec::EPI_RESIDUAL, false, (\d+)((?:, \w+)*)>\(u, ring, .*"
                    r"nullptr, A\(d\.a\[3\]\)\)", text)
    assert sorted((int(k), int(segs)) for k, segs, _ in sk) == [(1536, 2), (4352, 8)]
    assert all(args.split(", ")[9] == "1" and args.endswith(", true") for _, _, args in sk)  # ITEMS 1, SK
    # 2: gate/up too (tagged pairs: completed a pair at a time); 3: every GEMV (QKV's norm and store, the LM head's
    # argmax beside select)
    for level, dealt in ((2, {"EPI_RESIDUAL", "EPI_SILU_MUL"}), (3, {"EPI_RESIDUAL", "EPI_SILU_MUL", "EPI_STORE",
                                                                     "EPI_ARGMAX"})):
        cases = re.findall(r"gemv_tile<T, \d+, 8, \w+, kiec::(\w+), ([^>]*)>\(u, ring, [^;]*", persistent_cu(
            model, persist_item_shares=level))
        assert {epi for epi, args in cases if args.split(", ")[14:] == ["true"]} == dealt  # (SK: the 15th after EPI)
    from kiec.codegen import targets
    table = targets.TARGETS["sm_90"]
    for fields, what in ((dict(persist_item_shares=4), "persist_item_shares 4: 0, 1"),
                         (dict(persist_tag_parity=1), "persist_item_shares with persist_tag_parity"),
                         (dict(persist_probe_twice=1), "persist_item_shares with persist_probe_twice")):
        monkeypatch.setitem(targets.TARGETS, "sm_90", table)  # (compile_persistent replaces the table's fields)
        with pytest.raises(kiec.KiecError, match=what):
            compile_persistent(model, tmp_path / "bad", monkeypatch, **dict(dict(persist_item_shares=1), **fields))
        assert not os.path.exists(tmp_path / "bad")
    monkeypatch.setitem(targets.TARGETS, "sm_90", table)
    compile_persistent(model, tmp_path / "art", monkeypatch, persist_item_shares=3)


def test_tensor_core_shares_dealt_by_the_page_compile(tmp_path, monkeypatch):
    # persist_mma_item_shares: every tensor-core GEMV's tile takes MmaShare (SK with MMA) and the kernel defines
    # KIEC_ITEM_SHARES; nvcc builds it (hidden 1024: the output projection's and gate/up's blocks of 2 and 4 pages)
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=1024, intermediate_size=1024, num_attention_heads=8,
                 num_key_value_heads=2, vocab_size=1024, num_hidden_layers=1)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    fields = dict(persist_mma_rows="qkv+o+gate_up+down+head", persist_mma_share_excess=10000,
                  persist_mma_item_shares="qkv+o+gate_up+down+head")
    text = persistent_cu(model, **fields)
    assert "#define KIEC_ITEM_SHARES 1" in text
    cases = re.findall(r"gemv_tile<T, \d+, 8, \w+, kiec::(\w+), [^>]*, true, kiec::NoConsumerMerge, true>", text)
    assert set(cases) == {"EPI_STORE", "EPI_RESIDUAL", "EPI_SILU_MUL", "EPI_ARGMAX"}
    compile_persistent(model, tmp_path / "art", monkeypatch, **fields)
