"""scripts/code_size.py: the persistent kernel's machine code per dispatch case (nvcc and cuobjdump, no GPU)."""
import os
import shutil

import pytest

from tests.scripts import load_script
from tests.tiny_hf import make_tiny_hf

code_size = load_script("code_size")


def has_cuobjdump() -> bool:
    """cuobjdump and the nvdisasm its -sass needs (code_size.cuobjdump's rule)."""
    try:
        code_size.cuobjdump()
    except SystemExit:
        return False
    return True


@pytest.mark.skipif(shutil.which("nvcc") is None or not has_cuobjdump(), reason="needs nvcc and cuobjdump")
def test_every_case_adds_code_and_fewer_attention_keys_add_less(tmp_path):
    # a tiny llama: embedding, QKV, attention, output projection, gate/up, down, LM head (+ select): each case
    # alone adds code; attention's FMA passes (persist_attn_mma 0: the tensor-core passes, the default on this
    # model's 64-wide heads, have no keys a pass) unrolled over 2 keys a pass instead of 8 add less, and nothing
    # else changes
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384)
    whole, none, cases = code_size.sizes(str(tmp_path / "hf"), {}, max_seq_len=256)
    assert len(cases) == 7 and all(n > 0 for _, n in cases) and whole > none + max(n for _, n in cases)
    assert len([n for body, n in cases if "attention_tile" in body]) == 1
    _, _, fma = code_size.sizes(str(tmp_path / "hf"), {"persist_attn_mma": "0"}, max_seq_len=256)
    _, _, fewer = code_size.sizes(str(tmp_path / "hf"), {"persist_attn_mma": "0", "persist_attn_keys": "2"},
                                  max_seq_len=256)
    assert [n for body, n in fewer if "attention_tile" in body][0] < [n for body, n in fma
                                                                       if "attention_tile" in body][0]
    assert [n for body, n in fewer if "attention_tile" not in body] == [n for body, n in fma
                                                                         if "attention_tile" not in body]


@pytest.mark.skipif(shutil.which("nvcc") is None or not has_cuobjdump(), reason="needs nvcc and cuobjdump")
def test_sass_script_says_whether_a_build_changed_the_kernel(tmp_path, capsys):
    # scripts/sass.py writes each unit's SASS and compares it with the file it replaces: the same build is
    # byte-identical, a field that changes the persistent kernel's code (attention's passes on the FMA units
    # instead of the tensor cores) differs
    sass = load_script("sass")
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=256, intermediate_size=384)
    out = str(tmp_path / "sass")
    sass.main(out, str(tmp_path / "hf"), "persistent")
    first = capsys.readouterr().out
    assert "model.cu: " in first and "instructions" in first and "identical" not in first
    assert os.path.getsize(os.path.join(out, "hf_persistent_model.cu.sass")) > 0
    sass.main(out, str(tmp_path / "hf"), "persistent")
    assert "byte-identical to the one it replaced" in capsys.readouterr().out
    sass.main(out, str(tmp_path / "hf"), "persistent", "persist_attn_mma=0")
    assert "DIFFERS from the one it replaced" in capsys.readouterr().out


def test_sass_masks_what_a_reschedule_renames_and_counts_what_it_moves(tmp_path):
    # scripts/sass.py's masked diff: registers, predicates, convergence barriers and constants renamed count as
    # nothing; an instruction moved counts twice (removed and added), one inserted once
    sass = load_script("sass")

    def listing(*ins: str) -> str:
        return "".join(f"        /*{16 * i:04x}*/                   {s} ;   /* 0x000fe20000000f00 */\n"
                       for i, s in enumerate(ins))

    a = listing("FFMA R4, R2, R3, R4", "@P0 BRA 0x120", "BSSY B2, 0x80", "IMAD.MOV.U32 R7, RZ, RZ, UR5")
    renamed = listing("FFMA R8, R6, R9, R8", "@P3 BRA 0x1a0", "BSSY B4, 0x90", "IMAD.MOV.U32 R1, RZ, RZ, UR9")
    assert sass.masked(a) == sass.masked(renamed) and len(sass.masked(a)) == 4
    assert sass.moved(a, renamed, str(tmp_path)) == 0
    swapped = listing("@P0 BRA 0x120", "FFMA R4, R2, R3, R4", "BSSY B2, 0x80", "IMAD.MOV.U32 R7, RZ, RZ, UR5")
    assert sass.moved(a, swapped, str(tmp_path)) == 2
    more = listing("FFMA R4, R2, R3, R4", "FADD R1, R1, R2", "@P0 BRA 0x120", "BSSY B2, 0x80",
                   "IMAD.MOV.U32 R7, RZ, RZ, UR5")
    assert sass.moved(a, more, str(tmp_path)) == 1


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("changes", [(), ("persist_norm_batch=16",)], ids=["default", "norm-batch-16"])
def test_llama_8b_norm_words_at_once_spill_nothing(changes):
    # llama-3.1-8b's norm prologues (K 4096: 16 tagged words a thread) with all 16 words in flight: where each word
    # kept its index in a register for an `i < K` test THREADS makes always true, and its own address, ptxas spilled
    # 36 B (reloaded after the waits' polls, from L2: 0.6% slower on an H100, forty-fourth session); scripts/ptxas.py
    ptxas = load_script("ptxas")
    lines = ptxas.usage("llama-3.1-8b", "persistent", *changes)
    assert any("spill" in line for _, line in lines) and ptxas.spill_bytes(lines) == 0, lines


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("model,changes", [
    ("llama-3.2-1b", ("persist_attn_consumer_merges=2",)),
    ("llama-3.2-1b", ("persist_attn_consumer_merges=4", "persist_merge_loads=6")),
    ("llama-3.1-8b", ("persist_attn_consumer_merges=4",)),
    ("llama-3.1-8b", ("persist_attn_consumer_merges=2", "persist_merge_loads=16"))])
def test_consumer_merges_spill_nothing(model, changes):
    # the output projection merging attention's partials (merge_partials): its loads at once (persist_merge_loads 8,
    # a head's o words and one lane's m and l a (head, split)) fit beside the kernel's other live registers; at 8 with
    # 4 splits llama-3.2-1b spilled 72 B (spread over the kernel, not in the merge), at 6 none; llama-3.1-8b's 4 heads
    # a warp of 2 splits in one round trip at 16 (17 loads a lane); scripts/ptxas.py
    ptxas = load_script("ptxas")  # (owner merges and solo off: consumer merges refuse them)
    lines = ptxas.usage(model, "persistent", "persist_attn_owner_merges=0", "persist_attn_solo_keys=0", *changes)
    assert any("spill" in line for _, line in lines) and ptxas.spill_bytes(lines) == 0, lines
