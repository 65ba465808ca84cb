"""The Python VM tests' schedules (tests/cpu/test_persistent_vm.py, _deal.py, _tags.py): a tiny model's program
scheduled on a few SMs, tagged or not, and its reference logits to check a VM run against."""
import torch

import kiec
from kiec.codegen.buffers import plan_buffers
from kiec.ir.passes import pipeline
from kiec.ir.passes.persistent import schedule
from kiec.ir.passes.tags import tag_plan
from kiec.ir.passes.vm import VM
from tests.tiny_hf import make_tiny_hf


def setup(tmp_path, family="qwen3", sms=7, min_keys=2, previous_first=False, owner_merges=0, spare_splits=0,
          newest_first=False, early_pass=False, solo_keys=0):
    # min_keys 2: from the 4th token on, attention spreads over 2-3 splits per KV head, merged by the last
    make_tiny_hf(tmp_path, family)
    m = kiec.load(str(tmp_path), max_seq_len=16)
    prog = pipeline.run(m.graph)
    offsets, floats = plan_buffers(prog, {})
    sched = schedule(prog, sms, tile_rows=32, slot_of=offsets, min_keys=min_keys, previous_first=previous_first,
                     owner_merges=owner_merges, spare_splits=spare_splits, newest_first=newest_first,
                     early_pass=early_pass, solo_keys=solo_keys)
    weights = {n: m.weights[n].float() for n in m.graph.params}
    return m, prog, sched, weights, offsets, floats


def tagged_schedule(prog, **fields):
    """setup's schedule (7 SMs, 2 keys a split at least) with attention's input and output tagged (persist_tagged 2,
    its counter then relaxed), the buffers laid out for it: (offsets, arena floats, schedule)."""
    plan = tag_plan(prog, attention=True)
    offsets, floats = plan_buffers(prog, {}, frozenset(plan.writer))
    return offsets, floats, schedule(prog, 7, tile_rows=32, slot_of=offsets, min_keys=2, tags=plan, **fields)


def first_attention(prog) -> int:
    """The index of the program's first attention kernel (layer 0's)."""
    return next(k for k, kern in enumerate(prog.kernels) if type(kern).__name__ == "AttentionKernel")


def reference_logits(m, prompt, steps):
    ref = kiec.Reference(m)
    out, seq = [], list(prompt)
    for t in range(steps):
        out.append(torch.from_numpy(ref.step(seq[t], t)))
        if t + 1 >= len(seq):
            seq.append(int(out[-1].argmax()))
    return out


def assert_vm_computes_the_model(m, sched, offsets, floats, seed, prompt=(5, 17, 99), steps=6, policy="random"):
    """The VM's logits over `steps` tokens on a random interleaving (seed; or the eager one) are the reference's;
    the VM, run, for what a test asks of it after."""
    weights = {n: m.weights[n].float() for n in m.graph.params}
    vm = VM(sched, weights, offsets, floats)
    assert_reference_logits(m, vm.run(list(prompt), steps, policy, seed), prompt, steps)
    return vm


def assert_reference_logits(m, got, prompt, steps):
    """A run's logits, one a token over `steps` tokens after `prompt`, are the reference's, token by token."""
    assert len(got) == steps
    for t, (a, b) in enumerate(zip(got, reference_logits(m, list(prompt), steps))):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=f"token {t}")


def residual_gemvs(prog) -> dict[int, int]:
    """The residual GEMVs (output and down projections) dealt to the item, 4 segments a row (their K: 64, 96)."""
    return {i: 4 for i, k in enumerate(prog.kernels) if getattr(k, "epilogue", None) == "residual"}
