"""The parts of an ONNX decoder that are not its compute: the KV-cache inputs' names and declared shapes, and
the bookkeeping (sequence lengths, masks, positions, shapes) that the KV state and pos replace, with the
sliding window a mask may carry."""
from __future__ import annotations

import re

from kiec.errors import KiecError


# KV-cache input names other exporters write -> past_key_values.N.key|value (torch.export's flattening of a
# DynamicCache: past_key_values_key_cache_N; some tools: past_key_values_N_key)
_KV_NAMES = [(re.compile(r"past_key_values_(key|value)_cache_(\d+)"), lambda m: (m.group(2), m.group(1))),
             (re.compile(r"past_key_values_(\d+)_(key|value)"), lambda m: (m.group(1), m.group(2)))]


def canonical_kv_names(g) -> None:
    """Rename the graph's KV-cache inputs to past_key_values.N.key|value, in place, everywhere they are read."""
    rename = {}
    for i in g.input:
        for pattern, parts in _KV_NAMES:
            if m := pattern.fullmatch(i.name):
                layer, kind = parts(m)
                rename[i.name] = f"past_key_values.{int(layer)}.{kind}"
    if not rename:
        return
    for i in g.input:
        i.name = rename.get(i.name, i.name)
    for n in g.node:
        for j, name in enumerate(n.input):
            if name in rename:
                n.input[j] = rename[name]


def check_kv_inputs(g, found: dict, path: str) -> None:
    """The declared past_key_values shapes [batch, kv_heads, past, head_dim] against what the graph's
    projections and attention nodes say: a mismatch is an inconsistent file, named."""
    for i in g.input:
        if not i.name.startswith("past_key_values."):
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in i.type.tensor_type.shape.dim]
        if len(dims) != 4:
            raise KiecError(f"{path}: input {i.name} has {len(dims)} dims; expected [batch, kv_heads, past, head_dim]")
        for axis, key, what in ((1, "kv_heads", "KV heads"), (3, "head_dim", "head_dim")):
            if dims[axis] is not None and dims[axis] != found[key]:
                raise KiecError(f"{path}: input {i.name} declares {dims[axis]} on axis {axis} ({what}), but the "
                                f"graph's attention uses {found[key]}: inconsistent KV shapes")



# what builds a plain causal (and padding) mask; a sliding window adds Greater(key, Sub(query, W))
CAUSAL_MASK_OPS = {"Shape", "Squeeze", "Unsqueeze", "Range", "Add", "LessOrEqual", "And", "Max", "Expand", "Concat",
                   "GatherND", "Gather", "Cast", "Reshape", "Constant", "Where", "Slice", "ConstantOfShape",
                   "Flatten", "Mul", "Equal"}


def _mask_window(ups: list, producers: dict, values) -> int | None:
    """The sliding window of a mask built by `ups` (its upstream nodes): 0 for a plain causal mask, W where it
    also keeps key > query - W (and key <= query), None for anything else (not read as a mask)."""
    if not {n.op_type for n in ups} <= CAUSAL_MASK_OPS | {"Sub", "Greater"}:
        return None
    subs, gts = [n for n in ups if n.op_type == "Sub"], [n for n in ups if n.op_type == "Greater"]
    causal = {(n.input[0], n.input[1]) for n in ups if n.op_type == "LessOrEqual"}  # key <= query
    windows = set()
    for gt in gts:
        sub = producers.get(gt.input[1])
        w = values.scalar(sub.input[1]) if sub is not None and sub.op_type == "Sub" and values is not None else None
        if w is None or w != int(w) or w < 1 or (gt.input[0], sub.input[0]) not in causal:
            return None
        windows.add(int(w))
    if len(windows) > 1 or len(subs) != len(gts):
        return None
    return windows.pop() if windows else 0


def bookkeeping(nodes, outputs: set, values=None) -> tuple[set, dict]:
    """Nodes that only turn attention_mask, position_ids and shapes into sequence lengths, masks, cos/sin and
    target shapes: the KV state and pos replace them. Returns (their names, the attention masks among their
    outputs that are causal, each with its sliding window or 0). values: onnx_fold.ShapeValues, for W."""
    producers = {o: n for n in nodes for o in n.output if o}
    seeds, masks = [], []
    for n in nodes:
        if n.op_type == "GroupQueryAttention":
            seeds += [n.input[i] for i in (5, 6) if len(n.input) > i]
        elif n.op_type == "Attention" and len(n.input) > 3 and n.input[3]:
            seeds.append(n.input[3])
            masks.append(n.input[3])
        elif n.op_type in ("Expand", "Reshape") and len(n.input) > 1:
            seeds.append(n.input[1])
        elif n.op_type == "RotaryEmbedding":
            seeds += list(n.input[1:4])  # cos, sin and position ids, in either op's order

    def upstream(t: str) -> set:
        seen, stack = set(), [t]
        while stack:
            name = stack.pop()
            if name in producers and producers[name].name not in seen:
                seen.add(producers[name].name)
                if producers[name].op_type != "Shape":  # a shape reads no values: do not walk into the compute
                    stack += list(producers[name].input)
        return seen

    skip = set().union(*(upstream(t) for t in seeds)) if seeds else set()
    # and whatever feeds only those (what a Shape read): nothing else consumes it
    consumers: dict[str, list] = {}
    for n in nodes:
        for i in n.input:
            consumers.setdefault(i, []).append(n.name)
    grew = True
    while grew:
        grew = False
        for n in nodes:
            users = [u for o in n.output if o for u in consumers.get(o, [])]
            if n.name not in skip and users and all(u in skip for u in users) and not set(n.output) & outputs:
                skip.add(n.name)
                grew = True
    by_name = {n.name: n for n in nodes}
    causal = {}
    for m in masks:
        window = _mask_window([by_name[x] for x in upstream(m)], producers, values)
        if window is not None:
            causal[m] = window

    return skip, causal
