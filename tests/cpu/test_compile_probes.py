"""kiec compile of the persistent kernel (nvcc, no GPU): the timing probes (tokens wrong on purpose) and the traced
step's code are in the kernel only when asked, and change only what they say they change."""
import json
import os
import re
import shutil

import pytest

import kiec
from tests.persistent_build import compile_persistent, persistent_cu, tiny_llama
from tests.tiles import attention_tile_args
from tests.tiny_hf import make_tiny_hf

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def test_trace_stamps_compile_when_asked(tmp_path, monkeypatch):
    # persist_trace_attention, persist_trace_dots, persist_trace_stream: the kernel defines KIEC_TRACE_ATTENTION,
    # KIEC_TRACE_DOTS and KIEC_TRACE_STREAM and builds (nvcc) with the stamps; the recording's slots name the dot
    # products' six, then the stream's four (without: 9 slots, as before; the stream's alone follow the 9)
    import dataclasses

    from kiec.codegen import targets
    make_tiny_hf(tmp_path / "hf", "qwen3")
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    dots = ["x_sliced", "first_item", "warp_done_min", "warp_done_max", "first_item_min", "first_item_warp"]
    stream = ["stream_first", "stream_last", "stream_full_ns", "stream_pace_ns"]
    for on, with_stream in [(0, 0), (1, 1), (0, 1)]:
        monkeypatch.setitem(targets.TARGETS, "sm_90", dataclasses.replace(
            targets.TARGETS["sm_90"], persist_trace_attention=on, persist_trace_dots=on,
            persist_trace_stream=with_stream))
        art = kiec.compile(model, str(tmp_path / f"art{on}{with_stream}"), mode="persistent")
        with open(os.path.join(art, "src", "model.cu")) as fh:
            text = fh.read()
        assert f"#define KIEC_TRACE_ATTENTION {on}" in text and f"#define KIEC_TRACE_DOTS {on}" in text
        assert f"#define KIEC_TRACE_STREAM {with_stream}" in text
        with open(os.path.join(art, "manifest.json")) as fh:
            slots = json.load(fh)["trace_slots"]
        assert slots[9:] == (dots if on else []) + (stream if with_stream else [])
        assert slots[8] == "stored"


def test_trace_code_is_in_the_kernel_only_when_asked(tmp_path, monkeypatch):
    # persist_trace_code 0, the default: KIEC_TRACE_CODE 0 (no step is traced: every traced branch compiles out), the
    # manifest says the artifact cannot be traced and Engine.trace refuses it by name before it touches the GPU. 1, or
    # a field that stamps more of a traced step: KIEC_TRACE_CODE 1, traceable. Both build (nvcc).
    import types

    model = tiny_llama(tmp_path)
    assert "#define KIEC_TRACE_CODE 0 " in persistent_cu(model)
    assert "#define KIEC_TRACE_CODE 1 " in persistent_cu(model, persist_trace_code=1)
    for field in ("persist_trace_attention", "persist_trace_dots", "persist_trace_stream"):
        assert "#define KIEC_TRACE_CODE 1 " in persistent_cu(model, **{field: 1})
    manifests = {}
    for code in (1, 0):
        art = compile_persistent(model, tmp_path / f"art{code}", monkeypatch, persist_trace_code=code)
        with open(os.path.join(art, "manifest.json")) as fh:
            manifests[code] = json.load(fh)
    assert manifests[1]["traceable"] is True and manifests[0]["traceable"] is False
    untraceable = types.SimpleNamespace(manifest=manifests[0], artifact_dir=str(tmp_path / "art0"))
    with pytest.raises(kiec.KiecError, match=r"art0: compiled without the trace's code \(persist_trace_code 0\)"):
        kiec.Engine.trace(untraceable, 64)


def test_the_relaxed_signal_probe_moves_the_counter_without_the_release(tmp_path):
    import dataclasses

    from kiec.codegen.emit import INCLUDE_DIR
    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama")
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    probe = dataclasses.replace(target("sm_90"), persist_probe_relaxed_signal=1)
    src = emit_persistent(pipeline.run(model.graph), "bf16", model.max_seq_len, probe, "x")
    assert "#define KIEC_PROBE_RELAXED_SIGNAL 1" in src.files["model.cu"]
    with open(os.path.join(INCLUDE_DIR, "kiec", "persistent_tile.cuh")) as fh:
        tile = fh.read()
    relaxed = tile.split("if (RELAXED || KIEC_PROBE_RELAXED_SIGNAL) {")[1].split("} else")[0]
    assert "red.relaxed.gpu" in relaxed and "release" not in relaxed


def test_the_mlp_local_probe_adds_into_sums_from_the_down_projections_only(tmp_path):
    import dataclasses

    from kiec.codegen.persistent import PROBE_SUMS, _PersistentEmitter, emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama")
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    program = pipeline.run(model.graph)
    base = target("sm_90")

    def cases(t):  # the GEMV cases' calls, whole
        return re.findall(r"kiec::gemv_tile<[^>]*>\(u, ring, [^;]*;", emit_persistent(
            program, "bf16", model.max_seq_len, t, "x").files["model.cu"])

    default = cases(base)
    assert default and not any("unsigned long long" in c for c in default)
    assert cases(dataclasses.replace(base, persist_probe_mlp_local=1)) == default  # (its schedule differs, not its code)
    got = cases(dataclasses.replace(base, persist_probe_mlp_local=2))
    summed = [c for c in got if c.endswith("smem, (unsigned long long*)A(d.a[2]));")]
    # the down projection's case, SUMS its last template argument; every other case is one of the default's (the
    # down projection's own default case is gone where no other GEMV shared it)
    assert len(summed) == 1 and ", true>(u, ring" in summed[0] and set(got) - set(summed) <= set(default)
    assert len(set(default) - set(got)) <= 1
    e = _PersistentEmitter(program, "bf16", model.max_seq_len, dataclasses.replace(base, persist_probe_mlp_local=2))
    down = [k.name for k in program.kernels if e.after_silu(k)]
    assert down == [f"L{i}.x_mlp" for i in range(model.config.num_layers)]
    assert PROBE_SUMS in e.arena and PROBE_SUMS not in _PersistentEmitter(program, "bf16", model.max_seq_len,
                                                                          base).arena


def test_the_o_local_probe_changes_only_the_schedule_and_refuses_a_tagged_attention_output(tmp_path):
    import dataclasses

    from kiec.codegen.persistent import _PersistentEmitter, emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    program = pipeline.run(model.graph)
    wide = dataclasses.replace(target("sm_90"), persist_tagged_min_width=0)  # (the tiny model takes the tags)
    for level in (0, 1):  # attention's output untagged: the same code, the output projection's waits gone
        base = dataclasses.replace(wide, persist_tagged=level)
        probe = dataclasses.replace(base, persist_probe_o_local=1)
        assert (emit_persistent(program, "bf16", model.max_seq_len, probe, "x").files["model.cu"]
                == emit_persistent(program, "bf16", model.max_seq_len, base, "x").files["model.cu"])
        e, ep = (_PersistentEmitter(program, "bf16", model.max_seq_len, t) for t in (base, probe))
        assert e.sched.lists != ep.sched.lists
    with pytest.raises(ValueError, match=r"persist_probe_o_local with attention's output as tagged words"):
        _PersistentEmitter(program, "bf16", model.max_seq_len, dataclasses.replace(wide, persist_tagged=2,
                                                                                    persist_probe_o_local=1))


def test_the_attention_idle_probe_sets_only_attentions_last_template_argument(tmp_path):
    import dataclasses

    from kiec.codegen.emit import INCLUDE_DIR
    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama")
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    program = pipeline.run(model.graph)
    base = target("sm_90")
    default = emit_persistent(program, "bf16", model.max_seq_len, base, "x").files["model.cu"]
    probe = emit_persistent(program, "bf16", model.max_seq_len,
                            dataclasses.replace(base, persist_probe_attention_idle=1), "x").files["model.cu"]
    (args_probe,), (args_default,) = attention_tile_args(probe), attention_tile_args(default)
    assert (args_probe["IDLE"], args_default["IDLE"]) == ("true", "false")
    assert {**args_probe, "IDLE": "false"} == args_default  # (IDLE alone differs)
    drop = lambda text: re.sub(r"attention_tile<[^>]*>", "", text)
    assert drop(probe) == drop(default)  # nothing else moves
    with open(os.path.join(INCLUDE_DIR, "kiec", "persistent.cuh")) as fh:
        tile = fh.read()
    idle = tile.split("if constexpr (IDLE) {")[1].split("return true;\n  }")[0]
    assert "store_out<TAGGED, PAIRED>(out" in idle and "signal_done<TAGGED>(u)" in idle
    assert "red_release<SPLITS>" in idle


def test_the_twice_probe_picks_its_gemvs_and_compiles(tmp_path, monkeypatch):
    # persist_probe_twice: gemv_tile's TWICE per GEMV: 4 doubles the dots of QKV and the output projection (the
    # GEMVs beside an attention) only, 8 the others' (gate/up, down, LM head), 2 every prologue; the kernel builds
    # (nvcc) with dots and prologues doubled
    import dataclasses
    import re

    from kiec.build import emit_sources
    from kiec.codegen import targets
    make_tiny_hf(tmp_path / "hf", "llama")
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")

    def twice(probe):  # each GEMV case's TWICE, by its epilogue and K, in the order of the cases
        t = dataclasses.replace(targets.TARGETS["sm_90"], persist_probe_twice=probe)
        text = emit_sources(model, "persistent", "bf16", t, "x").files["model.cu"]
        return [(epi, int(k), int(rest.split(", ")[4]) if rest.count(",") >= 4 else 0)
                for k, epi, rest in re.findall(r"gemv_tile<T, (\d+), \d+, \w+, kiec::EPI_(\w+), \w+, ([^>]*)>", text)]
    hidden, inter = model.config.hidden_size, model.config.intermediate_size
    assert twice(0) == [("STORE", hidden, 0), ("RESIDUAL", hidden, 0), ("SILU_MUL", hidden, 0),
                        ("RESIDUAL", inter, 0), ("ARGMAX", hidden, 0)]
    assert [t for *_, t in twice(4)] == [1, 1, 0, 0, 0] and [t for *_, t in twice(8)] == [0, 0, 1, 1, 1]
    assert [t for *_, t in twice(2)] == [2] * 5 and [t for *_, t in twice(3)] == [3] * 5
    monkeypatch.setitem(targets.TARGETS, "sm_90", dataclasses.replace(targets.TARGETS["sm_90"], persist_probe_twice=3))
    kiec.compile(model, str(tmp_path / "art"), mode="persistent")


def test_the_warm_code_probe_and_the_page_look_compile_where_asked(tmp_path, monkeypatch):
    # persist_probe_warm_code, persist_page_look: the kernel defines KIEC_PROBE_WARM_CODE and KIEC_PAGE_LOOK (0 by
    # default) and builds (nvcc) with each GEMV's dry pass and its warps' look at their first pages
    model = tiny_llama(tmp_path)
    for on in (0, 1):
        text = persistent_cu(model, persist_probe_warm_code=on, persist_page_look=on)
        assert f"#define KIEC_PROBE_WARM_CODE {on}" in text and f"#define KIEC_PAGE_LOOK {on}" in text
    compile_persistent(model, tmp_path / "art", monkeypatch, persist_probe_warm_code=1, persist_page_look=1)
