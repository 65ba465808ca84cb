"""frontend.load(path) -> Model: HF directories, .gguf files, and registry names with random weights."""
from __future__ import annotations

import os

from kiec.errors import KiecError
from kiec.ir.types import DTYPES
from kiec.model import Model, TokenizerInfo
from kiec.models import REGISTRY
from kiec.models.llama import LlamaConfig, build_graph
from kiec.weights import Loader, WeightStore, random_loader

DEFAULT_MAX_SEQ_LEN = 4096


def load(path: str, dtype: str | None = None, max_seq_len: int | None = None, seed: int = 0) -> Model:
    """Load a model. dtype: the parameters' dtype (default: the checkpoint's; bf16 for registry names)."""
    if dtype is not None and dtype not in ("f32", "bf16", "f16"):
        raise KiecError(f"dtype {dtype!r} is not one of f32, bf16, f16")
    if max_seq_len is not None and max_seq_len <= 0:  # (0 too: it is not "the default")
        raise KiecError(f"max_seq_len must be positive, got {max_seq_len}")
    path = os.fspath(path)
    if path in REGISTRY:
        cfg = REGISTRY[path]
        loaders = {n: (shape, random_loader(n, shape, seed)) for n, (shape, _) in cfg.param_shapes().items()}
        return assemble(path, path, cfg, loaders, dtype or "bf16", max_seq_len, tokenizer=None)
    if os.path.isdir(path):
        from kiec.frontend.hf import load_hf
        return load_hf(path, dtype, max_seq_len)
    if path.endswith(".gguf"):
        from kiec.frontend.gguf import load_gguf
        return load_gguf(path, dtype, max_seq_len)
    if path.endswith(".onnx"):
        from kiec.frontend.onnx import load_onnx
        return load_onnx(path, dtype, max_seq_len)
    if not os.path.exists(path):
        raise KiecError(f"{path}: no such file or directory, and not a registry name ({', '.join(REGISTRY)})")
    raise KiecError(f"{path}: not an HF directory, a .gguf or an .onnx file")


def assemble(name: str, source: str, cfg: LlamaConfig, loaders: dict[str, tuple[tuple[int, ...], Loader]],
             dtype: str, max_seq_len: int | None, tokenizer: TokenizerInfo | None,
             notes: list[str] | None = None) -> Model:
    """Check every expected weight is present with its shape, then build the graph and the model."""
    for pname, (shape, _) in cfg.param_shapes().items():
        if pname not in loaders:
            raise KiecError(f"{source}: missing weight '{pname}' (expected shape {list(shape)})")
        if tuple(loaders[pname][0]) != tuple(shape):
            raise KiecError(f"{source}: weight '{pname}' has shape {list(loaders[pname][0])}, "
                            f"expected {list(shape)} from the config")
    if dtype not in DTYPES:
        raise KiecError(f"{source}: dtype {dtype} is not supported")
    seq = max_seq_len if max_seq_len is not None else min(cfg.max_position_embeddings, DEFAULT_MAX_SEQ_LEN)
    if seq <= 0:
        raise KiecError(f"max_seq_len must be positive, got {seq}")
    graph = build_graph(cfg, name, dtype, seq)
    weights = WeightStore(graph, {n: loaders[n][1] for n in graph.params})
    return Model(name, source, cfg, graph, weights, seq, tokenizer, list(notes or []))


def assemble_graph(builder, loaders: dict[str, Loader], cfg: LlamaConfig, source: str, max_seq_len: int) -> Model:
    """A frontend that built its graph op by op (ONNX): verify it and attach the weights."""
    import os as _os
    graph = builder.finish()
    name = _os.path.splitext(_os.path.basename(source))[0]
    return Model(name, source, cfg, graph, WeightStore(graph, loaders), max_seq_len, None, [])
