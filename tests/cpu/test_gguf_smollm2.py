"""The real SmolLM2-135M-Instruct GGUF: the Reference's greedy tokens equal transformers fp32 from the same file."""
import os

import numpy as np
import torch

import kiec
from tests.smollm2 import smollm2_gguf


def test_smollm2_gguf_greedy_matches_transformers():
    import transformers

    path = smollm2_gguf()
    folder, fname = os.path.split(path)
    tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=fname)
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=fname, dtype=torch.float32,
                                                           attn_implementation="eager").eval()
    messages = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    prompt = list(prompt["input_ids"] if isinstance(prompt, dict) or hasattr(prompt, "keys") else prompt)

    model = kiec.load(path)
    assert model.config.num_layers == 30 and model.config.tie_word_embeddings
    assert model.tokenizer is not None and model.tokenizer.kind == "gguf"
    ref = kiec.Reference(model)
    ids = ref.generate(prompt, max_new_tokens=32)
    with torch.no_grad():
        hf_ids = hf.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             max_new_tokens=32, min_new_tokens=32, do_sample=False,
                             eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
    print("kiec:", repr(tok.decode(ids)))
    assert ids == hf_ids, f"greedy ids differ\nkiec: {ids}\nhf:   {hf_ids}"

    # logits agree too, not only their argmax
    ref.reset()
    ours = np.stack([ref.step(t, p) for p, t in enumerate(prompt[:8])])
    with torch.no_grad():
        theirs = hf(torch.tensor([prompt[:8]])).logits[0].numpy()
    diff = np.abs(ours - theirs)
    assert diff.max() <= 1e-4 * np.abs(theirs).max(), f"max |diff| {diff.max():.3g} at {np.unravel_index(diff.argmax(), diff.shape)}"
