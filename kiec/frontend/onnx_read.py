"""Reading ONNX files for the ONNX frontend: initializers (lazy, external data), 4-bit MatMulNBits weights,
RoPE frequencies, node attributes and names."""
from __future__ import annotations

import os
import re

import numpy as np
import torch

from kiec.errors import KiecError

MS = "com.microsoft"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", name)


class _Initializers:
    """Initializer name -> (shape, lazy float32 tensor); external data read from its file when asked for."""

    def __init__(self, model, directory: str, path: str):
        from onnx import TensorProto, numpy_helper

        self.entries = {}
        for t in model.graph.initializer:
            shape = tuple(int(d) for d in t.dims)
            if t.data_location == TensorProto.EXTERNAL:
                ext = {e.key: e.value for e in t.external_data}
                file = os.path.join(directory, ext["location"])
                if not os.path.isfile(file):
                    raise KiecError(f"{path}: initializer '{t.name}' needs external data file {ext['location']}, "
                                    f"which is missing")
                offset, length = int(ext.get("offset", 0)), int(ext.get("length", 0))
                dtype = numpy_helper.helper.tensor_dtype_to_np_dtype(t.data_type)
                if offset + length > os.path.getsize(file):
                    raise KiecError(f"{path}: initializer '{t.name}' reaches past the end of {ext['location']} "
                                    f"(truncated external data)")
                def raw(file=file, offset=offset, shape=shape, dtype=dtype):
                    n = int(np.prod(shape)) if shape else 1
                    return np.fromfile(file, dtype=dtype, count=n, offset=offset).reshape(shape)
            else:
                def raw(t=t):
                    return numpy_helper.to_array(t)
            self.entries[t.name] = (shape, lambda raw=raw: torch.from_numpy(np.array(raw(), dtype=np.float32)), raw)

    def __contains__(self, name):
        return name in self.entries

    def raw(self, name) -> np.ndarray:
        """The initializer in its own dtype (uint8 for packed 4-bit weights and zero points)."""
        return self.entries[name][2]()

    def shape(self, name):
        return self.entries[name][0]

    def array(self, name) -> torch.Tensor:
        return self.entries[name][1]()


def dequantize_4bit(packed: np.ndarray, scales: torch.Tensor, zero_points: np.ndarray | None, k: int,
                    block: int) -> torch.Tensor:
    """MatMulNBits' 4-bit layout -> float [N, K]: element 2i of a block in the low nibble of byte i, 2i+1 in
    the high one; w = (q - zero_point) * scale per (row, block); zero point 8 when none is given."""
    rows, blocks = packed.shape[0], packed.shape[1]
    p = torch.from_numpy(np.ascontiguousarray(packed).reshape(rows, blocks, block // 2).astype(np.int16))
    q = torch.stack([p & 0x0F, p >> 4], dim=-1).reshape(rows, blocks, block).float()
    if zero_points is None:
        z = torch.full((rows, blocks), 8.0)
    elif zero_points.dtype == np.uint8:  # packed two to a byte, low nibble first
        zp = torch.from_numpy(zero_points.reshape(rows, -1).astype(np.int16))
        z = torch.stack([zp & 0x0F, zp >> 4], dim=-1).reshape(rows, -1)[:, :blocks].float()
    else:
        z = torch.from_numpy(np.asarray(zero_points, dtype=np.float32).reshape(rows, blocks))
    w = (q - z[..., None]) * scales.reshape(rows, blocks)[..., None]
    return w.reshape(rows, blocks * block)[:, :k].contiguous()


def _attrs(node) -> dict:
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _where(node) -> str:
    return f"node '{node.name}' ({node.op_type}, domain {node.domain or 'ai.onnx'})"


def _theta(cos: torch.Tensor, sin: torch.Tensor, where: str, rtol: float = 1e-4) -> float:
    """theta of an unscaled RoPE from the caches [positions, rotary_dim / 2]: the angle grows by
    inv_freq[i] = theta^(-2i/rotary_dim) per position; each frequency is the least-squares slope of the
    unwrapped angle over every position (fp16 caches hold the angle at one position to about 1e-3)."""
    ang = torch.atan2(sin.double(), cos.double())
    ang = torch.from_numpy(np.unwrap(ang.numpy(), axis=0))  # steps of at most 1 rad: no 2 pi ambiguity
    p = torch.arange(ang.shape[0], dtype=torch.float64)[:, None]
    return _theta_of((ang * p).sum(0) / (p * p).sum(), where, rtol)


def _theta_of(inv: torch.Tensor, where: str, rtol: float = 1e-4) -> float:
    """theta such that inv_freq[i] = theta^(-2i/d); an error where the frequencies follow no such theta."""
    d = 2 * inv.numel()
    theta = float(inv[1] ** (-d / 2)) if inv.numel() > 1 else 10000.0
    if abs(theta - round(theta)) < 1e-5 * theta:  # read from fp16 caches: 9999.992 is 10000
        theta = float(round(theta))
    expect = torch.tensor([theta ** (-2 * i / d) for i in range(inv.numel())], dtype=torch.float64)
    if not torch.allclose(inv, expect, rtol=rtol, atol=0):
        raise KiecError(f"{where}: its rotary frequencies do not follow an unscaled RoPE theta^(-2i/d); "
                        f"scaled RoPE from ONNX is not supported yet")
    return theta
