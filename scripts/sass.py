"""The SASS of a model's generated kernels, without a GPU, to read or to compare two builds:
    python3 scripts/sass.py OUTDIR llama-3.2-1b persistent [field=value ...]
Emits the sources as `kiec compile` would (the sm_90 target with the given TargetParams fields replaced), compiles
each .cu unit to a cubin and writes cuobjdump's SASS to OUTDIR/<model>_<mode>_<unit>.sass. Prints each unit's
instruction count and, where OUTDIR already held that file, whether the new one is byte-identical to it: run it
before a change and after, and a change meant to leave a kernel alone is checked (the commits' "SASS
byte-identical" claims). Where it differs, also how many lines of the two listings differ with registers, predicates,
convergence barriers and constants masked: the whole kernel is one function, so a change in one case moves the
schedule of the others too (bench/RESULTS.md, 2026-12-01), and this count says how far.
    python3 scripts/sass.py --lines OUTDIR MODEL persistent [field=value ...]
instead compiles with -lineinfo and writes nvdisasm's listing with each instruction's source line and the lines it
was inlined from (OUTDIR/<model>_<mode>_<unit>.lines), e.g. to read one GEMV kind's page loop. The generated unit's
line in the chain (gemv_tile's call in the kernel's switch) names a kind, but not always the right one: where code of
two kinds is alike, one copy may carry the other's lines (tell them by their constants: segments, K)."""
import os
import re
import subprocess
import sys
import tempfile

import kiec
from kiec.build import check_toolchain, emit_sources, nvcc_flags, write_sources
from kiec.codegen import targets

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from code_size import cuobjdump  # noqa: E402  (a script beside this one)


def masked(sass: str) -> list[str]:
    """The listing's instructions with registers, predicates, convergence barriers and constants masked: what two
    schedules of the same code share."""
    lines = re.findall(r"/\*[0-9a-f]{4,}\*/\s+([^;]*);", sass)
    subs = [(r"\bU?R\d+\b", "R"), (r"\bU?P\d\b", "P"), (r"\bB\d+\b", "B"), (r"0x[0-9a-f]+", "K"), (r"\s+", " ")]
    out = []
    for line in lines:
        for pattern, repl in subs:
            line = re.sub(pattern, repl, line)
        out.append(line.strip())
    return out


def moved(before: str, after: str, tmp: str) -> int:
    """Lines of the two masked listings that `diff` pairs with nothing (removed plus added)."""
    paths = [os.path.join(tmp, f"masked{i}.txt") for i in (0, 1)]
    for path, sass in zip(paths, (before, after)):
        with open(path, "w") as fh:
            fh.write("\n".join(masked(sass)) + "\n")
    diff = subprocess.run(["diff", *paths], capture_output=True, text=True).stdout
    return sum(1 for line in diff.splitlines() if line[:1] in "<>")


def main(out: str, name: str, mode: str = "graph", *changes: str, lines: bool = False) -> None:
    tp = targets.with_fields(targets.TARGETS["sm_90"], dict(c.split("=", 1) for c in changes))
    src = emit_sources(kiec.load(name, dtype="bf16", max_seq_len=512), mode, "bf16", tp, "sass")
    nvcc, dump = check_toolchain("cuda", "sm_90"), cuobjdump()
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        write_sources(src, d)
        for fname in sorted(f for f in src.files if f.endswith(".cu")):
            cubin = os.path.join(d, "unit.cubin")
            r = subprocess.run([nvcc, *nvcc_flags(tp.gencode), *(["-lineinfo"] if lines else []), "-I", d, "-cubin",
                                os.path.join(d, fname), "-o", cubin], capture_output=True, text=True)
            if r.returncode:  # (nvcc's own errors, not only its exit status)
                sys.exit(f"{fname}: nvcc failed:\n{r.stderr[-6000:]}")
            if lines:  # (nvdisasm: cuobjdump() put it on the PATH)
                listing = subprocess.run(["nvdisasm", "-g", "-gi", "-c", cubin], check=True, capture_output=True,
                                         text=True).stdout
                path = os.path.join(out, f"{os.path.basename(name)}_{mode}_{fname}.lines")
                with open(path, "w") as fh:
                    fh.write(listing)
                print(f"{fname}: {path}")
                continue
            sass = subprocess.run([dump, "-sass", cubin], check=True, capture_output=True, text=True).stdout
            path = os.path.join(out, f"{os.path.basename(name)}_{mode}_{fname}.sass")
            before = open(path).read() if os.path.exists(path) else None
            with open(path, "w") as fh:
                fh.write(sass)
            same = "" if before is None else ", byte-identical to the one it replaced" if before == sass else \
                f", DIFFERS from the one it replaced ({moved(before, sass, d)} opcode lines of either differ)"
            count = len(re.findall(r"/\*[0-9a-f]{4,}\*/\s", sass))
            print(f"{fname}: {count} instructions{same}")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(*[a for a in args if a != "--lines"], lines="--lines" in args)
