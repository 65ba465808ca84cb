"""scripts/test_jobs.sh, which runs the GPU tests in several pytest processes at once on the lent machine: every
listed test runs once, in some process, and any failure, timeout or empty list fails the whole."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "test_jobs.sh")


def write_tests(tmp_path, fail: str | None = None, sleep: float = 0.0):
    body = ["import os, time, pytest", ""]
    body.append("@pytest.mark.parametrize('i', range(7))")
    body.append("def test_case(i):")
    body.append("    open(os.path.join(os.environ['MARKS'], f'case{i}'), 'a').write(str(os.getpid()) + chr(10))")
    body.append(f"    time.sleep({sleep})")
    body.append(f"    assert {fail!r} != f'case{{i}}'")
    (tmp_path / "test_sample.py").write_text("\n".join(body) + "\n")
    ids = [f"{tmp_path}/test_sample.py::test_case[{i}]" for i in range(7)]
    (tmp_path / "ids.txt").write_text("\n".join(ids) + "\n")


def run(tmp_path, jobs: int, limit: int = 120):
    marks = tmp_path / "marks"
    marks.mkdir(exist_ok=True)
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    env = dict(os.environ, MARKS=str(marks), PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    r = subprocess.run(["bash", SCRIPT, str(tmp_path / "ids.txt"), str(jobs), str(limit), str(out), "-q",
                        "-p", "no:cacheprovider"], capture_output=True, text=True, env=env, cwd=tmp_path)
    return r, marks, out


def test_every_test_runs_once_over_the_processes(tmp_path):
    write_tests(tmp_path)
    r, marks, out = run(tmp_path, 3)
    assert r.returncode == 0, r.stdout + r.stderr
    runs = {p.name: p.read_text().split() for p in marks.iterdir()}
    assert sorted(runs) == [f"case{i}" for i in range(7)] and all(len(v) == 1 for v in runs.values())
    assert len({v[0] for v in runs.values()}) == 3  # three processes, each with some of them
    log = (out / "gpu_tests.log").read_text()  # one file, each process's part in turn
    assert [p.name for p in out.iterdir()] == ["gpu_tests.log"]
    assert [line for line in log.splitlines() if line.startswith("===")] == [f"=== process {j} (rc 0)" for j in range(3)]
    assert "7 in 3 processes, 0 of them not clean" in r.stdout


def test_a_failure_in_one_process_fails_the_whole(tmp_path):
    write_tests(tmp_path, fail="case4")
    r, marks, out = run(tmp_path, 2)
    assert r.returncode != 0
    assert "1 of them not clean" in r.stdout and "case4" in r.stdout
    assert len(list(marks.iterdir())) == 7  # the other process still ran its tests
    # the failed process's ids (cases 0, 2, 4, 6: dealt round-robin) for the next call's TEST_IDS, and only them
    rerun = (out / "rerun_ids.txt").read_text().split()
    assert rerun == [f"{tmp_path}/test_sample.py::test_case[{i}]" for i in (0, 2, 4, 6)]
    write_tests(tmp_path)
    r, _, out = run(tmp_path, 2)
    assert r.returncode == 0 and not (out / "rerun_ids.txt").exists()  # (a clean run leaves none behind)


def test_a_timeout_fails_and_says_so(tmp_path):
    write_tests(tmp_path, sleep=5)
    r, _, _ = run(tmp_path, 2, limit=2)
    assert r.returncode != 0 and "timed out or killed" in r.stdout


def test_more_processes_than_tests_and_no_tests(tmp_path):
    write_tests(tmp_path)
    r, marks, out = run(tmp_path, 20)
    assert r.returncode == 0 and "7 in 7 processes" in r.stdout
    (tmp_path / "ids.txt").write_text("")
    r, _, _ = run(tmp_path, 4)
    assert r.returncode != 0 and "none selected" in r.stdout
