"""kiec compile on the CPU machine (nvcc, no GPU): the artifact's contents, its weight layout, and that a
failed or refused compile leaves nothing that looks complete."""
import errno
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
from tests.persistent_build import compile_persistent
from tests.tiny_hf import make_tiny_hf

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    make_tiny_hf(d / "hf", "qwen2")  # qkv bias: the packed bias is laid out too
    model = kiec.load(str(d / "hf"), dtype="bf16")
    return d, model, kiec.compile(model, str(d / "art"), mode="graph", dump_ir=True)


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


def test_a_compile_that_cannot_write_names_the_path_and_keeps_the_previous_artifact(tiny, tmp_path):
    # these were OSError tracebacks: an output under a file, a full disk while weights.bin was written
    d, model, art = tiny
    (tmp_path / "file").write_text("keep me")
    r = CliRunner().invoke(main, ["compile", str(d / "hf"), "-o", str(tmp_path / "file" / "art"), "--mode", "graph"])
    assert r.exit_code == 1 and not isinstance(r.exception, OSError), r.output
    assert f"Error: {tmp_path / 'file' / 'art'}: cannot make the artifact's directory there (" in r.output, r.output
    assert "Not a directory" in r.output and (tmp_path / "file").read_text() == "keep me"
    before = {f: os.path.getmtime(os.path.join(art, f)) for f in os.listdir(art)}

    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(build, "write_weights", full)
        with pytest.raises(kiec.KiecError) as e:
            kiec.compile(model, art, mode="graph")
    assert str(e.value) == f"{art}: the compile failed on a file (unnamed: No space left on device); nothing was " \
                           "replaced"
    assert {f: os.path.getmtime(os.path.join(art, f)) for f in os.listdir(art)} == before
    assert not [f for f in os.listdir(d) if ".tmp-" in f or ".old-" in f]
    # the new artifact's move into place fails after the old one was moved aside: the old one goes back
    real = os.rename

    def rename(src, dst):
        if ".tmp-" in str(src):
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), src)
        real(src, dst)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "rename", rename)
        with pytest.raises(kiec.KiecError, match=r"the compile failed on a file \(.*\.tmp-\d+: Invalid cross"):
            kiec.compile(model, art, mode="graph")
    assert {f: os.path.getmtime(os.path.join(art, f)) for f in os.listdir(art)} == before
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


def test_every_gpu_knob_variant_builds_a_kernel_of_its_own(tmp_path):
    # tests/gpu/test_persistent.py's knob test compares each TABLE_VARIANTS entry's tokens with its base's: a
    # variant whose fields build the base's very kernel (the same sources, schedule and descriptors) would test
    # nothing, as many did while the tiny model's narrow rules replaced the fields under test
    import dataclasses

    from kiec.codegen.persistent import emit_persistent
    from kiec.codegen.targets import target
    from kiec.ir.passes import pipeline
    from tests.gpu.persistent_tiny import WIDE_FIELDS
    from tests.gpu.test_persistent import TABLE_VARIANTS
    from tests.persistent_build import splitting
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
                                   **splitting({k: x for k, x in change.items() if k == "attn_min_keys"}))
        if kernel(dataclasses.replace(base, **splitting(change))) == kernel(base):  # (as compile_persistent)
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


def test_compile_replaces_only_an_artifact_or_an_empty_directory(tiny, tmp_path):
    # `-o .` once removed the directory's files, and `-o FILE` moved the file aside, after a whole build
    d, model, art = tiny
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "todo.txt").write_text("keep me")
    (tmp_path / "file").write_text("keep me too")
    (tmp_path / "link").symlink_to(art)
    (tmp_path / "bad_manifest").mkdir()
    (tmp_path / "bad_manifest" / "manifest.json").write_text("[1, 2]")
    for out, message in ((mine, "a directory that is not a kiec artifact"),
                         (tmp_path / "file", "exists and is not a directory"), (tmp_path / "link", "a symbolic link"),
                         (tmp_path / "bad_manifest", "a directory that is not a kiec artifact")):
        r = CliRunner().invoke(main, ["compile", str(d / "hf"), "-o", str(out), "--mode", "graph"])
        assert r.exit_code != 0 and f"{out}: {message}" in r.output, r.output
    assert (mine / "todo.txt").read_text() == "keep me" and os.listdir(mine) == ["todo.txt"]
    assert (tmp_path / "file").read_text() == "keep me too"
    assert sorted(os.listdir(tmp_path)) == ["bad_manifest", "file", "link", "notes"]  # nothing left aside either
    (tmp_path / "empty").mkdir()
    assert kiec.compile(model, str(tmp_path / "empty"), mode="graph") == str(tmp_path / "empty")
    assert kiec.compile(model, str(tmp_path / "empty"), mode="graph")  # an artifact now: replaced
    assert (tmp_path / "empty" / "manifest.json").exists()


@pytest.mark.parametrize("content, message", [(None, "no manifest.json (not a kiec artifact"),
                                              ("{", "manifest.json: unreadable (Expecting"),
                                              ("[1, 2]", "manifest.json: not a JSON object"),
                                              ('{"abi": 1, "source": "smollm2-135m"}', "artifact ABI 1, this kiec")])
def test_run_and_bench_name_a_damaged_or_foreign_artifact(tmp_path, monkeypatch, content, message):
    # a directory without an artifact's manifest, or a damaged one, is named before any library or model is loaded:
    # no traceback from json or a missing key
    import kiec.bench as kb
    from kiec.runtime import Engine
    art = tmp_path / "art"
    art.mkdir()
    if content is not None:
        (art / "manifest.json").write_text(content)
    with pytest.raises(kiec.KiecError, match=re.escape(message)):
        Engine(str(art))
    r = CliRunner().invoke(main, ["run", str(art), "--prompt-ids", "1,2"])
    assert r.exit_code != 0 and message in r.output and "Traceback" not in r.output, r.output
    monkeypatch.setattr(kb, "require_gpu", lambda: None)
    monkeypatch.setattr(kiec, "load", lambda *a, **k: pytest.fail("a model was loaded"))
    with pytest.raises(kiec.KiecError, match=re.escape(message)):
        kb.run_bench(str(art), [], 32, 64, [0], str(tmp_path / "work"), log=lambda m: None)
    assert sorted(os.listdir(art)) == ([] if content is None else ["manifest.json"])
