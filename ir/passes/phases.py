"""The persistent schedule's vocabulary: its instructions (Instr) and the counters they wait on (Wait), the
Schedule that deals them to the SMs, the phases (one counter each: a kernel, and select last) and what each phase
reads and writes, from which ir/passes/persistent.py derives the waits and tags.py the tagged values.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .program import AttentionKernel, ElementwiseKernel, EmbedKernel, GemvKernel, Kernel, Program, kernel_io


# One source of truth for the device: the header generator reads these.
OPCODES = {"embed": 1, "gemv": 2, "attention": 3, "elementwise": 4, "select": 6}
TOKEN = "@token"  # the pseudo-value select writes and the next step's embedding reads (the token id)


@dataclass(frozen=True)
class Wait:
    counter: int  # index of the phase whose completed-tile counter this waits on
    tiles: int  # its tiles per token: the target is tiles * (token + 1), or tiles * token when `previous`
    previous: bool = False  # on the previous token's run of that phase
    # tag waits with a lead (persist_tag_lead): the target less this many tiles; such a wait only holds a tile back
    # until most of its writer is done (its words' tags cover the rest), so it implies nothing about the writer
    lead: int = 0
    # tag waits 2 (late_waits): the wait guards only the GEMV tile's writes (what it reads of the writer is tagged),
    # so the tile polls it before its epilogue, not before its prologue
    late: bool = False


@dataclass(frozen=True)
class Instr:
    opcode: str
    kernel: int  # index into program.kernels
    tile: int  # attention: KV head * splits + split
    lo: int  # the slice of the kernel's output this instruction computes (attention: KV head lo)
    hi: int
    waits: tuple[Wait, ...]
    counter: int = -1  # the phase whose counter it bumps when done
    # a GEMV dealt to the item (Schedule.item_segs): its share starts at segment `head` of row lo (0: at the row's
    # start) and ends after segment `tail` - 1 of row hi - 1 (0: at the row's end). Rows are completed a unit at a
    # time (unit_rows: a pair where the output is tagged pairs, else a row), by the tile that holds the unit's last
    # item: a share that starts mid-unit publishes its sums of that unit's rows (lead_rows) for the tile before, and a
    # share that ends mid-unit completes it with the next tile's (share_end_rows)
    head: int = 0
    tail: int = 0


@dataclass
class Schedule:
    program: Program
    sms: int
    tiles: list[int]  # per phase (counter): its bumps per token (attention: one per KV head, by its last split)
    lists: list[list[Instr]] = field(default_factory=list)  # per SM, in execution order
    phases: list[tuple[int, str]] = field(default_factory=list)  # counter -> (kernel, opcode)
    splits: dict[int, int] = field(default_factory=dict)  # attention kernel -> splits over the KV length
    min_keys: int = 64  # rows a split takes at least (simulate.split_rows)
    # tag waits (persist_tag_waits): the tagged values whose readers do not wait on their writer's counter but
    # load the words until they carry this token's tag (tag_covered); empty without
    spin: frozenset[str] = frozenset()
    # persist_attn_owner_merges: while at most this many of a KV head's splits are in use, the one holding the
    # token's row (the last in use) merges them as their partials come, and only it arrives (all the splits' count
    # at once); with more (or 0) the last to arrive merges
    owner_merges: int = 0
    # persist_attn_newest_first: split s of the splits in use takes chunk (in use - 1 - s) of split_rows (split 0
    # holds the token's row) and writes its partial at that chunk's slot, so that the merge order stays the chunks'
    newest_first: bool = False
    # persist_attn_early_pass: an attention tile loads its split's rows of early_rows before it waits for its inputs,
    # so they must be there once its SM reaches the instruction (the VM checks them then)
    early_pass: bool = False
    # persist_item_shares: the GEMV kernels (by index) dealt to the row segment instead of the row, and their segments
    # a row (Instr.head, Instr.tail; check_item_shares)
    item_segs: dict[int, int] = field(default_factory=dict)
    pair_rows: frozenset[int] = frozenset()  # the GEMV kernels whose outputs are handed over two rows a word
    # persist_attn_consumer_merges: while 2 to this many of a KV head's splits are in use, none merges them: each
    # stores its partial, the owner (holding the token's row) counts for the head and arrives for all, and the GEMVs
    # reading attention's output (the output projections) merge the partials as their x, loading them until they
    # are the token's (their tags); otherwise as without. 0: off
    consumer_merges: int = 0
    # persist_attn_solo_keys: a context of at most this many rows in one split a KV head (simulate.split_rows'
    # solo), a longer one split as min_keys says; 0: off
    solo_keys: int = 0
    # persist_mma_item_shares: the GEMV kernels of item_segs whose items are a 16-row block's K blocks (tensor-core
    # tiles' pages), not a row's segments: Instr.lo and hi are whole blocks' rows, head and tail count K blocks of the
    # first and last block (item_rows), and a block's 16 rows are completed together (unit_rows)
    block_items: frozenset[int] = frozenset()


BLOCK_ROWS = 16  # a tensor-core GEMV's block: 16 weight rows an mma


def item_rows(sched: Schedule, kernel: int) -> int:
    """The rows one item of a GEMV dealt to the item spans: a block's 16 where its items are block pages
    (Schedule.block_items), else 1 (a row's segment)."""
    return BLOCK_ROWS if kernel in sched.block_items else 1


def unit_rows(sched: Schedule, kernel: int) -> int:
    """The rows a GEMV's outputs are completed together: a block's 16 where its items are block pages, 2 where they
    are handed over as tagged pairs, else 1."""
    return BLOCK_ROWS if kernel in sched.block_items else 2 if kernel in sched.pair_rows else 1


def lead_rows(ins: Instr, unit: int) -> int:
    """The rows at the start of a share dealt to the item that the tile before completes: those of its first unit
    when it starts mid-unit (at a row's segment, or at a unit's second row), else none."""
    return unit - ins.lo % unit if ins.head or ins.lo % unit else 0


def share_end_rows(ins: Instr, unit: int) -> int:
    """The row after the last a share dealt to the item completes: the end of the unit its last item is in."""
    return -(-ins.hi // unit) * unit


def early_rows(lo: int, hi: int, token: int) -> tuple[int, int]:
    """The cache rows [lo, end) of a split's rows [lo, hi) its tile may load before its wait at `token`
    (persist_attn_early_pass; attention_rows.cuh's early_rows_end): those before token - 1. The previous token's row is
    acquired by this token's wait (with tagged words the relaxed counters carry no row: the arrivals do), the
    earlier ones by the same SM's wait at the previous token."""
    return lo, max(lo, min(hi, token - 1))


def phases(program: Program) -> list[tuple[int, str]]:
    """(kernel, opcode) per counter, in execution order; select comes last (its kernel is the one that writes
    the logits)."""
    out = []
    for i, k in enumerate(program.kernels):
        out.append((i, {EmbedKernel: "embed", GemvKernel: "gemv", AttentionKernel: "attention",
                        ElementwiseKernel: "elementwise"}[type(k)]))
    logits = program.graph.outputs[0]
    out.append((next(i for i, k in enumerate(program.kernels) if kernel_io(k)[1][0][0] == logits), "select"))
    return out


def partials(k: AttentionKernel) -> str:
    """The name of an attention kernel's per-split partial results (its own buffer, one per layer)."""
    return k.name + ".partials"


def output_size(k: Kernel, program: Program) -> int:
    if isinstance(k, EmbedKernel):
        return program.graph.types[k.out].shape[0]
    if isinstance(k, GemvKernel):
        return k.n_out
    if isinstance(k, AttentionKernel):
        return k.kv_heads  # one tile a KV head (its GROUP query heads)
    if isinstance(k, ElementwiseKernel):
        return k.n
    raise TypeError(type(k).__name__)


def reads_writes(k: Kernel, program: Program, opcode: str | None = None) -> tuple[set[str], set[str]]:
    """Values (and KV state, and attention partials) a kernel's phase reads and writes. The embedding reads
    the token select wrote (the previous step's choice once the prompt is consumed). Attention writes its
    partials (read back by its own last split) and the output."""
    if opcode == "select":
        return {program.graph.outputs[0]}, {TOKEN}
    reads, writes = kernel_io(k)
    r, w = set(reads), {v for v, _, _ in writes}
    if isinstance(k, EmbedKernel):
        r.add(TOKEN)
    if isinstance(k, AttentionKernel):
        r.add(k.append.cache)
        return r, {k.append.cache, partials(k), *w}
    return r, w


def phase_io(program: Program) -> list[tuple[set[str], set[str]]]:
    """Each phase's (reads, writes) (reads_writes), indexed by counter."""
    return [reads_writes(program.kernels[i], program, op) for i, op in phases(program)]


def slot_key(slot_of: dict[str, int] | None) -> Callable[[str], object]:
    """A value's arena slot (its name where `slot_of` does not place it, or without one): two values conflict where
    their slots do."""
    return (lambda v: slot_of.get(v, v)) if slot_of else (lambda v: v)
