"""kiec/unit_cache.py: nvcc's objects kept by what made them, reused by a build of the same units, never a wrong or
half-written one."""
import os
import shutil

import pytest

import kiec
from kiec import unit_cache
from tests.tiny_hf import make_tiny_hf

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def _sources(directory, unit_text="__global__ void k() {}\n", header_text="#define N 1\n"):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "model.cu"), "w") as fh:
        fh.write(unit_text)
    with open(os.path.join(directory, "abi.h"), "w") as fh:
        fh.write(header_text)
    return str(directory)


def test_a_key_changes_with_what_the_object_depends_on_and_not_with_the_build_path(tmp_path):
    # the unit's text, a header beside it, a header of the include tree and the flags each change the key; the same
    # inputs in another directory give the same key (an object holds no path of its build)
    include = tmp_path / "include"
    include.mkdir()
    (include / "kiec.cuh").write_text("// a\n")
    flags = ["-O3"]

    def key(src, fl=flags):
        return unit_cache.unit_keys("nvcc-missing", fl, src, ["model.cu"], str(include))["model.cu"]
    base = key(_sources(tmp_path / "a"))
    assert key(_sources(tmp_path / "b")) == base
    assert key(_sources(tmp_path / "c", unit_text="__global__ void k2() {}\n")) != base
    assert key(_sources(tmp_path / "d", header_text="#define N 2\n")) != base
    assert key(_sources(tmp_path / "a"), ["-O2"]) != base
    (include / "kiec.cuh").write_text("// b\n")
    assert key(_sources(tmp_path / "a")) != base


def test_the_cache_is_pruned_least_recently_used_first(tmp_path):
    for i, name in enumerate(["old", "mid", "new"]):
        (tmp_path / f"{name}.o").write_bytes(b"x" * 100)
        os.utime(tmp_path / f"{name}.o", (1000 + i, 1000 + i))
    (tmp_path / "stale.tmp").write_bytes(b"x")  # a build killed while it stored
    os.utime(tmp_path / "stale.tmp", (1000, 1000))
    unit_cache.prune(tmp_path, limit=250)
    assert sorted(os.listdir(tmp_path)) == ["mid.o", "new.o"]


@needs_nvcc
def test_a_model_built_again_takes_its_objects_from_the_cache_and_a_bad_entry_is_rebuilt(tmp_path, monkeypatch,
                                                                                            capfd):
    # the first build stores its one unit's object; a second build of the same model (another directory) takes it,
    # and its library is the same size; an entry gone bad (garbage of the same name) fails the link, and the build
    # compiles the unit again and replaces the entry; a unit nvcc rejects stores nothing
    monkeypatch.setenv("KIEC_CACHE_DIR", str(tmp_path / "cache"))
    make_tiny_hf(tmp_path / "hf", "llama")
    model = kiec.load(str(tmp_path / "hf"), dtype="bf16")
    first = kiec.compile(model, str(tmp_path / "a"), mode="persistent")
    entries = os.listdir(tmp_path / "cache" / "nvcc")
    assert len(entries) == 1 and entries[0].endswith(".o"), entries
    entry = tmp_path / "cache" / "nvcc" / entries[0]
    size = entry.stat().st_size
    capfd.readouterr()
    second = kiec.compile(model, str(tmp_path / "b"), mode="persistent")
    assert "1 of 1 units' objects from the cache" in capfd.readouterr().err
    assert os.path.getsize(os.path.join(second, "libkiec_model.so")) == os.path.getsize(
        os.path.join(first, "libkiec_model.so"))
    entry.write_bytes(b"not an object")
    kiec.compile(model, str(tmp_path / "c"), mode="persistent")
    assert "linking the cached objects failed; compiling those units again" in capfd.readouterr().err
    assert entry.stat().st_size == size and os.listdir(tmp_path / "cache" / "nvcc") == entries
    from kiec.build import nvcc_build
    src = _sources(tmp_path / "bad", unit_text="this is not CUDA\n")
    with pytest.raises(kiec.KiecError, match="nvcc failed on model.cu"):
        nvcc_build(shutil.which("nvcc"), src, str(tmp_path / "bad_out"), "-arch=sm_90")
    assert os.listdir(tmp_path / "cache" / "nvcc") == entries
