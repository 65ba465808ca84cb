"""Fields given on a command line (codegen/targets.py: with_fields, the A/B scripts' way in): a name that is no field
or a value of the wrong type is refused by name, and scripts/variants.py refuses it before it compiles or times any
variant of any model (a GPU call's time is the scarce thing)."""
import os
import subprocess
import sys

import pytest

from kiec.codegen import targets

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_fields_convert_to_their_types():
    base = targets.TARGETS["sm_90"]
    tp = targets.with_fields(base, {"persist_warps": "12", "persist_page_bytes": "8192"})
    assert (tp.persist_warps, tp.persist_page_bytes) == (12, 8192)
    assert base.persist_warps != 12 or base.persist_page_bytes != 8192  # (a copy: the table's entry unchanged)


def test_an_unknown_field_is_refused_with_the_names_near_it():
    with pytest.raises(ValueError, match=r"TargetParams has no field 'persist_dot_item' \(did you mean "
                                         r"persist_dot_items"):
        targets.with_fields(targets.TARGETS["sm_90"], {"persist_dot_item": "2"})
    with pytest.raises(ValueError, match=r"no field 'zzz'$"):
        targets.with_fields(targets.TARGETS["sm_90"], {"zzz": "1"})


def test_a_value_of_the_wrong_type_is_refused_by_name():
    with pytest.raises(ValueError, match=r"persist_warps='eight': not a value of its type \(int\)"):
        targets.with_fields(targets.TARGETS["sm_90"], {"persist_warps": "eight"})


@pytest.mark.parametrize("bad,message", [("persist_dot_mma=1", "no field 'persist_dot_mma'"),
                                         ("persist_warps=x", "persist_warps='x'"),
                                         ("mode=eager", "mode=eager: one of graph, persistent")])
def test_variants_refuses_a_bad_field_before_any_model_runs(tmp_path, bad, message):
    # the bad variant is the second model's: the first model's list must not run (nothing compiled, nothing timed)
    env = dict(os.environ, TMPDIR=str(tmp_path))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "variants.py"), "smollm2-135m",
                        "mode=persistent", "/", "llama-3.2-1b", f"mode=persistent,{bad}"],
                       capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert r.returncode != 0
    assert f"variants.py: llama-3.2-1b mode=persistent,{bad}: " in r.stderr and message in r.stderr, r.stderr
    assert "[kiec]" not in r.stdout + r.stderr and "read ceiling" not in r.stdout, r.stdout  # (no compile, no timing)


def test_variants_flags_a_variant_whose_logits_are_far_from_the_first():
    # variants.py compares each variant's logits over its first steps with the first variant's before timing: other
    # sums' bits pass, a wrong kernel's (here: rows swapped, a NaN) is flagged FAR
    import numpy as np
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    try:
        from variants import agreement_lines
    finally:
        sys.path.pop(0)
    gen = np.random.default_rng(0)
    base = gen.standard_normal((8, 64)).astype(np.float32) * 10
    near = base + 1e-3 * gen.standard_normal(base.shape).astype(np.float32)
    nan = base.copy()
    nan[3, 5] = np.nan
    lines = agreement_lines({"a": base, "near": near, "swapped": base[:, ::-1], "nan": nan})
    assert lines[1].startswith("    near: ") and "FAR" not in lines[1]
    assert lines[2].endswith("FAR") and lines[3].endswith("FAR")
