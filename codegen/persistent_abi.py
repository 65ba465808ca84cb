"""The persistent kernel's instruction format, described once here: the C header the device code includes
and the bytes the host uploads are both generated from INSTR_FIELDS, so they cannot disagree."""
from __future__ import annotations

import struct

from kiec.ir.passes.phases import OPCODES, Instr, Schedule

MAX_WAITS = 8
SAMPLE_CANDIDATES = 1024  # tokens the select tile can sort in shared memory to find top-p's threshold
# What kiec_trace records per instruction of the traced step (thread 0's view): global-timer ns when it starts,
# when its inputs are ready, when its x is ready (a GEMV's prologue done, an attention split's slice done; 0 where
# there is none), when a GEMV's dot products are all done and when its epilogue has issued its stores (0 elsewhere),
# and when it is done (signalled: the barrier and thread 0's release, which waits until the stores are acknowledged);
# the SM cycles it spent waiting for weight pages, and all its SM cycles (their ratio to the ns converts the
# others); and a GEMV's pages already landed in the ring when its x was ready (up to the ring's, at most its own).
# The default build times nothing in the streaming thread: counting its stalls in the traced step (the test in its
# page loop alone) made llama-3.2-1b 3.5% slower in every step at 48f2904 (0.848 vs 0.819 ms, bench/RESULTS.md);
# persist_trace_stream's build does (TRACE_STREAM_SLOTS below), at no cost seen in the thirty-fourth session.
TRACE_SLOTS = ("start", "ready", "x_ready", "sums_done", "done", "page_wait_cycles", "cycles", "pages_ready",
               "stored")
# With persist_trace_dots (KIEC_TRACE_DOTS) a row has six slots more: a GEMV cuts its dot products (x_ready to
# sums_done) at thread 0's slice of x loaded from the scratch (x_sliced), the latest warp's first item summed
# (first_item), and the earliest and latest warp's last item summed (warp_done_min, warp_done_max: the block's
# barrier follows), the earliest warp's first item (first_item_min) and which warp's first item came last
# (first_item_warp: an index, not a time); 0 elsewhere. Without it the rows keep their width, so the default kernel
# is unchanged.
TRACE_DOT_SLOTS = ("x_sliced", "first_item", "warp_done_min", "warp_done_max", "first_item_min", "first_item_warp")
# With persist_trace_stream (KIEC_TRACE_STREAM) four slots more, after the dots' where a row has them, written by the
# streaming thread for a GEMV's share of the traced step: when it came to the share's first page (before waiting
# for a free page) and when it issued the last page's copy, and the ns it waited, over the share's pages, for a free
# page of the ring (the compute warps behind: the memory's time lost to this SM) and on the pace. 0 elsewhere.
TRACE_STREAM_SLOTS = ("stream_first", "stream_last", "stream_full_ns", "stream_pace_ns")


def trace_slots(dots: bool, stream: bool = False) -> list[str]:
    """A recording's slots, in row order: the artifact's manifest names them (trace_slots)."""
    return list(TRACE_SLOTS + (TRACE_DOT_SLOTS if dots else ()) + (TRACE_STREAM_SLOTS if stream else ()))


# (name, C type, struct code): a Wait is (counter, target per token, previous?) packed in 8 bytes; with tag waits
# (KIEC_TAG_WAITS) `previous` carries the wait's late flag in bit 1 and its lead above (ir/passes/phases.py: Wait)
WAIT_FIELDS = [("counter", "uint16_t", "H"), ("previous", "uint16_t", "H"), ("tiles", "uint32_t", "I")]
# head, tail: a GEMV share's first segment of its first row and its segments of its last (Instr: persist_item_shares)
INSTR_FIELDS = [("opcode", "uint8_t", "B"), ("n_waits", "uint8_t", "B"), ("head", "uint8_t", "B"),
                ("tail", "uint8_t", "B"), ("kernel", "uint32_t", "I"),
                ("tile", "uint32_t", "I"), ("lo", "int32_t", "i"), ("hi", "int32_t", "i"),
                ("counter", "uint32_t", "I")]  # the phase counter it bumps
# A kernel's operands, one entry per fused kernel: `spec` picks the tile function (one inlined body per distinct
# template instantiation keeps the kernel within the register file), the rest are its offsets and scalars.
# w: byte offsets into the weights (or the KV cache), -1 for none; a: float offsets into the arena. A GEMV's
# weights stream through the ring (ring.cuh): w[0]'s rows are row_bytes long, cut into items of item_bytes;
# flags: FLAG_SILU, each output has a gate row and an up row n rows further (item_bytes 0: nothing to stream);
# FLAG_BLOCKS, a tensor-core GEMV's (persist_mma_rows): its items are blocks of 16 rows x item_bytes / 32 elements
# (gemv_mma.cuh), whole row blocks a share. arrive: an
# attention kernel's first arrival counter (one per KV head); splits, min_keys: its split of the context
# (split_range), row_bytes its cache rows' (the weight stream asks L2 for them with attn_l2_prefetch 2). tag_x,
# tag_res: a GEMV's x and residual as tagged words, the phase whose tag they carry (-1: plain floats).
KERNEL_FIELDS = [("spec", "int32_t", "i"), ("n", "int32_t", "i"), ("m", "int32_t", "i"), ("window", "int32_t", "i"),
                 ("eps", "float", "f"), ("scale", "float", "f"), ("softcap", "float", "f"),
                 ("row_bytes", "int32_t", "i"), ("item_bytes", "int32_t", "i"), ("flags", "int32_t", "i"),
                 ("arrive", "int32_t", "i"), ("splits", "int32_t", "i"), ("min_keys", "int32_t", "i"),
                 ("tag_x", "int32_t", "i"), ("tag_res", "int32_t", "i"), ("pace", "int32_t", "i"),
                 ("w", "int64_t", "4q"), ("a", "int64_t", "4q")]
KERNEL_FORMAT = "<" + "".join(c for _, _, c in KERNEL_FIELDS)
WAIT_FORMAT = "<" + "".join(c for _, _, c in WAIT_FIELDS)
INSTR_FORMAT = "<" + "".join(c for _, _, c in INSTR_FIELDS) + WAIT_FORMAT[1:] * MAX_WAITS
FLAG_SILU, FLAG_BLOCKS = 1, 2  # KernelDesc's flags


def header() -> str:
    lines = ["// Generated by kiec.codegen.persistent_abi: the persistent kernel's instruction format. Do not edit.",
             "#pragma once", "#include <stdint.h>", "", "namespace kiec {", ""]
    lines += [f"constexpr int OP_{name.upper()} = {code};" for name, code in OPCODES.items()]
    lines += [f"constexpr int FLAG_SILU = {FLAG_SILU}, FLAG_BLOCKS = {FLAG_BLOCKS};",
              f"constexpr int MAX_WAITS = {MAX_WAITS};", f"constexpr int SAMPLE_CANDIDATES = {SAMPLE_CANDIDATES};",
              "#ifndef KIEC_TRACE_DOTS", "#define KIEC_TRACE_DOTS 0", "#endif",
              "#ifndef KIEC_TRACE_STREAM", "#define KIEC_TRACE_STREAM 0", "#endif",
              f"constexpr int TRACE_STREAM_AT = {len(TRACE_SLOTS)} + (KIEC_TRACE_DOTS ? {len(TRACE_DOT_SLOTS)} : 0);",
              f"constexpr int TRACE_SLOTS = TRACE_STREAM_AT + (KIEC_TRACE_STREAM ? {len(TRACE_STREAM_SLOTS)} : 0);",
              "enum TraceSlot { " + ", ".join(f"TR_{n.upper()} = {i}"
                                              for i, n in enumerate(TRACE_SLOTS + TRACE_DOT_SLOTS)) + " };",
              *(f"constexpr int TR_{n.upper()} = TRACE_STREAM_AT + {i};" for i, n in enumerate(TRACE_STREAM_SLOTS)),
              "",
              "struct Wait {"]
    lines += [f"  {ctype} {name};" for name, ctype, _ in WAIT_FIELDS]
    lines += ["};", "", "struct Instr {"]
    lines += [f"  {ctype} {name};" for name, ctype, _ in INSTR_FIELDS]
    lines += ["  Wait waits[MAX_WAITS];", "};", "", "struct KernelDesc {"]
    lines += [f"  {ctype} {name}{'[' + code[:-1] + ']' if len(code) > 1 else ''};"
              for name, ctype, code in KERNEL_FIELDS]
    lines += ["};", ""]
    lines += [f"static_assert(sizeof(Wait) == {struct.calcsize(WAIT_FORMAT)}, \"Wait layout\");",
              f"static_assert(sizeof(Instr) == {struct.calcsize(INSTR_FORMAT)}, \"Instr layout\");",
              f"static_assert(sizeof(KernelDesc) == {struct.calcsize(KERNEL_FORMAT)}, \"KernelDesc layout\");", "",
              "}  // namespace kiec", ""]
    return "\n".join(lines)


def pack(ins: Instr) -> bytes:
    if len(ins.waits) > MAX_WAITS:
        raise ValueError(f"{ins.opcode} kernel {ins.kernel} tile {ins.tile} waits on {len(ins.waits)} counters; "
                         f"the format holds {MAX_WAITS}")
    if any(not 0 <= w.lead < 1 << 14 for w in ins.waits):
        raise ValueError(f"{ins.opcode} kernel {ins.kernel} tile {ins.tile}: a wait's lead is out of 0..16383")
    if not (0 <= ins.head < 256 and 0 <= ins.tail < 256):
        raise ValueError(f"{ins.opcode} kernel {ins.kernel} tile {ins.tile}: head {ins.head} or tail {ins.tail} is out "
                         f"of 0..255 (segments of a row)")
    waits = [(w.counter, int(w.previous) | int(w.late) << 1 | w.lead << 2, w.tiles) for w in ins.waits]
    waits += [(0, 0, 0)] * (MAX_WAITS - len(waits))
    return struct.pack(INSTR_FORMAT, OPCODES[ins.opcode], len(ins.waits), ins.head, ins.tail, ins.kernel, ins.tile,
                       ins.lo, ins.hi, ins.counter, *[x for w in waits for x in w])


def pack_schedule(sched: Schedule) -> tuple[bytes, list[int]]:
    """All SMs' lists back to back, and where each SM's list starts (in instructions)."""
    blobs, starts = [], []
    for lst in sched.lists:
        starts.append(sum(len(b) for b in blobs) // struct.calcsize(INSTR_FORMAT))
        blobs.append(b"".join(pack(i) for i in lst))
    return b"".join(blobs), starts


def pack_kernel(spec: int, n: int = 0, m: int = 0, window: int = 0, eps: float = 0.0, scale: float = 0.0,
                softcap: float = 0.0, row_bytes: int = 0, item_bytes: int = 0, silu: bool = False, arrive: int = 0,
                splits: int = 0, min_keys: int = 0, tag_x: int = -1, tag_res: int = -1, pace: int = 0,
                w: tuple[int, ...] = (), a: tuple[int, ...] = (), blocks: bool = False) -> bytes:
    w, a = tuple(w) + (-1,) * (4 - len(w)), tuple(a) + (-1,) * (4 - len(a))
    flags = (FLAG_SILU if silu else 0) | (FLAG_BLOCKS if blocks else 0)
    return struct.pack(KERNEL_FORMAT, spec, n, m, window, eps, scale, softcap, row_bytes, item_bytes, flags, arrive,
                       splits, min_keys, tag_x, tag_res, pace, *w, *a)
