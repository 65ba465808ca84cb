"""The one exception kiec raises for bad input: its message names what is wrong and where."""


class KiecError(Exception):
    pass


class Unlifted(KiecError):
    """A graph with nodes no frontend rule lifts; `nodes` names every one of them."""

    def __init__(self, source: str, nodes: list[str]):
        more = f" (and {len(nodes) - 3} more)" if len(nodes) > 3 else ""
        super().__init__(f"{source}: no rule lifts " + "; ".join(nodes[:3]) + more)
        self.source, self.nodes = source, nodes


class ModeUnsupported(KiecError):
    """A model the compile mode asked for cannot build (persistent mode: no device code or no room for it); another
    mode may."""
