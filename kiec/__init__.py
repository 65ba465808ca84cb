"""kiec: a kernel compiler for batch-1 LLM decoding at the speed of GPU memory.

    m = kiec.load("smollm2-135m")            # HF directory, .gguf, or a registry name (random weights)
    ref = kiec.Reference(m)                  # the IR interpreter: the semantics of record
    art = kiec.compile(m, "build/x")         # needs nvcc, not a GPU
    eng = kiec.Engine("build/x")             # needs the GPU; same step/generate API as Reference
"""
from kiec.build import compile
from kiec.errors import KiecError
from kiec.frontend import load
from kiec.model import Model, TokenizerInfo
from kiec.reference import Reference
from kiec.runtime import Engine
from kiec.sampling import SamplingParams

__all__ = ["Engine", "KiecError", "Model", "Reference", "SamplingParams", "TokenizerInfo", "compile", "load"]
