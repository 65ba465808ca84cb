"""CPU tests that build the project's CUDA sources with nvcc (host harnesses, device benchmarks): against
templates/include and a freshly generated persistent_abi.h, skipping where there is no nvcc."""
import os
import subprocess

import pytest

import kiec
from kiec.build import check_toolchain
from kiec.codegen.emit import INCLUDE_DIR
from kiec.codegen.persistent_abi import header


def nvcc_build(tmp_path, source: str, *flags: str, compile_only: bool = False) -> str:
    """Compiles `source` (an executable, or with compile_only an object) into tmp_path; returns its path."""
    try:
        nvcc = check_toolchain("cuda", "sm_90")
    except kiec.KiecError:
        pytest.skip("needs nvcc")
    (tmp_path / "persistent_abi.h").write_text(header())
    out = str(tmp_path / (os.path.splitext(os.path.basename(source))[0] + (".o" if compile_only else "")))
    r = subprocess.run([nvcc, *flags, "-I", INCLUDE_DIR, "-I", str(tmp_path), *(["-c"] if compile_only else []),
                        source, "-o", out], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return out
