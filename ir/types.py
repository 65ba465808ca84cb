"""Tensor types of the IR: a static shape and one of a few dtypes."""
from __future__ import annotations

from dataclasses import dataclass

import torch

# dtype name -> (bytes per element, torch dtype)
DTYPES: dict[str, tuple[int, torch.dtype]] = {
    "f32": (4, torch.float32),
    "bf16": (2, torch.bfloat16),
    "f16": (2, torch.float16),
    "i32": (4, torch.int32),
    "i64": (8, torch.int64),
}
FLOAT_DTYPES = {"f32", "bf16", "f16"}


def torch_dtype(name: str) -> torch.dtype:
    return DTYPES[name][1]


@dataclass(frozen=True)
class TensorType:
    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self):
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r} (kiec has {', '.join(DTYPES)})")
        if not all(isinstance(d, int) and d >= 0 for d in self.shape):
            raise ValueError(f"shape {self.shape} must be non-negative integers")

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPES[self.dtype][0]

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"


def parse_type(text: str) -> TensorType:
    """Inverse of str(TensorType): 'bf16[576,49152]' -> TensorType."""
    dtype, _, rest = text.strip().partition("[")
    if not rest.endswith("]"):
        raise ValueError(f"bad tensor type {text!r}: expected like bf16[2,3]")
    dims = rest[:-1].strip()
    shape = tuple(int(d) for d in dims.split(",")) if dims else ()
    return TensorType(shape, dtype)
