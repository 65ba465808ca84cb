"""Sampling, defined once: temperature, top-p and a seed.

The random number for a token comes from a counter-based generator, Philox-4x32-10, keyed by the seed and
counted by the position of the step that predicts the token: the CPU reference, the graph-mode host sampler
and a device sampler (templates/include/kiec/sampling.cuh holds the same arithmetic) draw the same number for
the same token, in any order, with no state to carry.

Top-p keeps every token whose probability is at least tau, where tau is the largest probability whose
at-or-above mass reaches top_p: the smallest head of the sorted distribution with that mass, plus any token
tied with its last one (a GPU finds tau by searching probability values, without sorting). The draw is
u * (kept mass), u uniform in [0, 1) with 24 bits, and the token is the first (by id) whose running kept mass
exceeds it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kiec.errors import KiecError

# Philox-4x32 constants (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11)
_M0, _M1 = 0xD2511F53, 0xCD9E8D57
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_MASK = 0xFFFFFFFF


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0: greedy (the lowest id among the largest logits)
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self):
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise KiecError(f"temperature {self.temperature} must be a finite number >= 0 (0 is greedy)")
        if not 0 < self.top_p <= 1:
            raise KiecError(f"top_p {self.top_p} must be in (0, 1]")
        if not 0 <= self.seed < 1 << 64:
            raise KiecError(f"seed {self.seed} must be in [0, 2^64)")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def check_request(prompt_ids: list[int], max_new_tokens: int, max_seq_len: int) -> None:
    """A generation request fits before any work: a prompt, and room for it and the new tokens."""
    if not prompt_ids:
        raise KiecError("the prompt is empty")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
        raise KiecError(f"max_new_tokens must be an integer of at least 1, got {max_new_tokens!r}")
    if len(prompt_ids) + max_new_tokens > max_seq_len:
        raise KiecError(f"prompt ({len(prompt_ids)}) + max_new_tokens ({max_new_tokens}) exceeds max_seq_len "
                        f"{max_seq_len}")


def philox4x32(counter: tuple[int, int, int, int], key: tuple[int, int], rounds: int = 10) -> tuple[int, ...]:
    c0, c1, c2, c3 = (x & _MASK for x in counter)
    k0, k1 = (x & _MASK for x in key)
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + _W0) & _MASK, (k1 + _W1) & _MASK
        p0, p1 = _M0 * c0, _M1 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0, p1 & _MASK, (p0 >> 32) ^ c3 ^ k1, p0 & _MASK)
    return c0, c1, c2, c3


def uniform(seed: int, position: int) -> float:
    """The draw for the token predicted at `position`: 24 random bits as a float in [0, 1)."""
    x = philox4x32((position & _MASK, position >> 32, 0, 0), (seed & _MASK, seed >> 32))[0]
    return (x >> 8) * (1.0 / (1 << 24))


def probabilities(logits: np.ndarray, temperature: float) -> np.ndarray:
    z = logits.astype(np.float64) / temperature
    p = np.exp(z - z.max())
    return p / p.sum()


def kept(p: np.ndarray, top_p: float) -> np.ndarray:
    """The top-p set as a mask: p >= tau, tau the largest probability whose at-or-above mass reaches top_p."""
    if top_p >= 1:
        return p > 0
    target = top_p * p.sum() * (1 - 1e-12)
    m = min(len(p), 1024)
    while True:  # sort only the largest m (the sorted head is the same): a peaked distribution needs no more
        head = np.sort(p[np.argpartition(p, len(p) - m)[len(p) - m:]])[::-1]
        running = np.cumsum(head)
        if running[-1] >= target or m == len(p):
            return p >= head[min(int(np.searchsorted(running, target)), m - 1)]  # first prefix reaching it
        m = len(p)  # a flat one: sort it all


def sample(logits: np.ndarray, params: SamplingParams, position: int) -> int:
    """The token after the step at `position`."""
    if params.greedy:
        return int(np.argmax(logits))
    p = probabilities(logits, params.temperature)
    ids = np.flatnonzero(kept(p, params.top_p))
    running = np.cumsum(p[ids])
    j = int(np.searchsorted(running, uniform(params.seed, position) * running[-1], side="right"))
    return int(ids[min(j, len(ids) - 1)])
