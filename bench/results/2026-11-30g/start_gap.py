"""The SM whose tile ended each GEMV phase: its next tile's start (and inputs ready, x ready, done) after that end,
before 8acb14b (e3615a3's call-6 traces, the start cycles read back from the recording at each done) and after it
(f3ab310's call-2 traces, kept in shared memory). Run from the repository root:
    python3 bench/results/2026-11-30g/start_gap.py
It runs last_sm of the eleventh session's analysis script on both sets of recordings."""
import importlib.util

spec = importlib.util.spec_from_file_location("call6", "bench/results/2026-11-30f/e3615a3_call6_analysis.py")
a = importlib.util.module_from_spec(spec)
spec.loader.exec_module(a)
print("== e3615a3 (before 8acb14b)")
a.last_sm()
a.D = "bench/results/2026-11-30g/call2_traces/"
a.FILES = ["llama-3.2-1b-0_mode_persistent.npz", "smollm2-135m-0_mode_persistent.npz"]
print("== f3ab310 (after 8acb14b)")
a.last_sm()
