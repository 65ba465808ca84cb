"""bench/mma_rows.cu's swizzled tensor-core ways emulated on the CPU with PTX's fragment rules, to check their index
arithmetic before a GPU runs them: each lane's ldmatrix row address, the fragments ldmatrix.m8n8.b16 gives it, what
mma.m16n8k16.row.col sums, and the lanes that hold each row's sum (PTX ISA: "Matrix fragments for mma.m16n8k16"
and "ldmatrix"). Prints each way's largest error against a direct dot of the same swizzled rows with x = its hi piece
plus its lo piece (here two unrelated values, so that a lane mixing them up shows: the fragments, not bf16's rounding,
are under test) and the most rows of one 8 x 8 matrix on one
16-byte bank group (1: no conflicts; the unswizzled rows for comparison). Exits 1 on a wrong sum or a conflict.
    python3 bench/mma_rows_emulate.py"""
import sys

import numpy as np

WARPS, BUF = 8, 128 << 10
CHUNKS = BUF // 16  # 16-byte chunks in the buffer
SMEM = np.random.default_rng(1).standard_normal(BUF // 2)  # the buffer's bf16 slots, as floats


def made_x(k: int) -> float:
    return 0.5 + 0.37 * np.sin(0.1 * k) - 1e-4 * k


def lo_piece(k: int) -> float:
    return 1e-3 * np.cos(0.7 * k)


def swizzled(j: int, k: int, K: int) -> float:
    """Row j's element k where row j's logical chunk c sits at chunk j * K / 8 + (c ^ (j & 7)) (mod the buffer)."""
    return SMEM[(j * (K // 8) + ((k // 8) ^ (j & 7))) % CHUNKS * 8 + k % 8]


def ldmatrix(addrs: list[int], count: int) -> list[list[tuple]]:
    """ldmatrix.x{count}: lane t gives row t % 8 of matrix t // 8; lane t gets, of each matrix i, row t // 4's
    elements 2 (t % 4) and 2 (t % 4) + 1."""
    out = [[None] * count for _ in range(32)]
    for i in range(count):
        rows = [SMEM[addrs[8 * i + r] // 2:][:8] for r in range(8)]
        for t in range(32):
            out[t][i] = (rows[t // 4][2 * (t % 4)], rows[t // 4][2 * (t % 4) + 1])
    return out


def mma(d: list, a: list, b: list) -> None:
    """d += A B, m16n8k16 row.col: lane t = 4 g + q holds A[g][2q..], A[g + 8][2q..], A[g][2q + 8..], A[g + 8][2q +
    8..]; B[2q..][g], B[2q + 8..][g]; D[g][2q], D[g][2q + 1], D[g + 8][2q], D[g + 8][2q + 1]."""
    A, B = np.zeros((16, 16)), np.zeros((16, 8))
    for t in range(32):
        g, q = t >> 2, t & 3
        for reg, (row, col) in enumerate([(g, 2 * q), (g + 8, 2 * q), (g, 2 * q + 8), (g + 8, 2 * q + 8)]):
            A[row, col:col + 2] = a[t][reg]
        B[2 * q:2 * q + 2, g], B[2 * q + 8:2 * q + 10, g] = b[t]
    D = A @ B
    for t in range(32):
        g, q = t >> 2, t & 3
        d[t] += [D[g, 2 * q], D[g, 2 * q + 1], D[g + 8, 2 * q], D[g + 8, 2 * q + 1]]


def x_pairs(s: int, t: int) -> tuple:
    """Lane t's x pieces for step s as mma_rows.cu holds them: group 0 the hi pieces, group 1 the lo ones, the others
    zeros."""
    k, g = s * 16 + (t & 3) * 2, t >> 2
    if g > 1:
        return (0.0, 0.0), (0.0, 0.0)
    f = made_x if g == 0 else lo_piece
    return (f(k), f(k + 1)), (f(k + 8), f(k + 9))


def addr16(K: int, rb: int, s: int, lane: int, swizzle: bool = True) -> int:
    """mma_rows<K, ROWS, true>'s ldmatrix.x4 row address: matrices (rows 0-7 | 8-15) x (chunk 2s | 2s + 1)."""
    m = lane >> 3
    row, c = rb * 16 + (m & 1) * 8 + (lane & 7), 2 * s + (m >> 1)
    return (row * (K // 8) + (c ^ (lane & 7) if swizzle else c)) % CHUNKS * 16


def addr8(K: int, rb: int, s: int, lane: int) -> int:
    """mma8_rows's ldmatrix.x2 row address: lanes 0-7 chunk 2s, lanes 8-15 chunk 2s + 1, of rows 8 rb + lane % 8."""
    n = lane & 7
    return ((rb * 8 + n) * (K // 8) + ((2 * s + ((lane >> 3) & 1)) ^ n)) % CHUNKS * 16


def rows16(K: int, ROWS: int) -> np.ndarray:
    """mma_rows<K, ROWS, true>: A the weights (16 rows), B x's pieces; lane 4g (q 0) keeps rows g and g + 8."""
    red = np.zeros(ROWS)
    for warp in range(WARPS):
        for rb in range(ROWS // 16):
            d = [np.zeros(4) for _ in range(32)]
            for s in range(warp, K // 16, WARPS):
                mma(d, ldmatrix([addr16(K, rb, s, t) for t in range(32)], 4), [x_pairs(s, t) for t in range(32)])
            for g in range(8):
                red[rb * 16 + g] += d[4 * g][0] + d[4 * g][1]
                red[rb * 16 + g + 8] += d[4 * g][2] + d[4 * g][3]
    return red


def rows8(K: int, ROWS: int) -> np.ndarray:
    """mma8_rows: A x's pieces (rows 0 and 1), B 8 weight rows; lane q holds rows 2q and 2q + 1's hi sums, lane q + 4
    their lo sums (the shuffle)."""
    red = np.zeros(ROWS)
    for warp in range(WARPS):
        for rb in range(ROWS // 8):
            d = [np.zeros(4) for _ in range(32)]
            for s in range(warp, K // 16, WARPS):
                b = [tuple(f) for f in ldmatrix([addr8(K, rb, s, t) for t in range(32)], 2)]
                a = [(p0, (0.0, 0.0), p1, (0.0, 0.0)) for p0, p1 in (x_pairs(s, t) for t in range(32))]
                mma(d, a, b)
            for q in range(4):
                red[rb * 8 + 2 * q] += d[q][0] + d[q + 4][0]
                red[rb * 8 + 2 * q + 1] += d[q][1] + d[q + 4][1]
    return red


def segs_of(chunks: int) -> int:
    """mma_rows.cu's segs_of: the FMA tile's segments a row (at most 4 chunks a lane)."""
    s = 1
    while s < WARPS:
        if chunks % s == 0 and (chunks // s + 31) // 32 <= 4:
            return s
        s *= 2
    return WARPS


class Paged:
    """mma_rows.cu's PagedShape<K>: 16 KB pages of whole items (row j's segment g is item j SEGS + g), each item's
    chunks XOR-swizzled in 128-byte groups by its slot in the page."""
    PAGE = 16 << 10

    def __init__(self, K: int):
        self.segs = segs_of(K // 8)
        self.segc = K // 8 // self.segs
        self.item = self.segc * 16
        self.per_page = self.PAGE // self.item
        self.steps = self.segc // 2
        self.s = -(-self.steps // WARPS)
        self.tiles = -(-self.per_page // 8)

    def at(self, i: int, c: int) -> int:
        slot = i % self.per_page
        return (i // self.per_page % (BUF // self.PAGE)) * self.PAGE + slot * self.item + (c ^ (slot & 7)) * 16

    def weight(self, j: int, k: int) -> float:
        c = k // 8
        return SMEM[self.at(j * self.segs + c // self.segc, c % self.segc) // 2 + k % 8]


def paged_addr(P: Paged, first: int, here: int, t: int, s0: int, s1: int, two: bool, lane: int) -> int:
    """page_rows's ldmatrix.x4 row address: item n = lane % 8 of tile t (past the page's items: slot n, or 0),
    matrices 0 and 1 step s0's chunks 2 s0 and 2 s0 + 1, matrices 2 and 3 step s1's (s0's where there is no second)."""
    mat, n = lane >> 3, lane & 7
    slot = 8 * t + n
    step = s0 if mat < 2 or not two else s1
    return P.at(first + (slot if slot < here else n if n < here else 0), 2 * step + (mat & 1))


def paged_a(P: Paged, s: int, lane: int) -> tuple:
    """page_rows's A at step s: rows g and g + 8 are segment row // 2's hi (made_x) or lo (lo_piece) pieces."""
    g, q = lane >> 2, lane & 3
    regs = [None] * 4
    for r in range(2):
        m = g + 8 * r
        k = (m >> 1) * P.segc * 8 + s * 16 + 2 * q
        f = made_x if m % 2 == 0 else lo_piece
        live = s < P.steps and m < 2 * P.segs
        regs[r] = (f(k), f(k + 1)) if live else (0.0, 0.0)
        regs[2 + r] = (f(k + 8), f(k + 9)) if live else (0.0, 0.0)
    return tuple(regs)


def rows_paged(K: int, ROWS: int) -> np.ndarray:
    """page_rows: B 8 items of a page, A every segment's x pieces; the hi and lo rows added by a shuffle (lane ^ 4),
    lanes of even g keep the item's part from the row pair of its segment."""
    P = Paged(K)
    items = ROWS * P.segs
    red = np.zeros((WARPS * P.segs, ROWS))
    for warp in range(WARPS):
        for p in range(-(-items // P.per_page)):
            first = p * P.per_page
            here = min(P.per_page, items - first)
            for t in range(P.tiles):
                d = [np.zeros(4) for _ in range(32)]
                for i in range(0, P.s, 2):
                    s0, s1 = warp + i * WARPS, warp + (i + 1) * WARPS
                    two = i + 1 < P.s and s1 < P.steps
                    if s0 >= P.steps:
                        continue
                    b = ldmatrix([paged_addr(P, first, here, t, s0, s1, two, u) for u in range(32)], 4)
                    mma(d, [paged_a(P, s0, u) for u in range(32)], [tuple(f[:2]) for f in b])
                    if two:
                        mma(d, [paged_a(P, s1, u) for u in range(32)], [tuple(f[2:]) for f in b])
                v = [d[u] + d[u ^ 4] for u in range(32)]
                for u in range(32):
                    g, q = u >> 2, u & 3
                    if g % 2:
                        continue
                    for e in range(2):
                        sl = 8 * t + 2 * q + e
                        if sl < here:
                            i = first + sl
                            seg, row = i % P.segs, i // P.segs
                            if seg == g >> 1:
                                red[warp * P.segs + seg, row] = v[u][e]
                            elif seg == (g + 8) >> 1:
                                red[warp * P.segs + seg, row] = v[u][2 + e]
    return red.sum(axis=0)


def worst_bank_group(K: int, addr, matrices: int) -> int:
    """The most of one matrix's 8 row addresses on one 16-byte bank group (128-byte lines), over a few row groups."""
    worst = 1
    for rb in range(4):
        for s in range(K // 16):
            addrs = [addr(K, rb, s, t) for t in range(32)]
            for i in range(matrices):
                groups = [(addrs[8 * i + r] // 16) % 8 for r in range(8)]
                worst = max(worst, max(groups.count(x) for x in groups))
    return worst


def main() -> int:
    ok = True
    for K, ROWS in [(576, 16), (2048, 32)]:
        ref = np.array([sum(swizzled(j, k, K) * (made_x(k) + lo_piece(k)) for k in range(K)) for j in range(ROWS)])
        for name, way in [("16 rows (mma_rows, swizzled)", rows16), ("8 rows (mma8_rows)", rows8)]:
            err = np.abs(way(K, ROWS) - ref).max() / np.abs(ref).max()
            ok &= err < 1e-12
            print(f"K {K:5d} rows {ROWS:3d} {name:<30} largest error {err:.1e} of the largest sum")
    for K, ROWS in [(576, 16), (2048, 32), (8192, 16), (4096, 32)]:
        P = Paged(K)
        ref = np.array([sum(P.weight(j, k) * (made_x(k) + lo_piece(k)) for k in range(K)) for j in range(ROWS)])
        err = np.abs(rows_paged(K, ROWS) - ref).max() / np.abs(ref).max()
        ok &= err < 1e-12
        print(f"K {K:5d} rows {ROWS:3d} {'paged, steps split (page_rows)':<30} largest error {err:.1e} of the "
              f"largest sum ({P.segs} segments, {P.per_page} items a page)")
    for K in (576, 2048, 8192):
        P = Paged(K)
        conflicts = (worst_bank_group(K, addr16, 4), worst_bank_group(K, addr8, 2),
                     worst_bank_group(K, lambda *a: addr16(*a, swizzle=False), 4),
                     worst_bank_group(K, lambda K_, t, s, u: paged_addr(P, 0, P.per_page, t % P.tiles, s, s, False, u), 4))
        ok &= conflicts[:2] == (1, 1) and conflicts[3] == 1
        print(f"K {K:5d} rows of a matrix on one bank group: paged items {conflicts[3]}")
        print(f"K {K:5d} rows of a matrix on one bank group: swizzled 16 rows {conflicts[0]}, 8 rows {conflicts[1]}; "
              f"unswizzled {conflicts[2]}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
