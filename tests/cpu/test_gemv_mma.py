"""The tensor-core GEMV (persist_mma_rows, templates/include/kiec/gemv_mma.cuh) checked on the CPU: its weight layout
(codegen/emit.py: mma_blocked) against the element offsets the device code reads, the index arithmetic of its x
pieces, ldmatrix addresses and mma fragments emulated under PTX's fragment rules (the formulas are gemv_mma.cuh's,
copied: change both together), the schedule's whole blocks, and the emitter's choices."""
import re
import struct

import numpy as np
import pytest
import torch

import kiec
from kiec.codegen.emit import mma_block_width, mma_blocked


def mma_block_offset(row: int, col: int, k: int, width: int) -> int:
    """Where element (row, col) of a [n, k] matrix sits in its blocks16x`width` layout, in elements (the offsets
    gemv_mma.cuh reads: row block, K block, row, swizzled chunk, element)."""
    r, c = row % 16, (col % width) // 8
    return ((row // 16 * (k // width) + col // width) * 16 + r) * width + (c ^ (r & 7)) * 8 + col % 8


@pytest.mark.parametrize("n,k,width", [(32, 1024, 512), (48, 512, 256), (16, 2048, 512), (64, 768, 256)])
def test_blocked_layout_puts_each_element_where_the_device_reads_it(n, k, width):
    w = torch.arange(n * k, dtype=torch.int64).reshape(n, k)
    flat = mma_blocked(w, f"blocks16x{width}").flatten()
    rows, cols = np.meshgrid(np.arange(n), np.arange(k), indexing="ij")
    at = np.vectorize(lambda r, c: mma_block_offset(int(r), int(c), k, width))(rows, cols)
    assert np.array_equal(flat.numpy()[at], w.numpy())  # (a permutation: every element once, where expected)


@pytest.mark.parametrize("layout,shape", [("blocks16x500", (16, 1000)), ("rows", (16, 512)),
                                          ("blocks16x512", (24, 512)), ("blocks16x512", (16, 768))])
def test_a_layout_that_does_not_fit_is_refused_by_name(layout, shape):
    with pytest.raises(ValueError, match=re.escape(layout)):
        mma_block_width(layout, shape)


def bf16(x: np.ndarray) -> np.ndarray:
    """x rounded to bf16 (nearest even), as float32."""
    return torch.from_numpy(np.asarray(x, dtype=np.float32)).to(torch.bfloat16).float().numpy()


def x_pieces(x: np.ndarray) -> np.ndarray:
    """mma_x_pieces: step s's 8 lanes' (b0, b1) as (hi or lo) element pairs: [K / 16, 8 lanes, 2 registers, 2]."""
    steps = x.reshape(-1, 16)
    hi = bf16(steps)
    lo = bf16(steps - hi)
    out = np.zeros((steps.shape[0], 8, 2, 2), dtype=np.float32)
    for lane in range(8):
        piece, t = (hi, lo)[lane >> 2], lane & 3
        out[:, lane, 0] = piece[:, 2 * t: 2 * t + 2]          # b0: k 2t, 2t + 1
        out[:, lane, 1] = piece[:, 2 * t + 8: 2 * t + 10]     # b1: k 2t + 8, 2t + 9
    return out


def emulate(w: np.ndarray, x: np.ndarray, silu: bool, warps: int = 8, layout=mma_blocked) -> np.ndarray:
    """gemv_pages_mma over one share of all of w's rows (w [RPO * n, K]: gate rows then up rows with silu), its
    pages laid out by `layout` as the ring streams them: acc[j * RPO + r]."""
    rpo, n2, K = (2 if silu else 1), *w.shape
    n = n2 // rpo
    bw = 256 if silu else 512
    ppb, steps = K // bw, bw // 16
    blocked = [layout(torch.from_numpy(w[r * n:(r + 1) * n]), f"blocks16x{bw}").numpy().ravel()
               for r in range(rpo)]
    xf = x_pieces(x)
    acc = np.zeros(n * rpo)
    for b in range(n // 16):
        parts = np.zeros((warps, rpo, 16))
        for p in range(ppb):
            page = [blk[(b * ppb + p) * 16 * bw:(b * ppb + p + 1) * 16 * bw] for blk in blocked]  # (the item)
            for warp in range(warps):
                d = np.zeros((rpo, 2, 32, 4))
                for j in range(steps // warps):
                    s = warp * (steps // warps) + j  # (a warp's run of the page's steps)
                    # B: lane l < 8 loads entry l of x's step; the others zeros
                    breg = np.zeros((32, 2, 2))
                    breg[:8] = xf[p * steps + s]
                    B = np.zeros((16, 8))  # B[k][n]: b0 = (k 2t, 2t + 1; n g), b1 = (k 2t + 8, 2t + 9; n g)
                    for lane in range(32):
                        g, t = lane >> 2, lane & 3
                        B[2 * t: 2 * t + 2, g] = breg[lane, 0]
                        B[2 * t + 8: 2 * t + 10, g] = breg[lane, 1]
                    for r in range(rpo):
                        # ldmatrix.x4: lane i's address is row (i & 7) + (i & 8), chunk (2 s + (i >> 4)) ^ (row & 7)
                        addr = []
                        for i in range(32):
                            row, khalf = (i & 7) + (i & 8), i >> 4
                            addr.append(row * bw + (((2 * s + khalf) ^ (row & 7)) * 8))
                        # thread l gets, of matrix m, elements (row l >> 2, columns 2 (l & 3), + 1) of the 8 rows
                        # lanes 8 m .. 8 m + 7 addressed
                        A = np.zeros((16, 16))  # a0: (g, 2t..), a1: (g + 8, 2t..), a2: (g, 2t + 8..), a3: (g + 8, ..)
                        for lane in range(32):
                            g, t = lane >> 2, lane & 3
                            for m, (ar, ac) in enumerate([(g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8),
                                                          (g + 8, 2 * t + 8)]):
                                src = addr[8 * m + g] + 2 * t
                                A[ar, ac: ac + 2] = page[r][src: src + 2]
                        D = A @ B  # (16 x 8)
                        for lane in range(32):  # c0, c1: (g, 2t..2t + 1), c2, c3: (g + 8, ..)
                            g, t = lane >> 2, lane & 3
                            d[r, j & 1, lane] += [D[g, 2 * t], D[g, 2 * t + 1], D[g + 8, 2 * t], D[g + 8, 2 * t + 1]]
                for lane in range(0, 32, 4):
                    g = lane >> 2
                    for r in range(rpo):  # (row g: columns 0 and 1 of both chains; row g + 8: c2, c3)
                        parts[warp, r, g] += d[r, :, lane, 0].sum() + d[r, :, lane, 1].sum()
                        parts[warp, r, g + 8] += d[r, :, lane, 2].sum() + d[r, :, lane, 3].sum()
        for g in range(16):
            for r in range(rpo):
                acc[(b * 16 + g) * rpo + r] = parts[:, r, g].sum()
    return acc


@pytest.mark.parametrize("n,K,silu", [(32, 1024, False), (16, 512, True), (16, 2048, False)])
def test_emulated_fragments_give_every_rows_dot(n, K, silu):
    # the device's indices (x's pieces, ldmatrix's addresses in the swizzled blocks, the fragments' rows and
    # columns, the warps' steps and the block's sums) reproduce each row's dot product with x to x's 16 significant
    # bits; a wrong swizzle, row or fragment column would mix rows or elements and miss by far more
    gen = np.random.default_rng(0)
    w = bf16(gen.standard_normal(((2 if silu else 1) * n, K)).astype(np.float32))
    x = gen.standard_normal(K).astype(np.float32)
    got = emulate(w, x, silu)
    rpo = 2 if silu else 1
    rows = [r * n + j for j in range(n) for r in range(rpo)]  # (acc's order: a row's gate, then its up)
    want = w[rows].astype(np.float64) @ x.astype(np.float64)
    scale = np.abs(w[rows]).astype(np.float64) @ np.abs(x).astype(np.float64)
    assert np.all(np.abs(got - want) <= 2e-5 * scale)  # (x to 16 significant bits: 2^-16 of the sum of |w x|)


def test_emulation_fails_a_wrong_swizzle():
    # the check above can fail: the same emulation reading unswizzled blocks misses
    gen = np.random.default_rng(1)
    w = bf16(gen.standard_normal((16, 1024)).astype(np.float32))
    x = gen.standard_normal(1024).astype(np.float32)
    want = w.astype(np.float64) @ x.astype(np.float64)
    scale = np.abs(w).astype(np.float64) @ np.abs(x).astype(np.float64)
    assert np.all(np.abs(emulate(w, x, False) - want) <= 2e-5 * scale)
    unswizzled = lambda t, layout: t.reshape(16, -1, 512).permute(1, 0, 2).reshape(16, -1)  # noqa: E731
    assert np.max(np.abs(emulate(w, x, False, layout=unswizzled) - want) / scale) > 1e-2


@pytest.mark.parametrize("name", ["llama-3.2-1b", "qwen3-1.7b"])
def test_block_rows_are_dealt_in_whole_blocks(name):
    from kiec.ir.passes import pipeline
    from kiec.ir.passes.persistent import schedule
    from kiec.ir.passes.program import GemvKernel
    prog = pipeline.run(kiec.load(name, max_seq_len=256).graph)
    gemvs = frozenset(i for i, k in enumerate(prog.kernels) if isinstance(k, GemvKernel))
    sched = schedule(prog, 132, block_rows=gemvs)
    for i in gemvs:
        shares = sorted((ins.lo, ins.hi) for lst in sched.lists for ins in lst
                        if ins.kernel == i and ins.opcode == "gemv")
        assert all(lo % 16 == 0 and hi % 16 == 0 and hi > lo for lo, hi in shares)
        assert [lo for lo, _ in shares[1:]] == [hi for _, hi in shares[:-1]] and shares[-1][1] == prog.kernels[i].n_out


def emitter(name, dtype="bf16", **fields):
    import dataclasses

    from kiec.codegen.persistent import _PersistentEmitter, walk
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    prog = pipeline.run(kiec.load(name, max_seq_len=256).graph)
    e = _PersistentEmitter(prog, dtype, 256, dataclasses.replace(target("sm_90"), **fields))
    return prog, e, walk(e, prog, "test")


def test_the_kinds_named_run_on_the_tensor_cores_and_stream_blocks():
    # llama-3.2-1b with every kind but QKV (whose 192 blocks deal unevenly over 132 SMs): those GEMVs' descriptors
    # stream 16-row blocks (FLAG_BLOCKS, item_bytes 16 rows of a block), their tile functions take MMA, their
    # weights are a blocks16xW copy (the tied LM head's apart from the embedding's table); QKV keeps the FMA tile
    from kiec.codegen.persistent_abi import FLAG_BLOCKS, FLAG_SILU, KERNEL_FIELDS, KERNEL_FORMAT
    prog, e, src = emitter("llama-3.2-1b", persist_mma_rows="o+gate_up+down+head")
    names = [n for n, _, _ in KERNEL_FIELDS]
    layouts = {t.name: t.layout for t in src.weights}
    seen = set()
    for k, blob in zip(prog.kernels, e.descs):
        if type(k).__name__ != "GemvKernel":
            continue
        d = dict(zip(names, struct.unpack(KERNEL_FORMAT, blob)))
        kind, mma = e.gemv_kind(k), e.cases[d["spec"]].rstrip(")").find("kiec::NoConsumerMerge, true>") >= 0
        assert mma == (kind != "qkv") == bool(d["flags"] & FLAG_BLOCKS), (k.name, kind)
        assert bool(d["flags"] & FLAG_SILU) == (k.epilogue == "silu_mul")
        if mma:
            width = 256 if k.epilogue == "silu_mul" else 512
            assert d["item_bytes"] == 16 * width * 2 and d["row_bytes"] == 2 * k.k
            assert layouts["+".join(k.weights) + f"@blocks16x{width}"] == f"blocks16x{width}"
            seen.add(kind)
    assert seen == {"o", "gate_up", "down", "head"}
    assert layouts["model.embed_tokens.weight"] == ""  # (the embedding still reads rows)
    assert re.search(r"Ring<12, 16384>", src.files["model.cu"])  # (the slots cost no page of the ring)


def test_a_wrong_mma_field_is_refused_by_name():
    with pytest.raises(ValueError, match="gate is no kind of GEMV"):
        emitter("llama-3.2-1b", persist_mma_rows="gate+down")


@pytest.mark.parametrize("fields", [dict(persist_page_bytes=8192), dict(persist_warps=12)])
def test_pages_or_warps_the_blocks_do_not_fit_keep_the_fma_tile(fields):
    # the tensor-core blocks fill 16 KB pages and give each warp a run of a page's 16 or 32 steps: with other pages
    # or 12 warps every GEMV keeps the FMA tile (the table's default names every kind; a knob test changes these)
    prog, e, src = emitter("llama-3.2-1b", persist_mma_rows="qkv+o+gate_up+down+head", **fields)
    assert not e.mma and "NoConsumerMerge, true>" not in src.files["model.cu"]


def test_fp16_weights_keep_the_fma_tile():
    # x's pieces take the weights' type: in fp16 an x past 65504 would be infinite (the FMA tile reads x in fp32), so
    # an fp16 model keeps the FMA tile wherever bf16 would take the tensor cores
    prog, e, src = emitter("qwen3-1.7b", "f16", persist_mma_rows="qkv+o+gate_up+down+head")
    assert not e.mma and "NoConsumerMerge, true>" not in src.files["model.cu"]
    assert emitter("qwen3-1.7b", persist_mma_rows="qkv+o+gate_up+down+head")[1].mma


@pytest.mark.parametrize("name,excess,kinds", [
    ("smollm2-135m", 5, set()), ("smollm2-135m", 400, {"down"}),
    ("llama-3.2-1b", 5, {"o", "gate_up", "down", "head"}),
    ("llama-3.2-1b", 50, {"qkv", "o", "gate_up", "down", "head"}),
    ("qwen3-1.7b", 5, {"qkv", "o", "gate_up", "down", "head"})])
def test_only_gemvs_of_whole_blocks_dealt_evenly_take_the_tensor_cores(name, excess, kinds):
    # every kind asked for: smollm2-135m's K 576 is no whole number of 512- or 256-element blocks, and its down
    # projection's (K 1536) 36 blocks would put 16 rows on 36 SMs where rows put 5 on each of 132 (+220%);
    # llama-3.2-1b's QKV, 192 blocks, 32 rows against 24 (+33%); each within persist_mma_share_excess when it allows
    prog, e, src = emitter(name, persist_mma_rows="qkv+o+gate_up+down+head", persist_mma_share_excess=excess)
    assert {e.gemv_kind(prog.kernels[i]) for i in e.mma} == kinds
    assert src.files["model.cu"].count("NoConsumerMerge, true>") == len(kinds)


@pytest.mark.parametrize("K,silu", [(512, False), (2048, False), (8192, False), (256, True), (2048, True)])
def test_each_warp_makes_the_x_pieces_it_reads(K, silu, warps=8):
    # mma_x_pieces is followed by a warp barrier only: the steps a warp converts (two lanes a step, each its own two
    # quarters) must be exactly the steps its mmas read in gemv_pages_mma, each step once (formulas copied)
    steps = (256 if silu else 512) // 16
    run, own = steps // warps, K // 16 // warps
    made = {}
    for warp in range(warps):
        for lane in range(32):
            for n in range(lane >> 1, own, 16):
                s = n // run * steps + warp * run + n % run
                for quarter in (lane & 1, 2 + (lane & 1)):
                    assert (s, quarter) not in made
                    made[s, quarter] = warp
    assert sorted(made) == [(s, q) for s in range(K // 16) for q in range(4)]
    for warp in range(warps):
        read = {p * steps + warp * run + j for p in range(K // (steps * 16)) for j in range(run)}
        assert read == {s for (s, _), w in made.items() if w == warp}


ALL = "qkv+o+gate_up+down+head"  # (persist_mma_rows' default, which the tests' conftest sets to "")


def test_kinds_dealt_by_the_page_take_block_items():
    # persist_mma_item_shares: the tensor-core GEMVs of the kinds named are dealt by the page of a block (the
    # schedule's block_items, a block's K blocks as item segments): llama-3.1-8b's gate/up (896 blocks of 16 pages
    # over 132 SMs) takes 108 or 109 pages a share where whole blocks give 104 SMs 112 and 28 SMs 96; its tile
    # function takes the share (SK) on the tensor cores (MMA), and the others keep whole blocks
    from kiec.ir.passes.persistent import share_items
    prog, e, src = emitter("llama-3.1-8b", persist_mma_rows=ALL, persist_mma_item_shares="gate_up")
    gate_up = {i for i, k in enumerate(prog.kernels) if getattr(k, "epilogue", None) == "silu_mul"}
    assert set(e.mma_items) == gate_up and set(e.mma_items.values()) == {16} and gate_up <= set(e.mma)
    assert e.sched.block_items == frozenset(gate_up)
    for i in gate_up:
        pages = [share_items(ins, 16, 16) for lst in e.sched.lists for ins in lst if ins.kernel == i]
        assert sorted(set(pages)) == [108, 109] and sum(pages) == 896 * 16
    cases = re.findall(r"gemv_tile<T, 4096, 8, true, kiec::EPI_SILU_MUL, [^>]*>", src.files["model.cu"])
    assert len(cases) == 1 and cases[0].endswith(", true, kiec::NoConsumerMerge, true>")  # (SK, MG, MMA)
    assert "#define KIEC_ITEM_SHARES 1" in src.files["model.cu"]
    assert not any(ins.head or ins.tail for lst in e.sched.lists for ins in lst if ins.kernel not in gate_up)


def test_a_kind_dealt_by_the_page_leaves_the_share_rule_aside():
    # llama-3.2-1b's QKV (192 blocks: whole blocks would give 32 rows where rows give 24) stays off the tensor cores by
    # the share rule, but dealt by the page (4 a block: 5 or 6 pages a share) it takes them
    prog, e, _ = emitter("llama-3.2-1b", persist_mma_rows=ALL)
    assert not any(e.gemv_kind(prog.kernels[i]) == "qkv" for i in e.mma)
    prog, e, _ = emitter("llama-3.2-1b", persist_mma_rows=ALL, persist_mma_item_shares="qkv")
    assert {e.gemv_kind(prog.kernels[i]) for i in e.mma_items} == {"qkv"} and set(e.mma_items) <= set(e.mma)


@pytest.mark.parametrize("fields,message", [
    (dict(persist_mma_item_shares="gate"), "persist_mma_item_shares 'gate': gate is no kind of GEMV"),
    (dict(persist_mma_item_shares="down", persist_tag_parity=1), "persist_mma_item_shares with persist_tag_parity")])
def test_a_wrong_mma_item_share_field_is_refused_by_name(fields, message):
    with pytest.raises(ValueError, match=message):
        emitter("llama-3.2-1b", persist_mma_rows=ALL, **fields)
