"""Does the read ceiling (kiec bench's MBU denominator) depend on what the GPU did just before it? The SM clock idles
at 345 MHz between runs and is at 1980 MHz once kernels run (nvidia-smi, CLOCKS=1 in gpu_run.sh), while the ceiling's
timed reads take ~20 ms by arithmetic (23 reads of 4 GB at ~4.6 TB/s; not timed): shorter than the clock log's 100 ms
steps. This measures the ceiling after idling, at once again, after a second of matmuls and after idling again, each
with the SM clock nvidia-smi reports just before (it sets nothing). Run on the GPU machine after kiec is installed:
    python3 scripts/ceiling_warmth.py [WORK_DIR]"""
import subprocess
import sys
import time

import torch

from kiec.bench import measure_ceilings


def sm_clock() -> str:
    r = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader"], capture_output=True, text=True)
    return r.stdout.strip() or r.stderr.strip()


def busy(seconds: float) -> None:
    a = torch.randn(8192, 8192, device="cuda")
    end = time.time() + seconds
    while time.time() < end:
        a @ a
        torch.cuda.synchronize()


def main() -> None:
    work = sys.argv[1] if len(sys.argv) > 1 else "/tmp/kiec_ceiling_warmth"
    measure_ceilings(work)  # (builds the ceiling library once, outside the timings)
    steps = [("after 5 s idle", lambda: time.sleep(5)), ("again at once", lambda: None),
             ("after 1 s of matmuls", lambda: busy(1.0)), ("again at once", lambda: None),
             ("after 5 s idle", lambda: time.sleep(5)), ("again at once", lambda: None)]
    print(f"{'before the ceiling':<24} {'SM clock':>10} {'read TB/s':>10} {'copy TB/s':>10}")
    for name, before in steps:
        before()
        clock = sm_clock()
        c = measure_ceilings(work)
        print(f"{name:<24} {clock:>10} {c['read_tbps']:>10.3f} {c['copy_tbps']:>10.3f}", flush=True)


if __name__ == "__main__":
    main()
