"""kiec: a kernel compiler for batch-1 LLM decoding at the speed of GPU memory.

    m = kiec.load("smollm2-135m")      # HF directory, .gguf, or a registry name (random weights)
    ref = kiec.Reference(m)            # the IR interpreter: the semantics of record
    ids = ref.generate([1, 2, 3], max_new_tokens=16)
"""
from kiec.errors import KiecError
from kiec.frontend import load
from kiec.model import Model, TokenizerInfo
from kiec.reference import Reference

__all__ = ["KiecError", "Model", "Reference", "TokenizerInfo", "load"]
