"""Engine's library load: an artifact rebuilt at the same path in one process runs the new build's code."""
import ctypes
import os
import shutil
import subprocess

import pytest

from kiec.runtime import load_library

CC = shutil.which("cc") or shutil.which("gcc")


def build(src_dir: str, so: str, value: int) -> None:
    c = os.path.join(src_dir, f"v{value}.c")
    with open(c, "w") as fh:
        fh.write(f"int kiec_value(void) {{ return {value}; }}\n")
    tmp = so + ".new"
    subprocess.run([CC, "-shared", "-fPIC", c, "-o", tmp], check=True)
    os.replace(tmp, so)  # as kiec.compile puts a new artifact in place: a new file at the same path


@pytest.mark.skipif(CC is None, reason="no C compiler")
def test_rebuilt_library_at_the_same_path_is_loaded_anew(tmp_path):
    so = str(tmp_path / "art" / "libkiec_model.so")
    os.makedirs(os.path.dirname(so))
    build(str(tmp_path), so, 1)
    first = load_library(so)
    assert first.kiec_value() == 1
    same = load_library(so)  # the same file: the loader's one copy
    assert same._handle == first._handle
    build(str(tmp_path), so, 2)
    assert load_library(so).kiec_value() == 2
    # what the loader does without the fresh name: the old build's code, the reason load_library exists
    plain = ctypes.CDLL(so)
    plain_again = ctypes.CDLL(so)
    assert plain_again._handle == plain._handle
    build(str(tmp_path), so, 3)
    assert ctypes.CDLL(so).kiec_value() == 2
    assert load_library(so).kiec_value() == 3
    assert not [d for d in os.listdir(os.path.dirname(so)) if d != "libkiec_model.so"]


def test_no_temporary_directory_is_a_clear_error(tmp_path, monkeypatch):
    import tempfile

    from kiec.errors import KiecError
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    with pytest.raises(KiecError, match="libkiec_model.so: no temporary directory.*TMPDIR"):
        load_library(str(tmp_path / "libkiec_model.so"))
