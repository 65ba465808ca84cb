"""kiec compile on the CPU machine (nvcc, no GPU): the artifact's contents, its weight layout, and that a
failed or refused compile leaves nothing that looks complete."""
import json
import os
import re
import shutil
import sys

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import kiec
from kiec import build
from kiec.cli import main
from kiec.ir.text import parse_graph
from tests.tiles import attention_tile_args
from tests.tiny_hf import make_tiny_hf

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    make_tiny_hf(d / "hf", "qwen2")  # qkv bias: the packed bias is laid out too
    model = kiec.load(str(d / "hf"), dtype="bf16")
    return d, model, kiec.compile(model, str(d / "art"), mode="graph", dump_ir=True)


def tiny_llama(tmp_path):
    """A tiny llama (tests/tiny_hf.py) loaded in bf16."""
    make_tiny_hf(tmp_path / "hf", "llama")
    return kiec.load(str(tmp_path / "hf"), dtype="bf16")


def persistent_cu(model, **fields) -> str:
    """The generated model.cu of `model`'s persistent kernel with those fields of the sm_90 table replaced (nothing
    written, no nvcc)."""
    import dataclasses

    from kiec.build import emit_sources
    from kiec.codegen import targets
    t = dataclasses.replace(targets.TARGETS["sm_90"], **fields)
    return emit_sources(model, "persistent", "bf16", t, "x").files["model.cu"]


def compile_persistent(model, path, monkeypatch, **fields) -> str:
    """kiec compile (nvcc) of `model`'s persistent kernel into `path` with those fields of the sm_90 table replaced."""
    import dataclasses

    from kiec.codegen import targets
    monkeypatch.setitem(targets.TARGETS, "sm_90", dataclasses.replace(targets.TARGETS["sm_90"], **fields))
    return kiec.compile(model, str(path), mode="persistent")


def test_artifact_contents(tiny):
    _, model, art = tiny
    for f in ("libkiec_model.so", "kiec-run", "weights.bin", "manifest.json", "ir/00_loaded.kir"):
        assert os.path.isfile(os.path.join(art, f)), f
    with open(os.path.join(art, "manifest.json")) as fh:
        man = json.load(fh)
    assert man["dtype"] == "bf16" and man["mode"] == "graph" and man["vocab_size"] == 256
    srcs = os.listdir(os.path.join(art, "src"))
    gemv = [s for s in srcs if s.startswith("gemv_bf16_k64_rmsnorm_store_bias")]
    assert gemv and gemv[0].endswith("_sm90.cu")
    with open(os.path.join(art, "src", gemv[0])) as fh:
        assert fh.readline().startswith("// spec: gemv_bf16_k64_rmsnorm_store_bias")
    with open(os.path.join(art, "ir", "00_loaded.kir")) as fh:
        assert parse_graph(fh.read()) == model.graph


def test_weights_bin_holds_the_packed_layout(tiny):
    _, model, art = tiny
    with open(os.path.join(art, "manifest.json")) as fh:
        entries = {e["name"]: e for e in json.load(fh)["weights"]}
    raw = np.fromfile(os.path.join(art, "weights.bin"), dtype=np.uint8)
    p = "model.layers.1.self_attn."
    for suffix in ("weight", "bias"):
        name = "+".join(f"{p}{n}_proj.weight" for n in "qkv") + (".bias" if suffix == "bias" else "")
        e = entries[name]
        n = int(np.prod(e["shape"]))
        got = torch.from_numpy(raw[e["offset"]: e["offset"] + 2 * n].copy().view(np.int16)).view(torch.bfloat16)
        expect = torch.cat([model.weights[f"{p}{x}_proj.{suffix}"] for x in "qkv"]).flatten()
        assert torch.equal(got, expect), name
        assert e["offset"] % 256 == 0


def test_a_failed_compile_keeps_the_previous_artifact(tiny, monkeypatch):
    d, model, art = tiny
    before = sorted(os.listdir(art))

    def broken(*a, **k):
        raise KeyboardInterrupt  # as if the user pressed ^C while weights were written

    monkeypatch.setattr(build, "write_weights", broken)
    with pytest.raises(KeyboardInterrupt):
        kiec.compile(model, art, mode="graph")
    assert sorted(os.listdir(art)) == before
    assert not [f for f in os.listdir(d) if ".tmp-" in f or ".old-" in f]


def test_weights_like_copies_the_model_tensors_and_writes_the_schedule(tiny, tmp_path, monkeypatch, capsys):
    # weights_like (variants.py, kiec bench): the packed model tensors come from an earlier artifact of the same
    # model, byte for byte what converting them again writes; the persistent schedule and descriptors are this
    # build's (two target variants' differ); another model's artifact is not used
    import dataclasses

    from kiec.codegen import targets
    _, model, graph_art = tiny
    fresh = kiec.compile(model, str(tmp_path / "fresh"), mode="persistent")
    capsys.readouterr()
    like = kiec.compile(model, str(tmp_path / "like"), mode="persistent", weights_like=graph_art)
    assert "copied from" in capsys.readouterr().err

    def read(art):
        with open(os.path.join(art, "weights.bin"), "rb") as fh:
            return fh.read()
    assert read(like) == read(fresh)
    with pytest.MonkeyPatch.context() as mp:  # (monkeypatch.undo would undo conftest's patch too)
        mp.setitem(targets.TARGETS, "sm_90", dataclasses.replace(targets.TARGETS["sm_90"], persist_waits_previous_first=0))
        variant = kiec.compile(model, str(tmp_path / "variant"), mode="persistent", weights_like=like)
    again = kiec.compile(model, str(tmp_path / "again"), mode="persistent")
    assert read(variant) != read(like) and read(again) == read(like)  # (the variant orders its waits otherwise)
    # a variant of the kernels' code alone (the pace) makes the same bytes: its weights.bin is like's, linked
    def inode(art):
        return os.stat(os.path.join(art, "weights.bin")).st_ino
    capsys.readouterr()
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(targets.TARGETS, "sm_90", dataclasses.replace(targets.TARGETS["sm_90"], persist_page_pace_ns=400))
        paced = kiec.compile(model, str(tmp_path / "paced"), mode="persistent", weights_like=like)
    assert "linked to" in capsys.readouterr().err and inode(paced) == inode(like) != inode(variant)
    assert read(paced) == read(fresh)
    shutil.rmtree(like)  # (the link outlives the artifact it came from)
    assert read(paced) == read(fresh)
    make_tiny_hf(tmp_path / "other", "llama")
    other = kiec.load(str(tmp_path / "other"), dtype="bf16")
    capsys.readouterr()
    kiec.compile(other, str(tmp_path / "other_art"), weights_like=graph_art)
    assert "copied from" not in capsys.readouterr().err


def test_cli_weights_like_copies_from_the_other_modes_artifact(tiny, tmp_path):
    # kiec compile --weights-like: the persistent artifact's model tensors from the graph one, the same bytes as
    # a fresh compile's; a path that is no artifact is refused before anything is written; another model's
    # artifact is said to give nothing
    d, model, graph_art = tiny
    fresh = kiec.compile(model, str(tmp_path / "fresh"), mode="persistent")
    r = CliRunner().invoke(main, ["compile", str(d / "hf"), "-o", str(tmp_path / "like"), "--mode", "persistent",
                                  "--weights-like", graph_art])
    assert r.exit_code == 0, r.output
    assert "copied from" in r.output

    def read(art):
        with open(os.path.join(art, "weights.bin"), "rb") as fh:
            return fh.read()
    assert read(str(tmp_path / "like")) == read(fresh)
    r = CliRunner().invoke(main, ["compile", str(d / "hf"), "-o", str(tmp_path / "no"), "--weights-like", str(tmp_path)])
    assert r.exit_code != 0 and "not an artifact directory (no manifest.json)" in r.output
    assert not (tmp_path / "no").exists()
    make_tiny_hf(tmp_path / "other", "llama")
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "other"), "-o", str(tmp_path / "other_art"),
                                  "--weights-like", graph_art])
    assert r.exit_code == 0 and "no tensor reused from" in r.output


def test_refused_target_writes_nothing(tmp_path):
    r = CliRunner().invoke(main, ["compile", "smollm2-135m", "-o", str(tmp_path / "out"), "--arch", "sm_75"])
    assert r.exit_code != 0 and "arch 'sm_75' has no target parameters" in r.output
    r = CliRunner().invoke(main, ["compile", "smollm2-135m", "-o", str(tmp_path / "out"), "--tp", "2"])
    assert r.exit_code != 0 and "tensor parallel is not built yet" in r.output
    assert not (tmp_path / "out").exists()


def test_a_chain_no_template_covers_is_generated_by_tvm(tmp_path, monkeypatch):
    pytest.importorskip("tvm")
    monkeypatch.setenv("KIEC_CACHE_DIR", str(tmp_path / "cache"))
    make_tiny_hf(tmp_path / "hf", "llama-gelu")
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    assert model.config.hidden_act == "gelu_tanh"
    art = kiec.compile(model, str(tmp_path / "art"), mode="graph")
    tvm_files = [f for f in os.listdir(os.path.join(art, "src")) if f.startswith("ew_")]
    assert len(tvm_files) == 1  # one kernel, shared by both layers
    with open(os.path.join(art, "src", tvm_files[0])) as fh:
        text = fh.read()
    assert text.startswith("// spec: ew_n96_") and "Activation(x=in0,fn=gelu_tanh)" in text and "tanhf" in text
    with open(os.path.join(art, "src", "model.cu")) as fh:
        assert fh.read().count(f"launch_{tvm_files[0][:-len('_sm90.cu')]}(") == 2 + 1  # declared once, called twice


def test_the_default_mode_is_persistent_and_graph_where_persistent_cannot_build(tmp_path, monkeypatch, capsys):
    # without a mode: persistent; a model whose elementwise chain only TVM covers is built in graph mode, and says
    # so; named, persistent mode refuses that model, names the op and writes nothing
    pytest.importorskip("tvm")
    monkeypatch.setenv("KIEC_CACHE_DIR", str(tmp_path / "cache"))
    make_tiny_hf(tmp_path / "hf", "llama")
    make_tiny_hf(tmp_path / "gelu", "llama-gelu")

    def mode(art):
        with open(os.path.join(art, "manifest.json")) as fh:
            return json.load(fh)["mode"]
    assert mode(kiec.compile(kiec.load(str(tmp_path / "hf"), dtype="bf16"), str(tmp_path / "p"))) == "persistent"
    gelu = kiec.load(str(tmp_path / "gelu"), dtype="bf16")
    capsys.readouterr()
    assert mode(kiec.compile(gelu, str(tmp_path / "g"))) == "graph"
    err = capsys.readouterr().err
    assert "persistent mode cannot build this model" in err and "(Activation, Mul)" in err
    assert "building it in graph mode" in err
    with pytest.raises(kiec.KiecError, match=r"gelu: L0\.act \(Activation, Mul\): persistent mode has no device code"):
        kiec.compile(gelu, str(tmp_path / "x"), mode="persistent")
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "gelu"), "-o", str(tmp_path / "cli")])
    assert r.exit_code == 0, r.output
    assert mode(str(tmp_path / "cli")) == "graph"
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "gelu"), "-o", str(tmp_path / "y"), "--mode", "persistent"])
    assert r.exit_code != 0 and "compile with --mode graph" in r.output
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    assert not [f for f in os.listdir(tmp_path) if ".tmp-" in f or ".old-" in f]


def test_buffer_plan_never_overlaps_live_values():
    from kiec.codegen.buffers import plan_buffers
    from kiec.ir.passes.program import kernel_io
    from kiec.ir.passes import pipeline
    from tests.cpu.test_fusion import gelu_variant
    for graph in (kiec.load("qwen3-1.7b").graph, gelu_variant().graph):
        prog = pipeline.run(graph)
        offsets, total = plan_buffers(prog, {"scratch": 100})
        io = [kernel_io(k) for k in prog.kernels]
        born, last, size = {}, {}, {}
        for i, (reads, writes) in enumerate(io):
            for v in reads:
                last[v] = i
            for v, n, alias in writes:
                born[v], size[v] = i, n if n >= 0 else graph.types[v].shape[0]
        for v in graph.outputs:
            last[v] = len(io)
        spans = {v: (offsets[v], offsets[v] + size[v]) for v in born}
        alias = {v for _, writes in io for v, _, a in writes if a}
        for a in spans:
            for b in spans:
                if a < b and born[a] <= last.get(b, born[b]) and born[b] <= last.get(a, born[a]):
                    same_stream = a in alias or b in alias  # residual results share their input's slot by design
                    overlap = spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]
                    assert not overlap or same_stream, (a, b, spans[a], spans[b])
        assert offsets["scratch"] + 100 <= total


def test_cached_tvm_kernels_compile_without_tvm_and_a_miss_is_named(tmp_path, monkeypatch):
    pytest.importorskip("tvm")
    monkeypatch.setenv("KIEC_CACHE_DIR", str(tmp_path / "cache"))
    make_tiny_hf(tmp_path / "hf", "llama-gelu")
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    first = kiec.compile(model, str(tmp_path / "a"), mode="graph")
    cached = os.listdir(tmp_path / "cache" / "tvm")
    assert len(cached) == 1 and cached[0].startswith("ew_n96_") and cached[0].endswith("_sm_90_v1.json")
    monkeypatch.setitem(sys.modules, "tvm", None)  # import tvm now fails, as on the lent GPU machine
    second = kiec.compile(model, str(tmp_path / "b"), mode="graph")
    name = [f for f in os.listdir(os.path.join(first, "src")) if f.startswith("ew_")][0]
    with open(os.path.join(first, "src", name)) as a, open(os.path.join(second, "src", name)) as b:
        assert a.read() == b.read()
    monkeypatch.setenv("KIEC_CACHE_DIR", str(tmp_path / "empty"))
    with pytest.raises(kiec.KiecError, match=r"has no template and needs TVM .*/ew_n96_\w+_sm_90_v1.json is missing"):
        kiec.compile(model, str(tmp_path / "c"), mode="graph")
    assert not (tmp_path / "c").exists()


def test_persistent_artifact_carries_its_schedule_in_the_weights(tmp_path):
    from kiec.codegen.persistent_abi import pack_schedule
    from kiec.codegen.persistent import _PersistentEmitter
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "qwen3")  # q/k norm: attention with its norms
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    art = kiec.compile(model, str(tmp_path / "art"), mode="persistent")
    with open(os.path.join(art, "manifest.json")) as fh:
        man = json.load(fh)
    assert man["mode"] == "persistent" and sorted(os.listdir(os.path.join(art, "src"))) == ["model.cu", "persistent_abi.h"]
    e = _PersistentEmitter(pipeline.run(model.graph), "bf16", model.max_seq_len, target("sm_90"))
    blob, starts = pack_schedule(e.sched)
    entry = {w["name"]: w for w in man["weights"]}
    data = np.fromfile(os.path.join(art, "weights.bin"), dtype=np.uint8)
    at = entry["persistent.instructions"]["offset"]
    assert data[at:at + len(blob)].tobytes() == blob  # the lists the kernel runs are the scheduler's
    at = entry["persistent.starts"]["offset"]
    assert data[at:at + 4 * (len(starts) + 1)].view(np.int32).tolist() == starts + [sum(len(x) for x in e.sched.lists)]
    for k in e.p.kernels:  # the descriptors the kernel reads are the emitter's, one per fused kernel
        getattr(e, {"EmbedKernel": "embed", "GemvKernel": "gemv", "AttentionKernel": "attention"}[type(k).__name__])(k)
    at, descs = entry["persistent.kernels"]["offset"], b"".join(e.descs)
    assert len(e.descs) == len(e.p.kernels) and data[at:at + len(descs)].tobytes() == descs
    with open(os.path.join(art, "src", "model.cu")) as fh:
        text = fh.read()
    # one inlined body per distinct tile function: the two layers share theirs
    assert len(re.findall(r"case \d+: return", text)) == len(e.cases) == 7  # embed, 4 GEMVs, attention, LM head
    assert "kiec::select_tile" in text and "u.a->arrivals + d.arrive" in text  # attention merges in its last split
    assert "#define KIEC_PROBE_RELAXED_SIGNAL 0" in text  # the counters' release, not the timing probe


@pytest.mark.parametrize("level", [1, 2])
def test_tagged_words_compile_with_their_flags_per_tile(tmp_path, monkeypatch, level):
    # persist_tagged 1: QKV reads a tagged x and writes plain floats (attention reads them); the output projection
    # reads attention's plain output and writes the tagged stream; the MLP's both tagged; the LM head reads it.
    # 2: QKV's output and attention's tagged too
    import dataclasses

    from kiec.codegen import targets
    make_tiny_hf(tmp_path / "hf", "qwen3")
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    monkeypatch.setitem(targets.TARGETS, "sm_90", dataclasses.replace(targets.TARGETS["sm_90"], persist_tagged=level))
    art = kiec.compile(model, str(tmp_path / "art"), mode="persistent")  # nvcc: the tagged tiles compile
    with open(os.path.join(art, "src", "model.cu")) as fh:
        text = fh.read()
    assert re.search(r"kiec::embed_tile<T, true>", text)
    # gemv_tile<T, K, WARPS, NORM, EPI, BIAS, SEGS[, DIRECT[, TX[, TY]]]>: (TX, TY) of QKV, O, gate/up, down, LM head
    flags = [(a.split(", ")[7:] + ["false"] * 3)[1:3] for a in re.findall(r"kiec::gemv_tile<([^>]*)>", text)]
    two = "true" if level == 2 else "false"
    assert flags == [["true", two], [two, "true"], ["true", "true"], ["true", "true"], ["true", "false"]]
    assert attention_tile_args(text)[0]["TAGGED"] == ("true" if level == 2 else "false")
    assert "#define KIEC_TAGGED 1" in text


def test_narrow_models_get_no_tags(tmp_path):
    # persist_tagged_min_width: a model whose embedding row is narrower than it runs tags 0 (smollm2-135m's 576
    # timed faster without), a wider one the table's level; the emitter's plan follows
    import dataclasses

    from kiec.codegen.persistent import _PersistentEmitter
    from kiec.codegen.persistent_rules import tag_level
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    program = pipeline.run(model.graph)
    for width, want in [(257, 0), (256, 2), (0, 2)]:
        t = dataclasses.replace(target("sm_90"), persist_tagged=2, persist_tagged_min_width=width)
        assert tag_level(program, t) == want
        e = _PersistentEmitter(program, "bf16", model.max_seq_len, t)
        assert (e.tags is None) == (want == 0)
        assert bool(e.tags and e.tagged(next(k.qkv for k in program.kernels if hasattr(k, "qkv")))) == (want == 2)
    assert tag_level(program, dataclasses.replace(target("sm_90"), persist_tagged=1, persist_tagged_min_width=0)) == 1


def test_narrow_models_stream_unpaced_with_the_walk_read_each_page(tmp_path):
    # persist_paced_min_width: a model whose embedding row is narrower than it streams its weights with the walk read
    # each page and no pace (smollm2-135m's 576 timed faster so), whatever the table's walk and pace; a wider one gets
    # them and what hangs on the pace (the ahead pace, paced L2 asks, the reference peak)
    import dataclasses

    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384)
    program = pipeline.run(kiec.load(str(tmp_path / "hf"), dtype="bf16").graph)
    paced = ["#define KIEC_WALK_KEPT 1", "#define KIEC_PAGE_PACE_NS 460", "#define KIEC_PAGE_PACE_AHEAD_NS 900",
             "#define KIEC_L2_AHEAD_PACED 1", "#define KIEC_L2_AHEAD_BURST 1", "#define KIEC_PACE_REF_GBPS 4814"]
    for width, want in [(257, False), (256, True), (0, True)]:
        t = dataclasses.replace(target("sm_90"), persist_walk_kept=1, persist_page_pace_ns=460,
                                persist_page_pace_ahead_ns=900, persist_l2_ahead_paced=1, persist_l2_ahead_burst=1,
                                persist_pace_ref_gbps=4814, persist_paced_min_width=width)
        text = emit_persistent(program, "bf16", 64, t, "x").files["model.cu"]
        assert [line in text for line in paced] == [want] * len(paced), width
    narrow = emit_persistent(program, "bf16", 64, dataclasses.replace(t, persist_paced_min_width=257), "x")
    unpaced = emit_persistent(program, "bf16", 64, dataclasses.replace(t, persist_walk_kept=0, persist_page_pace_ns=0,
                                                                       persist_paced_min_width=0), "x")
    assert narrow.files["model.cu"] == unpaced.files["model.cu"]  # (the measured variant's kernel, exactly)


@pytest.mark.parametrize("name, tensor_cores", [("llama-3.2-1b", True), ("llama-3.1-8b", True), ("qwen3-1.7b", False)])
def test_the_pace_is_the_fma_attentions_where_some_attention_keeps_its_fma_passes(name, tensor_cores):
    # persist_page_pace_fma_ns: a model whose attention keeps its FMA passes (qwen3-1.7b: 2 query heads a KV head, 128
    # wide) streams at that pace, the others at persist_page_pace_ns; 0 leaves every model at persist_page_pace_ns, and
    # persist_page_pace_ns 0 leaves every model unpaced
    import dataclasses

    from kiec.codegen.persistent import _PersistentEmitter
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    program = pipeline.run(kiec.load(name, max_seq_len=256).graph)
    t = dataclasses.replace(target("sm_90"), persist_page_pace_ns=440, persist_page_pace_fma_ns=460)
    e = _PersistentEmitter(program, "bf16", 256, t)
    assert all((e.mma_keys(k) > 0) == tensor_cores for k in e.attn)
    assert e.page_pace() == (440 if tensor_cores else 460)
    e = _PersistentEmitter(program, "bf16", 256, dataclasses.replace(t, persist_page_pace_fma_ns=0))
    assert e.page_pace() == 440
    assert _PersistentEmitter(program, "bf16", 256, dataclasses.replace(t, persist_page_pace_ns=0)).page_pace() == 0


def test_the_ahead_pace_from_a_position_is_compiled_only_with_the_ahead_pace(tmp_path):
    # persist_page_pace_ahead_from_pos: the ring's check of the page's position is there with the ahead pace and a
    # position; the ahead pace alone (every position) and the position alone (no ahead pace) compile as before
    import dataclasses

    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384)
    program = pipeline.run(kiec.load(str(tmp_path / "hf"), dtype="bf16").graph)
    base = dataclasses.replace(target("sm_90"), persist_page_pace_ns=460, persist_paced_min_width=0)

    def model_cu(**fields):
        return emit_persistent(program, "bf16", 64, dataclasses.replace(base, **fields), "x").files["model.cu"]
    both = model_cu(persist_page_pace_ahead_ns=1000, persist_page_pace_ahead_from_pos=2048)
    assert "#define KIEC_PAGE_PACE_AHEAD_NS 1000" in both and "#define KIEC_PAGE_PACE_AHEAD_FROM 2048" in both
    assert model_cu(persist_page_pace_ahead_ns=1000) == model_cu(persist_page_pace_ahead_ns=1000,
                                                                 persist_page_pace_ahead_from_pos=0)
    assert model_cu(persist_page_pace_ahead_from_pos=2048) == model_cu()
    assert "KIEC_PAGE_PACE_AHEAD_FROM" not in model_cu(persist_page_pace_ahead_from_pos=2048)


def test_narrow_models_run_x_direct_owner_merges_and_newest_first(tmp_path):
    # persist_narrow_width: a model whose embedding row is narrower than it runs the *_narrow fields' x direct, owner
    # merges, newest first, combine batch, ring depth, attention passes in flight and their first rows loaded before
    # the wait (smollm2-135m's 576 timed faster so), exactly the kernel those fields give a wide model; a wider one
    # the table's own
    import dataclasses

    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.persistent_rules import for_model
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384)
    program = pipeline.run(kiec.load(str(tmp_path / "hf"), dtype="bf16").graph)
    t = dataclasses.replace(target("sm_90"), persist_x_direct=0, persist_attn_owner_merges=0,
                            persist_attn_newest_first=0, persist_combine_batch=0, persist_x_direct_narrow=1,
                            persist_attn_owner_merges_narrow=8, persist_attn_newest_first_narrow=1,
                            persist_combine_batch_narrow=16, persist_stages=12, persist_stages_narrow=4,
                            persist_attn_mma_ahead=2, persist_attn_mma_ahead_narrow=1, persist_attn_mma_first=0,
                            persist_attn_mma_first_narrow=2, persist_tag_waits=0, persist_tag_waits_narrow=0)
    for width, want in [(257, (1, 8, 1, 16, 4, 1, 2)), (256, (0, 0, 0, 0, 12, 2, 0)), (0, (0, 0, 0, 0, 12, 2, 0))]:
        got = for_model(program, dataclasses.replace(t, persist_narrow_width=width))
        assert (got.persist_x_direct, got.persist_attn_owner_merges, got.persist_attn_newest_first,
                got.persist_combine_batch, got.persist_stages, got.persist_attn_mma_ahead,
                got.persist_attn_mma_first) == want, width
    narrow = emit_persistent(program, "bf16", 64, dataclasses.replace(t, persist_narrow_width=257), "x")
    fields = dataclasses.replace(t, persist_narrow_width=0, persist_x_direct=1, persist_attn_owner_merges=8,
                                 persist_attn_newest_first=1, persist_combine_batch=16, persist_stages=4,
                                 persist_attn_mma_ahead=1, persist_attn_mma_first=2,
                                 attn_min_keys=t.persist_attn_min_keys_narrow)  # (its own test below)
    assert narrow.files == emit_persistent(program, "bf16", 64, fields, "x").files
    attention = attention_tile_args(narrow.files["model.cu"])[0]
    assert (attention["OWNER_MAX"], attention["NEWEST_FIRST"], attention["MMA_FIRST"]) == ("8", "true", "2")
    assert "#define KIEC_COMBINE_BATCH 16" in narrow.files["model.cu"]
    wide = emit_persistent(program, "bf16", 64, dataclasses.replace(t, persist_narrow_width=256), "x")
    assert "attention_tile" in wide.files["model.cu"] and wide.files != narrow.files
    assert wide.files == emit_persistent(program, "bf16", 64, dataclasses.replace(t, persist_narrow_width=0), "x").files


def test_narrow_models_run_tag_waits(tmp_path):
    # persist_tag_waits_narrow: a narrow tagged model spins on its tags (smollm2-135m timed faster so, the wide models
    # at noise), exactly the kernel persist_tag_waits gives a wide one; a wider model the table's own
    import dataclasses

    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.persistent_rules import for_model
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384)
    program = pipeline.run(kiec.load(str(tmp_path / "hf"), dtype="bf16").graph)
    t = dataclasses.replace(target("sm_90"), persist_tagged_min_width=0, persist_tag_waits=0,
                            persist_tag_waits_narrow=1)
    assert target("sm_90").persist_tag_waits_narrow == 1 and target("sm_90").persist_tag_waits == 0
    assert [for_model(program, dataclasses.replace(t, persist_narrow_width=w)).persist_tag_waits
            for w in (257, 256, 0)] == [1, 0, 0]
    narrow = emit_persistent(program, "bf16", 64, dataclasses.replace(t, persist_narrow_width=257), "x")
    assert "KIEC_TAG_WAITS" in narrow.files["model.cu"]
    as_wide = dataclasses.replace(for_model(program, dataclasses.replace(t, persist_narrow_width=257)),
                                  persist_narrow_width=0)
    assert narrow.files == emit_persistent(program, "bf16", 64, as_wide, "x").files
    wide = emit_persistent(program, "bf16", 64, dataclasses.replace(t, persist_narrow_width=256), "x")
    assert "KIEC_TAG_WAITS" not in wide.files["model.cu"]


def test_narrow_models_split_attention_by_their_own_min_keys(tmp_path):
    # persist_attn_min_keys_narrow: a narrow model's persistent kernel splits attention's context by it (smollm2-135m:
    # one split a KV head up to 256 rows, timed 8% faster so), the kernel's template argument, its descriptors and the
    # schedule (the VM's and the trace tools' split of the rows) alike; a wider model, and graph mode's kernels, keep
    # attn_min_keys
    import dataclasses

    from kiec.codegen.emit import emit
    from kiec.codegen.persistent import _PersistentEmitter, emit_persistent
    from kiec.codegen.persistent_rules import for_model
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    from kiec.ir.passes.simulate import split_rows
    assert (target("sm_90").persist_attn_min_keys_narrow, target("sm_90").attn_min_keys) == (256, 64)
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384)
    program = pipeline.run(kiec.load(str(tmp_path / "hf"), dtype="bf16").graph)
    t = dataclasses.replace(target("sm_90"), attn_min_keys=16, persist_attn_min_keys_narrow=128)
    for width, keys in [(257, 128), (256, 16), (0, 16)]:
        tw = dataclasses.replace(t, persist_narrow_width=width)
        e = _PersistentEmitter(program, "bf16", 64, tw)
        assert (e.t.attn_min_keys, e.sched.min_keys) == (keys, keys), width
        src = emit_persistent(program, "bf16", 64, tw, "x").files["model.cu"]
        tiles = attention_tile_args(src)
        assert tiles and all(a["MIN_KEYS"] == str(keys) for a in tiles), (width, tiles)
        graph = emit(program, "bf16", 64, tw, "x").files  # (its attention kernel's name ends in m<min keys>)
        assert {m for text in graph.values() for m in re.findall(r"_w\d+s\d+u\d+m(\d+)", text)} == {"16"}, width
    k = next(k for k in program.kernels if hasattr(k, "kv_heads"))
    assert split_rows(k, 200, 8, 128) == [(0, 128), (128, 201)]  # (two of 8 splits in use at position 200)
    narrow = dataclasses.replace(t, persist_narrow_width=257)
    as_wide = dataclasses.replace(for_model(program, narrow), persist_narrow_width=0)  # (its other narrow fields too)
    assert as_wide.attn_min_keys == 128
    assert emit_persistent(program, "bf16", 64, narrow, "x").files == emit_persistent(program, "bf16", 64, as_wide,
                                                                                       "x").files


def test_narrow_models_ask_l2_ahead(tmp_path):
    # persist_l2_ahead_max_width: a model no wider than it asks L2 for persist_l2_ahead_bytes past the ring (the
    # kernel's L2_AHEAD, in pages), a wider one for none; by default smollm2-135m's width (576) does, 2048 does not
    import dataclasses
    import re

    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.persistent_rules import l2_ahead_bytes, model_width
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    program = pipeline.run(model.graph)
    assert model_width(program) == 256
    base = target("sm_90")
    assert 576 <= base.persist_l2_ahead_max_width < 2048 and base.persist_l2_ahead_bytes > 0
    for width, want in [(256, 1 << 18), (255, 0)]:
        t = dataclasses.replace(base, persist_l2_ahead_bytes=1 << 18, persist_l2_ahead_max_width=width)
        assert l2_ahead_bytes(program, t) == want
        src = emit_persistent(program, "bf16", model.max_seq_len, t, "x")
        pages = re.search(r"persistent_kernel<Model, Ring, WARPS, (\d+)>", src.files["model.cu"])
        assert pages and int(pages.group(1)) == want // t.persist_page_bytes


def test_waits_polled_together_compile_and_poll_a_lane_a_wait(tmp_path, monkeypatch):
    # persist_waits_together: warp 0's lanes poll an instruction's waits at once (wait_inputs); the kernel builds
    import dataclasses

    from kiec.codegen import targets
    from kiec.codegen.emit import INCLUDE_DIR
    make_tiny_hf(tmp_path / "hf", "llama")
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    monkeypatch.setitem(targets.TARGETS, "sm_90",
                        dataclasses.replace(targets.TARGETS["sm_90"], persist_waits_together=1))
    art = kiec.compile(model, str(tmp_path / "art"), mode="persistent")
    with open(os.path.join(art, "src", "model.cu")) as fh:
        assert "#define KIEC_WAITS_TOGETHER 1" in fh.read()
    with open(os.path.join(INCLUDE_DIR, "kiec", "persistent_tile.cuh")) as fh:
        together = fh.read().split("if (KIEC_WAITS_TOGETHER && threadIdx.x < 32) {")[1].split("} else if")[0]
    assert "u.ins->waits[lane]" in together and "__all_sync" in together


def test_early_rope_and_kv_first_set_their_flags_after_the_short_pass(tmp_path):
    # persist_attn_early_rope, persist_attn_kv_first: attention_tile's EARLY_ROPE and KV_FIRST after U_SHORT; off,
    # the tail stops before them; KV_FIRST only with a short pass (persist_attn_short_keys)
    import dataclasses

    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    program = pipeline.run(model.graph)
    base = dataclasses.replace(target("sm_90"), persist_attn_pipeline=0, persist_tagged=0, persist_attn_short_keys=2,
                               persist_attn_lean=0, persist_attn_mma=0)  # (the flags after them at their defaults)
    args = {}
    for early, first, short in [(0, 0, 2), (1, 0, 2), (0, 1, 2), (1, 1, 2), (0, 1, 0)]:
        t = dataclasses.replace(base, persist_attn_early_rope=early, persist_attn_kv_first=first,
                                persist_attn_short_keys=short)
        text = emit_persistent(program, "bf16", model.max_seq_len, t, "x").files["model.cu"]
        a = attention_tile_args(text)[0]
        args[early, first, short] = a["U_SHORT"], a["EARLY_ROPE"], a["KV_FIRST"]
    assert args == {(0, 0, 2): ("2", "false", "false"), (1, 0, 2): ("2", "true", "false"),
                    (0, 1, 2): ("2", "false", "true"), (1, 1, 2): ("2", "true", "true"),
                    (0, 1, 0): ("0", "false", "false")}


def test_attention_tiles_parameters_are_named_as_persistent_cuh_declares_them(tmp_path):
    # codegen's ATTENTION_TILE_HEAD and ATTENTION_TILE_TAIL: attention_tile's template parameters in persistent.cuh's
    # order, the tail's defaults its defaults, so that the emitter's named values land where the kernel reads them
    # and attention_tile_args reads a call back by name (a default filled in where the call leaves it out)
    import re

    from kiec.codegen.emit import INCLUDE_DIR
    from kiec.codegen.persistent import ATTENTION_TILE_HEAD, ATTENTION_TILE_TAIL, emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    with open(os.path.join(INCLUDE_DIR, "kiec", "persistent.cuh")) as fh:
        decl = re.search(r"template <([^>]*)>\s*__device__ __forceinline__ bool attention_tile\(", fh.read()).group(1)
    params = [re.fullmatch(r"(?:typename|bool|int) (\w+)(?: = (\w+))?", p.strip()).groups() for p in decl.split(",")]
    assert [n for n, _ in params] == list(ATTENTION_TILE_HEAD) + [n for n, _ in ATTENTION_TILE_TAIL]
    assert [d for _, d in params[len(ATTENTION_TILE_HEAD):]] == [str(d).lower() for _, d in ATTENTION_TILE_TAIL]
    assert all(d is None for _, d in params[:len(ATTENTION_TILE_HEAD)])
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    text = emit_persistent(pipeline.run(model.graph), "bf16", model.max_seq_len, target("sm_90"), "x").files["model.cu"]
    calls = attention_tile_args(text)
    written = [a.strip() for a in re.search(r"kiec::attention_tile<([^>]*)>", text).group(1).split(",")]
    assert len(calls) == 1 and list(calls[0].values())[:len(written)] == written
    assert (calls[0]["HEAD_DIM"], calls[0]["GROUP"], calls[0]["TAGGED"]) == ("64", "2", "true")
    with pytest.raises(ValueError, match="9 template arguments"):
        attention_tile_args("kiec::attention_tile<T, 64, 2, 64, false, false, 8, 4, 8>(u")


def test_q_pairs_set_attentions_flag_only_where_they_apply(tmp_path):
    # persist_attn_q_pairs (1, 2: the coefficients after the wait, 3: read from the step's table): attention_tile's
    # Q_PAIRS (its last template argument) on a tagged llama whose every dim is rotated; not on qwen3 (head norms
    # before the rotation) nor where attention's words are untagged; off, the tail stops before it. 3 defines the
    # table (KIEC_ROPE_TABLE: a pair for every two dims of a head, the frequencies' offset) and counts its bytes in
    # the static shared memory; where the layers rotate by different frequencies it falls back to 2 and defines no
    # table. Another value is a ValueError naming the field
    import dataclasses
    import re

    from kiec.codegen.persistent import _PersistentEmitter, emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    from kiec.ir.passes.program import AttentionKernel
    base = dataclasses.replace(target("sm_90"), persist_narrow_width=0, persist_tagged_min_width=0)
    found, tables = {}, {}
    for family in ("llama", "qwen3"):
        make_tiny_hf(tmp_path / family, family, hidden_size=256, intermediate_size=384)
        model = kiec.load(str(tmp_path / family), dtype="bf16")
        program = pipeline.run(model.graph)
        for pairs, tagged in [(0, 2), (1, 2), (2, 2), (3, 2), (1, 0), (3, 0)]:
            t = dataclasses.replace(base, persist_attn_q_pairs=pairs, persist_tagged=tagged)
            text = emit_persistent(program, "bf16", model.max_seq_len, t, "x").files["model.cu"]
            found[family, pairs, tagged] = attention_tile_args(text)[0]["Q_PAIRS"]
            table = re.search(r"#define KIEC_ROPE_TABLE (\d+)", text)
            tables[family, pairs, tagged] = table and int(table.group(1))
        with pytest.raises(ValueError, match="persist_attn_q_pairs 4"):
            emit_persistent(program, "bf16", model.max_seq_len, dataclasses.replace(base, persist_attn_q_pairs=4), "x")
    assert found == {("llama", 0, 2): "0", ("llama", 1, 2): "1", ("llama", 2, 2): "2", ("llama", 3, 2): "3",
                     ("llama", 1, 0): "0", ("llama", 3, 0): "0",
                     ("qwen3", 0, 2): "0", ("qwen3", 1, 2): "0", ("qwen3", 2, 2): "0", ("qwen3", 3, 2): "0",
                     ("qwen3", 1, 0): "0", ("qwen3", 3, 0): "0"}
    llama = pipeline.run(kiec.load(str(tmp_path / "llama"), dtype="bf16").graph)
    head_dim = next(k.head_dim for k in llama.kernels if isinstance(k, AttentionKernel))
    assert {k: v for k, v in tables.items() if v} == {("llama", 3, 2): head_dim // 2}
    three = dataclasses.replace(base, persist_attn_q_pairs=3)
    two = dataclasses.replace(base, persist_attn_q_pairs=2)
    # (the table lies in the room STATIC_SMEM leaves, so the ring keeps its pages: one fewer on llama-3.2-1b when it
    # was counted on top)
    assert (_PersistentEmitter(llama, "bf16", 1024, three).static_smem
            == _PersistentEmitter(llama, "bf16", 1024, two).static_smem)
    # one layer rotating by another base: no table, every attention back to 2
    i = next(i for i, k in enumerate(llama.kernels) if isinstance(k, AttentionKernel))
    llama.kernels[i] = dataclasses.replace(llama.kernels[i], rope=dataclasses.replace(llama.kernels[i].rope,
                                                                                     theta=1234.0))
    text = emit_persistent(llama, "bf16", 1024, three, "x").files["model.cu"]
    assert "KIEC_ROPE_TABLE" not in text
    assert {a["Q_PAIRS"] for a in attention_tile_args(text)} == {"2"}


def test_q_pairs_normed_set_head_norm_attentions_flag_only_where_they_apply(tmp_path):
    # persist_attn_q_pairs_normed: persist_attn_q_pairs on attentions with q and k head norms too (qwen3: a warp a
    # head), where heads are a multiple of 64 wide and the model has no tag waits (whose words the tile would load
    # before its wait a pair a thread); on by default; off, qwen3's attention_tile keeps no Q_PAIRS. A llama's
    # kernel is the same text with it or without
    import dataclasses
    import re

    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    base = dataclasses.replace(target("sm_90"), persist_narrow_width=0, persist_tagged_min_width=0, persist_tagged=2,
                               persist_tag_waits=0, persist_attn_q_pairs=3)

    def q_pairs(family, head_dim, **change):
        make_tiny_hf(tmp_path / f"{family}{head_dim}", family, hidden_size=256, intermediate_size=384,
                     **({"head_dim": head_dim} if family == "qwen3" else {}))
        model = kiec.load(str(tmp_path / f"{family}{head_dim}"), dtype="bf16")
        text = emit_persistent(pipeline.run(model.graph), "bf16", model.max_seq_len,
                               dataclasses.replace(base, **change), "x").files["model.cu"]
        table = re.search(r"#define KIEC_ROPE_TABLE (\d+)", text)
        return attention_tile_args(text)[0]["Q_PAIRS"], table and int(table.group(1)), text

    assert q_pairs("qwen3", 64)[:2] == ("3", 32)  # (the default: on)
    assert q_pairs("qwen3", 64, persist_attn_q_pairs_normed=0)[:2] == ("0", None)
    assert q_pairs("qwen3", 128, persist_attn_q_pairs_normed=1)[:2] == ("3", 64)
    assert q_pairs("qwen3", 128, persist_attn_q_pairs_normed=1, persist_attn_q_pairs=2)[:2] == ("2", None)
    assert q_pairs("qwen3", 128, persist_attn_q_pairs_normed=1, persist_attn_q_pairs=0)[:2] == ("0", None)
    assert q_pairs("qwen3", 32, persist_attn_q_pairs_normed=1)[:2] == ("0", None)  # (32 wide: a lane, half a pair)
    assert q_pairs("qwen3", 64, persist_attn_q_pairs_normed=1, persist_tag_waits=1)[:2] == ("0", None)
    assert q_pairs("qwen3", 64, persist_attn_q_pairs_normed=1, persist_tagged=0)[:2] == ("0", None)
    assert q_pairs("llama", 0, persist_attn_q_pairs_normed=0)[2] == q_pairs("llama", 0)[2]


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


@pytest.mark.parametrize("tagged", [0, 2])
def test_attention_pipeline_halves_the_keys_a_pass_and_sets_its_flag(tmp_path, tagged):
    # persist_attn_pipeline: attention_tile's PIPE after TAGGED, U halved (two passes' rows in registers at once);
    # SOFTCAP false after them (a model without a logit softcap leaves tanhf out of the unrolled step)
    import dataclasses

    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    program = pipeline.run(model.graph)
    args = {}
    for pipe in (0, 1):
        t = dataclasses.replace(target("sm_90"), persist_attn_pipeline=pipe, persist_tagged=tagged,
                                persist_attn_short_keys=0, persist_attn_lean=0, persist_attn_mma=0)
        text = emit_persistent(program, "bf16", model.max_seq_len, t, "x").files["model.cu"]
        args[pipe] = attention_tile_args(text)[0]
    assert int(args[1]["U"]) == int(args[0]["U"]) // 2
    on = "true" if tagged else "false"
    assert (args[1]["TAGGED"], args[1]["PIPE"], args[1]["SOFTCAP"]) == (on, "true", "false")
    assert (args[0]["TAGGED"], args[0]["PIPE"], args[0]["SOFTCAP"]) == (on, "false", "false")
    # with a softcap (Gemma-style; no frontend makes one yet), SOFTCAP keeps its default: tanhf stays
    from kiec.ir.passes.program import AttentionKernel
    capped = dataclasses.replace(program, kernels=[
        dataclasses.replace(k, attention=dataclasses.replace(k.attention, softcap=30.0))
        if isinstance(k, AttentionKernel) else k for k in program.kernels])
    t = dataclasses.replace(target("sm_90"), persist_tagged=tagged, persist_attn_pipeline=0, persist_attn_short_keys=0,
                            persist_attn_lean=0, persist_attn_mma=0)
    text = emit_persistent(capped, "bf16", model.max_seq_len, t, "x").files["model.cu"]
    capped_args = attention_tile_args(text)[0]
    assert (capped_args["TAGGED"], capped_args["SOFTCAP"]) == (on, "true")


def test_attention_keys_a_pass_can_be_set(tmp_path):
    # persist_attn_keys: attention's U (the step's unrolled keys) set instead of derived; halved with the pipeline
    import dataclasses

    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    program = pipeline.run(model.graph)

    base = dataclasses.replace(target("sm_90"), persist_attn_pipeline=0, persist_tagged=0, persist_attn_lean=0,
                               persist_attn_mma=0)  # not the defaults'

    def u(**change):
        t = dataclasses.replace(base, **change)
        text = emit_persistent(program, "bf16", model.max_seq_len, t, "x").files["model.cu"]
        return int(attention_tile_args(text)[0]["U"])
    assert (u(), u(persist_attn_keys=2), u(persist_attn_keys=2, persist_attn_pipeline=1)) == (8, 2, 1)
    # persist_attn_short_keys: U_SHORT after TAGGED, PIPE and SOFTCAP; none where it is not below U
    t = dataclasses.replace(base, persist_attn_short_keys=2)
    text = emit_persistent(program, "bf16", model.max_seq_len, t, "x").files["model.cu"]
    assert attention_tile_args(text)[0]["U_SHORT"] == "2"
    t = dataclasses.replace(base, persist_attn_short_keys=8)
    text = emit_persistent(program, "bf16", model.max_seq_len, t, "x").files["model.cu"]
    assert attention_tile_args(text)[0]["U_SHORT"] == "0"


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


def tiny_tagged_llama(tmp_path):
    """A tiny llama (hidden 256, 4 heads on 2 KV heads), its program, and the sm_90 table with the widths under which
    it runs a wide model's fields (tagged words, not a narrow model's)."""
    import dataclasses

    from kiec.codegen import targets
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=300)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    wide = dataclasses.replace(targets.TARGETS["sm_90"], persist_tagged_min_width=0, persist_narrow_width=0)
    return model, pipeline.run(model.graph), wide


def test_tagged_pairs_take_the_silu_outputs_whose_readers_copy_them(tmp_path, monkeypatch):
    # persist_tagged_pairs: on a tagged model the SiLU-mul's output, whose reader (the down projection) copies it into
    # the scratch (all of it, or a warp's segment: llama-3.1-8b): gate/up's case writes pairs (PY, argument 18), the
    # down projection's reads them (PX, argument 17), gate/up's shares are whole pairs, and the kernel builds (nvcc).
    # None where the down projection reads x straight from memory, with tag waits or parity tags, or without tags
    import dataclasses

    from kiec.codegen import targets
    from kiec.codegen.persistent import _PersistentEmitter
    from kiec.ir.passes import pipeline
    model, program, wide = tiny_tagged_llama(tmp_path)
    silu = {k.out for k in program.kernels if getattr(k, "epilogue", None) == "silu_mul"}

    def paired(**change):
        return _PersistentEmitter(program, "bf16", model.max_seq_len, dataclasses.replace(wide, **change)).paired

    attn = {k.attention.out for k in program.kernels if type(k).__name__ == "AttentionKernel"}
    assert paired(persist_tagged_pairs=0) == frozenset() and paired(persist_tagged_pairs=1) == silu
    assert paired(persist_tagged_pairs=2) == silu | attn and paired(persist_tagged_pairs=2, persist_tagged=1) == silu
    assert paired(persist_tagged_pairs=2, persist_attn_owner_merges=8) == silu
    with pytest.raises(ValueError, match=r"persist_tagged_pairs 3: 0, 1 \(the SiLU-mul's output\) or 2"):
        paired(persist_tagged_pairs=3)
    for other in (dict(persist_x_direct=1), dict(persist_tag_waits=1), dict(persist_tag_parity=1),
                  dict(persist_tagged=0)):
        assert paired(persist_tagged_pairs=1, **other) == frozenset(), other
    big = pipeline.run(kiec.load("llama-3.1-8b", dtype="bf16", max_seq_len=512).graph)  # (its down: a warp's copy)
    big_silu = {k.out for k in big.kernels if getattr(k, "epilogue", None) == "silu_mul"}
    e = _PersistentEmitter(big, "bf16", 512, dataclasses.replace(wide, persist_tagged_pairs=1))
    assert e.paired == big_silu and all(e.x_warp_copy(k) for k in big.kernels if getattr(k, "x", None) in big_silu)
    e = _PersistentEmitter(program, "bf16", model.max_seq_len, dataclasses.replace(wide, persist_tagged_pairs=2))
    for lst in e.sched.lists:
        for ins in lst:
            if getattr(program.kernels[ins.kernel], "out", None) in silu:
                assert ins.lo % 2 == 0 and ins.hi % 2 == 0
    monkeypatch.setitem(targets.TARGETS, "sm_90", dataclasses.replace(wide, persist_tagged_pairs=2))
    art = kiec.compile(model, str(tmp_path / "art"), mode="persistent")
    with open(os.path.join(art, "src", "model.cu")) as fh:
        text = fh.read()
    cases = [c.split(", ") for c in re.findall(r"kiec::gemv_tile<([^>]*)>", text)]
    assert [c[4] for c in cases if len(c) == 19 and c[18] == "true"] == ["kiec::EPI_SILU_MUL"]
    # the output projection (K 256) and the down projection (K 384) read pairs; attention writes them (PAIRED, last)
    assert sorted((c[4], c[1]) for c in cases if len(c) >= 18 and c[17] == "true") == [("kiec::EPI_RESIDUAL", "256"),
                                                                                       ("kiec::EPI_RESIDUAL", "384")]
    assert attention_tile_args(text)[0]["PAIRED"] == "true"


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


def test_every_gpu_knob_variant_builds_a_kernel_of_its_own(tmp_path):
    # tests/gpu/test_persistent.py's knob test compares each TABLE_VARIANTS entry's tokens with its base's: a
    # variant whose fields build the base's very kernel (the same sources, schedule and descriptors) would test
    # nothing, as many did while the tiny model's narrow rules replaced the fields under test
    import dataclasses

    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    from tests.gpu.test_persistent import TABLE_VARIANTS, WIDE_FIELDS
    make_tiny_hf(tmp_path / "hf", "qwen3", vocab_size=16384)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    program = pipeline.run(model.graph)

    def kernel(t):
        src = emit_persistent(program, "bf16", model.max_seq_len, t, "x")
        return src.files, src.manifest, [w for w in src.weights if not w.sources]  # (the schedule, the descriptors)

    same = []
    for v in TABLE_VARIANTS:
        change = v if isinstance(v, dict) else v.values[0]  # (a pytest.param's dict)
        base = dataclasses.replace(target("sm_90"), **WIDE_FIELDS,
                                   **{k: x for k, x in change.items() if k == "attn_min_keys"})
        if kernel(dataclasses.replace(base, **change)) == kernel(base):
            same.append(change)
    assert not same, f"these variants build their base's kernel: {same}"


def test_persistent_mode_refuses_what_it_has_no_device_code_for(tmp_path):
    make_tiny_hf(tmp_path / "hf", "llama-gelu")  # a TVM-generated elementwise chain
    with pytest.raises(kiec.KiecError, match=r"L0\.\S+ \(Activation.*\): persistent mode has no device code"):
        kiec.compile(kiec.load(str(tmp_path / "hf")), str(tmp_path / "art"), mode="persistent")
    assert not os.path.exists(tmp_path / "art")


@pytest.mark.parametrize("change,message", [
    (dict(persist_page_bytes=128 << 10), r"room for 1 weight pages of 131072 bytes .* at least 2 pages are needed"),
    (dict(persist_page_bytes=32), r"K = 96: no cut of a row into segments fits a 32-byte page with 8 warps"),
])
def test_persistent_mode_names_a_weight_ring_that_does_not_fit(tmp_path, monkeypatch, change, message):
    import dataclasses

    from kiec.codegen import targets
    make_tiny_hf(tmp_path / "hf", "llama")
    monkeypatch.setitem(targets.TARGETS, "sm_90", dataclasses.replace(targets.TARGETS["sm_90"], **change))
    with pytest.raises(kiec.KiecError, match=message):
        kiec.compile(kiec.load(str(tmp_path / "hf")), str(tmp_path / "art"), mode="persistent")
    assert not os.path.exists(tmp_path / "art") and not any(p.name.startswith("art.tmp") for p in tmp_path.iterdir())


def test_consumer_merges_reach_both_cases_or_are_refused_by_name(tmp_path, monkeypatch):
    # persist_attn_consumer_merges: the attention case takes the most splits the consumer merges (CONSUMER, its
    # 27th argument) and the output projection's case a ConsumerMerge of the attention's geometry with the partials'
    # regions as its descriptor's a[2] and a[3] (8-byte words: twice the floats) and the attention's window; the
    # kernel builds (nvcc). Refused by name without tagged attention, with owner merges, tag waits, parity tags, newest
    # first or the idle probe, heads not a multiple of 64 wide, attention's output read by more than the output
    # projection, or a count below 2
    import dataclasses

    from kiec.codegen import targets
    from kiec.codegen.persistent import _PersistentEmitter, emit_persistent
    from kiec.ir.passes import pipeline
    from kiec.ir.passes.phases import partials
    model, program, wide = tiny_tagged_llama(tmp_path)
    on = dataclasses.replace(wide, persist_attn_consumer_merges=2)
    e = _PersistentEmitter(program, "bf16", model.max_seq_len, on)
    assert e.consumer_merges == 2 and e.sched.consumer_merges == 2
    off = _PersistentEmitter(program, "bf16", model.max_seq_len, wide)
    attn = [k for k in program.kernels if type(k).__name__ == "AttentionKernel"]
    for k in attn:  # the partials as words
        assert e.scratch()[partials(k) + ".o"] == 2 * off.scratch()[partials(k) + ".o"]
    src = emit_persistent(program, "bf16", model.max_seq_len, on, "x")
    text = src.files["model.cu"]
    splits = e.splits[attn[0].name]
    assert attention_tile_args(text)[0]["CONSUMER"] == "2"
    assert (f"kiec::ConsumerMerge<{attn[0].head_dim}, 2, {splits}, {on.attn_min_keys}, 2>>(u, ring" in text
            and "smem, nullptr, nullptr, A(d.a[2]), A(d.a[3]))" in text)
    assert "ConsumerMerge" not in emit_persistent(program, "bf16", model.max_seq_len, wide, "x").files["model.cu"]
    for change, why in ((dict(persist_tagged=1), "attention's output is not tagged words"),
                        (dict(persist_attn_owner_merges=8), "persist_attn_owner_merges"),
                        (dict(persist_tag_waits=1),
                         r"persist_tag_waits \(persist_tag_waits_narrow on a narrow model\) is on"),
                        (dict(persist_tag_parity=1), "persist_tag_parity is on"),
                        (dict(persist_attn_newest_first=1), "persist_attn_newest_first"),
                        (dict(persist_probe_attention_idle=1), "persist_probe_attention_idle is on")):
        with pytest.raises(ValueError, match=rf"persist_attn_consumer_merges 2: {why}"):
            _PersistentEmitter(program, "bf16", model.max_seq_len, dataclasses.replace(on, **change))
    program.graph.outputs.append(attn[0].attention.out)  # (read by the host too: at merged positions never written)
    with pytest.raises(ValueError, match=r"persist_attn_consumer_merges 2: attention's output is read other than as a "
                                         r"GEMV's x"):
        _PersistentEmitter(program, "bf16", model.max_seq_len, on)
    program.graph.outputs.pop()
    make_tiny_hf(tmp_path / "narrow", "llama")  # (hidden 64 over 4 heads: 16 wide)
    narrow = pipeline.run(kiec.load(str(tmp_path / "narrow"), dtype="bf16").graph)
    with pytest.raises(ValueError, match=r"persist_attn_consumer_merges 2: a head is not a multiple of 64 wide"):
        _PersistentEmitter(narrow, "bf16", 64, on)
    with pytest.raises(ValueError, match=r"persist_attn_consumer_merges 1: 0 \(off\) or the most splits in use"):
        _PersistentEmitter(program, "bf16", model.max_seq_len, dataclasses.replace(on, persist_attn_consumer_merges=1))
    monkeypatch.setitem(targets.TARGETS, "sm_90", on)
    art = kiec.compile(model, str(tmp_path / "art"), mode="persistent")
    with open(os.path.join(art, "src", "model.cu")) as fh:
        assert "kiec::ConsumerMerge<" in fh.read()


def test_copy_batch_reaches_the_kernel(tmp_path):
    # persist_copy_batch, persist_norm_batch, persist_warp_copy_rounds and persist_merge_loads: a tagged x's loads in
    # flight a thread (copied, normed, a warp's own copy, merged from attention's partials), defines of the persistent
    # source
    import dataclasses

    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama")
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    program = pipeline.run(model.graph)
    for copy, norm, rounds, merge in ((8, 8, 4, 8), (16, 12, 5, 6)):
        t = dataclasses.replace(target("sm_90"), persist_copy_batch=copy, persist_norm_batch=norm,
                                persist_warp_copy_rounds=rounds, persist_merge_loads=merge)
        text = emit_persistent(program, "bf16", 64, t, "x").files["model.cu"]
        assert f"#define KIEC_COPY_BATCH {copy} " in text
        assert f"#define KIEC_NORM_BATCH {norm} " in text
        assert f"#define KIEC_WARP_COPY_ROUNDS {rounds} " in text
        assert f"#define KIEC_MERGE_LOADS {merge} " in text


def test_x_direct_2_takes_only_the_gemvs_whose_warps_hold_a_segment_each(tmp_path):
    # persist_x_direct 2: the down projection (K 8192: 8 segments, one a warp) loads its x slices from memory, the
    # output projection (K 256: one segment all 8 warps load) keeps its scratch; 1 takes both. The scratch left is
    # the K-256 GEMVs', so 13 pages fit where the 8192 floats of x left room for 12
    import dataclasses
    import re

    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=8192)
    program = pipeline.run(kiec.load(str(tmp_path / "hf"), dtype="bf16").graph)

    def direct(x_direct):  # each norm-less GEMV case's (K, DIRECT), and the ring's pages
        t = dataclasses.replace(target("sm_90"), persist_x_direct=x_direct, persist_stages=13)
        text = emit_persistent(program, "bf16", 64, t, "x").files["model.cu"]
        cases = [(int(k), d == "true") for k, d in re.findall(
            r"gemv_tile<T, (\d+), \d+, false, kiec::EPI_\w+, \w+, \d+, (\w+)", text)]
        return cases, int(re.search(r"Ring<(\d+), \d+>", text).group(1))
    assert direct(0) == ([(256, False), (8192, False)], 12)
    assert direct(2) == ([(256, False), (8192, True)], 13)
    assert direct(1) == ([(256, True), (8192, True)], 13)
    with pytest.raises(ValueError, match="persist_x_direct 3: 0, 1"):
        direct(3)


def test_x_warp_copy_takes_the_gemvs_whose_warps_hold_a_segment_each_and_frees_their_scratch(tmp_path):
    # persist_x_warp_copy_min_k: the down projection (K 8192: 8 segments, one a warp) copies x a warp at a time through
    # 1 KB of the scratch each from a min K of 8192, not past it; the output projection (K 256: one segment all 8 warps
    # read) keeps the block's copy; the scratch then 8 KB where x took 32 KB, so a 13th page fits. With x direct,
    # direct wins (no scratch at all)
    import dataclasses
    import re

    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=8192)
    program = pipeline.run(kiec.load(str(tmp_path / "hf"), dtype="bf16").graph)

    def cases(**change):  # each norm-less GEMV case's (K, DIRECT, WCOPY), the ring's pages and the scratch's bytes
        t = dataclasses.replace(target("sm_90"), persist_stages=13, **change)
        text = emit_persistent(program, "bf16", 64, t, "x").files["model.cu"]
        found = []
        for k, tail in re.findall(r"gemv_tile<T, (\d+), \d+, false, kiec::EPI_\w+, \w+, \d+((?:, \w+)*)>", text):
            args = tail.split(", ")[1:]
            found.append((int(k), args[:1] == ["true"], len(args) == 10 and args[9] == "true"))
        return (sorted(found), int(re.search(r"Ring<(\d+), \d+>", text).group(1)),
                int(re.search(r"KIEC_SCRATCH_BYTES (\d+)", text).group(1)))
    assert cases(persist_x_warp_copy_min_k=0)[:2] == ([(256, False, False), (8192, False, False)], 12)
    assert cases(persist_x_warp_copy_min_k=8200)[:2] == ([(256, False, False), (8192, False, False)], 12)
    got, pages, scratch = cases(persist_x_warp_copy_min_k=8192)
    assert (got, pages) == ([(256, False, False), (8192, False, True)], 13)
    assert scratch < 8192 * 4 and scratch >= 8 * 256 * 4
    assert cases(persist_x_warp_copy_min_k=1, persist_x_direct=2)[0] == [(256, False, False), (8192, True, False)]
    with pytest.raises(ValueError, match="persist_x_warp_copy_min_k -1: 0 .never."):
        cases(persist_x_warp_copy_min_k=-1)


@pytest.mark.table_tags
def test_norm_in_warps_takes_the_gemvs_with_a_norm_whose_warps_hold_all_of_x(tmp_path, monkeypatch):
    # persist_norm_in_warps: QKV, gate/up and the LM head (K 576: one segment of 3 rounds a lane, untagged) normalize
    # x in each warp's registers, none of it staged in the scratch; the norm-less GEMVs are untouched, and so is a
    # model whose rows are cut into segments (K 1536: 2) or whose x is tagged. The kernel builds (nvcc)
    import dataclasses
    import re

    from kiec.build import emit_sources
    from kiec.codegen import targets

    def cases(model, **change):  # each GEMV case's (epilogue, K, WNORM), and the tiles' scratch
        t = dataclasses.replace(targets.TARGETS["sm_90"], **change)
        text = emit_sources(model, "persistent", "bf16", t, "x").files["model.cu"]
        got = [(epi, int(k), len(rest.split(", ")) > 5 and rest.split(", ")[5] == "true")  # (SEGS .. WNORM: 6th)
               for k, epi, rest in re.findall(r"gemv_tile<T, (\d+), \d+, \w+, kiec::EPI_(\w+), \w+, ([^>]*)>", text)]
        return got, int(re.search(r"#define KIEC_SCRATCH_BYTES (\d+)", text).group(1))

    make_tiny_hf(tmp_path / "narrow", "llama", hidden_size=576, intermediate_size=1536, num_attention_heads=9,
                 num_key_value_heads=3)
    narrow = kiec.load(str(tmp_path / "narrow"), dtype="bf16")
    untagged = dict(persist_tagged_min_width=1024)  # (the table tags every model since the forty-seventh session)
    off, scratch_off = cases(narrow, persist_norm_in_warps=0, **untagged)
    on, scratch_on = cases(narrow, persist_norm_in_warps=1, **untagged)
    assert [w for *_, w in off] == [False] * 5
    assert on == [("STORE", 576, True), ("RESIDUAL", 576, False), ("SILU_MUL", 576, True), ("RESIDUAL", 1536, False),
                  ("ARGMAX", 576, True)]
    assert scratch_on <= scratch_off  # (attention's scratch is the largest here either way)
    make_tiny_hf(tmp_path / "wide", "llama", hidden_size=1536, intermediate_size=4096, num_attention_heads=12,
                 num_key_value_heads=4)
    wide = kiec.load(str(tmp_path / "wide"), dtype="bf16")
    assert [w for *_, w in cases(wide, persist_norm_in_warps=1)[0]] == [False] * 5  # 2 segments a row
    assert [w for *_, w in cases(narrow, persist_norm_in_warps=1, persist_tagged_min_width=0)[0]] == [False] * 5
    monkeypatch.setitem(targets.TARGETS, "sm_90",
                        dataclasses.replace(targets.TARGETS["sm_90"], persist_norm_in_warps=1, **untagged))
    kiec.compile(narrow, str(tmp_path / "art"), mode="persistent")


@pytest.mark.table_tags
def test_dot_half_warps_takes_the_gemvs_that_give_a_warp_several_items(tmp_path, monkeypatch):
    # persist_dot_half_warps on an untagged K-576 model (smollm2-135m's shapes, 132 SMs, 8 warps): gate/up (12 items
    # a tile), the down projection (K 1536, 2 segments: 10) and the LM head (a vocabulary of 49152: 372) take an item
    # a half-warp; QKV (8 items) and the output projection (5) keep a warp an item; with tagged x none does. The
    # kernel builds (nvcc) alone and with the norm in the warps
    import dataclasses
    import re

    from kiec.build import emit_sources
    from kiec.codegen import targets

    def halves(model, **change):  # each GEMV case's (epilogue, K, HALF: the 7th template argument after SEGS)
        t = dataclasses.replace(targets.TARGETS["sm_90"], **change)
        text = emit_sources(model, "persistent", "bf16", t, "x").files["model.cu"]
        return [(epi, int(k), rest.count(",") >= 7 and rest.split(", ")[7] == "true")
                for k, epi, rest in re.findall(r"gemv_tile<T, (\d+), \d+, \w+, kiec::EPI_(\w+), \w+, ([^>]*)>", text)]

    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=576, intermediate_size=1536, num_attention_heads=9,
                 num_key_value_heads=3, vocab_size=49152)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    untagged = dict(persist_tagged_min_width=1024)  # (the table tags every model since the forty-seventh session)
    assert [h for *_, h in halves(model, **untagged)] == [False] * 5
    assert halves(model, persist_dot_half_warps=1, **untagged) == [("STORE", 576, False), ("RESIDUAL", 576, False),
                                                                   ("SILU_MUL", 576, True), ("RESIDUAL", 1536, True),
                                                                   ("ARGMAX", 576, True)]
    assert [h for *_, h in halves(model, persist_dot_half_warps=1)] == [False] * 5
    for change in (dict(persist_dot_half_warps=1, **untagged),
                   dict(persist_dot_half_warps=1, persist_norm_in_warps=1, **untagged)):
        monkeypatch.setitem(targets.TARGETS, "sm_90", dataclasses.replace(targets.TARGETS["sm_90"], **change))
        kiec.compile(model, str(tmp_path / f"art{len(change)}"), mode="persistent")


def test_attention_on_the_tensor_cores_takes_the_models_its_passes_can(tmp_path, monkeypatch):
    # persist_attn_mma: attention_tile's MMA_KEYS (its 23rd template argument) where heads are 64 wide (128 wide:
    # persist_attn_mma_wide, where 4 or more share a KV head) and at most 8 query heads share a KV head (2 and 4
    # here); the FMA passes (no argument) with heads 16 wide, with 9 query heads a KV head, with the early pass; a
    # value other than 0, 16 or 32 is refused by name. The kernel builds (nvcc) with 16 rows a pass, heads 64 and 128
    # wide (64: with 2 passes in flight, their rows loaded beside q's)
    import dataclasses

    from kiec.build import emit_sources
    from kiec.codegen import targets

    def tile_args(name, family="llama", change=None, **shape):  # (the model, its MMA_KEYS, MMA_AHEAD, MMA_FIRST)
        make_tiny_hf(tmp_path / name, family, **shape)
        model = kiec.load(str(tmp_path / name), dtype="bf16")
        t = dataclasses.replace(targets.TARGETS["sm_90"], **(change or dict(persist_attn_mma=16)))
        text = emit_sources(model, "persistent", "bf16", t, "x").files["model.cu"]
        (args,) = attention_tile_args(text)
        return model, (args["MMA_KEYS"], args["MMA_AHEAD"], args["MMA_FIRST"])

    def mma(name, family="llama", change=None, **shape):  # (the model, MMA_KEYS, MMA_AHEAD)
        model, (keys, ahead, _) = tile_args(name, family, change, **shape)
        return model, int(keys), int(ahead)

    wide = dict(hidden_size=256, intermediate_size=384)
    model, keys, _ = mma("g2", **wide)
    assert keys == 16
    assert mma("g4", num_key_value_heads=1, **wide)[1] == 16
    assert mma("g2-32", change=dict(persist_attn_mma=32), **wide)[1] == 32
    assert mma("off", change=dict(persist_attn_mma=0), **wide)[1] == 0
    assert mma("h128-default", "qwen3", change=dict(persist_attn_mma=16, persist_attn_mma_wide=0), head_dim=128,
               **wide)[1] == 0  # (128 wide: persist_attn_mma_wide's)
    # 128 wide, by default where 4 or more query heads share a KV head (persist_attn_mma_wide_min_group)
    assert mma("h128-g2", "qwen3", head_dim=128, **wide)[1] == 0
    wide_heads, keys, _ = mma("h128", "qwen3", change=dict(), head_dim=128, num_key_value_heads=1, **wide)
    assert keys == 16
    assert mma("h128-g2-min2", "qwen3", change=dict(persist_attn_mma_wide_min_group=2), head_dim=128, **wide)[1] == 16
    assert mma("h16")[1] == 0  # (the tiny model's heads: 64 / 4)
    assert mma("g9", hidden_size=576, intermediate_size=384, num_attention_heads=9, num_key_value_heads=1)[1] == 0
    assert mma("early", change=dict(persist_attn_mma=16, persist_attn_early_pass=1), **wide)[1] == 0
    with pytest.raises(kiec.KiecError, match="persist_attn_mma 24: rows a warp a pass"):
        mma("bad", change=dict(persist_attn_mma=24), **wide)
    with pytest.raises(kiec.KiecError, match="persist_attn_mma_wide 8: rows a warp a pass"):
        mma("bad-wide", change=dict(persist_attn_mma_wide=8), **wide)
    # persist_attn_mma_ahead: MMA_AHEAD where the tensor cores take heads 64 wide (1, the template's default); heads
    # 128 wide and the FMA passes keep 1; a value other than 1-3 is refused by name
    assert mma("ahead", change=dict(persist_attn_mma=16, persist_attn_mma_ahead=2), **wide)[1:] == (16, 2)
    assert mma("ahead1", change=dict(persist_attn_mma=16, persist_attn_mma_ahead=1), **wide)[2] == 1
    assert mma("ahead-off", change=dict(persist_attn_mma=0, persist_attn_mma_ahead=3), **wide)[2] == 1
    assert mma("ahead-h128", "qwen3", change=dict(persist_attn_mma_ahead=2), head_dim=128, num_key_value_heads=1,
               **wide)[1:] == (16, 1)
    with pytest.raises(kiec.KiecError, match="persist_attn_mma_ahead 4: passes in flight"):
        mma("bad-ahead", change=dict(persist_attn_mma_ahead=4), **wide)
    # persist_attn_mma_first: MMA_FIRST where the tensor cores take heads 64 wide: 1 (beside q's words) or 2 (before
    # the tile's wait); heads 128 wide (no passes in flight) and the FMA passes keep 0; any other value is refused by
    # name
    first = dict(persist_attn_mma=16, persist_attn_mma_first=1)
    assert tile_args("first", change=dict(first, persist_attn_mma_ahead=2), **wide)[1] == ("16", "2", "1")
    assert tile_args("first1", change=dict(first, persist_attn_mma_ahead=1), **wide)[1] == ("16", "1", "1")
    assert tile_args("first2", change=dict(first, persist_attn_mma_first=2), **wide)[1] == ("16", "2", "2")
    assert tile_args("first-off", change=dict(first, persist_attn_mma=0), **wide)[1] == ("0", "1", "0")
    assert tile_args("first-h128", "qwen3", change=first, head_dim=128, num_key_value_heads=1,
                     **wide)[1] == ("16", "1", "0")
    assert tile_args("first2-h128", "qwen3", change=dict(first, persist_attn_mma_first=2), head_dim=128,
                     num_key_value_heads=1, **wide)[1] == ("16", "1", "0")
    with pytest.raises(kiec.KiecError, match="persist_attn_mma_first 3: 0, 1"):
        tile_args("bad-first", change=dict(first, persist_attn_mma_first=3), **wide)
    monkeypatch.setitem(targets.TARGETS, "sm_90", dataclasses.replace(targets.TARGETS["sm_90"], persist_attn_mma=16,
                                                                      persist_attn_mma_wide=16,
                                                                      persist_attn_mma_ahead=2,
                                                                      persist_attn_mma_first=1))
    kiec.compile(model, str(tmp_path / "art"), mode="persistent")  # (2 passes in flight, loaded beside q)
    kiec.compile(wide_heads, str(tmp_path / "art128"), mode="persistent")  # (one pass's rows at a time)
    monkeypatch.setitem(targets.TARGETS, "sm_90", dataclasses.replace(targets.TARGETS["sm_90"],
                                                                      persist_attn_mma_first=2))
    kiec.compile(model, str(tmp_path / "art2"), mode="persistent")  # (2 passes in flight, loaded before the wait)


def test_reduce_batch_head_takes_the_lm_head_alone(tmp_path):
    # persist_reduce_batch_head: the LM head's tiles (the argmax GEMV) sum their items over the warp in batches of
    # its own; the other GEMVs keep the table's persist_reduce_batch (KIEC_REDUCE_BATCH); a batch warp_sum_batch cannot
    # take is refused by name
    import dataclasses
    import re

    from kiec.build import emit_sources
    from kiec.codegen import targets
    make_tiny_hf(tmp_path / "hf", "llama")
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")

    def batches(head):  # each GEMV case's (epilogue, BATCH: its last template argument where there are 6 after SEGS)
        t = dataclasses.replace(targets.TARGETS["sm_90"], persist_reduce_batch_head=head)
        text = emit_sources(model, "persistent", "bf16", t, "x").files["model.cu"]
        return [(epi, int(rest.split(", ")[6]) if rest.count(",") >= 6 else 0)
                for epi, rest in re.findall(r"gemv_tile<T, \d+, \d+, \w+, kiec::EPI_(\w+), \w+, ([^>]*)>", text)]
    assert batches(0) == [("STORE", 0), ("RESIDUAL", 0), ("SILU_MUL", 0), ("RESIDUAL", 0), ("ARGMAX", 0)]
    assert batches(8) == [("STORE", 0), ("RESIDUAL", 0), ("SILU_MUL", 0), ("RESIDUAL", 0), ("ARGMAX", 8)]
    with pytest.raises(kiec.KiecError, match="persist_reduce_batch_head 3: 0 or a power of two"):
        batches(3)


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


def test_select_host_late_compiles_where_asked(tmp_path, monkeypatch):
    # persist_select_host_late: the kernel defines KIEC_SELECT_HOST_LATE (0 by default) and builds (nvcc) with select's
    # host read before its wait and its host write after its signal
    model = tiny_llama(tmp_path)
    for on in (0, 1):
        assert f"#define KIEC_SELECT_HOST_LATE {on}" in persistent_cu(model, persist_select_host_late=on)
    compile_persistent(model, tmp_path / "art", monkeypatch, persist_select_host_late=1)


def test_paces_of_their_own_compile_where_asked_and_paced(tmp_path, monkeypatch):
    # persist_page_pace_kinds: the kernel defines KIEC_PAGE_PACE_KINDS where the stream is paced and some kind has a
    # pace (none by default, none with persist_page_pace_ns 0: unpaced), and builds (nvcc) with it
    model = tiny_llama(tmp_path)
    paced = dict(persist_paced_min_width=0)
    assert "KIEC_PAGE_PACE_KINDS" not in persistent_cu(model, **paced)
    assert "#define KIEC_PAGE_PACE_KINDS 1" in persistent_cu(model, persist_page_pace_kinds="down:460", **paced)
    assert "KIEC_PAGE_PACE_KINDS" not in persistent_cu(model, persist_page_pace_kinds="down:460",
                                                       persist_page_pace_ns=0, **paced)  # (unpaced)
    compile_persistent(model, tmp_path / "art", monkeypatch, persist_page_pace_kinds="down:460+head:300", **paced)


def test_several_items_a_warp_at_once_compile_and_bad_counts_are_refused(tmp_path, monkeypatch):
    # persist_dot_items: each GEMV tile takes its count as gemv_tile's ITEMS (its 16th template argument; 1, the
    # default, left out), only where a warp of its tiles has at least persist_dot_items_min_share items; the kernel
    # defines KIEC_DOT_ITEM_CHUNKS and builds (nvcc) with 4 at once; a count that is not 1, 2, 4 or 8, or no chunks, is
    # refused by name (the model's and the field's) before anything is written
    from kiec.codegen import targets
    model = tiny_llama(tmp_path)

    def items(**fields):  # each GEMV case's ITEMS, in the order of the cases
        text = persistent_cu(model, **fields)
        chunks = fields.get("persist_dot_item_chunks", targets.TARGETS["sm_90"].persist_dot_item_chunks)
        assert f"#define KIEC_DOT_ITEM_CHUNKS {chunks}" in text
        args = [a.split(", ") for a in re.findall(r"gemv_tile<(T, [^>]*)>", text)]
        return [int(a[15]) if len(a) > 15 else 1 for a in args]
    assert items() == [1] * 5
    assert items(persist_dot_items=4, persist_dot_item_chunks=32) == [4] * 5
    assert items(persist_dot_items=4, persist_dot_items_min_share=1 << 20) == [1] * 5
    for n, chunks in ((3, 16), (16, 16), (0, 16), (2, 0)):
        with pytest.raises(kiec.KiecError, match=f"persist_dot_items {n}: 1, 2, 4 or 8"):
            persistent_cu(model, persist_dot_items=n, persist_dot_item_chunks=chunks)
    compile_persistent(model, tmp_path / "art", monkeypatch, persist_dot_items=4)


def test_staged_instructions_and_raw_norm_weights_compile_where_asked(tmp_path, monkeypatch):
    # persist_stage_instrs, persist_norm_w_raw: the kernel defines KIEC_STAGE_INSTRS and KIEC_NORM_W_RAW (1 by
    # default) and builds (nvcc) with both; the staged slots' shared memory is kept out of the ring's room
    from kiec.codegen import persistent
    model = tiny_llama(tmp_path)
    for on in (0, 1):
        text = persistent_cu(model, persist_stage_instrs=on, persist_norm_w_raw=on)
        assert f"#define KIEC_STAGE_INSTRS {on}" in text and f"#define KIEC_NORM_W_RAW {on}" in text
        smem = int(re.search(r"SMEM_BYTES = (\d+)", text).group(1))
        assert smem + persistent.STATIC_SMEM + (persistent.STAGE_SMEM if on else 0) <= persistent.SMEM_LIMIT
    compile_persistent(model, tmp_path / "art", monkeypatch, persist_stage_instrs=1, persist_norm_w_raw=1)


def test_late_norm_scale_compiles_where_asked(tmp_path, monkeypatch):
    # persist_norm_late_scale: the kernel defines KIEC_NORM_LATE_SCALE (1 by default) and builds (nvcc) without it
    model = tiny_llama(tmp_path)
    assert "#define KIEC_NORM_LATE_SCALE 1" in persistent_cu(model)
    assert "#define KIEC_NORM_LATE_SCALE 0" in persistent_cu(model, persist_norm_late_scale=0)
    compile_persistent(model, tmp_path / "art", monkeypatch, persist_norm_late_scale=0)


@pytest.mark.parametrize("change", [dict(), dict(persist_tagged=1, persist_x_direct=1)])
def test_parity_tags_compile_with_their_table_and_reset(tmp_path, monkeypatch, change):
    # persist_tag_parity: the kernel defines KIEC_TAG_PARITY, holds each phase's parity bits and zeroes the tagged
    # slots before each launch; it builds (nvcc) with tags 2 and with tags 1 and x slices straight from memory (the
    # table's spared splits are not taken: every SM must read the residual stream). A model too narrow for every SM
    # to read the residual stream is refused by name, nothing left behind
    import dataclasses

    from kiec.codegen import targets
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=300)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    monkeypatch.setitem(targets.TARGETS, "sm_90",
                        dataclasses.replace(targets.TARGETS["sm_90"], persist_tag_parity=1, **change))
    art = kiec.compile(model, str(tmp_path / "art"), mode="persistent")
    with open(os.path.join(art, "src", "model.cu")) as fh:
        text = fh.read()
    assert "#define KIEC_TAG_PARITY 1" in text and "kiec_tag_parity[] = { 3, " in text
    assert "cudaMemsetAsync(c->arena + " in text
    make_tiny_hf(tmp_path / "narrow", "llama")
    with pytest.raises(kiec.KiecError, match=r"parity tags: .* on \d+ of 132 SMs"):
        kiec.compile(kiec.load(str(tmp_path / "narrow"), dtype="bf16"), str(tmp_path / "art2"), mode="persistent")
    assert not os.path.exists(tmp_path / "art2")


def test_item_shares_compile_where_asked(tmp_path, monkeypatch):
    # persist_item_shares: the kernel defines KIEC_ITEM_SHARES, the residual GEMVs (K 1536: 2 segments a row; K 4352:
    # 8) take the item-share tile with their partials' region, one item a warp at a time even where the table asks for
    # several or for half-warps, and every GEMV at 3 builds (nvcc) tagged; off, nothing of it. A value that is not 0
    # to 3, or the knob with parity tags or a probe that runs the dots twice, is refused by name before anything is
    # written
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=1536, intermediate_size=4352, num_attention_heads=12,
                 num_key_value_heads=4, vocab_size=1024, num_hidden_layers=1)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    off = persistent_cu(model)
    assert "#define KIEC_ITEM_SHARES 0" in off and "nullptr, A(d.a[3]))" not in off
    text = persistent_cu(model, persist_item_shares=1, persist_dot_items=4, persist_dot_half_warps=1)
    assert "#define KIEC_ITEM_SHARES 1" in text
    sk = re.findall(r"gemv_tile<T, (\d+), 8, false, kiec::EPI_RESIDUAL, false, (\d+)((?:, \w+)*)>\(u, ring, .*"
                    r"nullptr, A\(d\.a\[3\]\)\)", text)
    assert sorted((int(k), int(segs)) for k, segs, _ in sk) == [(1536, 2), (4352, 8)]
    assert all(args.split(", ")[9] == "1" and args.endswith(", true") for _, _, args in sk)  # ITEMS 1, SK
    # 2: gate/up too (tagged pairs: completed a pair at a time); 3: every GEMV (QKV's norm and store, the LM head's
    # argmax beside select)
    for level, dealt in ((2, {"EPI_RESIDUAL", "EPI_SILU_MUL"}), (3, {"EPI_RESIDUAL", "EPI_SILU_MUL", "EPI_STORE",
                                                                     "EPI_ARGMAX"})):
        cases = re.findall(r"gemv_tile<T, \d+, 8, \w+, kiec::(\w+), ([^>]*)>\(u, ring, [^;]*", persistent_cu(
            model, persist_item_shares=level))
        assert {epi for epi, args in cases if args.split(", ")[14:] == ["true"]} == dealt  # (SK: the 15th after EPI)
    from kiec.codegen import targets
    table = targets.TARGETS["sm_90"]
    for fields, what in ((dict(persist_item_shares=4), "persist_item_shares 4: 0, 1"),
                         (dict(persist_tag_parity=1), "persist_item_shares with persist_tag_parity"),
                         (dict(persist_probe_twice=1), "persist_item_shares with persist_probe_twice")):
        monkeypatch.setitem(targets.TARGETS, "sm_90", table)  # (compile_persistent replaces the table's fields)
        with pytest.raises(kiec.KiecError, match=what):
            compile_persistent(model, tmp_path / "bad", monkeypatch, **dict(dict(persist_item_shares=1), **fields))
        assert not os.path.exists(tmp_path / "bad")
    monkeypatch.setitem(targets.TARGETS, "sm_90", table)
    compile_persistent(model, tmp_path / "art", monkeypatch, persist_item_shares=3)


def test_tensor_core_gemvs_weights_are_their_blocks_and_like_reuse_keeps_layouts_apart(tmp_path, monkeypatch, capsys):
    # persist_mma_rows: each GEMV on the tensor cores has its weights in weights.bin as mma_blocked's 16-row blocks
    # (a copy of their own beside a tied table's rows), named in the manifest with their layout; an artifact built
    # like a row-major one copies none of its blocks from that one's rows
    from kiec.codegen.emit import mma_blocked
    make_tiny_hf(tmp_path / "hf", "llama-tied", hidden_size=512, intermediate_size=1024, num_attention_heads=8,
                 num_key_value_heads=2, vocab_size=512)
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    plain = kiec.compile(model, str(tmp_path / "plain"), mode="persistent")
    capsys.readouterr()
    art = compile_persistent(model, tmp_path / "mma", monkeypatch, persist_mma_rows="qkv+o+gate_up+down+head",
                             persist_mma_share_excess=10000)  # (a tiny model's blocks cannot deal evenly)
    with open(os.path.join(art, "manifest.json")) as fh:
        entries = json.load(fh)["weights"]
    raw = np.fromfile(os.path.join(art, "weights.bin"), dtype=np.uint8)
    blocked = [e for e in entries if e.get("layout")]
    assert {e["layout"] for e in blocked} == {"blocks16x512", "blocks16x256"}
    assert len(blocked) == 2 * 4 + 1  # (2 layers' QKV, O, gate/up and down, and the LM head)
    for e in blocked:
        n = int(np.prod(e["shape"]))
        got = torch.from_numpy(raw[e["offset"]: e["offset"] + 2 * n].copy().view(np.int16)).view(torch.bfloat16)
        rows = torch.cat([model.weights[s] for s in e["sources"]])
        assert torch.equal(got, mma_blocked(rows, e["layout"]).flatten()), e["name"]
    assert any(e["sources"] == blocked[-1]["sources"] and not e.get("layout") for e in entries)  # (the table's rows)
    kiec.compile(model, str(tmp_path / "like"), mode="persistent", weights_like=plain)
    with open(os.path.join(tmp_path / "like", "weights.bin"), "rb") as a, open(os.path.join(art, "weights.bin"),
                                                                                "rb") as b:
        assert a.read() == b.read()  # (the blocks converted, not copied from plain's rows)
