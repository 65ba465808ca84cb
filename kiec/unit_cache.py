"""nvcc's objects kept by what made them (KIEC_CACHE_DIR/nvcc, beside TVM's kernels): a unit compiled again with
the same compilers, flags, source and headers takes its object from here instead of nvcc. A model built again
(kiec compile of a model already built, a GPU test's base that every test of a file builds) then skips nvcc: the
tiny model's whole build 9.8 s without the object, 5.9 s with it, on the CPU machine (bench/RESULTS.md).

The key hashes everything the object depends on: nvcc's and the host compiler's version text, the flags, the
unit's name, every file of its source directory (the unit, the headers generated beside it, the other units) and
every file of the include tree. Units compile in their source directory by a relative name, so an object holds no path of the
build that made it. An entry is written whole or not at all (a temp file renamed into place); one that is
unreadable counts as a miss, and build.py's nvcc_build rebuilds the units it took from here when they fail to
link. The cache is pruned to CACHE_BYTES, the least recently used entries first."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

CACHE_BYTES = 2 << 30  # ~0.5 MB a tiny model's object, a few MB a large one's: thousands of builds


def cache_dir() -> Path:
    return Path(os.environ.get("KIEC_CACHE_DIR") or Path.home() / ".cache" / "kiec") / "nvcc"


def _version(tool: str | None) -> bytes:
    """A compiler's --version text (b"" where it is missing: the key then says so)."""
    if not tool:
        return b""
    try:
        return subprocess.run([tool, "--version"], capture_output=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return b""


def _hash_files(h, root: str, paths: list[str]) -> None:
    for path in sorted(paths):
        h.update(os.path.relpath(path, root).encode() + b"\0")
        with open(path, "rb") as fh:
            h.update(hashlib.sha256(fh.read()).digest())


def unit_keys(nvcc: str, flags: list[str], src_dir: str, units: list[str], include_dir: str) -> dict[str, str]:
    """Each unit's key: the sha256 of what its object depends on (every file of its source directory, not only the
    headers: a unit that included another unit would otherwise keep a stale object)."""
    h = hashlib.sha256()
    for text in (_version(nvcc), _version(shutil.which("g++")), "\0".join(flags).encode()):
        h.update(hashlib.sha256(text).digest())
    _hash_files(h, src_dir, [p for p in (os.path.join(src_dir, f) for f in os.listdir(src_dir)) if os.path.isfile(p)])
    _hash_files(h, include_dir, [os.path.join(d, f) for d, _, files in os.walk(include_dir) for f in files])
    keys = {}
    for unit in units:
        u = h.copy()
        u.update(unit.encode())
        keys[unit] = u.hexdigest()
    return keys


def fetch(key: str, obj: str) -> bool:
    """Copies the entry for `key` to `obj`: whether there was one (its use time refreshed for the pruning)."""
    entry = cache_dir() / f"{key}.o"
    try:
        shutil.copyfile(entry, obj)
    except OSError:
        return False
    try:
        os.utime(entry)
    except OSError:  # (a cache that cannot be written still serves)
        pass
    return True


def store(key: str, obj: str) -> None:
    """Keeps `obj` as the entry for `key`, whole or not at all; a cache that cannot be written is left alone (the
    build never depends on it)."""
    root = cache_dir()
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=root, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as out, open(obj, "rb") as src:
                shutil.copyfileobj(src, out)
            os.replace(tmp, root / f"{key}.o")
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        prune(root)
    except OSError:
        pass


def prune(root: Path, limit: int = CACHE_BYTES) -> None:
    """Removes the least recently used entries until the rest hold at most `limit` bytes, and temp files an hour old
    (a build killed while it stored)."""
    for p in root.glob("*.tmp"):
        try:
            if os.path.getmtime(p) < time.time() - 3600:
                p.unlink(missing_ok=True)
        except OSError:
            pass
    entries = []
    for p in root.glob("*.o"):
        try:
            st = p.stat()
        except OSError:  # (removed meanwhile by another build's prune)
            continue
        entries.append((st.st_mtime, st.st_size, p))
    total = sum(size for _, size, _ in entries)
    for _, size, p in sorted(entries, key=lambda e: e[0]):
        if total <= limit:
            break
        p.unlink(missing_ok=True)
        total -= size
