"""Temporary: does llama-3.2-1b's persistent kernel fail with a long max_seq_len (5012f6d, call 2)?"""
import os, subprocess, sys
import numpy as np
import kiec
from kiec.runtime import Engine

def one(msl: int, tag: str, fields: str) -> None:
    from kiec.codegen import targets
    base = targets.TARGETS["sm_90"]
    if fields:
        targets.TARGETS["sm_90"] = targets.with_fields(base, dict(kv.split("=") for kv in fields.split(",")))
    model = kiec.load("llama-3.2-1b", dtype="bf16", max_seq_len=msl)
    art = f"/tmp/repro_{tag}"
    if not os.path.exists(art):
        kiec.compile(model, art, mode="persistent")
    eng = Engine(art, stall_timeout_s=20)
    prompt = [int(t) for t in np.random.default_rng(0).integers(0, eng.vocab_size, size=32)]
    toks = list(eng.stream(prompt, 4))
    print(tag, "tokens", toks, flush=True)
    if msl > 8192:
        print(tag, "8192 steps", eng.time_steps(8192, 16, warmup=8), flush=True)

if __name__ == "__main__":
    if len(sys.argv) > 1:
        one(int(sys.argv[1]), sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "")
    else:
        for msl, tag, f in [(8704, "long", ""), (8704, "long", ""), (512, "short", "")]:
            r = subprocess.run([sys.executable, __file__, str(msl), tag, f], capture_output=True, text=True, timeout=150)
            print(f"== {tag} {msl} {f} rc {r.returncode}\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}", flush=True)
        r = subprocess.run("timeout 240 compute-sanitizer --tool memcheck --print-limit 5 /tmp/repro_long/kiec-run /tmp/repro_long 1,2,3,4 2 2>&1 | tail -40", shell=True, capture_output=True, text=True)
        print("== memcheck long\n" + r.stdout, flush=True)
