"""The persistent schedule's deal, run on the Python VM: each GEMV's rows (or items, or pairs) dealt evenly over the
SMs and every row covered, the spared splits' SMs left out of the output projection, the weight stream paging each
share as its tile does, and the dealt schedule computing the graph."""
import dataclasses

import pytest
import torch

import kiec
from kiec.codegen.buffers import plan_buffers
from kiec.ir.passes import pipeline
from kiec.ir.passes.persistent import schedule
from kiec.ir.passes.phases import phases
from kiec.ir.passes.simulate import split_rows
from kiec.ir.passes.tags import tag_plan
from kiec.ir.passes.vm import VM, ScheduleError
from tests.tiny_hf import make_tiny_hf
from tests.vm_setup import (assert_reference_logits, assert_vm_computes_the_model, first_attention, reference_logits,
                             residual_gemvs, setup)


def test_gemv_shares_are_equal_per_sm_and_cover_every_row():
    from kiec.ir.passes.persistent import gemv_shares
    for n, sms, first in ((3072, 132, 0), (576, 132, 17), (10, 132, 130), (128256, 132, 5)):
        tiles = gemv_shares(n, sms, first)
        assert [lo for _, lo, _ in tiles] == [0] + [hi for _, _, hi in tiles[:-1]] and tiles[-1][2] == n
        sizes = [hi - lo for _, lo, hi in tiles]
        assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)  # the longer ones first
        assert len({sm for sm, _, _ in tiles}) == len(tiles) and tiles[0][0] == first


def test_gemv_shares_skip_the_spared_sms():
    from kiec.ir.passes.persistent import gemv_shares
    for n, sms, first, skip in ((2048, 132, 128, {0, 16, 32, 48, 64, 80, 96, 112}), (10, 7, 5, {5, 6}),
                                (3, 7, 0, {1})):
        tiles = gemv_shares(n, sms, first, frozenset(skip))
        assert [lo for _, lo, _ in tiles] == [0] + [hi for _, _, hi in tiles[:-1]] and tiles[-1][2] == n
        sizes = [hi - lo for _, lo, hi in tiles]
        assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
        assert not {sm for sm, _, _ in tiles} & skip and len(tiles) == min(n, sms - len(skip))
    with pytest.raises(ValueError, match="all 3 SMs skipped"):
        gemv_shares(4, 3, 0, frozenset({0, 1, 2}))


@pytest.mark.parametrize("policy,seed", [("eager", 0), ("random", 1), ("random", 2)])
def test_spared_splits_sms_get_no_output_projection_and_the_vm_agrees(tmp_path, policy, seed):
    # persist_attn_spare_splits 1: the GEMV after each attention phase skips the SMs of every KV head's first split
    # (7 SMs, 2 KV heads, 3 splits: 2 of the 7), the other 5 share its rows; the schedule still computes the model
    m, prog, sched, weights, offsets, floats = setup(tmp_path, spare_splits=1)
    splits = sched.splits[first_attention(prog)]
    order = [i for i, _ in sched.phases]
    checked = 0
    for c, (i, opcode) in enumerate(sched.phases[:-1]):
        if opcode != "attention":
            continue
        first = {sm for sm, lst in enumerate(sched.lists) for ins in lst if ins.counter == c and ins.tile % splits == 0}
        after = {sm for sm, lst in enumerate(sched.lists) for ins in lst if ins.counter == c + 1}
        rows = sorted((ins.lo, ins.hi) for lst in sched.lists for ins in lst if ins.counter == c + 1)
        assert sched.phases[c + 1][1] == "gemv" and len(first) == 2 and after and not first & after
        assert rows[0][0] == 0 and all(a[1] == b[0] for a, b in zip(rows, rows[1:]))
        assert rows[-1][1] == prog.kernels[order[c + 1]].n_out
        checked += 1
    assert checked == sum(1 for _, op in sched.phases if op == "attention") > 0
    prompt, steps = [5, 17, 99, 4], 8  # (splits in use per KV head: 1, then 2, then 3)
    got = VM(sched, weights, offsets, floats).run(prompt, steps, policy, seed)
    assert_reference_logits(m, got, prompt, steps)


def test_even_spares_leave_the_busiest_share_as_with_every_sm():
    from kiec.ir.passes.persistent import even_spares
    heads8 = [16 * h for h in range(8)]  # (the first split of each of 8 KV heads, 16 splits a head)
    assert even_spares(128, 132, heads8) == frozenset(heads8[:4])  # 128 blocks: 128 SMs a block each
    assert even_spares(256, 132, heads8) == frozenset(heads8[:4])  # 256 blocks: 2 each on 128 SMs
    assert even_spares(2048, 132, heads8) == frozenset(heads8[:4])  # rows: 16 each on 128 SMs
    assert even_spares(576, 132, [0, 44, 88]) == frozenset({0, 44, 88})  # 5 rows at most either way
    assert even_spares(7, 7, [0, 3]) == frozenset()


@pytest.mark.parametrize("policy,seed", [("eager", 0), ("random", 1)])
def test_spare_even_keeps_the_output_projections_blocks_one_an_sm_and_the_vm_agrees(tmp_path, policy, seed):
    # persist_attn_spare_even: 7 SMs, 2 KV heads, the output projection's 112 rows in 7 blocks of 16 (as on the
    # tensor cores). Sparing both first splits' SMs leaves 5 SMs for 7 blocks, two of them taking 32 rows; even
    # spares none, and each SM takes one block. The schedule still computes the model
    make_tiny_hf(tmp_path, "llama", hidden_size=112)
    m = kiec.load(str(tmp_path), max_seq_len=16)
    prog = pipeline.run(m.graph)
    offsets, floats = plan_buffers(prog, {})
    order = phases(prog)
    o = frozenset(order[c + 1][0] for c, (_, op) in enumerate(order) if op == "attention")
    busiest = {}
    for even in (False, True):
        sched = schedule(prog, 7, tile_rows=32, slot_of=offsets, min_keys=2, spare_splits=1, block_rows=o,
                         spare_even=even)
        busiest[even] = max(sum(ins.hi - ins.lo for ins in lst if ins.kernel == k) for lst in sched.lists for k in o)
        assert all((ins.hi - ins.lo) % 16 == 0 for lst in sched.lists for ins in lst if ins.kernel in o)
    assert busiest == {False: 32, True: 16}
    weights = {n: m.weights[n].float() for n in m.graph.params}
    prompt, steps = [5, 17, 99, 4], 8
    got = VM(sched, weights, offsets, floats).run(prompt, steps, policy, seed)
    assert_reference_logits(m, got, prompt, steps)


def test_spare_even_min_k_deals_evenly_where_the_output_projection_is_that_wide(tmp_path):
    # persist_attn_spare_even_min_k: the emitter takes spare_even's deal where every output projection's K is at least
    # the field (llama-3.1-8b's 4096 by default), spare splits' below it; 1 in persist_attn_spare_even takes it at any
    # K. Hidden 2048 and 8 KV heads on 132 SMs: the projection's 128 blocks (on the tensor cores, as the table has it)
    # go to 124 SMs (4 with two) or one an SM
    from kiec.codegen.persistent import _PersistentEmitter
    from kiec.codegen.targets import target, with_fields
    from kiec.ir.passes.persistent import output_projections
    make_tiny_hf(tmp_path, "llama", hidden_size=2048, intermediate_size=1024, num_attention_heads=32,
                 num_key_value_heads=8, vocab_size=1024)
    prog = pipeline.run(kiec.load(str(tmp_path), dtype="bf16", max_seq_len=64).graph)
    o = output_projections(prog)
    assert {prog.kernels[i].k for i in o} == {2048}

    def busiest(**fields) -> int:
        fields = dict(persist_mma_rows="qkv+o+gate_up+down+head", **fields)  # (conftest.py takes them off)
        sched = _PersistentEmitter(prog, "bf16", 64, with_fields(target("sm_90"), fields)).sched
        return max(sum(ins.hi - ins.lo for ins in lst if ins.kernel == k) for lst in sched.lists for k in o)
    assert busiest() == 32  # (the default: 4096, wider than this model's)
    assert busiest(persist_attn_spare_even_min_k=2048) == 16
    assert busiest(persist_attn_spare_even_min_k=2049) == 32
    assert busiest(persist_attn_spare_even=1, persist_attn_spare_even_min_k=0) == 16
    assert busiest(persist_attn_spare_even_min_k=0) == 32
    for bad in (dict(persist_attn_spare_even=2), dict(persist_attn_spare_even_min_k=-1)):
        with pytest.raises(ValueError, match="persist_attn_spare_even"):
            busiest(**bad)


@pytest.mark.parametrize("policy,seed,most", [("eager", 0, 3), ("random", 1, 3), ("random", 2, 2), ("random", 3, 0)])
def test_newest_first_puts_the_owner_on_the_spared_sm_and_computes_the_graph(tmp_path, policy, seed, most):
    # persist_attn_newest_first: split 0 takes the newest chunk of the context (row `token`) at every token, so with
    # owner merges the owner is split 0, whose SM spare splits leave out of the output projection; the other splits
    # in use take the older chunks, each once (their partials at the chunk's slot: the merge's order is the chunks');
    # over 12 tokens 1 to 3 splits are in use (min_keys 2), and with `most` 2 the last to arrive merges from the 5th
    m, prog, sched, weights, offsets, floats = setup(tmp_path, owner_merges=most, spare_splits=1, newest_first=True)
    vm = VM(sched, weights, offsets, floats)
    attn = first_attention(prog)
    splits = sched.splits[attn]
    ins = [i for lst in sched.lists for i in lst if i.kernel == attn]
    for token in range(12):
        for x in ins:
            s = x.tile % splits
            got = vm._split(x, token)
            assert (got is not None) == (s < vm._in_use(x.kernel, token))
            assert vm._owns(x, token) == (s == 0), (token, x.tile)
        for g in range(2):  # the chunks taken by KV head g's splits in use: each one once, covering [0, token]
            rows = sorted(vm._split(x, token)[2:] for x in ins if x.lo == g and vm._split(x, token) is not None)
            assert rows[0][0] == 0 and rows[-1][1] == token + 1 and all(a[1] == b[0] for a, b in zip(rows, rows[1:]))
    c = next(c for c, (i, _) in enumerate(sched.phases) if i == attn)
    owners = {sm for sm, lst in enumerate(sched.lists) for x in lst if x.counter == c and x.tile % splits == 0}
    projection = {sm for sm, lst in enumerate(sched.lists) for x in lst if x.counter == c + 1}
    assert len(owners) == 2 and not owners & projection
    prompt, steps = [5, 17, 99, 4, 8, 1], 12
    got = vm.run(prompt, steps, policy, seed)
    assert_reference_logits(m, got, prompt, steps)


def test_newest_first_with_the_chunks_of_the_default_double_counts_a_chunk(tmp_path, monkeypatch):
    # the mutation: split 0 holds the newest chunk, but the others keep their default chunks, so at 3 splits in
    # use chunk 2 is taken twice and chunk 0 never: the VM's merge of the partials comes out wrong
    m, prog, sched, weights, offsets, floats = setup(tmp_path, owner_merges=3, newest_first=True)
    real = VM._split

    def split(self, ins, token):
        got = real(self, ins, token)
        if got is None or ins.tile % self.s.splits[ins.kernel] == 0:
            return got
        rows = split_rows(self.p.kernels[ins.kernel], token, self.s.splits[ins.kernel], self.s.min_keys,
                          self.s.solo_keys)
        s = ins.tile % self.s.splits[ins.kernel]
        return ins.lo, s, *rows[s]
    monkeypatch.setattr(VM, "_split", split)
    prompt, steps = [5, 17, 99, 4, 8, 1], 12
    with pytest.raises((ScheduleError, AssertionError)):  # (a stale partial's stamp, or the logits)
        got = VM(sched, weights, offsets, floats).run(prompt, steps, "eager")
        for t, (a, b) in enumerate(zip(got, reference_logits(m, prompt, steps))):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=f"token {t}")


def test_no_splits_are_spared_where_they_would_be_most_sms(tmp_path):
    # 7 SMs, 2 KV heads, 3 splits: sparing every split (6 SMs) would leave one SM the whole output projection; the
    # schedule spares none then, and the projection's rows go to all 7 SMs
    _, prog, sched, *_ = setup(tmp_path, spare_splits=3)
    c = next(c for c, (_, op) in enumerate(sched.phases) if op == "attention")
    assert len({sm for sm, lst in enumerate(sched.lists) for ins in lst if ins.counter == c + 1}) == 7


@pytest.mark.parametrize("name,bound", [("llama-3.2-1b", 0.97), ("llama-3.1-8b", 0.97), ("smollm2-135m", 0.93)])
def test_each_kernels_weights_are_dealt_evenly_over_132_sms(name, bound):
    # a kernel lasts as long as its busiest SM: with 64-row tiles dealt round-robin, llama-3.2-1b's QKV
    # (48 tiles) left 84 SMs idle and the bound was 50%
    from kiec.ir.passes import pipeline
    from kiec.ir.passes.persistent import balance
    prog = pipeline.run(kiec.load(name, max_seq_len=256).graph)
    b = balance(schedule(prog, 132))
    assert b["phase_bound"] >= bound and b["token_bound"] >= 0.99 and b["max_waits"] <= 2


@pytest.mark.parametrize("name", ["smollm2-135m", "llama-3.2-1b", "qwen3-1.7b", "llama-3.1-8b"])
def test_the_weight_stream_and_the_gemv_tiles_page_each_share_alike(name):
    # the streaming thread pages a share from its kernel descriptor (row_bytes, item_bytes, flags), the GEMV tile
    # from its template arguments (K, SEGS, the epilogue): both must cut the rows into the same items, and a page
    # must hold one (persistent.cuh: stream_weights, gemv_tile)
    import re
    import struct

    from kiec.codegen.persistent import _PersistentEmitter, walk
    from kiec.codegen.persistent_abi import FLAG_BLOCKS, FLAG_SILU, KERNEL_FIELDS, KERNEL_FORMAT
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    import dataclasses
    prog = pipeline.run(kiec.load(name, max_seq_len=256).graph)
    # (every kind on the tensor cores, the share rule choosing: the FMA tile's GEMVs and the tensor cores' both)
    t = dataclasses.replace(target("sm_90"), persist_mma_rows="qkv+o+gate_up+down+head")
    e = _PersistentEmitter(prog, "bf16", 256, t)
    assert bool(e.mma) == (name != "smollm2-135m")
    src = walk(e, prog, "test")
    stages, page = map(int, re.search(r"Ring<(\d+), (\d+)>", src.files["model.cu"]).groups())
    assert stages >= 4 and page == target("sm_90").persist_page_bytes
    names = [n for n, _, _ in KERNEL_FIELDS]
    streamed = 0
    for k, blob in zip(prog.kernels, e.descs):
        d = dict(zip(names, struct.unpack(KERNEL_FORMAT, blob)))
        body = e.cases[d["spec"]]
        if type(k).__name__ != "GemvKernel":
            assert d["item_bytes"] == 0 and "gemv_tile" not in body
            continue
        K, epi, segs = re.search(r"gemv_tile<T, (\d+), \d+, \w+, ([\w:]+), \w+, (\d+)[,>]", body).groups()
        K, segs = int(K), int(segs)
        silu = d["flags"] & FLAG_SILU
        mma = body.rstrip(");").split("(u, ring")[0].endswith("NoConsumerMerge, true>")  # (persist_mma_rows: MMA)
        assert bool(d["flags"] & FLAG_BLOCKS) == mma == (prog.kernels.index(k) in e.mma)
        if mma:  # a 16-row block of 512 elements (a SiLU-mul's 256: gate and up a page), whole blocks a share
            width = 256 if silu else 512
            assert K == k.k and d["row_bytes"] == 2 * K and d["item_bytes"] == 16 * width * 2 and K % width == 0
        else:
            assert K == k.k and d["row_bytes"] == 2 * K and d["row_bytes"] // d["item_bytes"] == segs
            assert d["row_bytes"] % d["item_bytes"] == 0 and d["item_bytes"] % 16 == 0
        assert bool(silu) == (k.epilogue == "silu_mul") == (epi == "kiec::EPI_SILU_MUL") and d["n"] == k.n_out
        assert page // (d["item_bytes"] * (2 if silu else 1)) >= 1
        streamed += 1
    assert streamed == sum(type(k).__name__ == "GemvKernel" for k in prog.kernels)


def test_each_kind_of_gemv_carries_its_own_pace_where_asked():
    # persist_page_pace_kinds: each GEMV's descriptor carries its kind's pace (qkv, o, gate_up, down, head; 0 where the
    # kind is left out, and on every other kernel); none on an unpaced stream; a malformed list is refused by name
    import dataclasses
    import struct

    from kiec.codegen.persistent import _PersistentEmitter, walk
    from kiec.codegen.persistent_abi import KERNEL_FIELDS, KERNEL_FORMAT
    from kiec.codegen.targets import target
    prog = pipeline.run(kiec.load("llama-3.2-1b", max_seq_len=256).graph)
    names = [n for n, _, _ in KERNEL_FIELDS]

    def paces(kinds: str, **fields) -> list[tuple[str, int]]:
        e = _PersistentEmitter(prog, "bf16", 256,
                               dataclasses.replace(target("sm_90"), persist_page_pace_kinds=kinds, **fields))
        walk(e, prog, "test")
        return [(k.name.split(".")[-1], dict(zip(names, struct.unpack(KERNEL_FORMAT, blob)))["pace"])
                for k, blob in zip(prog.kernels, e.descs)]

    want = dict(qkv=401, x_attn=402, act=403, x_mlp=404, logits=405)
    got = paces("qkv:401+ o:402+gate_up:403+down:404+head:405")
    assert {want.get(n, 0) for n, _ in got} >= {0, 401, 405} and all(p == want.get(n, 0) for n, p in got)
    assert all(p == (460 if n == "x_mlp" else 0) for n, p in paces("down:460"))
    assert all(p == 0 for _, p in paces("")) and all(p == 0 for _, p in paces("down:460", persist_page_pace_ns=0))
    for bad in ("down:0", "mlp:400", "down:fast", "down", "down=460"):
        with pytest.raises(ValueError, match="persist_page_pace_kinds"):
            paces(bad)
    with pytest.raises(ValueError, match="persist_page_pace_ahead_ns"):
        paces("down:460", persist_page_pace_ahead_ns=900)


def test_pair_rows_deal_whole_pairs_and_the_vm_computes_the_model(tmp_path):
    # persist_tagged_pairs: a GEMV whose output is handed over two rows a word gets shares of whole pairs (no SM
    # writes half a word), over all its rows; the schedule still computes the model (the VM, every interleaving
    # checked); an odd row count is refused by name
    m, prog, _, _, offsets, floats = setup(tmp_path)
    gate_up = frozenset(i for i, k in enumerate(prog.kernels) if getattr(k, "epilogue", None) == "silu_mul")
    for sms in (7, 132):
        sched = schedule(prog, sms, tile_rows=32, slot_of=dict(offsets), min_keys=2, pair_rows=gate_up)
        for i in gate_up:
            tiles = sorted((ins.lo, ins.hi) for lst in sched.lists for ins in lst if ins.kernel == i)
            assert all(lo % 2 == 0 and hi % 2 == 0 and hi > lo for lo, hi in tiles)
            assert [lo for lo, _ in tiles[1:]] == [hi for _, hi in tiles[:-1]]
            assert tiles[0][0] == 0 and tiles[-1][1] == prog.kernels[i].n_out
        if sms == 7:
            assert_vm_computes_the_model(m, sched, offsets, floats, seed=3)
    make_tiny_hf(tmp_path / "odd", "llama", intermediate_size=97)
    odd_prog = pipeline.run(kiec.load(str(tmp_path / "odd"), max_seq_len=16).graph)
    odd = next(i for i, k in enumerate(odd_prog.kernels) if getattr(k, "epilogue", None) == "silu_mul")
    with pytest.raises(ValueError, match=rf"{odd_prog.kernels[odd].name}: 97 rows dealt in pairs"):
        schedule(odd_prog, 7, tile_rows=32, min_keys=2, pair_rows=frozenset({odd}))


def test_gemv_item_shares_are_equal_to_the_item_and_cover_every_row():
    from kiec.ir.passes.persistent import gemv_item_shares
    for n, segs, sms, first, skip in ((2048, 8, 132, 0, set()), (2048, 8, 132, 128, {0, 16, 32, 48}),
                                      (64, 4, 7, 3, set()), (64, 4, 7, 0, {2}), (10, 4, 132, 5, set())):
        shares = gemv_item_shares(n, segs, sms, first, frozenset(skip))
        items = [(lo * segs + head, (hi - 1) * segs + (tail or segs)) for _, lo, hi, head, tail in shares]
        assert [a for a, _ in items] == [0] + [b for _, b in items[:-1]] and items[-1][1] == n * segs
        sizes = [b - a for a, b in items]
        assert max(sizes) - min(sizes) <= (1 if n >= sms - len(skip) else segs)  # rows below an SM each: whole rows
        assert sizes == sorted(sizes, reverse=True) and min(sizes) >= segs
        assert not {sm for sm, *_ in shares} & skip and shares[0][0] == first
        for (_, lo, hi, head, tail), (_, lo2, _, head2, _) in zip(shares, shares[1:]):
            assert (lo2, head2) == ((hi - 1, tail) if tail else (hi, 0))  # a tail's row is the next tile's head row


@pytest.mark.parametrize("policy,seed,tags", [("eager", 0, 0), ("random", 1, 0), ("random", 2, 1), ("random", 3, 2),
                                              ("eager", 0, 2)])
def test_item_shares_compute_the_graph_on_any_interleaving(tmp_path, policy, seed, tags):
    # persist_item_shares: the residual GEMVs dealt to the row segment; a tile whose share starts mid-row publishes
    # that row's partial, the tile before completes the row with it. The VM runs each tile's segments as dealt (a
    # wrong pairing adds the wrong segments) and holds a tail back until the next tile's partial is this token's;
    # with tagged values and tag waits too (2: the write guards polled late)
    m, prog, _, _, offsets, floats = setup(tmp_path)
    plan = tag_plan(prog) if tags else None
    sched = schedule(prog, 7, tile_rows=32, slot_of=dict(offsets), min_keys=2, tags=plan, tag_waits=tags,
                     item_segs=residual_gemvs(prog))
    split = [ins for lst in sched.lists for ins in lst if ins.kernel in sched.item_segs and ins.tail]
    assert len(split) >= 4  # 64 rows of 4 segments over 7 SMs: 37 or 36 items a share, most ending mid-row
    assert_vm_computes_the_model(m, sched, offsets, floats, seed=seed, steps=5)


def assert_a_moved_head_is_caught(m, prog, sched, trailing, offsets, floats):
    """With the head of the tile after `trailing` moved back by one item, check_item_shares names that tile and the VM
    (which does not check it) adds an item twice, so its logits are not the model's."""
    from kiec.ir.passes.persistent import check_item_shares
    bad = dataclasses.replace(sched, lists=[[dataclasses.replace(ins, head=ins.head - 1)
                                             if ins.kernel == trailing.kernel and ins.tile == trailing.tile + 1 else ins
                                             for ins in lst] for lst in sched.lists])
    with pytest.raises(ValueError, match=rf"{prog.kernels[trailing.kernel].name} tile {trailing.tile + 1}: rows"):
        check_item_shares(bad)
    with pytest.raises(AssertionError):
        assert_vm_computes_the_model(m, bad, offsets, floats, seed=0, steps=2)


def test_a_wrong_item_pairing_is_caught(tmp_path):
    # a tile that trails a row must take the segments the next tile does not: with the next tile's head moved by one
    # segment, the schedule check names it, and the VM (which does not check it) adds a segment twice and the logits
    # are not the model's; two tiles of a phase on one SM are refused; a tail whose row no tile leads deadlocks by name
    from kiec.ir.passes.persistent import check_item_shares
    m, prog, _, weights, offsets, floats = setup(tmp_path)
    sched = schedule(prog, 7, tile_rows=32, slot_of=dict(offsets), min_keys=2, item_segs=residual_gemvs(prog))
    trailing = next(ins for lst in sched.lists for ins in lst if ins.kernel in sched.item_segs and ins.tail > 1)
    assert_a_moved_head_is_caught(m, prog, sched, trailing, offsets, floats)
    # the trailing tile moved onto the SM of the tile it waits for (which would then run after it): refused by name
    after = next(sm for sm, lst in enumerate(sched.lists) for ins in lst
                 if ins.kernel == trailing.kernel and ins.tile == trailing.tile + 1)
    moved = [[ins for ins in lst if ins != trailing] for lst in sched.lists]
    moved[after].insert(0, trailing)
    with pytest.raises(ValueError, match=rf"{prog.kernels[trailing.kernel].name}: two of its tiles on one SM"):
        check_item_shares(dataclasses.replace(sched, lists=moved))
    lone = dataclasses.replace(sched, lists=[[dataclasses.replace(ins, head=0, lo=ins.lo + 1)
                                              if ins.kernel == trailing.kernel and ins.tile == trailing.tile + 1
                                              else ins for ins in lst] for lst in sched.lists])
    with pytest.raises(ScheduleError, match=rf"deadlock: .* tile {trailing.tile} on the next tile's partials of rows "
                                            rf"\[{trailing.hi - 1}, {trailing.hi}\)"):
        VM(lone, weights, offsets, floats).run([5, 17, 99], 2, "eager")


@pytest.mark.parametrize("policy,seed", [("eager", 0), ("random", 1), ("random", 2)])
def test_item_shares_of_pairs_complete_whole_pairs_and_compute_the_graph(tmp_path, policy, seed):
    # the SiLU-mul's output as tagged pairs (persist_tagged_pairs) and dealt to the item: a pair's rows are completed
    # together, by the tile that holds its last item, with the next tile's gate and up partials of both rows; a share
    # that starts at a pair's second row (head 0) leads too. Every share writes whole pairs, all of them once
    from kiec.ir.passes.phases import lead_rows, share_end_rows
    m, prog, _, _, offsets, floats = setup(tmp_path)
    gate_up = {i: 4 for i, k in enumerate(prog.kernels) if getattr(k, "epilogue", None) == "silu_mul"}
    for sms in (7, 5, 13):  # (96 rows of 4 segments: 55 or 54, 77 or 76, 30 or 29 items a share)
        sched = schedule(prog, sms, tile_rows=32, slot_of=dict(offsets), min_keys=2, item_segs=gate_up,
                         pair_rows=frozenset(gate_up))
        for i in gate_up:
            tiles = sorted((ins for lst in sched.lists for ins in lst if ins.kernel == i), key=lambda x: x.tile)
            written = [(ins.lo + lead_rows(ins, 2), share_end_rows(ins, 2)) for ins in tiles]
            assert all(a % 2 == 0 and b % 2 == 0 and b > a for a, b in written)
            assert [a for a, _ in written] == [0] + [b for _, b in written[:-1]] and written[-1][1] == 96
        leads = {(ins.lo % 2, bool(ins.head)) for lst in sched.lists for ins in lst if ins.kernel in gate_up}
        if sms == 7:  # shares from a pair's first row's middle, its second row's start and its middle, and whole
            assert leads == {(0, True), (1, False), (1, True), (0, False)}
            assert_vm_computes_the_model(m, sched, offsets, floats, seed=seed, steps=5, policy=policy)


@pytest.mark.parametrize("policy,seed,tags", [("eager", 0, 0), ("random", 1, 1), ("random", 2, 2)])
def test_every_gemv_dealt_to_the_item_computes_the_graph(tmp_path, policy, seed, tags):
    # persist_item_shares 3: QKV (a norm, a store), the output and down projections, gate/up in pairs and the LM head
    # (an argmax; select's instruction beside it) all dealt to the item, with tags and tag waits
    m, prog, _, _, offsets, floats = setup(tmp_path)
    every = {i: 4 for i, k in enumerate(prog.kernels) if hasattr(k, "epilogue") and k.n_out >= 7}
    assert {prog.kernels[i].epilogue for i in every} == {"store", "residual", "silu_mul", "argmax"}
    plan = tag_plan(prog) if tags else None
    sched = schedule(prog, 7, tile_rows=32, slot_of=dict(offsets), min_keys=2, tags=plan, tag_waits=tags,
                     item_segs=every, pair_rows=frozenset(i for i in every if prog.kernels[i].epilogue == "silu_mul"))
    assert_vm_computes_the_model(m, sched, offsets, floats, seed=seed, steps=5, policy=policy)


def test_item_shares_balance_counts_items(tmp_path):
    from kiec.ir.passes.persistent import balance
    _, prog, *_ = setup(tmp_path)
    items = residual_gemvs(prog)
    rows, by_item = (balance(schedule(prog, 7, tile_rows=32, min_keys=2, item_segs=s)) for s in (None, items))
    assert by_item["phase_bound"] > rows["phase_bound"]  # 64 rows over 7 SMs: 10 or 9; 37 or 36 items
    head = next(i for i, k in enumerate(prog.kernels) if getattr(k, "epilogue", None) == "argmax")
    sched = schedule(prog, 7, tile_rows=32, min_keys=2, item_segs={head: 4})  # (select's instruction is no share)
    assert any(ins.head for lst in sched.lists for ins in lst if ins.kernel == head)


def block_item_schedule(tmp_path, sms=5, tags=0, **fields):
    """persist_mma_item_shares on a tiny qwen3 whose GEMVs are 16-row blocks (hidden 128: 8 blocks; gate/up 192 rows:
    12): every GEMV of whole blocks dealt by the page of a block (4 K blocks a block). (m, prog, offsets, floats,
    schedule)."""
    make_tiny_hf(tmp_path, "qwen3", hidden_size=128, intermediate_size=192)
    m = kiec.load(str(tmp_path), max_seq_len=16)
    prog = pipeline.run(m.graph)
    blocks = {i: 4 for i, k in enumerate(prog.kernels) if hasattr(k, "epilogue") and k.n_out % 16 == 0}
    plan = tag_plan(prog) if tags else None
    offsets, floats = plan_buffers(prog, {}, frozenset(plan.writer) if plan else frozenset())
    sched = schedule(prog, sms, tile_rows=32, slot_of=offsets, min_keys=2, tags=plan, tag_waits=tags,
                     item_segs=blocks, block_rows=frozenset(blocks), block_items=frozenset(blocks),
                     pair_rows=frozenset(i for i in blocks if prog.kernels[i].epilogue == "silu_mul"), **fields)
    return m, prog, offsets, floats, sched


@pytest.mark.parametrize("policy,seed,tags", [("eager", 0, 0), ("random", 1, 0), ("random", 2, 1), ("random", 3, 2)])
def test_block_items_compute_the_graph_on_any_interleaving(tmp_path, policy, seed, tags):
    # persist_mma_item_shares: a tensor-core GEMV dealt by the page of a block. A share that starts inside a block
    # publishes the block's 16 rows' sums over its pages; the tile before, ending inside it, completes those rows
    # with them. Shares are whole blocks' rows, a block's pages in order, each tile writes whole blocks, all of them
    # once; the VM runs each tile's pages as dealt and holds a trailing block back until the next tile's sums are
    # this token's (with tags and tag waits too)
    from kiec.ir.passes.persistent import share_items
    from kiec.ir.passes.phases import lead_rows, share_end_rows
    m, prog, offsets, floats, sched = block_item_schedule(tmp_path, tags=tags)
    for i, segs in sched.item_segs.items():
        tiles = sorted((ins for lst in sched.lists for ins in lst if ins.kernel == i and ins.opcode == "gemv"),
                       key=lambda x: x.tile)
        assert all(ins.lo % 16 == 0 and ins.hi % 16 == 0 for ins in tiles)
        written = [(ins.lo + lead_rows(ins, 16), share_end_rows(ins, 16)) for ins in tiles]
        assert [a for a, _ in written] == [0] + [b for _, b in written[:-1]]
        assert written[-1][1] == prog.kernels[i].n_out
        sizes = [share_items(ins, segs, 16) for ins in tiles]
        assert sum(sizes) == prog.kernels[i].n_out // 16 * segs and max(sizes) - min(sizes) <= 1
    split = [ins for lst in sched.lists for ins in lst if ins.kernel in sched.item_segs and ins.head]
    assert len(split) >= 8  # (8 blocks of 4 pages over 5 SMs: 7 or 6 pages a share, most starting inside a block)
    assert_vm_computes_the_model(m, sched, offsets, floats, seed=seed, steps=5, policy=policy)


def test_a_wrong_block_item_pairing_is_caught(tmp_path):
    # the next tile's head moved by a page: the schedule check names the tile, and the VM (which does not check it)
    # adds a page twice, so the logits are not the model's; a share that is not whole blocks' rows is refused by name
    from kiec.ir.passes.persistent import check_item_shares
    m, prog, offsets, floats, sched = block_item_schedule(tmp_path)
    trailing = next(ins for lst in sched.lists for ins in lst if ins.kernel in sched.item_segs and ins.tail > 1)
    assert_a_moved_head_is_caught(m, prog, sched, trailing, offsets, floats)
    odd = dataclasses.replace(sched, lists=[[dataclasses.replace(ins, hi=ins.hi - 1) if ins == trailing else ins
                                             for ins in lst] for lst in sched.lists])
    with pytest.raises(ValueError, match=r"in whole 16-row blocks"):
        check_item_shares(odd)
    with pytest.raises(ValueError, match=r"block items need 16-row blocks"):
        schedule(prog, 5, block_items=frozenset({trailing.kernel}))
