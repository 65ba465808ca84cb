"""Registers, spills and shared memory of a model's generated kernels, without writing weights or running them:
    python3 scripts/ptxas.py llama-3.2-1b persistent [field=value ...]
Emits the sources as `kiec compile` would (the sm_90 target with the given TargetParams fields replaced) and
compiles each unit with `nvcc -Xptxas -v`; prints ptxas's lines for the kernels."""
import os
import re
import subprocess
import sys
import tempfile

import kiec
from kiec.build import check_toolchain, emit_sources, nvcc_flags, write_sources
from kiec.codegen import targets


def usage(name: str, mode: str = "graph", *changes: str) -> list[tuple[str, str]]:
    """(kernel, ptxas's line) for each registers or spill line of `name`'s kernels in `mode` with those changes."""
    tp = targets.with_fields(targets.TARGETS["sm_90"], dict(c.split("=", 1) for c in changes))
    src = emit_sources(kiec.load(name, dtype="bf16", max_seq_len=512), mode, "bf16", tp, "ptxas")
    nvcc = check_toolchain("cuda", "sm_90")
    out = []
    with tempfile.TemporaryDirectory() as d:
        write_sources(src, d)
        for fname in sorted(f for f in src.files if f.endswith(".cu")):
            r = subprocess.run([nvcc, *nvcc_flags(tp.gencode), "-I", d, "-Xptxas", "-v", "-c", os.path.join(d, fname),
                                "-o", os.path.join(d, "x.o")],
                               capture_output=True, text=True)
            if r.returncode:
                sys.exit(r.stderr[-4000:])
            fn = None
            for line in r.stderr.splitlines():
                m = re.search(r"Compiling entry function '(\S+)'", line)
                if m:
                    fn = m.group(1)[:90]
                if fn and ("registers" in line or "spill" in line):
                    out.append((fn, line.split(":", 1)[-1].strip()))
    return out


def spill_bytes(lines: list[tuple[str, str]]) -> int:
    """The spill stores' and loads' bytes of usage()'s lines, all kernels together."""
    return sum(int(n) for _, line in lines for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", line))


def main(name: str, mode: str = "graph", *changes: str) -> None:
    for fn, line in usage(name, mode, *changes):
        print(f"{fn}: {line}")


if __name__ == "__main__":
    main(*sys.argv[1:])
