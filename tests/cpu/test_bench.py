"""kiec bench on the CPU side: statistics, the table and JSON, and the torch baseline's numerics."""
import json
import os

import numpy as np
import pytest
import torch

import kiec
from kiec.baselines.torch_decoder import TorchDecoder
from kiec.bench import Report, Row, Stats, format_table


def test_stats_are_median_p10_p90():
    s = Stats.of([5.0, 1.0, 2.0, 4.0, 3.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0])
    assert (s.median_ms, s.p10_ms, s.p90_ms) == (6.0, 2.0, 10.0)
    with pytest.raises(ValueError):
        Stats.of([1.0, float("nan")])


def test_table_and_json_agree():
    hdr = dict(model="llama-3.2-1b", dtype="bf16", prompt_len=32, new_tokens=256, gpu="NVIDIA H200",
               driver="580", torch="2.11", commit="abc1234", python="3.12")
    rep = Report(hdr, dict(read_tbps=4.6, copy_tbps=4.3))
    nbytes = 2_471_632_896
    rep.rows += [Row("kiec (graph)", Stats(1.0, 0.9, 1.1), nbytes, 4.6, 20.0, 0),
                 Row("torch-compile", Stats(2.0, 1.9, 2.2), nbytes, 4.6, 15.0, 0),
                 Row("kiec (graph)", Stats(1.5, 1.4, 1.6), 2 * nbytes, 4.6, 20.0, 8192),
                 Row("torch-compile", Stats(1.5, 1.4, 1.6), 2 * nbytes, 4.6, 15.0, 8192)]
    rep.kernels = [dict(spec="gemv_bf16_k2048_rmsnorm_silu_mul_w4r2", family="gemv", count=16, us_each=25.0,
                        bytes_each=67_108_864, gbps=67_108_864 / 25e-6 / 1e9, context=0)]
    text = format_table(rep)
    gemv_line = next(ln for ln in text.splitlines() if ln.startswith("gemv_bf16_k2048"))
    assert "2684" in gemv_line and "58.4%" in gemv_line  # 67.1 MB in 25 us = 2684 GB/s = 58.4% of 4.6 TB/s
    assert "llama-3.2-1b" in text and "NVIDIA H200" in text and "abc1234" in text
    kiec_line = next(ln for ln in text.splitlines() if ln.startswith("kiec"))
    assert "1000" in kiec_line and f"{nbytes / 1e-3 / 4.6e12 * 100:.1f}%" in kiec_line
    assert "2.00x" in next(ln for ln in text.splitlines() if ln.startswith("torch-compile"))
    assert "context 8192: 4.943 GB read per token" in text
    assert [ln for ln in text.splitlines() if ln.startswith("torch-compile")][1].endswith("1.00x")
    d = json.loads(json.dumps(rep.to_dict()))
    assert d["rows"][1]["speedup_of_first"] == 2.0 and d["rows"][3]["speedup_of_first"] == 1.0
    assert d["rows"][2]["context"] == 8192
    assert abs(d["rows"][0]["mbu"] - nbytes / 1e-3 / 4.6e12) < 1e-9
    assert d["rows"][0]["tok_s"] == 1000.0


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3"])
def test_torch_baseline_equals_the_reference(tmp_path, family):
    from tests.tiny_hf import make_tiny_hf
    make_tiny_hf(tmp_path, family)
    m = kiec.load(str(tmp_path), dtype="f32", max_seq_len=32)
    dec = TorchDecoder(m, 32, device="cpu", dtype=torch.float32)
    ref = kiec.Reference(m)
    toks = np.random.default_rng().integers(0, m.config.vocab_size, size=6).tolist()
    with torch.no_grad():
        prefill = dec(torch.tensor(toks[:5]), torch.arange(5))[-1].numpy()
        ours = [ref.step(t, p) for p, t in enumerate(toks)]
        step = dec(torch.tensor(toks[5:]), torch.tensor([5]))[0].numpy()
    scale = np.abs(ours[4]).max()
    assert np.abs(prefill - ours[4]).max() <= 1e-4 * scale
    assert np.abs(step - ours[5]).max() <= 1e-4 * scale


def test_run_bench_times_each_context_and_peer(tmp_path, monkeypatch):
    import kiec.bench as kb

    calls = []
    monkeypatch.setattr(kiec, "compile", lambda model, out, mode, weights_like=None: calls.append(
        ("compile", mode, model.max_seq_len, weights_like and os.path.basename(weights_like))) or out)
    monkeypatch.setattr(kb, "require_gpu", lambda: None)
    monkeypatch.setattr(kb, "measure_ceilings", lambda work_dir: dict(read_tbps=4.5, copy_tbps=4.2, read_gb=4.0))
    monkeypatch.setattr(kb, "header", lambda *a: dict(model="smollm2-135m", dtype="bf16", prompt_len=32,
                                                       new_tokens=64, gpu="-", driver="-", torch="-", commit="-"))

    def fake_kiec(arts, prompt_len, new_tokens, ctx):
        calls.append(("kiec", tuple(os.path.basename(a) for a in arts), ctx))
        return [(Stats(1.0 + ctx / 8192, 0.9, 1.1), 25.0) for _ in arts]

    def fake_torch(model, compiled, prompt_len, new_tokens, ctx, need):
        calls.append(("torch-compile" if compiled else "eager", ctx))
        return Stats(2.0, 1.9, 2.1), 10.0

    monkeypatch.setattr(kb, "time_kiec_modes", fake_kiec)
    monkeypatch.setattr(kb, "time_kernels", lambda art, ctx: calls.append(("kernels", ctx)) or [])
    monkeypatch.setattr(kb, "time_torch", fake_torch)
    rep = kb.run_bench("smollm2-135m", ["eager", "torch-compile"], 32, 64, [0, 8192], str(tmp_path),
                       json_path=str(tmp_path / "r.json"), log=lambda m: None, modes=("graph", "persistent"))
    need = 8192 + 64 + 32
    assert calls == [("compile", "graph", need, None), ("compile", "persistent", need, "smollm2-135m"),  # its tensors
                     ("kiec", ("smollm2-135m", "smollm2-135m-persistent"), 0), ("kernels", 32),  # both modes at once
                     ("eager", 0), ("torch-compile", 0),
                     ("kiec", ("smollm2-135m", "smollm2-135m-persistent"), 8192),
                     ("eager", 8192), ("torch-compile", 8192)]
    rows = json.load(open(tmp_path / "r.json"))["rows"]
    assert [r["context"] for r in rows] == [0] * 4 + [8192] * 4
    assert [r["name"] for r in rows[:2]] == ["kiec (graph)", "kiec (persistent)"]
    assert rows[4]["bytes_per_token"] > rows[0]["bytes_per_token"]  # the 8k KV cache is counted
    assert "context 8192" in format_table(rep)


def test_torch_baseline_reads_an_onnx_models_parameters(tmp_path):
    from tests.onnx_export import genai_export
    from tests.tiny_hf import make_tiny_hf
    make_tiny_hf(tmp_path / "hf", "llama-tied")
    m = kiec.load(genai_export(tmp_path / "hf", tmp_path / "onnx"), max_seq_len=32)
    dec = TorchDecoder(m, 32, device="cpu", dtype=torch.float32)
    ref = kiec.Reference(m)
    with torch.no_grad():
        got = dec(torch.tensor([5, 9]), torch.arange(2))[-1].numpy()
    ref.step(5, 0)
    want = ref.step(9, 1)
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def test_progress_bar_redraws_on_a_terminal_and_prints_one_line_elsewhere():
    import io
    from kiec.bench import Bar

    class Tty(io.StringIO):
        def isatty(self):
            return True

    log = io.StringIO()
    bar = Bar("steps", 4, stream=log, width=8)
    for _ in range(4):
        bar.step()
    assert log.getvalue() == "steps [########] 4/4\n"
    tty = Tty()
    bar = Bar("steps", 4, stream=tty, width=8)
    bar.step(2)
    assert tty.getvalue() == "\rsteps [####....] 2/4"
    bar.step(5)  # clamps at the total, finishes the line
    assert tty.getvalue() == "\rsteps [####....] 2/4\rsteps [########] 4/4\n"


def test_the_ceiling_line_gives_the_drivers_peak_where_there_is_one():
    hdr = dict(model="m", dtype="bf16", prompt_len=32, new_tokens=256, gpu="NVIDIA H200", driver="580", torch="2.11",
               commit="abc1234", python="3.12")
    line = format_table(Report(hdr, dict(read_tbps=4.6, copy_tbps=4.3, peak_gbps=4916))).splitlines()[1]
    assert line == ("read ceiling 4.60 TB/s, copy 4.30 TB/s; peak 4.92 TB/s (the driver's memory clock x bus "
                    "width)")
    assert format_table(Report(hdr, dict(read_tbps=4.6, copy_tbps=4.3, peak_gbps=0))).splitlines()[1] == \
        "read ceiling 4.60 TB/s, copy 4.30 TB/s"


def test_the_read_ceiling_library_builds_and_gives_no_peak_without_a_gpu(tmp_path):
    # the library kiec bench measures the ceilings with: built (once per source: the same path again), loaded, and
    # on a machine without a GPU its peak is 0, not an error
    import torch

    import kiec
    from kiec.bench import ceiling_library
    from kiec.build import check_toolchain
    try:
        check_toolchain("cuda", "sm_90")
    except kiec.KiecError:
        pytest.skip("needs nvcc")
    lib = ceiling_library(str(tmp_path))
    assert [f.name for f in tmp_path.iterdir() if f.suffix == ".so"] and not list(tmp_path.glob("*.tmp"))
    if not torch.cuda.is_available():
        assert lib.kiec_peak_gbps() == 0
    assert ceiling_library(str(tmp_path)) is not None and len(list(tmp_path.glob("*.so"))) == 1


def test_run_bench_without_modes_times_graph_mode_where_persistent_cannot_build(tmp_path, monkeypatch):
    # as kiec.compile without a mode: the default (persistent), or graph mode where the persistent build is refused;
    # a mode named is refused with it
    import kiec.bench as kb
    from kiec.errors import ModeUnsupported

    calls = []

    def fake_compile(model, out, mode, weights_like=None):
        calls.append(("compile", mode))
        if mode == "persistent" and refuse:
            raise ModeUnsupported("x: L0.act (Activation, Mul): persistent mode has no device code")
        return out
    monkeypatch.setattr(kiec, "compile", fake_compile)
    monkeypatch.setattr(kb, "require_gpu", lambda: None)
    monkeypatch.setattr(kb, "measure_ceilings", lambda work_dir: dict(read_tbps=4.5, copy_tbps=4.2, read_gb=4.0))
    monkeypatch.setattr(kb, "header", lambda *a: dict(model="smollm2-135m", dtype="bf16", prompt_len=32,
                                                       new_tokens=64, gpu="-", driver="-", torch="-", commit="-"))
    monkeypatch.setattr(kb, "time_kiec_modes", lambda arts, *a: [calls.append(("kiec", os.path.basename(art)))
                                                                 or (Stats(1.0, 0.9, 1.1), 25.0) for art in arts])
    monkeypatch.setattr(kb, "time_kernels", lambda art, ctx: [])
    logged = []
    for refuse, want in [(False, "smollm2-135m-persistent"), (True, "smollm2-135m")]:
        calls.clear()
        rep = kb.run_bench("smollm2-135m", [], 32, 64, [0], str(tmp_path), log=logged.append)
        assert [c for c in calls if c[0] == "kiec"] == [("kiec", want)]
        assert [r["name"] for r in rep.to_dict()["rows"]] == ["kiec (graph)" if refuse else "kiec (persistent)"]
    assert calls[:2] == [("compile", "persistent"), ("compile", "graph")]
    assert any("timing graph mode instead" in m for m in logged)
    with pytest.raises(ModeUnsupported):
        kb.run_bench("smollm2-135m", [], 32, 64, [0], str(tmp_path), log=logged.append, modes=("persistent",))


def test_modes_are_timed_interleaved_each_round_in_turned_order(monkeypatch):
    # kiec bench times a model's modes chunk by chunk, A B then B A, so that a drift of the GPU's state over the run
    # (smollm2-135m's graph mode: 0.490 ms timed first, 0.478 second) falls on both; each keeps its own samples
    import kiec.bench as kb

    log = []

    class FakeEngine:
        vocab_size = 100

        def __init__(self, name, ms):
            self.name, self.ms, self.last_ttft_s = name, ms, ms / 100

        def stream(self, prompt, n):
            log.append((self.name, "stream", len(prompt), n))
            return iter(range(n))

        def time_steps(self, pos, steps, warmup=8):
            log.append((self.name, pos, steps, warmup))
            return self.ms + pos / 1000

    engines = {"g": FakeEngine("g", 1.0), "p": FakeEngine("p", 2.0)}
    monkeypatch.setattr(kb, "engine", lambda art: engines[art])
    out = kb.time_kiec_modes(["g", "p"], 32, 64, 0, chunk=16)
    # each chunk after 2 untimed steps (its mode's L2 and caches warm again after the other's chunk)
    timed = [(n, pos) for n, pos, *rest in log if pos != "stream" and rest == [16, 2]]
    assert timed == [("g", 32), ("p", 32), ("p", 48), ("g", 48), ("g", 64), ("p", 64), ("p", 80), ("g", 80)]
    assert [e for e in log if e[1] != "stream" and e[3] == 8] == [("g", 32, 8, 8), ("p", 32, 8, 8)]  # warm-ups
    assert [s.median_ms for s, _ in out] == pytest.approx([1.056, 2.056])  # each mode its own chunks' median
    assert [t for _, t in out] == [10.0, 20.0]  # and its own time to first token
    log.clear()
    one = kb.time_kiec("p", 32, 64, 0, chunk=16)  # one artifact: the same path, its chunks back to back
    assert one == out[1]
    assert [e[1:] for e in log if e[1] != "stream" and e[3] != 8] == [(32, 16, 0), (48, 16, 0), (64, 16, 0), (80, 16, 0)]


@pytest.mark.parametrize("args, message", [
    (["--context", "-5"], "contexts [-5]: at least one, each 0 or more tokens"),
    (["--new-tokens", "0"], "new tokens 0: at least 1"),
    (["--prompt-len", "0"], "prompt length 0: at least 1 token"),
    ([], "kiec bench times on a CUDA GPU, and torch sees none here")])
def test_bench_refuses_bad_numbers_and_a_machine_without_a_gpu_before_compiling(tmp_path, monkeypatch, args,
                                                                                 message):
    # each once reached the read-ceiling kernel after a whole compile, and ended there in a RuntimeError's traceback
    from click.testing import CliRunner

    from kiec.cli import main
    monkeypatch.setattr(torch.cuda, "is_available", lambda: bool(args))  # (no GPU for the last case)
    monkeypatch.setattr(kiec, "compile", lambda *a, **k: pytest.fail("compiled before refusing"))
    r = CliRunner().invoke(main, ["bench", "smollm2-135m", "--work-dir", str(tmp_path), *args])
    assert r.exit_code != 0 and message in r.output and "Traceback" not in r.output, r.output
    assert not list(tmp_path.iterdir())
