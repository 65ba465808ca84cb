"""The device benchmarks the GPU run builds (scripts/gpu_run.sh: HOPS, COMPUTE, L2, STREAM, CLUSTER, ACQUIRE, MMA,
KVSLICE) still compile against the headers they borrow from: nvcc here, no GPU needed."""
import os

import pytest

from tests.nvcc_host import nvcc_build

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")


@pytest.mark.parametrize("source,flags", [("hop_latency.cu", []), ("l2_prefetch.cu", []),
                                          ("gemv_compute.cu", ["-DKIEC_COMPUTE_THREADS=256", "-DKIEC_REDUCE_BATCH=8"]),
                                          ("gemv_compute.cu", ["-DKIEC_COMPUTE_THREADS=256", "-DKIEC_REDUCE_BATCH=1"]),
                                          ("gemv_compute.cu", ["-DKIEC_COMPUTE_THREADS=256", "-DKIEC_REDUCE_BATCH=1",
                                                               "-DKIEC_CODE_TABLE=1"]),
                                          ("stream_rate.cu", ["-DKIEC_COMPUTE_THREADS=256"]), ("cluster_x.cu", []),
                                          ("acquire_pipeline.cu", []), ("mma_rows.cu", []),
                                          ("kv_slice.cu", [])])
def test_device_benchmarks_compile(tmp_path, source, flags):
    nvcc_build(tmp_path, os.path.join(BENCH, source), "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a",
               *flags, compile_only=True)
