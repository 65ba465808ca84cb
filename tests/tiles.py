"""Generated persistent source read back by the tests: a tile call's template arguments by name."""
import re

from kiec.codegen.persistent import ATTENTION_TILE_HEAD, ATTENTION_TILE_TAIL, template_value


def attention_tile_args(text: str) -> list[dict[str, str]]:
    """Each kiec::attention_tile call's template arguments in generated source, by parameter name (codegen's
    ATTENTION_TILE_HEAD and ATTENTION_TILE_TAIL), as written ("true", "16"); those its call leaves out
    (template_tail) at their defaults."""
    out, names = [], ATTENTION_TILE_HEAD + tuple(n for n, _ in ATTENTION_TILE_TAIL)
    defaults = [None] * len(ATTENTION_TILE_HEAD) + [template_value(d) for _, d in ATTENTION_TILE_TAIL]
    for call in re.findall(r"kiec::attention_tile<([^>]*)>", text):
        args = [a.strip() for a in call.split(",")]
        if not len(ATTENTION_TILE_HEAD) <= len(args) <= len(names):
            raise ValueError(f"attention_tile<{call}>: {len(args)} template arguments, not {len(ATTENTION_TILE_HEAD)} "
                             f"to {len(names)}")
        out.append({n: args[i] if i < len(args) else defaults[i] for i, n in enumerate(names)})
    return out
