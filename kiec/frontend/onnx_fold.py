"""Decomposed patterns folded into the ops the ONNX lifter reads, before it runs. torch.onnx below opset 23
(its default is 18) writes RMSNorm, RoPE and attention as primitive ops:
- RMSNorm: w * (x * Reciprocal(Sqrt(ReduceMean(Pow(x, 2), [-1]) + eps))), with optional fp32 Casts of x and
  back -> RMSNormalization(x, w);
- half-split RoPE: x * cos + Concat(-x[.., h:], x[.., :h]) * sin, cos/sin from Cos/Sin of the positions x
  inv_freq -> RotaryEmbedding(x, cos, sin, position_ids); a rotated slice concatenated with the rest (partial
  rotary) -> one RotaryEmbedding with rotary_embedding_dim;
- attention: Softmax(q·s1 @ (K^T)·s2 [+ mask]) [NaN -> 0] @ V, K and V reached from past ++ new through the GQA
  repeat (Unsqueeze/Expand/Reshape) and K's transposition -> Attention(q, present_key, present_value, mask)
  with scale s1·s2.
A node is replaced by the fused one under its output's name; what fed only the pattern is then unused and
dropped. Anything that does not match is left as it was, for the lifter to lift or to name."""
from __future__ import annotations

import numpy as np


class ShapeValues:
    """Producers, small constants and static dimensions of an ONNX node list: what the pattern matchers and
    the lifter ask of a tensor that is not a compute value (a scale, an epsilon, a slice bound, a shape)."""

    def __init__(self, nodes, inits, constants: dict, shapes: dict):
        self.nodes, self.inits, self.constants, self.shapes = nodes, inits, constants, shapes
        self.producer = {o: n for n in nodes for o in n.output if o}

    def prod(self, name: str, *ops):
        n = self.producer.get(name)
        return n if n is not None and n.op_type in ops and not n.domain else None

    def value(self, name: str):
        if name in self.constants:
            return np.asarray(self.constants[name])
        if name in self.inits and int(np.prod(self.inits.shape(name) or (1,))) <= 16:
            return np.asarray(self.inits.raw(name))
        return None

    def scalar(self, name: str):
        v = self.value(name)
        return float(v.reshape(-1)[0]) if v is not None and v.size == 1 else None

    def ints(self, name: str, depth: int = 0):
        """An integer vector: a constant, or computed from static dimensions (Shape, Gather, arithmetic,
        Concat, Cast, Unsqueeze, as TorchScript exports compute slice bounds); None where unknown."""
        v = self.value(name)
        if v is not None:
            return [int(x) for x in v.reshape(-1)] if np.issubdtype(v.dtype, np.integer) else None
        n = self.producer.get(name)
        if n is None or n.domain or depth > 32:
            return None
        ins = [self.ints(i, depth + 1) if n.op_type != "Shape" else None for i in n.input]
        if n.op_type == "Shape":
            dims = self.shapes.get(n.input[0])
            return None if dims is None else list(dims)[_attr(n, "start", 0):_attr(n, "end", None)]
        if n.op_type in ("Cast", "Unsqueeze", "Squeeze", "Reshape", "Identity"):
            return ins[0]
        if any(i is None for i in ins):
            return None
        if n.op_type == "Gather" and _attr(n, "axis", 0) == 0:
            return [ins[0][j] if -len(ins[0]) <= j < len(ins[0]) else None for j in ins[1]]
        if n.op_type == "Concat":
            return [x for i in ins for x in i]
        if n.op_type in ("Add", "Sub", "Mul", "Div") and len(ins) == 2:
            a, b = ins
            if len(a) != len(b) and 1 not in (len(a), len(b)):
                return None
            a, b = (a * len(b) if len(a) == 1 else a), (b * len(a) if len(b) == 1 else b)
            f = {"Add": lambda x, y: x + y, "Sub": lambda x, y: x - y, "Mul": lambda x, y: x * y,
                 "Div": lambda x, y: int(x / y) if y else None}[n.op_type]
            return [None if x is None or y is None else f(x, y) for x, y in zip(a, b)]
        return None

    def through(self, name: str, *ops):
        """Follow single-input producers of the given types (Cast, Unsqueeze, ...) upstream."""
        while (n := self.prod(name, *ops)) is not None:
            name = n.input[0]
        return name


def _attr(node, name, default=None):
    from onnx import helper
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _pairs(node):
    a, b = node.input[0], node.input[1]
    return ((a, b), (b, a))


def _rmsnorm(g: ShapeValues, m):
    """m = Mul(w, [Cast](Mul(xc, Reciprocal(Sqrt(Add(ReduceMean(Pow(xc, 2)), eps)))))) -> (x, w, eps)."""
    for w, inner in _pairs(m):
        if w not in g.inits or len(g.inits.shape(w)) != 1:
            continue
        mul = g.prod(g.through(inner, "Cast"), "Mul")
        if mul is None:
            continue
        for xc, r in _pairs(mul):
            rec = g.prod(r, "Reciprocal", "Div")  # 1 / sqrt: Reciprocal (torch.onnx) or Div(1, .) (TorchScript)
            if rec is not None and rec.op_type == "Div" and g.scalar(rec.input[0]) != 1.0:
                rec = None
            sqrt = g.prod(rec.input[-1], "Sqrt") if rec is not None else None
            add = g.prod(sqrt.input[0], "Add") if sqrt is not None else None
            if add is None:
                continue
            for mean_out, eps_name in _pairs(add):
                mean, eps = g.prod(mean_out, "ReduceMean"), g.scalar(eps_name)
                if mean is None or eps is None:
                    continue
                axes = g.ints(mean.input[1]) if len(mean.input) > 1 else _attr(mean, "axes")
                pw = g.prod(mean.input[0], "Pow")
                if list(axes or []) != [-1] or pw is None or pw.input[0] != xc or g.scalar(pw.input[1]) != 2.0:
                    continue
                return g.through(xc, "Cast"), w, eps
    return None


def _slice(g: ShapeValues, name: str):
    """(source, start, end) of a Slice along the last axis with step 1, or None."""
    s = g.prod(name, "Slice")
    if s is None or len(s.input) < 4:
        return None
    starts, ends, axes = (g.ints(s.input[i]) for i in (1, 2, 3))
    steps = g.ints(s.input[4]) if len(s.input) > 4 and s.input[4] else [1]
    if not starts or not ends or None in starts + ends or axes not in ([-1], [3]) or steps != [1]:
        return None
    return s.input[0], starts[0], ends[0]


def _rope(g: ShapeValues, add):
    """add = Add(Mul(x, cos), Mul(Concat(Neg(x[.., h:]), x[.., :h]), sin)) -> (x, cos, sin, h)."""
    for a, b in _pairs(add):
        m1, m2 = g.prod(a, "Mul"), g.prod(b, "Mul")
        if m1 is None or m2 is None:
            continue
        for x, cos in _pairs(m1):
            for rot, sin in _pairs(m2):
                cat = g.prod(rot, "Concat")
                if cat is None or len(cat.input) != 2 or _attr(cat, "axis") not in (-1, 3):
                    continue
                neg = g.prod(cat.input[0], "Neg")
                hi, lo = _slice(g, neg.input[0]) if neg is not None else None, _slice(g, cat.input[1])
                c, s = _trig(g, cos, "Cos"), _trig(g, sin, "Sin")
                if hi is None or lo is None or c is None or s is None or hi[0] != x or lo[0] != x:
                    continue
                half = lo[2]
                if lo[1] != 0 or hi[1] != half or hi[2] < 2 * half:  # ends past the last axis mean "to the end"
                    continue
                return x, c.output[0], s.output[0], half
    return None


def _trig(g: ShapeValues, name: str, op: str):
    """The Cos/Sin node behind a RoPE operand: through Unsqueeze/Cast and a Mul by an attention scaling of 1
    (a scaling other than 1, as YaRN writes, is not folded)."""
    name = g.through(name, "Unsqueeze", "Cast")
    m = g.prod(name, "Mul")
    if m is not None:
        one = [t for t, c in _pairs(m) if g.scalar(c) == 1.0]
        name = g.through(one[0], "Cast") if one else name
    return g.prod(name, op)


def _kv_source(g: ShapeValues, name: str, kind: str):
    """Walk from an attention operand back through the GQA repeat and K's transposition to the past ++ new
    Concat of past_key_values.N.<kind>. Returns (present tensor, whether a last-two-axes transpose was seen)."""
    transposed = False
    while True:
        n = g.producer.get(name)
        if n is None or n.domain:
            return None, transposed
        if n.op_type == "Concat" and n.input[0].startswith("past_key_values.") and n.input[0].endswith("." + kind):
            return n.output[0], transposed
        if n.op_type == "Transpose":
            perm = list(_attr(n, "perm", []))
            if perm in ([0, 2, 1], [0, 1, 3, 2]):
                transposed = not transposed
            elif perm != list(range(len(perm))):
                return None, transposed
        elif n.op_type not in ("Reshape", "Expand", "Unsqueeze", "Cast"):
            return None, transposed
        name = n.input[0]


def _scaled(g: ShapeValues, name: str):
    """name = Mul(t, c) or Div(t, c) with c a scalar constant -> (t, factor); else (name, 1.0)."""
    n = g.prod(name, "Mul", "Div")
    if n is not None:
        for t, c in _pairs(n):
            v = g.scalar(c)
            if v is not None and (n.op_type == "Mul" or t == n.input[0]):
                return t, (v if n.op_type == "Mul" else 1.0 / v)
    return name, 1.0


def _score_matmul(g: ShapeValues, name: str):
    """The q·K^T MatMul behind attention scores, through Casts (fp16 exports score in fp32) and scalar
    scales; returns (the MatMul node or None, the product of the scales)."""
    scale = 1.0
    while True:
        name = g.through(name, "Cast")
        name, f = _scaled(g, name)
        if f == 1.0:
            return g.prod(g.through(name, "Cast"), "MatMul"), scale
        scale *= f


def _attention(g: ShapeValues, consumers: dict, sm):
    """sm = Softmax(axis -1) of q·k scores -> (q, present_key, present_value, mask, scale, the output MatMul)."""
    if _attr(sm, "axis", -1) not in (-1, 3):
        return None
    scores, mask = g.through(sm.input[0], "Cast"), ""
    add = g.prod(scores, "Add")
    if add is not None:
        for s, m in _pairs(add):
            if g.prod(g.through(s, "Mul", "Div", "Cast"), "MatMul") is not None:
                scores, mask = s, m
                break
    mm1, s0 = _score_matmul(g, scores)
    if mm1 is None:
        return None
    q, s1 = _scaled(g, mm1.input[0])
    kt, s2 = _scaled(g, mm1.input[1])
    key, transposed = _kv_source(g, kt, "key")
    if key is None or not transposed:
        return None
    p = sm.output[0]
    users = consumers.get(p, [])
    if len(users) == 1 and users[0].op_type == "Cast":  # back to the model's dtype after an fp32 softmax
        p, users = users[0].output[0], consumers.get(users[0].output[0], [])
    isnan = [u for u in users if u.op_type == "IsNaN"]
    where = [u for u in users if u.op_type == "Where" and u.input[2] == p]
    if isnan and where and where[0].input[0] == isnan[0].output[0] and g.scalar(where[0].input[1]) == 0.0:
        p = where[0].output[0]  # fully masked rows: NaN -> 0 (never the case at decode, where row pos is kept)
    mm2 = [u for u in consumers.get(p, []) if u.op_type == "MatMul" and u.input[0] == p]
    if len(mm2) != 1:
        return None
    value, vt = _kv_source(g, mm2[0].input[1], "value")
    if value is None or vt:
        return None
    return q, key, value, mask, s0 * s1 * s2, mm2[0]


def static_shapes(model) -> dict:
    """Tensor name -> dims (int, or None where symbolic) from ONNX shape inference with data propagation
    (which carries Reshape targets computed from shapes); {} where inference fails."""
    import onnx
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # inference is a help for slice bounds, not a requirement
        return {}
    out = {}
    for v in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        dims = v.type.tensor_type.shape.dim
        out[v.name] = [d.dim_value if d.HasField("dim_value") else None for d in dims]
    return out


def fold_decompositions(nodes: list, inits, constants: dict, outputs: set, shapes: dict | None = None) \
        -> tuple[list, dict]:
    """The node list with decomposed RMSNorm/RoPE/attention replaced by fused nodes and unused nodes removed;
    returns (nodes, counts of each fold) so that `kiec inspect` can say what was folded. shapes: static
    dimensions (static_shapes) for slice bounds computed from shapes."""
    from onnx import helper

    g = ShapeValues(nodes, inits, constants, shapes or {})
    consumers: dict[str, list] = {}
    for n in nodes:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    replace, counts = {}, {"RMSNormalization": 0, "RotaryEmbedding": 0, "Attention": 0}  # id(node) -> node or None
    for n in nodes:
        if n.domain:
            continue
        if n.op_type == "Mul" and (r := _rmsnorm(g, n)):
            x, w, eps = r
            replace[id(n)] = helper.make_node("RMSNormalization", [x, w], [n.output[0]], name=n.name + ".rmsnorm",
                                              epsilon=eps, axis=-1)
        elif n.op_type == "Add" and (r := _rope(g, n)):
            x, cos, sin, half = r
            at, out, extra = n, n.output[0], {"rotary_embedding_dim": 2 * half}  # the lifter checks it
            whole, users = _slice(g, x), consumers.get(out, [])
            if whole and whole[1] == 0 and whole[2] == 2 * half and len(users) == 1 and users[0].op_type == "Concat" \
                    and list(users[0].input[:1]) == [out] and len(users[0].input) == 2:
                rest = _slice(g, users[0].input[1])  # partial rotary: x = X[.., :r], then Concat(rotated, X[.., r:])
                if rest and rest[0] == whole[0] and rest[1] == 2 * half:
                    replace[id(n)] = None
                    at, x, out = users[0], whole[0], users[0].output[0]
            replace[id(at)] = helper.make_node("RotaryEmbedding", [x, cos, sin, "position_ids"], [out],
                                               name=at.name + ".rope", interleaved=0, **extra)
        elif n.op_type == "Softmax" and (r := _attention(g, consumers, n)):
            q, key, value, mask, scale, mm2 = r
            replace[id(mm2)] = helper.make_node("Attention", [q, key, value, mask], [mm2.output[0]],
                                                name=mm2.name + ".attention", scale=scale)
    for node in replace.values():
        if node is not None:
            counts[node.op_type] += 1
    if not any(counts.values()):
        return nodes, counts
    folded = [replace.get(id(n), n) for n in nodes]
    return _prune([n for n in folded if n is not None], outputs), counts


def _prune(nodes: list, outputs: set) -> list:
    """Drop nodes whose every output is unused (what fed only a folded pattern), until none is left."""
    while True:
        used = {i for n in nodes for i in n.input} | outputs
        keep = [n for n in nodes if any(o in used for o in n.output if o)]
        if len(keep) == len(nodes):
            return keep
        nodes = keep
