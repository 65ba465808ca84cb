"""Compile the 2-layer tiny llama the GPU scripts run (gpu_run.sh's SMOKE, sanitize.sh):
    python3 scripts/tiny_model.py ARTIFACT_DIR [graph|persistent] [wide=1] [field=value ...]
(field=value: the sm_90 target's TargetParams fields replaced, as scripts/variants.py takes them; wide=1: hidden
256 instead of 64, more rows than the H100/H200's SMs in every GEMV, which persist_tag_parity needs; smol=1:
smollm2-135m's widths (hidden 576, 1536, 9 heads over 3 KV heads) and a vocabulary of 8192, so that a tile gives
some warps several items, as persist_dot_half_warps needs; h128=1: hidden 512 as 4 heads 128 wide over one KV head,
llama-3.1-8b's group, which by default run the tensor-core attention passes' one-pass-at-a-time loop; longk=1: hidden
256 and intermediate 4352, so that the down projection's rows are cut into a segment a warp, 68 chunks each, as
persist_x_warp_copy_min_k's copy takes them; mma=1: hidden 512 and intermediate 1024, 8 heads over 2 KV heads and a
vocabulary of 2048, so that every kind of GEMV has whole blocks for persist_mma_rows, and persist_mma_share_excess
10000 unless given, so that the share rule deals a tiny model's few blocks to the tensor cores too; qwen3=1: a
qwen3 (head norms on q and k) of hidden 256, 4 heads 128 wide over 2 KV heads, qwen3-1.7b's group and head width,
whose attention takes a head a warp, normed and rotated in registers (persist_attn_q_pairs_normed), on FMA passes)"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo: tests.tiny_hf
import kiec  # noqa: E402
from kiec.codegen import targets  # noqa: E402
from tests.tiny_hf import make_tiny_hf  # noqa: E402

if __name__ == "__main__":
    art, mode = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "persistent"
    # the tag level and weight stream the large models get (persist_tagged, the paced kept walk), not the ones a
    # 2-layer model's width gives
    fields = {"persist_tagged_min_width": "0", "persist_paced_min_width": "0", "persist_narrow_width": "0",
              **dict(c.split("=", 1) for c in sys.argv[3:])}
    # parity tags need every SM to read the residual stream: a width above the SMs' count (tag_parity)
    shapes = {"wide": dict(hidden_size=256, intermediate_size=384, num_attention_heads=4, num_key_value_heads=2,
                           vocab_size=300),
              "smol": dict(hidden_size=576, intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3,
                           vocab_size=8192),
              "h128": dict(hidden_size=512, intermediate_size=384, num_attention_heads=4, num_key_value_heads=1,
                           vocab_size=300),
              "longk": dict(hidden_size=256, intermediate_size=4352, num_attention_heads=4, num_key_value_heads=2,
                            vocab_size=300),
              "mma": dict(hidden_size=512, intermediate_size=1024, num_attention_heads=8, num_key_value_heads=2,
                          vocab_size=2048),
              "qwen3": dict(hidden_size=256, intermediate_size=384, num_attention_heads=4, num_key_value_heads=2,
                            head_dim=128, vocab_size=300)}
    named = {name for name in shapes if fields.pop(name, "0") == "1"}
    shape = {k: v for name in named for k, v in shapes[name].items()}
    if "mma" in named:  # (a tiny model's 2-4 blocks a GEMV deal unevenly over the SMs: the rule would keep them off)
        fields.setdefault("persist_mma_share_excess", "10000")
    targets.TARGETS["sm_90"] = targets.with_fields(targets.TARGETS["sm_90"], fields)
    make_tiny_hf(art + "-hf", "qwen3" if "qwen3" in named else "llama", **shape)
    kiec.compile(kiec.load(art + "-hf", dtype="bf16", max_seq_len=64), art, mode=mode)
