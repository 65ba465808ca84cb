"""kiec.Reference: the IR interpreter over a model's weights, with the step/generate API of the Engine."""
from __future__ import annotations

import numpy as np
import torch

from kiec.errors import KiecError
from kiec.ir import interp
from kiec.model import Model
from kiec.sampling import SamplingParams, check_request, sample


class Reference:
    """dtype=float32 on the CPU is the semantics of record; bfloat16 gives the same-dtype torch baseline
    that error budgets compare kernels against; device="cuda" runs the interpreter on a GPU."""

    def __init__(self, model: Model, dtype: torch.dtype = torch.float32, device: str = "cpu"):
        self.model = model
        self.graph = model.graph
        self.dtype, self.device = dtype, device
        self._env = {name: model.weights[name].to(device=device, dtype=dtype) for name in self.graph.params}
        self.reset()

    def reset(self) -> None:
        # The cache past pos is NaN: anything that reads a row not yet written shows up in the logits.
        for s in self.graph.states.values():
            self._env[s.name] = torch.full(s.type.shape, float("nan"), dtype=self.dtype, device=self.device)

    def step(self, token_id: int, pos: int) -> np.ndarray:
        """Run one decode step; returns the float32 logits [vocab]."""
        return self._step(token_id, pos)["logits"].float().cpu().numpy()

    def _step(self, token_id: int, pos: int) -> dict[str, torch.Tensor]:
        vocab = self.model.config.vocab_size
        if not 0 <= token_id < vocab:
            raise KiecError(f"token id {token_id} is out of range [0, {vocab})")
        if not 0 <= pos < self.model.max_seq_len:
            raise KiecError(f"position {pos} is past max_seq_len {self.model.max_seq_len}")
        env = dict(self._env)
        env["token"] = torch.tensor(token_id, dtype=torch.int32)
        env["pos"] = torch.tensor(pos, dtype=torch.int32)
        with torch.no_grad():
            return interp.run(self.graph, env)

    def generate(self, prompt_ids: list[int], max_new_tokens: int = 16, stop_at_eos: bool = False,
                 sampling: SamplingParams | None = None) -> list[int]:
        """Greedy decoding, or sampling (kiec.sampling); returns the new ids. The prompt goes through the
        decode step token by token."""
        check_request(prompt_ids, max_new_tokens, self.model.max_seq_len)
        self.reset()
        for pos, tok in enumerate(prompt_ids):
            out = self._step(tok, pos)
        new: list[int] = []
        eos = set(self.model.config.eos_token_ids) if stop_at_eos else set()
        for i in range(max_new_tokens):
            pos = len(prompt_ids) - 1 + i  # the step that predicts this token
            if sampling is None or sampling.greedy:
                nxt = int(out["next"])
            else:
                nxt = sample(out["logits"].float().cpu().numpy(), sampling, pos)
            new.append(nxt)
            if nxt in eos or i == max_new_tokens - 1:
                break
            out = self._step(nxt, len(prompt_ids) + i)
        return new
