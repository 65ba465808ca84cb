"""The device benchmarks the GPU run builds (scripts/gpu_run.sh: HOPS, COMPUTE) still compile against the headers
they borrow from: nvcc here, no GPU needed."""
import os
import subprocess

import pytest

import kiec
from kiec.build import check_toolchain
from kiec.codegen.persistent_abi import header

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


@pytest.mark.parametrize("source,flags", [("hop_latency.cu", []),
                                          ("gemv_compute.cu", ["-DKIEC_COMPUTE_THREADS=256", "-DKIEC_REDUCE_BATCH=8"])])
def test_device_benchmarks_compile(tmp_path, source, flags):
    try:
        nvcc = check_toolchain("cuda", "sm_90")
    except kiec.KiecError:
        pytest.skip("needs nvcc")
    (tmp_path / "persistent_abi.h").write_text(header())
    r = subprocess.run([nvcc, "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-I",
                        os.path.join(ROOT, "templates", "include"), "-I", str(tmp_path), *flags, "-c",
                        os.path.join(ROOT, "bench", source), "-o", str(tmp_path / "x.o")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
