"""The text form of a graph (`.kir`): print_graph(g) and parse_graph(text) are inverses.

    graph smollm2-135m {
      input %pos: i32[]
      param %model.norm.weight: bf16[576] replicated
      state %kv.0: f32[2,3,8192,64]
      %h: f32[576] = RMSNorm(x=%x, weight=%model.norm.weight, eps=1e-05, group=0)
      return %logits
    }
"""
from __future__ import annotations

import dataclasses
import json
import re

from .graph import Graph, Param, State
from .ops import ALL_OPS, Op
from .types import parse_type

NAME = r"[A-Za-z0-9_.\-]+"
_ARG = re.compile(rf'\s*(\w+)=(%{NAME}|"(?:[^"\\]|\\.)*"|None|True|False|[-+]?inf|nan|[-+0-9.eE]+)\s*(,|$)')


def _attr_text(v) -> str:
    if isinstance(v, str):
        return json.dumps(v)
    return repr(v)  # int, float (repr round-trips exactly), bool, None


def print_op(op: Op, type_text: str) -> str:
    args = []
    for f in dataclasses.fields(op):
        if f.name == "out":
            continue
        v = getattr(op, f.name)
        ref = f.type.startswith("Value") and v is not None
        args.append(f"{f.name}={'%' + v if ref else _attr_text(v)}")
    return f"%{op.out}: {type_text} = {type(op).__name__}({', '.join(args)})"


def print_graph(g: Graph) -> str:
    lines = [f"graph {g.name} {{"]
    lines += [f"  input %{n}: {t}" for n, t in g.inputs.items()]
    lines += [f"  param %{p.name}: {p.type} {p.shard}" for p in g.params.values()]
    lines += [f"  state %{s.name}: {s.type}" for s in g.states.values()]
    lines += [f"  {print_op(op, str(g.types[op.out]))}" for op in g.ops]
    lines.append(f"  return {', '.join('%' + o for o in g.outputs)}")
    lines.append("}")
    return "\n".join(lines) + "\n"


class ParseError(ValueError):
    pass


def _parse_value(text: str, ftype: str, where: str):
    if ftype.startswith("Value"):
        if text == "None" and "None" in ftype:
            return None
        if not text.startswith("%"):
            raise ParseError(f"{where}: expected a %value, got {text}")
        return text[1:]
    if ftype == "str":
        return json.loads(text)
    if ftype == "bool":
        return {"True": True, "False": False}[text]
    if ftype == "int":
        return int(text)
    if ftype == "float":
        return float(text)
    raise ParseError(f"{where}: field type {ftype} has no text form")


def _parse_op(line: str, where: str) -> tuple[Op, str]:
    m = re.fullmatch(rf"%({NAME}):\s*(\S+)\s*=\s*(\w+)\((.*)\)", line)
    if not m:
        raise ParseError(f"{where}: cannot read {line!r}")
    out, type_text, op_name, args_text = m.groups()
    if op_name not in ALL_OPS:
        raise ParseError(f"{where}: unknown op {op_name}")
    cls = ALL_OPS[op_name]
    ftypes = {f.name: f.type for f in dataclasses.fields(cls)}
    kwargs, pos = {}, 0
    while pos < len(args_text):
        a = _ARG.match(args_text, pos)
        if not a:
            raise ParseError(f"{where}: cannot read the arguments at {args_text[pos:]!r}")
        key, val = a.group(1), a.group(2)
        if key not in ftypes or key == "out":
            raise ParseError(f"{where}: {op_name} has no field {key}")
        kwargs[key] = _parse_value(val, ftypes[key], where)
        pos = a.end()
    return cls(out=out, **kwargs), type_text


def _fields(pattern: str, line: str, where: str) -> tuple[str, ...]:
    m = re.fullmatch(pattern, line)
    if not m:
        raise ParseError(f"{where}: cannot read {line!r}")
    return m.groups()


def parse_graph(text: str) -> Graph:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    m = re.fullmatch(rf"graph ({NAME}) \{{", lines[0]) if lines else None
    if not m or lines[-1] != "}":
        raise ParseError("line 1: expected 'graph NAME {' ... '}'")
    g = Graph(m.group(1))
    for i, line in enumerate(lines[1:-1], start=2):
        where = f"line {i}"
        if line.startswith("input "):
            name, t = _fields(rf"input %({NAME}):\s*(\S+)", line, where)
            g.inputs[name] = parse_type(t)
        elif line.startswith("param "):
            name, t, shard = _fields(rf"param %({NAME}):\s*(\S+)\s+(\w+)", line, where)
            g.params[name] = Param(name, parse_type(t), shard)
        elif line.startswith("state "):
            name, t = _fields(rf"state %({NAME}):\s*(\S+)", line, where)
            g.states[name] = State(name, parse_type(t))
        elif line.startswith("return"):
            rest = line[len("return"):].strip()
            g.outputs = [o.strip()[1:] for o in rest.split(",")] if rest else []
        else:
            op, type_text = _parse_op(line, where)
            g.ops.append(op)
            g.types[op.out] = parse_type(type_text)
    return g
