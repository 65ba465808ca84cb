"""scripts/share_bound.py on a tiny model: shares to the row segment are nearer the mean than whole rows where the
SMs do not divide a GEMV's rows and its rows are cut into segments."""

from tests.scripts import load_script
from tests.tiny_hf import make_tiny_hf

share_bound = load_script("share_bound")


def test_item_shares_bound_at_least_the_rows_bound(tmp_path):
    # hidden 1536 over 132 SMs: 84 SMs take 12 rows of each GEMV writing it, 48 take 11, so whole rows leave the
    # busiest SM 0.36 of a row over the mean; the down projection's rows (K 6144) are cut into segments, so items
    # leave its busiest SM at most a segment over
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=1536, intermediate_size=6144, num_attention_heads=12,
                 num_key_value_heads=4, vocab_size=1024)
    b_rows, b_items, us_rows, us_items = share_bound.bound(str(tmp_path / "hf"))
    assert 0 < b_rows < b_items <= 1
    assert 0 <= us_items < us_rows


def test_kinds_split_the_whole_token_excess(tmp_path):
    # the per-kind view deals the same shares: its excesses add up to the whole-token excess with rows, each kind
    # comes once a layer (the LM head once, select's instruction not counted as a share of it), and a kind's busiest
    # share is at least its mean
    make_tiny_hf(tmp_path / "hf", "llama", hidden_size=1536, intermediate_size=6144, num_attention_heads=12,
                 num_key_value_heads=4, vocab_size=1024, num_hidden_layers=2)
    rows = share_bound.by_kind(str(tmp_path / "hf"))
    assert [(kind, n) for kind, n, *_ in rows] == [("qkv", 2), ("o", 2), ("gate_up", 2), ("down", 2), ("head", 1)]
    for kind, n, mean, top, at_top, part, us in rows:
        assert 0 < mean <= top and 1 <= at_top <= part <= 132 and us >= 0, kind
    us_rows = share_bound.bound(str(tmp_path / "hf"))[2]
    assert abs(sum(r[-1] for r in rows) - us_rows) < 1e-6
