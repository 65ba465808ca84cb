"""Model families and the registry of named configs (real shapes, random weights)."""
from kiec.models.llama import CONFIGS as _LLAMA_CONFIGS
from kiec.models.llama import LlamaConfig

REGISTRY: dict[str, LlamaConfig] = dict(_LLAMA_CONFIGS)
