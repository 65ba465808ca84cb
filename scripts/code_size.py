"""How much machine code each dispatch case of a model's persistent kernel adds, without a GPU:
    python3 scripts/code_size.py llama-3.2-1b [field=value ...]
Emits the persistent source as `kiec compile` would (the sm_90 target with the given TargetParams fields replaced),
compiles it with every case, with none, and with each case alone, and counts the SASS instructions (cuobjdump).
A layer runs its attention case and four GEMV cases one after another on every SM: their sum is the code a layer
needs in the SM's instruction caches. cuobjdump: on the PATH, or pip's nvidia-cuda-cuobjdump."""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

import kiec
from kiec.build import check_toolchain, emit_sources, nvcc_flags, write_sources
from kiec.codegen import targets

CASE = re.compile(r"      case (\d+): return ([^\n]*)\n")


def cuobjdump() -> str:
    """cuobjdump, and nvdisasm (which its -sass runs) on the PATH: the CUDA toolkit's, or pip's nvidia packages'
    (nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm put both in one bin folder, added to the PATH here)."""
    found = shutil.which("cuobjdump")
    if not found:
        try:
            import nvidia  # pip's CUDA packages share this namespace
            roots = list(nvidia.__path__)
        except ImportError:
            roots = []
        found = next((p for r in roots for p in glob.glob(os.path.join(r, "*", "bin", "cuobjdump"))), None)
        if not found:
            sys.exit("code_size.py: no cuobjdump on the PATH or in pip's nvidia packages "
                     "(pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
        os.environ["PATH"] = os.path.dirname(found) + os.pathsep + os.environ.get("PATH", "")
    if not shutil.which("nvdisasm"):
        sys.exit(f"code_size.py: {found} needs nvdisasm on the PATH (pip install nvidia-cuda-nvdisasm)")
    return found


def sizes(name: str, changes: dict[str, str], max_seq_len: int = 512) -> tuple[int, int, list[tuple[str, int]]]:
    """(instructions with every case, with none, [(case body, instructions it adds alone)])."""
    tp = targets.with_fields(targets.TARGETS["sm_90"], changes)
    src = emit_sources(kiec.load(name, dtype="bf16", max_seq_len=max_seq_len), "persistent", "bf16", tp, "code_size")
    text = src.files["model.cu"]
    cases = CASE.findall(text)
    nvcc, dump = check_toolchain("cuda", "sm_90"), cuobjdump()
    with tempfile.TemporaryDirectory() as d:
        write_sources(src, d)

        def count(keep: set[str]) -> int:
            with open(os.path.join(d, "only.cu"), "w") as fh:
                fh.write(CASE.sub(lambda m: m.group(0) if m.group(1) in keep else "", text))
            cubin = os.path.join(d, "only.cubin")
            subprocess.run([nvcc, *nvcc_flags(tp.gencode), "-I", d, "-cubin", os.path.join(d, "only.cu"), "-o", cubin],
                           check=True, capture_output=True)
            sass = subprocess.run([dump, "-sass", cubin], check=True, capture_output=True, text=True).stdout
            return len(re.findall(r"/\*[0-9a-f]{4,}\*/\s", sass))
        none = count(set())
        return count({c for c, _ in cases}), none, [(body, count({c}) - none) for c, body in cases]


def main(name: str, *changes: str) -> None:
    whole, none, per_case = sizes(name, dict(c.split("=") for c in changes))
    print(f"{name}: {whole} instructions ({whole * 16 // 1024} KB), {none} without any case")
    for body, n in per_case:
        print(f"  {n:6d} ({n * 16 // 1024:3d} KB)  {body[:90]}")


if __name__ == "__main__":
    main(*sys.argv[1:])
