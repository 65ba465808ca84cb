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


def mma_block_offset(row: int, col: int, k: int, width: int, rows: int = 16) -> int:
    """Where element (row, col) of a [n, k] matrix sits in its blocks`rows`x`width` layout, in elements (the offsets
    gemv_mma.cuh reads: row block, K block, row, swizzled chunk, element)."""
    r, c = row % rows, (col % width) // 8
    return ((row // rows * (k // width) + col // width) * rows + r) * width + (c ^ (r & 7)) * 8 + col % 8


@pytest.mark.parametrize("n,k,width,rows", [(32, 1024, 512, 16), (48, 512, 256, 16), (16, 2048, 512, 16),
                                            (64, 768, 256, 16), (24, 2048, 1024, 8), (8, 1024, 512, 8)])
def test_blocked_layout_puts_each_element_where_the_device_reads_it(n, k, width, rows):
    w = torch.arange(n * k, dtype=torch.int64).reshape(n, k)
    flat = mma_blocked(w, f"blocks{rows}x{width}").flatten()
    rr, cc = np.meshgrid(np.arange(n), np.arange(k), indexing="ij")
    at = np.vectorize(lambda r, c: mma_block_offset(int(r), int(c), k, width, rows))(rr, cc)
    assert np.array_equal(flat.numpy()[at], w.numpy())  # (a permutation: every element once, where expected)


@pytest.mark.parametrize("layout,shape", [("blocks16x500", (16, 1000)), ("rows", (16, 512)),
                                          ("blocks16x512", (24, 512)), ("blocks16x512", (16, 768)),
                                          ("blocks8x1024", (12, 1024)), ("blocks4x512", (16, 512))])
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


def weights_and_x(seed: int, n: int, K: int, silu: bool):
    """Random bf16 weights ([RPO * n, K]: gate rows then up rows with silu), x, and each output's exact dot in acc's
    order (a row's gate, then its up) with the sum of |w x| it is measured against."""
    gen = np.random.default_rng(seed)
    w = bf16(gen.standard_normal(((2 if silu else 1) * n, K)).astype(np.float32))
    x = gen.standard_normal(K).astype(np.float32)
    rows = [r * n + j for j in range(n) for r in range(2 if silu else 1)]
    want = w[rows].astype(np.float64) @ x.astype(np.float64)
    return w, x, want, np.abs(w[rows]).astype(np.float64) @ np.abs(x).astype(np.float64)


def frag_a(pair) -> np.ndarray:
    """mma.m16n8k16's A (16 x 16) from its lanes' registers (PTX's fragment: lane 4 g + t's a0 holds (row g, columns
    2t, 2t + 1), a1 (g + 8, 2t..), a2 (g, 2t + 8..), a3 (g + 8, 2t + 8..)); pair(lane, m): register m's 2 elements."""
    A = np.zeros((16, 16))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for m, (ar, ac) in enumerate([(g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8)]):
            A[ar, ac: ac + 2] = pair(lane, m)
    return A


def frag_b(pair) -> np.ndarray:
    """Its B (16 x 8): lane 4 g + t's b0 holds (k 2t, 2t + 1; column g), b1 (k 2t + 8, 2t + 9; g); pair(lane, h):
    register h's 2 elements."""
    B = np.zeros((16, 8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for h in range(2):
            B[2 * t + 8 * h: 2 * t + 8 * h + 2, g] = pair(lane, h)
    return B


def frag_d(D: np.ndarray) -> np.ndarray:
    """Its D (16 x 8) as the lanes' registers [32, 4]: c0, c1 (row g, columns 2t, 2t + 1), c2, c3 (row g + 8)."""
    g, t = np.arange(32) >> 2, np.arange(32) & 3
    return np.stack([D[g, 2 * t], D[g, 2 * t + 1], D[g + 8, 2 * t], D[g + 8, 2 * t + 1]], axis=1)


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
                    B = frag_b(lambda lane, h: breg[lane, h])
                    for r in range(rpo):
                        # ldmatrix.x4: lane i's address is row (i & 7) + (i & 8), chunk (2 s + (i >> 4)) ^ (row & 7)
                        addr = []
                        for i in range(32):
                            row, khalf = (i & 7) + (i & 8), i >> 4
                            addr.append(row * bw + (((2 * s + khalf) ^ (row & 7)) * 8))
                        # thread l gets, of matrix m, elements (row l >> 2, columns 2 (l & 3), + 1) of the 8 rows
                        # lanes 8 m .. 8 m + 7 addressed
                        A = frag_a(lambda lane, m: page[r][addr[8 * m + (lane >> 2)] + 2 * (lane & 3):][:2])
                        d[r, j & 1] += frag_d(A @ B)
                for lane in range(0, 32, 4):
                    g = lane >> 2
                    for r in range(rpo):  # (row g: columns 0 and 1 of both chains; row g + 8: c2, c3)
                        parts[warp, r, g] += d[r, :, lane, 0].sum() + d[r, :, lane, 1].sum()
                        parts[warp, r, g + 8] += d[r, :, lane, 2].sum() + d[r, :, lane, 3].sum()
        acc[b * 16 * rpo:(b + 1) * 16 * rpo] = parts.sum(0).T.ravel()  # (the warps' sums: row g's r at g * RPO + r)
    return acc


@pytest.mark.parametrize("n,K,silu", [(32, 1024, False), (16, 512, True), (16, 2048, False)])
def test_emulated_fragments_give_every_rows_dot(n, K, silu):
    # the device's indices (x's pieces, ldmatrix's addresses in the swizzled blocks, the fragments' rows and
    # columns, the warps' steps and the block's sums) reproduce each row's dot product with x to x's 16 significant
    # bits; a wrong swizzle, row or fragment column would mix rows or elements and miss by far more
    w, x, want, scale = weights_and_x(0, n, K, silu)
    assert np.all(np.abs(emulate(w, x, silu) - want) <= 2e-5 * scale)  # (x to 16 significant bits: 2^-16 of |w x|)


def test_emulation_fails_a_wrong_swizzle():
    # the check above can fail: the same emulation reading unswizzled blocks misses
    w, x, want, scale = weights_and_x(1, 16, 1024, False)
    assert np.all(np.abs(emulate(w, x, False) - want) <= 2e-5 * scale)
    unswizzled = lambda t, layout: t.reshape(16, -1, 512).permute(1, 0, 2).reshape(16, -1)  # noqa: E731
    assert np.max(np.abs(emulate(w, x, False, layout=unswizzled) - want) / scale) > 1e-2


def emulate8(w: np.ndarray, x: np.ndarray, silu: bool, warps: int = 8, layout=mma_blocked) -> np.ndarray:
    """gemv_pages_mma8 over one share of all of w's rows (w [RPO * n, K]: gate rows then up rows with silu) in 8-row
    blocks, its pages laid out by `layout` as the ring streams them: acc[j * RPO + r]."""
    rpo, n2, K = (2 if silu else 1), *w.shape
    n = n2 // rpo
    bw = 512 if silu else 1024
    ppb, steps = K // bw, bw // 16
    run = steps // warps
    blocked = [layout(torch.from_numpy(w[r * n:(r + 1) * n]), f"blocks8x{bw}").numpy().ravel() for r in range(rpo)]
    xf = x_pieces(x)
    acc = np.zeros(n * rpo)
    for b in range(n // 8):
        parts = np.zeros((warps, rpo, 8))
        for p in range(ppb):
            page = [blk[(b * ppb + p) * 8 * bw:(b * ppb + p + 1) * 8 * bw] for blk in blocked]
            for warp in range(warps):
                d = np.zeros((rpo, 2, 32, 4))
                for j in range(0, run, 2):
                    s = warp * run + j  # (the pair's first step)
                    for c in range(2):  # (the pair's two steps, two chains)
                        # A: lane l < 8 gives x's step s + c as (a0, a2) = (b0, b1) of mma_x_pieces; a1, a3 zero
                        areg = np.zeros((32, 4, 2))
                        areg[:8, 0] = xf[p * steps + s + c][:, 0]
                        areg[:8, 2] = xf[p * steps + s + c][:, 1]
                        A = frag_a(lambda lane, m: areg[lane, m])
                        for r in range(rpo):
                            # ldmatrix.x4: lane i's address is row i & 7, chunk (2 s + (i >> 3)) ^ row; thread l gets,
                            # of matrix m, elements (row l >> 2, columns 2 (l & 3), + 1)
                            addr = [(i & 7) * bw + (((2 * s + (i >> 3)) ^ (i & 7)) * 8) for i in range(32)]
                            # (b0, b1: matrices 2c and 2c + 1, w[0] and w[1] or w[2] and w[3])
                            B = frag_b(lambda lane, h: page[r][addr[8 * (2 * c + h) + (lane >> 2)]
                                                               + 2 * (lane & 3):][:2])
                            d[r, c] += frag_d(A @ B)
                for r in range(rpo):  # (chains summed, then lane t + the lane 4 + t: rows 2t, 2t + 1)
                    v = d[r, 0, :, :2] + d[r, 1, :, :2]
                    for t in range(4):
                        parts[warp, r, 2 * t: 2 * t + 2] += v[t] + v[4 + t]
        acc[b * 8 * rpo:(b + 1) * 8 * rpo] = parts.sum(0).T.ravel()
    return acc


@pytest.mark.parametrize("n,K,silu", [(24, 2048, False), (8, 512, True), (16, 1024, True)])
def test_emulated_8_row_fragments_give_every_rows_dot(n, K, silu):
    # gemv_pages_mma8's indices (the weights as B, x's pieces as A's first two rows, ldmatrix's two steps, the
    # swizzle, the shuffle that adds the pieces) reproduce each row's dot to x's 16 significant bits; an unswizzled
    # layout misses by far more
    w, x, want, scale = weights_and_x(2, n, K, silu)
    assert np.all(np.abs(emulate8(w, x, silu) - want) <= 2e-5 * scale)
    bw = 512 if silu else 1024
    unswizzled = lambda t, layout: t.reshape(-1, 8, K // bw, bw).permute(0, 2, 1, 3).reshape(t.shape)  # noqa: E731
    assert np.max(np.abs(emulate8(w, x, silu, layout=unswizzled) - want) / scale) > 1e-2


@pytest.mark.parametrize("name", ["llama-3.2-1b", "qwen3-1.7b"])
def test_block_rows_are_dealt_in_whole_blocks(name):
    from kiec.ir.passes import pipeline
    from kiec.ir.passes.persistent import schedule
    from kiec.ir.passes.program import GemvKernel
    prog = pipeline.run(kiec.load(name, max_seq_len=256).graph)
    gemvs = [i for i, k in enumerate(prog.kernels) if isinstance(k, GemvKernel)]
    block = {i: (8 if j % 2 else 16) for j, i in enumerate(gemvs)}  # (blocks of 16 or 8 rows, every other GEMV)
    sched = schedule(prog, 132, block_rows=block)
    for i in gemvs:
        shares = sorted((ins.lo, ins.hi) for lst in sched.lists for ins in lst
                        if ins.kernel == i and ins.opcode == "gemv")
        assert all(lo % block[i] == 0 and hi % block[i] == 0 and hi > lo for lo, hi in shares)
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


def test_8_row_blocks_take_the_gemvs_16_row_blocks_deal_unevenly():
    # persist_mma_block8: llama-3.2-1b's QKV (3072 rows: 16-row blocks 32 rows an SM against 24 by the row, 8-row
    # blocks 24) streams 8-row blocks of 1024 elements (a page each), its tile function takes MMA8, its weights are a
    # blocks8x1024 copy and the kernel is compiled with KIEC_MMA_BLOCK8 (the walk counts its pages by bytes); the
    # other GEMVs keep their 16-row blocks, and the ring its 12 pages
    from kiec.codegen.persistent_abi import FLAG_BLOCKS, KERNEL_FIELDS, KERNEL_FORMAT
    prog, e, src = emitter("llama-3.2-1b", persist_mma_rows="qkv+o+gate_up+down+head", persist_mma_block8=1)
    names = [n for n, _, _ in KERNEL_FIELDS]
    layouts = {t.name: t.layout for t in src.weights}
    rows = {}
    for k, blob in zip(prog.kernels, e.descs):
        if type(k).__name__ != "GemvKernel":
            continue
        d = dict(zip(names, struct.unpack(KERNEL_FORMAT, blob)))
        case = e.cases[d["spec"]].rstrip(")")
        kind = e.gemv_kind(k)
        assert d["flags"] & FLAG_BLOCKS
        if case.find("kiec::NoConsumerMerge, true, true>") >= 0:
            rows[kind] = 8
            assert d["item_bytes"] == 8 * 1024 * 2 and layouts["+".join(k.weights) + "@blocks8x1024"] == "blocks8x1024"
        else:
            assert case.find("kiec::NoConsumerMerge, true>") >= 0
            rows[kind] = 16
    assert rows == {"qkv": 8, "o": 16, "gate_up": 16, "down": 16, "head": 16}
    assert "#define KIEC_MMA_BLOCK8 1" in src.files["model.cu"] and re.search(r"Ring<12, 16384>", src.files["model.cu"])
    assert "KIEC_MMA_BLOCK8" not in emitter("llama-3.2-1b", persist_mma_rows="qkv+o+gate_up+down+head")[2].files[
        "model.cu"]  # (without persist_mma_block8: 16-row blocks only)


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
    assert not np.isfinite(np.float16(np.float32(70000.0)))  # (what the fp16 pieces would make of such an x)


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


@pytest.mark.parametrize("K,silu,rows", [(512, False, 16), (2048, False, 16), (8192, False, 16), (256, True, 16),
                                         (2048, True, 16), (2048, False, 8), (1024, False, 8), (512, True, 8)])
def test_each_warp_makes_the_x_pieces_it_reads(K, silu, rows, warps=8):
    # mma_x_pieces is followed by a warp barrier only: the steps a warp converts (two lanes a step, each its own two
    # quarters) must be exactly the steps its mmas read in gemv_pages_mma (gemv_pages_mma8: the same run, in pairs),
    # each step once (formulas copied)
    steps = (256 if silu else 512) * 16 // rows // 16
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
