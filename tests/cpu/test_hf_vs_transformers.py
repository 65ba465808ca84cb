"""The interpreter over a loaded HF directory equals transformers fp32, for every Llama-family variant."""
import numpy as np
import pytest
import torch

import kiec
from tests.tiny_hf import FAMILIES, make_tiny_hf


def assert_logits_close(ours: np.ndarray, theirs: np.ndarray, what: str, rel: float = 1e-4):
    diff = np.abs(ours - theirs)
    worst = np.unravel_index(diff.argmax(), diff.shape)
    bound = rel * np.abs(theirs).max()
    assert diff.max() <= bound, (f"{what}: max |diff| {diff.max():.3g} > {bound:.3g} at {worst}: "
                                 f"kiec {ours[worst]:.6g}, transformers {theirs[worst]:.6g}")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_reference_matches_transformers(tmp_path, family):
    hf = make_tiny_hf(tmp_path, family)
    model = kiec.load(str(tmp_path))
    assert model.graph.params["model.embed_tokens.weight"].type.dtype == "f32"
    ref = kiec.Reference(model)
    rng = np.random.default_rng()
    prompt = rng.integers(0, model.config.vocab_size, size=9).tolist()

    with torch.no_grad():
        hf_ids = hf.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             max_new_tokens=16, do_sample=False, min_new_tokens=16,
                             pad_token_id=0, eos_token_id=None)[0, len(prompt):].tolist()
    ids = ref.generate(prompt, max_new_tokens=16)
    assert ids == hf_ids, f"{family}: greedy ids differ\nkiec:         {ids}\ntransformers: {hf_ids}"

    seq = prompt + ids
    with torch.no_grad():
        theirs = hf(torch.tensor([seq])).logits[0].numpy()
    ref.reset()
    ours = np.stack([ref.step(tok, pos) for pos, tok in enumerate(seq)])
    assert_logits_close(ours, theirs, f"{family}: logits over {len(seq)} positions")
