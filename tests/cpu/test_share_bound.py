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
