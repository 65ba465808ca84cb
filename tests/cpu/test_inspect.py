"""`kiec inspect`: byte counts against hand counts, the CLI's text and JSON, and its errors."""
import json

from click.testing import CliRunner

import kiec
from kiec.cli import main
from kiec.summary import bytes_per_token, summarize
from tests.tiny_hf import make_tiny_hf


def test_llama_3_2_1b_reads_2_47_gb_per_token():
    m = kiec.load("llama-3.2-1b")
    d, f, layers, kv, vocab = 2048, 8192, 16, 8 * 64, 128256
    per_layer = d * d + 2 * kv * d + d * d + 3 * d * f + 2 * d  # q, k+v, o, gate/up/down, two norms
    hand = 2 * (layers * per_layer + vocab * d + d + d)  # + LM head (tied: the table, counted once) + final norm + one row
    counted = bytes_per_token(m.graph, context=0)
    assert counted.weights == hand
    assert round(counted.weights / 1e9, 2) == 2.47


def test_gqa_model_at_8k_context_counts_the_kv_cache():
    m = kiec.load("qwen3-1.7b", max_seq_len=8448)
    counted = bytes_per_token(m.graph, context=8192)
    assert counted.kv_cache == 28 * 2 * 8 * 128 * 8193 * 2  # layers * (K, V) * kv heads * head_dim * rows * bf16
    assert round(bytes_per_token(m.graph, 0).weights / 1e9, 2) == 3.44


def test_floor_follows_the_bandwidth():
    s = summarize(kiec.load("llama-3.1-8b"), bandwidth_tbps=4.63)
    assert round(s.bytes_per_token / 1e9, 1) == 15.0
    assert abs(s.floor_tok_s - 4.63e12 / s.bytes_per_token) < 1e-6
    assert round(s.floor_tok_s) == 308


def test_cli_inspect_registry_and_hf_dir(tmp_path):
    runner = CliRunner()
    r = runner.invoke(main, ["inspect", "smollm2-135m"])
    assert r.exit_code == 0, r.output
    assert "30 layers, hidden 576, 9 heads / 3 KV heads x 64" in r.output
    assert "bytes/token" in r.output and "tok/s at 4.8 TB/s" in r.output
    assert "152 fused kernels per token" in r.output  # embed + 5 per layer x 30 + LM head
    assert "persistent   132 SMs:" in r.output and "<= 2 waits each" in r.output
    make_tiny_hf(tmp_path, "qwen3")
    r = runner.invoke(main, ["inspect", str(tmp_path), "--json", "--context", "10"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    assert s["arch"] == "qwen3" and s["head_dim"] == 32 and s["dtype"] == "f32"
    assert s["kv_bytes"] == 2 * 2 * 2 * 32 * 11 * 4
    assert s["op_counts"]["RMSNorm"] == 2 * 4 + 1
    assert s["programs"]["attention"]["count"] == 2 and s["unscheduled"] == ""
    assert s["persistent"]["sms"] == 132 and 0 < s["persistent"]["phase_bound"] <= 1 and s["window"] == 0
    # the fused programs read exactly what the byte count says a token needs
    assert sum(p["bytes"] for p in s["programs"].values()) == s["bytes_per_token"]


def test_cli_inspect_bad_path_exits_nonzero(tmp_path):
    r = CliRunner().invoke(main, ["inspect", str(tmp_path / "nope")])
    assert r.exit_code != 0
    assert "no such file or directory, and not a registry name" in r.output


def test_cli_inspect_refuses_a_context_past_max_seq_len_or_negative_and_a_bandwidth_of_zero():
    # a negative context once counted negative KV bytes, one past max_seq_len the cache only up to max_seq_len
    for args, message in ((["--context", "-3"], "context -3: 0 to max_seq_len - 1 (4095) tokens"),
                          (["--context", "4096"], "context 4096: 0 to max_seq_len - 1 (4095) tokens"),
                          (["--bandwidth", "0"], "bandwidth 0.0 TB/s: must be positive")):
        r = CliRunner().invoke(main, ["inspect", "smollm2-135m", *args])
        assert r.exit_code != 0 and message in r.output and "Traceback" not in r.output, r.output
    r = CliRunner().invoke(main, ["inspect", "smollm2-135m", "--context", "8192", "--max-seq-len", "8193"])
    assert r.exit_code == 0 and "at context 8192" in r.output, r.output
