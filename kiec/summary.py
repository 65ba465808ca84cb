"""What `kiec inspect` reports: structure, parameters, bytes read per decode token, and the floor they set."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from kiec.errors import KiecError
from kiec.ir.graph import Graph
from kiec.ir.ops import Attention, Embedding, KVAppend
from kiec.ir.types import DTYPES
from kiec.model import Model

H200_TBPS = 4.8  # datasheet HBM3e bandwidth; the measured streaming-read ceiling is lower (about 4.6)


@dataclass(frozen=True)
class ByteCount:
    weights: int  # every matrix once, the embedding as one row (plus the whole table if it is the LM head)
    kv_cache: int  # K and V rows read by attention at the given context
    kv_write: int  # the one new row per layer

    @property
    def read(self) -> int:
        return self.weights + self.kv_cache


def bytes_per_token(graph: Graph, context: int) -> ByteCount:
    """Bytes a decode step at position `context` (that many tokens already cached) must move."""
    users = graph.users()
    weights = 0
    for p in graph.params.values():
        uses = users.get(p.name, [])
        if any(isinstance(op, Embedding) for op in uses):
            weights += p.type.nbytes // p.type.shape[0]  # the embedding reads one row of its table
        if any(not isinstance(op, Embedding) for op in uses):
            weights += p.type.nbytes  # a GEMV (the tied LM head too) reads all of it
    kv_read = kv_write = 0
    for op in graph.ops:
        if isinstance(op, Attention):
            _, kv_heads, seq, head_dim = graph.type_of(op.cache).shape
            rows = min(context + 1, op.window or seq, seq)
            kv_read += 2 * kv_heads * head_dim * rows * DTYPES[graph.type_of(op.cache).dtype][0]
        elif isinstance(op, KVAppend):
            c = graph.type_of(op.cache)
            kv_write += 2 * c.shape[1] * c.shape[3] * DTYPES[c.dtype][0]
    return ByteCount(weights, kv_read, kv_write)


@dataclass(frozen=True)
class Summary:
    name: str
    source: str
    arch: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool
    dtype: str
    max_seq_len: int
    parameters: int
    context: int
    weight_bytes: int
    kv_bytes: int
    bytes_per_token: int
    bandwidth_tbps: float
    floor_tok_s: float
    floor_tok_s_h200: float
    op_counts: dict[str, int]
    programs: dict[str, dict]  # kernel family -> {"count", "bytes"} after fusion
    unscheduled: str  # why fusion stopped, when it did
    notes: list[str]
    window: int = 0  # sliding window (rows), 0 for full attention
    persistent: dict | None = None  # the persistent schedule's balance on an H200's SMs (persistent.balance)

    def to_dict(self) -> dict:
        return asdict(self)


def fused_programs(graph: Graph, context: int) -> tuple[dict[str, dict], str, dict | None]:
    """Kernel families with their counts and bytes, why fusion stopped (when it did), and the persistent
    schedule's balance over an H200's SMs."""
    from kiec.codegen.targets import TARGETS
    from kiec.ir.passes import pipeline
    from kiec.ir.passes.fuse import Unscheduled
    from kiec.ir.passes.persistent import balance, schedule
    from kiec.ir.passes.program import kernel_bytes

    try:
        prog = pipeline.run(graph)
    except Unscheduled as e:
        return {}, str(e), None
    sms = TARGETS["sm_90"].sms
    persistent = {"sms": sms, **balance(schedule(prog, sms))}
    out: dict[str, dict] = {}
    for k in prog.kernels:
        fam = type(k).__name__.removesuffix("Kernel").lower()
        if getattr(k, "epilogue", None):
            fam += f" ({'norm+' if k.norm else ''}{k.epilogue})"
        f = out.setdefault(fam, {"count": 0, "bytes": 0})
        f["count"] += 1
        f["bytes"] += kernel_bytes(k, graph, context)
    return out, "", persistent


def summarize(model: Model, context: int = 0, bandwidth_tbps: float = H200_TBPS) -> Summary:
    if not 0 <= context < model.max_seq_len:  # (past it the cache's rows were counted up to max_seq_len, silently)
        raise KiecError(f"context {context}: 0 to max_seq_len - 1 ({model.max_seq_len - 1}) tokens; a longer one "
                        f"needs a larger --max-seq-len")
    if not bandwidth_tbps > 0:
        raise KiecError(f"bandwidth {bandwidth_tbps} TB/s: must be positive")
    cfg, g = model.config, model.graph
    programs, unscheduled, persistent = fused_programs(g, context)
    counted = bytes_per_token(g, context)
    dtype = g.params["model.embed_tokens.weight"].type.dtype
    return Summary(
        name=model.name, source=model.source, arch=cfg.arch, layers=cfg.num_layers, hidden=cfg.hidden_size,
        heads=cfg.num_heads, kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim, intermediate=cfg.intermediate_size,
        vocab=cfg.vocab_size, tied_embeddings=cfg.tie_word_embeddings, dtype=dtype, max_seq_len=model.max_seq_len,
        parameters=sum(p.type.numel for p in g.params.values()), context=context,
        weight_bytes=counted.weights, kv_bytes=counted.kv_cache, bytes_per_token=counted.read,
        bandwidth_tbps=bandwidth_tbps, floor_tok_s=bandwidth_tbps * 1e12 / counted.read,
        floor_tok_s_h200=H200_TBPS * 1e12 / counted.read, op_counts=g.op_counts(), programs=programs,
        unscheduled=unscheduled, notes=list(model.notes), window=cfg.sliding_window or 0, persistent=persistent,
    )


def format_summary(s: Summary) -> str:
    rows = [
        ("model", f"{s.name}  ({s.source})"),
        ("architecture", f"{s.arch}: {s.layers} layers, hidden {s.hidden}, {s.heads} heads / {s.kv_heads} KV heads"
                         f" x {s.head_dim}, MLP {s.intermediate}, vocab {s.vocab}"
                         f"{', tied embeddings' if s.tied_embeddings else ''}"
                         f"{f', sliding window {s.window}' if s.window else ''}"),
        ("parameters", f"{s.parameters / 1e6:,.1f} M ({s.dtype})"),
        ("max_seq_len", f"{s.max_seq_len}"),
        ("bytes/token", f"{s.bytes_per_token / 1e9:.4f} GB = weights {s.weight_bytes / 1e9:.4f} GB"
                        f" + KV {s.kv_bytes / 1e6:.2f} MB at context {s.context}"),
        ("floor", f"{s.floor_tok_s:,.0f} tok/s at {s.bandwidth_tbps} TB/s"
                  + ("" if s.bandwidth_tbps == H200_TBPS else f"; {s.floor_tok_s_h200:,.0f} tok/s at H200's {H200_TBPS} TB/s")),
        ("ops", ", ".join(f"{k} {v}" for k, v in sorted(s.op_counts.items(), key=lambda kv: -kv[1]))),
    ]
    total = sum(p["count"] for p in s.programs.values())
    rows.append(("programs", f"{total} fused kernels per token, reading "
                             f"{sum(p['bytes'] for p in s.programs.values()) / 1e9:.4f} GB" if total else
                 f"not schedulable: {s.unscheduled}"))
    rows += [("", f"  {p['count']:>4} x {fam:<28} {p['bytes'] / 1e6:10.2f} MB") for fam, p in s.programs.items()]
    if s.persistent:
        p = s.persistent
        rows.append(("persistent", f"{p['sms']} SMs: {p['instructions']:,} instructions a token, <= {p['max_waits']} "
                                   f"waits each; weights dealt for {p['phase_bound']:.1%} of the ceiling kernel by "
                                   f"kernel ({p['token_bound']:.1%} over the token)"))
    rows += [("note", n) for n in s.notes]
    return "\n".join(f"{k:<13}{v}" for k, v in rows)
