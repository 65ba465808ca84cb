"""The tree shows the flow: no stage imports a later one."""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
# stage folder -> kiec modules it must not import
FORBIDDEN = {
    "ir": ("kiec.frontend", "kiec.models", "kiec.codegen", "kiec.build", "kiec.unit_cache", "kiec.runtime",
           "kiec.reference", "kiec.model", "kiec.cli"),
    "models": ("kiec.frontend", "kiec.codegen", "kiec.build", "kiec.unit_cache", "kiec.runtime", "kiec.cli"),
    "codegen": ("kiec.frontend", "kiec.build", "kiec.unit_cache", "kiec.runtime", "kiec.cli"),
}


def imported_modules(path: pathlib.Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def test_no_stage_imports_a_later_one():
    bad = []
    for folder, forbidden in FORBIDDEN.items():
        for path in (ROOT / folder).rglob("*.py"):
            bad += [f"{path.relative_to(ROOT)} imports {m}" for m in imported_modules(path)
                    if m.startswith(forbidden)]
    assert not bad, "\n".join(bad)
