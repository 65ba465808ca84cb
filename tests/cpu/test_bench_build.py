"""scripts/bench_build.sh, which builds gpu_run.sh's device benchmarks: a build carried from the CPU machine is used
only while its stamp (scripts/bench_stamp.sh) says it is of this tree's sources and flags; otherwise nvcc builds it
(here a stand-in nvcc on the PATH that records its call)."""
import os
import stat
import subprocess

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def run_build(tmp_path, *flags: str, stamp: str | None = None, carried: bool = True) -> tuple[str, bool]:
    """What bench_build.sh leaves as OUT for gemv_compute with `flags`, and whether it called nvcc; the carried
    build (when `carried`) holds "carried" and the stamp `stamp` (None: this tree's for `flags`)."""
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "nvcc").write_text('#!/bin/sh\nwhile [ "$1" != -o ]; do shift; done\necho built > "$2"\n'
                               'touch "$(dirname "$2")/nvcc_called"\n')
    (fake / "nvcc").chmod(stat.S_IRWXU)
    carry, out = tmp_path / "carry", tmp_path / "out"
    carry.mkdir(exist_ok=True)
    out.mkdir(exist_ok=True)
    for f in out.iterdir():
        f.unlink()
    if carried:
        (carry / "gc").write_text("carried")
        (carry / "gc").chmod(stat.S_IRWXU)
        if stamp is None:
            stamp = subprocess.run(["bash", "scripts/bench_stamp.sh", "gemv_compute", *flags], cwd=ROOT,
                                   capture_output=True, text=True, check=True).stdout
        (carry / "gc.stamp").write_text(stamp)
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", CARRY_DIR=str(carry), BENCH_OUT_DIR=str(out),
               ABI_DIR=str(tmp_path))
    subprocess.run(["bash", "scripts/bench_build.sh", "gemv_compute", "gc", *flags], cwd=ROOT, env=env, check=True,
                   capture_output=True)
    return (out / "gc").read_text().strip(), (out / "nvcc_called").exists()


def test_a_carried_build_is_used_only_with_this_trees_stamp(tmp_path):
    assert run_build(tmp_path, "-DKIEC_REDUCE_BATCH=1") == ("carried", False)
    # other flags, an older tree's stamp, or none carried: built here
    other = subprocess.run(["bash", "scripts/bench_stamp.sh", "gemv_compute", "-DKIEC_REDUCE_BATCH=8"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout
    assert run_build(tmp_path, "-DKIEC_REDUCE_BATCH=1", stamp=other) == ("built", True)
    assert run_build(tmp_path, "-DKIEC_REDUCE_BATCH=1", stamp="0" * 64) == ("built", True)
    assert run_build(tmp_path, "-DKIEC_REDUCE_BATCH=1", carried=False) == ("built", True)


def test_the_stamp_covers_the_source_the_headers_and_the_flags(tmp_path):
    def stamp(*flags, root=ROOT):
        return subprocess.run(["bash", "scripts/bench_stamp.sh", "gemv_compute", *flags], cwd=root,
                              capture_output=True, text=True, check=True).stdout.strip()
    assert stamp("-DA=1") == stamp("-DA=1") != stamp("-DA=2") and len(stamp("-DA=1")) == 64
    # a copy of the files it reads, then one header changed: another stamp
    copy = tmp_path / "tree"
    copy.mkdir()
    for part in ("scripts", "bench", "codegen", "templates"):
        subprocess.run(["cp", "-r", os.path.join(ROOT, part), str(copy / part)], check=True)
    assert stamp("-DA=1", root=copy) == stamp("-DA=1")
    with open(copy / "templates" / "include" / "kiec" / "ring.cuh", "a") as fh:
        fh.write("// changed\n")
    assert stamp("-DA=1", root=copy) != stamp("-DA=1")
