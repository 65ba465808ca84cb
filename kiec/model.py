"""kiec.Model: what a frontend hands the compiler — the graph, its weights, and how to tokenize."""
from __future__ import annotations

from dataclasses import dataclass, field

from kiec.ir.graph import Graph
from kiec.models.llama import LlamaConfig
from kiec.weights import WeightStore


@dataclass(frozen=True)
class TokenizerInfo:
    kind: str  # "hf": tokenizer.json in `path`; "gguf": the vocabulary inside the .gguf at `path`
    path: str
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    chat_template: str | None = None


@dataclass
class Model:
    name: str
    source: str  # the path or registry name it came from
    config: LlamaConfig
    graph: Graph
    weights: WeightStore
    max_seq_len: int
    tokenizer: TokenizerInfo | None = None
    notes: list[str] = field(default_factory=list)  # how fields were derived, for `kiec inspect`
