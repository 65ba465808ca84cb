"""codegen/TUNING.md keeps the measurements behind the target table's values, a section per commented line of the
table, headed by that line's assignments: a value changed in the table without its section changed (and so without
the measurement that changed it) fails here, and so does a section left behind for a line that is gone."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def commented_lines(source: str) -> list[str]:
    """The table's assignment lines that have a comment above them, as written (without the trailing comma)."""
    lines = source.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith('    "sm_90": TargetParams('))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("}"))
    out = []
    for i in range(start + 1, end):
        text, above = lines[i].strip(), lines[i - 1].strip()
        if not text.startswith("#") and above.startswith("#"):
            out.append(text.rstrip(",").removesuffix(")"))  # (the table's last line closes the call)
    return out


def test_every_commented_value_of_the_table_has_its_section_in_order():
    with open(os.path.join(ROOT, "codegen", "targets.py")) as f:
        source = f.read()
    table = commented_lines(source)
    with open(os.path.join(ROOT, "codegen", "TUNING.md")) as f:
        heads = re.findall(r"^## `(.*)`", f.read(), flags=re.M)
    assert len(table) > 50  # (the parse found the table)
    sections = heads[:len(table)]
    for line, head in zip(table, sections):
        assert line == head, f"targets.py's table has {line!r} where codegen/TUNING.md's section is {head!r}"
    assert len(sections) == len(table), f"TUNING.md lacks sections for {table[len(sections):]}"
    for extra in heads[len(table):]:  # (after the table's: the class's own defaults, each still the class's)
        name, value = extra.split("=", 1)
        assert re.search(rf"^    {name}: \w+ = {re.escape(value)}$", source, flags=re.M), \
            f"codegen/TUNING.md's section {extra!r} is not TargetParams' default"
