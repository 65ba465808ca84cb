"""ONNX decoders, node by node into model-level IR, for the producers users have:
- onnxruntime-genai's model builder: com.microsoft GroupQueryAttention (packed or split QKV, RoPE caches),
  (Skip)SimplifiedLayerNormalization, MatMul [+ Add bias] or MatMulNBits (4-bit), Sigmoid·Mul as SiLU;
- the standard opset-23 RMSNormalization, RotaryEmbedding and Attention (past/present);
- torch.onnx (dynamo) at opset 23: the same ops on 4-D views, cos/sin computed from position_ids x inv_freq,
  past ++ new through Concat and the GQA repeat through Unsqueeze/Expand/Reshape, the causal mask in-graph;
  below opset 23 (torch.onnx's default is 18) RMSNorm, RoPE and attention are decomposed: onnx_fold.py folds
  them back into those ops first.
Shape, mask and position bookkeeping is dropped (the KV state and pos replace it; onnx_graph.py finds it);
anything else is named."""
from __future__ import annotations

import json
import os
import re

import numpy as np
import torch

from kiec.errors import KiecError, Unlifted
from kiec.frontend.onnx_fold import ShapeValues, fold_decompositions, static_shapes
from kiec.frontend.onnx_graph import bookkeeping, canonical_kv_names, check_kv_inputs
from kiec.frontend.onnx_read import MS, _attrs, _Initializers, _safe, _theta, _theta_of, _where, dequantize_4bit
from kiec.ir.builder import Builder
from kiec.ir.interp import attention_scale
from kiec.ir.ops import Activation, Add, Argmax, Attention, Embedding, KVAppend, Linear, Mul, RMSNorm, Rope
from kiec.ir.types import TensorType
from kiec.models.llama import LlamaConfig, RopeConfig


class _Lifter:
    """Walks the nodes in order; one method per ONNX op turns a node into IR ops (or records it unlifted)."""

    def __init__(self, model, inits: _Initializers, path: str, dtype: str, seq: int, values: ShapeValues):
        self.g, self.inits, self.path, self.dtype, self.seq = model.graph, inits, path, dtype, seq
        self.values = values  # the (folded) nodes, their producers, constants and integer shape values
        self.nodes, self.producer, self.constants = values.nodes, values.producer, values.constants
        self.consumers: dict[str, list] = {}
        for n in self.nodes:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)
        self.b = Builder(_safe(os.path.splitext(os.path.basename(path))[0]))
        self.token = self.b.input("token", TensorType((), "i32"))
        self.pos = self.b.input("pos", TensorType((), "i32"))
        self.value: dict[str, str] = {}  # ONNX tensor -> IR value
        self.loaders: dict[str, object] = {}  # IR param -> loader
        self.sigmoid_of: dict[str, str] = {}  # Sigmoid output -> its input (a SiLU once a Mul pairs them)
        self.transposed: dict[str, str] = {}  # Transpose output -> the 2-D initializer (a tied embedding)
        self.kv_new: dict[str, tuple[int, str, str]] = {}  # past ++ new row (and its GQA repeats) -> (layer, key|value, new)
        self.lifted_splits: set[str] = set()
        self.causal_masks: dict[str, int] = {}  # causal attention masks (from attention_mask and positions) -> window
        self.grouped: dict[str, int] = {}  # tensor viewed as [.., heads, D] by a Reshape -> D (the flat vector is the same)
        self.found = dict(heads=0, kv_heads=0, head_dim=0, eps=None, theta=None, rotary=0, window=0, bias=False,
                          hidden=0, inter=0, vocab=0, table=None)
        self.unlifted: list[str] = []
        self.layer = 0

    # -- parameters
    def param(self, name: str, shape, loader) -> str:
        pname = _safe(name)
        if pname not in self.loaders:
            self.loaders[pname] = loader
            self.b.param(pname, tuple(shape), self.dtype)
        return pname

    def init_param(self, name: str) -> str:
        return self.param(name, self.inits.shape(name), lambda: self.inits.array(name))

    def weight_t(self, init: str, lo: int = 0, hi: int | None = None) -> str:
        """An ONNX MatMul weight [K, N] as Linear weight rows [lo, hi) of its transpose [N, K]."""
        k, n = self.inits.shape(init)
        hi = n if hi is None else hi
        suffix = "" if (lo, hi) == (0, n) else f".rows{lo}-{hi}"
        return self.param(init + ".T" + suffix, (hi - lo, k), lambda: self.inits.array(init)[:, lo:hi].t().contiguous())

    def bias_of(self, matmul_out: str):
        users = self.consumers.get(matmul_out, [])
        if len(users) == 1 and users[0].op_type == "Add":
            other = [i for i in users[0].input if i != matmul_out]
            if len(other) == 1 and other[0] in self.inits and len(self.inits.shape(other[0])) == 1:
                return users[0], other[0]
        return None, None

    def cache_rtol(self, name: str) -> float:
        """How closely a RoPE cache's frequencies can be read: fp32 to 1e-4, fp16/bf16 caches to 5e-3."""
        return 1e-4 if self.inits.raw(name).dtype == np.float32 else 5e-3

    # -- one method per op
    def Transpose(self, n, a):
        perm = list(a.get("perm", [1, 0]))
        if n.input[0] in self.inits and perm == [1, 0]:
            self.transposed[n.output[0]] = n.input[0]
        elif n.input[0] in self.kv_new:
            self.kv_new[n.output[0]] = self.kv_new[n.input[0]]
        elif perm == [0, 2, 1, 3]:  # [B, S, H, D] <-> [B, H, S, D] with S = 1: the same flat vector
            self.value[n.output[0]] = self.value[n.input[0]]
            if n.input[0] in self.grouped:
                self.grouped[n.output[0]] = self.grouped[n.input[0]]
        else:
            self.unlifted.append(_where(n) + f" with perm {perm}")

    def Gather(self, n, a):
        if n.input[1] != "input_ids" or not (n.input[0] in self.inits or n.input[0] in self.transposed):
            return self.unlifted.append(_where(n))
        # a tied model reads the LM head's matrix as the embedding: one parameter serves both
        table = self.weight_t(self.transposed[n.input[0]]) if n.input[0] in self.transposed else self.init_param(n.input[0])
        vocab, hidden = self.b.graph.params[table].type.shape
        self.found.update(vocab=vocab, hidden=hidden, table=table)
        self.value[n.output[0]] = self.b.emit(Embedding, "x", table=table, index=self.token)

    def SimplifiedLayerNormalization(self, n, a):
        eps = float(a.get("epsilon", 1e-5))
        group = self.grouped.get(n.input[0], 0)
        if not group:
            self.found["eps"] = eps
        self.found["qk_norm"] = self.found.get("qk_norm", False) or bool(group)
        self.value[n.output[0]] = self.b.emit(RMSNorm, f"L{self.layer}.{'head_norm' if group else 'norm'}",
                                              x=self.value[n.input[0]], weight=self.init_param(n.input[1]), eps=eps,
                                              group=group)
        if group:
            self.grouped[n.output[0]] = group

    def Split(self, n, a):
        if n.name not in self.lifted_splits:  # lifted with the MatMul it cuts, or not at all
            self.unlifted.append(_where(n))

    def Reshape(self, n, a):
        """[.., H*D] <-> [.., H, D] views of one decode vector: the flat IR value is unchanged; a trailing D
        is remembered so that a norm over the last axis becomes a per-group RMSNorm."""
        if n.input[0] in self.kv_new:  # the GQA repeat of past ++ new: attention reads the cache itself
            self.kv_new[n.output[0]] = self.kv_new[n.input[0]]
            return
        shape = self.values.ints(n.input[1])  # a constant, or computed from shapes (TorchScript exports)
        if shape is None or len(shape) < 2 or shape[0] not in (0, 1, None) or shape[-1] is None or shape[-1] < -1 \
                or shape[-1] == 0:
            return self.unlifted.append(_where(n) + " with a shape that is not [batch, .., last]")
        src = self.value[n.input[0]]
        self.value[n.output[0]] = src
        if shape[-1] != -1 and int(shape[-1]) != self.b.graph.type_of(src).shape[0]:  # -1 last: flat again
            self.grouped[n.output[0]] = int(shape[-1])

    def SkipSimplifiedLayerNormalization(self, n, a):
        if len(n.input) != 3:
            return self.unlifted.append(_where(n) + " with beta or bias inputs")
        self.found["eps"] = float(a.get("epsilon", 1e-5))
        s = self.b.emit(Add, f"L{self.layer}.x", a=self.value[n.input[0]], b=self.value[n.input[1]])
        self.value[n.output[0]] = self.b.emit(RMSNorm, f"L{self.layer}.norm", x=s,
                                              weight=self.init_param(n.input[2]), eps=self.found["eps"])
        if len(n.output) > 3 and n.output[3]:
            self.value[n.output[3]] = s

    def MatMul(self, n, a):
        if n.input[1] in self.transposed:  # x @ E^T with E [N, K] an initializer (a tied LM head): E itself
            src = self.transposed[n.input[1]]
            rows = self.inits.shape(src)[0]
            self.linear(n, lambda lo=0, hi=None: self.init_param(src) if (lo, hi or rows) == (0, rows) else
                        self.param(f"{src}.rows{lo}-{hi}", (hi - lo, self.inits.shape(src)[1]),
                                   lambda: self.inits.array(src)[lo:hi]), rows)
            return
        if n.input[1] not in self.inits:
            return self.unlifted.append(_where(n) + " whose weight is not an initializer")
        self.linear(n, lambda lo=0, hi=None: self.weight_t(n.input[1], lo, hi))

    def MatMulNBits(self, n, a):
        """4-bit weights [N, blocks, block_size/2] with scales (and zero points), dequantized at load."""
        if int(a.get("bits", 4)) != 4 or not all(i in self.inits for i in n.input[1:] if i) or len(n.input) > 4:
            return self.unlifted.append(_where(n) + f" with bits={a.get('bits')} or inputs that are not initializers")
        k, rows, block = int(a["K"]), int(a["N"]), int(a["block_size"])
        q, scales = n.input[1], n.input[2]
        zp = n.input[3] if len(n.input) > 3 and n.input[3] else None

        def matrix(lo=0, hi=None):
            hi = rows if hi is None else hi
            loader = lambda: dequantize_4bit(self.inits.raw(q), self.inits.array(scales),  # noqa: E731
                                             self.inits.raw(zp) if zp else None, k, block)[lo:hi]
            return self.param(f"{q}.dq" + ("" if (lo, hi) == (0, rows) else f".rows{lo}-{hi}"), (hi - lo, k), loader)

        self.linear(n, matrix, rows)

    def linear(self, n, matrix, rows: int | None = None):
        """A MatMul-like node: one Linear, or three on row slices when it is GroupQueryAttention's packed q|k|v.
        matrix(lo, hi) names the parameter holding rows [lo, hi) of the weight as [N, K]."""
        add, bias = self.bias_of(n.output[0])
        result = add.output[0] if add else n.output[0]
        gqa = [c for c in self.consumers.get(result, []) if c.op_type == "GroupQueryAttention"
               and c.input[0] == result and not (len(c.input) > 1 and c.input[1])]  # packed q|k|v only
        split = [c for c in self.consumers.get(result, []) if c.op_type == "Split" and len(c.input) > 1]
        x = self.value[n.input[0]]
        if len(split) == 1 and split[0].input[1] in self.constants and not bias:
            # packed q|k|v cut by a Split (Qwen3's builder graph, q/k norms between): one Linear per piece
            lo, sizes = 0, self.constants[split[0].input[1]].tolist()
            for i, (out, size) in enumerate(zip(split[0].output, sizes)):
                name = "qkv"[i] if len(sizes) == 3 else f"part{i}"
                self.value[out] = self.b.emit(Linear, f"L{self.layer}.{name}", x=x, weight=matrix(lo, lo + size))
                lo += size
            self.lifted_splits.add(split[0].name)
            return
        if not gqa:
            bp = self.init_param(bias) if bias else None
            name = "logits" if result == "logits" else f"L{self.layer}.linear"
            self.value[result] = self.b.emit(Linear, name, x=x, weight=matrix(), bias=bp)
            return
        # packed q|k|v feeding GroupQueryAttention: three Linears on row slices, as the HF layout has them
        ga = _attrs(gqa[0])
        h, kvh = int(ga["num_heads"]), int(ga["kv_num_heads"])
        dh = (rows or self.inits.shape(n.input[1])[1]) // (h + 2 * kvh)
        bounds = {"q": (0, h * dh), "k": (h * dh, (h + kvh) * dh), "v": ((h + kvh) * dh, (h + 2 * kvh) * dh)}
        for part, (lo, hi) in bounds.items():
            bp = None
            if bias:
                bp = self.param(f"{bias}.{part}", (hi - lo,), lambda lo=lo, hi=hi: self.inits.array(bias)[lo:hi])
            self.value[f"{result}:{part}"] = self.b.emit(Linear, f"L{self.layer}.{part}", x=x,
                                                         weight=matrix(lo, hi), bias=bp)
        self.found["bias"] = self.found["bias"] or bias is not None

    def GroupQueryAttention(self, n, a):
        if n.input[1] and n.input[2]:  # separate q, k, v
            q_in, k_in, v_in = (self.value[i] for i in n.input[:3])
        else:
            q_in, k_in, v_in = (self.value.get(f"{n.input[0]}:{p}") for p in "qkv")
        if q_in is None:
            if not self.unlifted:  # otherwise a consequence of a node already named
                self.unlifted.append(_where(n) + ": its query is not one packed q|k|v MatMul")
            return
        h, kvh = int(a["num_heads"]), int(a["kv_num_heads"])
        dh = self.b.graph.type_of(q_in).shape[0] // h
        window = max(0, int(a.get("local_window_size", -1)))
        self.found.update(heads=h, kv_heads=kvh, head_dim=dh, window=window)
        L, b = f"L{self.layer}.", self.b
        if a.get("do_rotary", 0):
            cos, sin = self.inits.array(n.input[7]), self.inits.array(n.input[8])
            rotary, theta = 2 * cos.shape[1], _theta(cos, sin, _where(n), self.cache_rtol(n.input[7]))
            self.found.update(theta=theta, rotary=rotary)
            if int(a.get("rotary_interleaved", 0)) not in (0, 1):
                return self.unlifted.append(_where(n) + f" with rotary_interleaved={a['rotary_interleaved']} "
                                                        "(expected 0: halves, or 1: interleaved pairs)")
            rope = dict(pos=self.pos, head_dim=dh, rotary_dim=rotary, theta=theta,
                        interleaved=bool(a.get("rotary_interleaved", 0)))
            q = b.emit(Rope, L + "q_rot", x=q_in, **rope)
            k = b.emit(Rope, L + "k_rot", x=k_in, **rope)
        else:  # rotated before it by RotaryEmbedding nodes (the genai builder for DirectML)
            q, k = q_in, k_in
        cache = b.state(f"kv.{self.layer}", TensorType((2, kvh, self.seq, dh), self.dtype))
        kv = b.emit(KVAppend, L + "kv", cache=cache, k=k, v=v_in, pos=self.pos)
        self.value[n.output[0]] = b.emit(Attention, L + "attn", q=q, cache=kv, pos=self.pos, n_heads=h,
                                         scale=float(a.get("scale", 0.0)) or attention_scale(dh), window=window,
                                         softcap=float(a.get("softcap", 0.0)))
        self.layer += 1

    # -- the standard opset-23 ops
    def RMSNormalization(self, n, a):
        if int(a.get("axis", -1)) != -1:
            return self.unlifted.append(_where(n) + f" over axis {a.get('axis')} (kiec normalizes the last axis)")
        self.SimplifiedLayerNormalization(n, a)

    def RotaryEmbedding(self, n, a):
        """Standard (X, cos_cache, sin_cache, position_ids); com.microsoft's is (X, position_ids, cos, sin)."""
        x, cos_name, sin_name = (n.input[0], n.input[2], n.input[3]) if n.domain == MS else n.input[:3]
        heads = int(a.get("num_heads", 0))
        src = self.value[x]
        if not heads and x in self.grouped:
            heads = self.b.graph.type_of(src).shape[0] // self.grouped[x]
        if not heads and not a.get("rotary_embedding_dim") and cos_name in self.inits:
            # onnxruntime's rule for [B, S, hidden] without num_heads: the head is what the cache rotates
            heads = self.b.graph.type_of(src).shape[0] // (2 * self.inits.shape(cos_name)[1])
        if not heads:
            return self.unlifted.append(_where(n) + " without num_heads")
        if n.domain == MS and a.get("is_packed_batching", 0):
            return self.unlifted.append(_where(n) + " with packed batching")
        if cos_name in self.inits and sin_name in self.inits:
            cos, sin = self.inits.array(cos_name), self.inits.array(sin_name)
            half, theta = cos.shape[1], _theta(cos, sin, _where(n), self.cache_rtol(cos_name))
        else:  # cos/sin computed in the graph from position x inv_freq (torch.onnx): read inv_freq
            inv = self.traced_inv_freq(cos_name)
            if inv is None:
                return self.unlifted.append(_where(n) + ": its cos/sin are neither caches nor Cos/Sin of "
                                                        "positions x an inv_freq initializer")
            half, theta = inv.numel(), _theta_of(inv.double(), _where(n))
            if a.get("rotary_embedding_dim") and int(a["rotary_embedding_dim"]) != 2 * half:
                return self.unlifted.append(_where(n) + f": it rotates {a['rotary_embedding_dim']} features but its "
                                                        f"cos/sin come from {half} frequencies")
        if int(a.get("interleaved", 0)) not in (0, 1):
            return self.unlifted.append(_where(n) + f" with interleaved={a['interleaved']} (expected 0: halves, or "
                                                    "1: interleaved pairs)")
        rotary = int(a.get("rotary_embedding_dim", 0)) or 2 * half
        dh = self.b.graph.type_of(src).shape[0] // heads
        self.found.update(theta=theta, rotary=rotary, head_dim=dh)
        self.value[n.output[0]] = self.b.emit(Rope, f"L{self.layer}.rot", x=src, pos=self.pos, head_dim=dh,
                                              rotary_dim=rotary, theta=theta, interleaved=bool(a.get("interleaved", 0)))
        self.grouped[n.output[0]] = dh

    def traced_inv_freq(self, cos_name: str):
        """The inv_freq initializer behind an in-graph cos: the one float vector upstream of the angle
        (positions x inv_freq through Mul or MatMul, Cast/Unsqueeze/Expand/Transpose/Concat(f, f) around)."""
        cos = self.producer.get(cos_name)
        if cos is None or cos.op_type != "Cos":
            return None
        found, stack, seen = set(), [cos.input[0]], set()
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            value = self.constants.get(name)
            if value is None and name in self.inits and int(np.prod(self.inits.shape(name) or (1,))) <= 1 << 16:
                value = self.inits.raw(name)
            if value is not None:
                if value.size > 1 and np.issubdtype(value.dtype, np.floating):
                    found.add(name)
                continue
            n = self.producer.get(name)
            if n is not None and n.op_type in ("Mul", "MatMul", "Cast", "Unsqueeze", "Expand", "Transpose",
                                               "Concat", "Reshape"):
                stack += [n.input[0]] if n.op_type in ("Expand", "Reshape", "Unsqueeze") else list(n.input)
        if len(found) != 1:
            return None
        name = found.pop()
        value = self.constants[name] if name in self.constants else self.inits.raw(name)
        return torch.from_numpy(np.asarray(value, np.float32).reshape(-1).copy())

    def Concat(self, n, a):
        """past_key_values.N.key|value ++ the new row (axis -2): the cache append, done by KVAppend."""
        m = re.fullmatch(r"past_key_values\.(\d+)\.(key|value)", n.input[0]) if len(n.input) == 2 else None
        if m is None or int(a.get("axis", 0)) not in (-2, 2):
            return self.unlifted.append(_where(n))
        self.kv_new[n.output[0]] = (int(m.group(1)), m.group(2), self.value[n.input[1]])

    def Unsqueeze(self, n, a):
        if n.input[0] not in self.kv_new:
            return self.unlifted.append(_where(n))
        self.kv_new[n.output[0]] = self.kv_new[n.input[0]]

    Expand = Unsqueeze

    def Attention(self, n, a):
        """opset-23 Attention over (Q, K, V, mask, past_key, past_value) -> (Y, present_key, present_value)."""
        ins = list(n.input) + [""] * (6 - len(n.input))
        if ins[3] and ins[3] not in self.causal_masks:
            return self.unlifted.append(_where(n) + " with an attn_mask that is not the plain causal mask "
                                                    "or a causal mask with one sliding window (key > query - W)")
        window = self.causal_masks.get(ins[3], 0)
        if ins[1] in self.kv_new and ins[2] in self.kv_new:  # 4-D: K, V are past ++ new (torch.onnx)
            layer, _, k = self.kv_new[ins[1]]
            v = self.kv_new[ins[2]][2]
            q = self.value[ins[0]]
            dh = self.grouped.get(ins[0], 0)
            if not dh:
                return self.unlifted.append(_where(n) + ": cannot tell the head size of its query")
            h, kvh = self.b.graph.type_of(q).shape[0] // dh, self.b.graph.type_of(k).shape[0] // dh
        else:
            m = re.fullmatch(r"past_key_values\.(\d+)\.key", ins[4])
            if m is None:
                return self.unlifted.append(_where(n) + " whose past_key is not a past_key_values.N.key input")
            layer = int(m.group(1))
            h, kvh = int(a.get("q_num_heads", 0)), int(a.get("kv_num_heads", 0))
            if not h or not kvh:
                return self.unlifted.append(_where(n) + " without q_num_heads/kv_num_heads (3-D inputs expected)")
            q, k, v = (self.value[i] for i in ins[:3])
            dh = self.b.graph.type_of(q).shape[0] // h
        self.found.update(heads=h, kv_heads=kvh, head_dim=dh)
        L, b = f"L{self.layer}.", self.b
        cache = b.state(f"kv.{layer}", TensorType((2, kvh, self.seq, dh), self.dtype))
        kv = b.emit(KVAppend, L + "kv", cache=cache, k=k, v=v, pos=self.pos)
        self.value[n.output[0]] = b.emit(Attention, L + "attn", q=q, cache=kv, pos=self.pos, n_heads=h,
                                         scale=float(a.get("scale", 0.0)) or attention_scale(dh),
                                         softcap=float(a.get("softcap", 0.0)), window=window)
        self.found["window"] = max(self.found["window"], window)
        self.layer += 1

    def Cast(self, n, a):
        """A cast between float types on the compute path (fp32 around a norm, TorchScript's residual): kiec
        computes in its own precision, so the value passes through."""
        from onnx import TensorProto
        if a.get("to") not in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE):
            return self.unlifted.append(_where(n) + f" to type {a.get('to')} (only float casts are lifted)")
        self.value[n.output[0]] = self.value[n.input[0]]
        for table in (self.grouped, self.kv_new):
            if n.input[0] in table:
                table[n.output[0]] = table[n.input[0]]

    def Sigmoid(self, n, a):
        self.sigmoid_of[n.output[0]] = n.input[0]

    def Mul(self, n, a):
        x, y = n.input
        L = f"L{max(self.layer - 1, 0)}."
        if self.sigmoid_of.get(y) == x or self.sigmoid_of.get(x) == y:  # x * sigmoid(x): SiLU
            src = x if self.sigmoid_of.get(y) == x else y
            self.value[n.output[0]] = self.b.emit(Activation, L + "act", x=self.value[src], fn="silu")
            self.found["inter"] = self.b.graph.type_of(self.value[src]).shape[0]
        else:
            self.value[n.output[0]] = self.b.emit(Mul, L + "mul", a=self.value[x], b=self.value[y])

    def Add(self, n, a):
        if n.output[0] in self.value or f"{n.output[0]}:q" in self.value:  # a bias folded into its MatMul's Linear
            return
        self.value[n.output[0]] = self.b.emit(Add, f"L{self.layer}.add", a=self.value[n.input[0]],
                                              b=self.value[n.input[1]])

    def run(self, skip: set) -> None:
        for n in self.nodes:
            if n.name in skip or n.op_type == "Constant":  # constants: read through self.values
                continue
            method = getattr(self, n.op_type, None) if (n.domain or "") in ("", MS) else None
            if method is None:
                self.unlifted.append(_where(n))
                continue
            try:
                method(n, _attrs(n))
            except KeyError as e:  # an input whose producer was not lifted: the producer is the one to name
                if not self.unlifted:
                    self.unlifted.append(f"{_where(n)}: input {e} has no lifted producer")


def load_onnx(path: str, dtype: str | None, max_seq_len: int | None):
    import onnx

    from kiec.frontend import assemble_graph

    if not os.path.isfile(path):
        raise KiecError(f"{path}: no such file")
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as e:  # protobuf raises DecodeError and friends on a truncated or foreign file
        raise KiecError(f"{path}: not a readable ONNX model: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    g = model.graph
    canonical_kv_names(g)
    inputs, outputs = {i.name for i in g.input}, [o.name for o in g.output]
    layers = sorted(int(m.group(1)) for n in inputs if (m := re.fullmatch(r"past_key_values\.(\d+)\.key", n)))
    if "input_ids" not in inputs or "logits" not in outputs or not layers:
        raise KiecError(f"{path}: not a decoder with a KV cache (expected inputs input_ids and "
                        f"past_key_values.N.key/value, output logits; found inputs {sorted(inputs)})")
    inits = _Initializers(model, os.path.dirname(os.path.abspath(path)), path)
    caches = [n.input[7] for n in g.node if n.op_type == "GroupQueryAttention" and len(n.input) > 8]
    caches += [n.input[2 if n.domain == MS else 1] for n in g.node if n.op_type == "RotaryEmbedding"]
    caches = [c for c in caches if c in inits]
    positions = inits.shape(caches[0])[0] if caches else 0
    seq = max_seq_len if max_seq_len is not None else min(positions or 4096, 4096)
    if positions and seq > positions:
        raise KiecError(f"{path}: max_seq_len {seq} is past the {positions} positions of its RoPE caches")
    embed = next((i for i in g.initializer if i.name in {n.input[0] for n in g.node if n.op_type in ("Gather", "Transpose")}), None)
    native = {onnx.TensorProto.FLOAT16: "f16", onnx.TensorProto.BFLOAT16: "bf16"}.get(getattr(embed, "data_type", 0), "f32")

    from onnx import numpy_helper
    constants = {n.output[0]: numpy_helper.to_array(a.t) for n in g.node if n.op_type == "Constant"
                 for a in n.attribute if a.name == "value"}
    decomposed = {"Pow", "Softmax", "Neg"} & {n.op_type for n in g.node}  # worth a shape inference
    shapes = static_shapes(model) if decomposed else {}
    nodes, folded = fold_decompositions(list(g.node), inits, constants, set(outputs), shapes)
    lift = _Lifter(model, inits, path, dtype or native, seq, ShapeValues(nodes, inits, constants, shapes))
    skip, lift.causal_masks = bookkeeping(nodes, set(outputs), lift.values)
    lift.run(skip)
    if lift.unlifted:
        raise Unlifted(path, lift.unlifted)
    if "logits" not in lift.value:
        raise KiecError(f"{path}: the output 'logits' is not computed by a lifted MatMul")
    if lift.layer != len(layers):
        raise KiecError(f"{path}: {len(layers)} past_key_values inputs but {lift.layer} attention nodes")
    b, found = lift.b, lift.found
    check_kv_inputs(g, found, path)
    b.output(lift.value["logits"], b.emit(Argmax, "next", x=lift.value["logits"]))
    found["tied"] = b.graph.producer()[lift.value["logits"]].weight == found["table"]  # the LM head reads the table
    cfg = _config(found, lift.layer, os.path.dirname(os.path.abspath(path)))
    model = assemble_graph(b, lift.loaders, cfg, path, seq)
    if any(folded.values()):
        model.notes.append("folded from primitive ops: " + ", ".join(f"{n} {op}" for op, n in folded.items() if n))
    return model


def _config(found: dict, layers: int, directory: str) -> LlamaConfig:
    eos, bos = (), None
    gc = os.path.join(directory, "genai_config.json")
    if os.path.isfile(gc):
        with open(gc) as fh:
            m = json.load(fh).get("model", {})
        e = m.get("eos_token_id")
        eos = tuple(e) if isinstance(e, list) else (() if e is None else (int(e),))
        bos = m.get("bos_token_id")
    return LlamaConfig(
        arch="llama", vocab_size=found["vocab"], hidden_size=found["hidden"], intermediate_size=found["inter"],
        num_layers=layers, num_heads=found["heads"], num_kv_heads=found["kv_heads"], head_dim=found["head_dim"],
        rms_norm_eps=found["eps"], rope=RopeConfig(found["theta"], partial_rotary_factor=found["rotary"] / found["head_dim"]),
        max_position_embeddings=1 << 20, tie_word_embeddings=found["tied"], qkv_bias=found["bias"],
        qk_norm=found.get("qk_norm", False),
        sliding_window=found["window"], bos_token_id=bos, eos_token_ids=eos)

