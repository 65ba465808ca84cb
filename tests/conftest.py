"""GPU tests skip cleanly where there is no CUDA GPU (CI), and multi-GPU tests where there are too few."""
import pytest


def _gpus() -> int:
    try:
        import torch
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:
        return 0


def pytest_collection_modifyitems(config, items):
    n = _gpus()
    for item in items:
        if "gpu" in item.keywords and n < 1:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))
        if "multigpu" in item.keywords and n < 2:
            item.add_marker(pytest.mark.skip(reason="needs two CUDA GPUs"))


@pytest.fixture(autouse=True)
def _wide_rules_at_any_width(request, monkeypatch):
    """The tests' tiny models run the tag level and the weight stream the large models get (persist_tagged, the paced
    kept walk, the table's x direct, owner merges, newest first and combine batch), not the ones their width would give
    them (persist_tagged_min_width, persist_paced_min_width, persist_narrow_width: test_compile_model_rules checks those
    rules on their own); a test marked table_tags runs the table's rules. The SiLU-mul's output stays tagged floats
    (persist_tagged_pairs 0), so that the knobs whose tests compare bits with a base (tags 0, x direct, tag waits: none
    of them hands that value over in pairs) keep comparing like with like; the tests of tagged pairs set them
    (tests/gpu/test_persistent_gemv.py, tests/cpu/test_compile_model_rules.py). For the same reason the GEMVs keep the
    FMA tile (persist_mma_rows ""): item shares, x direct, a warp's own copy, the norm in the warps, consumer merges and
    the probes each take a GEMV off the tensor cores, whose bits differ; the tests of the tensor-core tiles set it
    (tests/gpu/test_persistent_gemv.py, tests/cpu/test_gemv_mma.py)."""
    import dataclasses

    from kiec.codegen import targets
    if request.node.get_closest_marker("table_tags"):
        return
    monkeypatch.setitem(targets.TARGETS, "sm_90",
                        dataclasses.replace(targets.TARGETS["sm_90"], persist_tagged_min_width=0,
                                            persist_paced_min_width=0, persist_narrow_width=0,
                                            persist_tagged_pairs=0, persist_mma_rows=""))
