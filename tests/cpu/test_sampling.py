"""kiec.sampling: the Philox draw against published vectors and against the CUDA header compiled for the host,
top-p's kept set, the distribution of draws, and sampled generation in the reference."""
import os
import shutil
import subprocess

import numpy as np
import pytest
from click.testing import CliRunner

import kiec
from kiec.cli import main
from kiec.errors import KiecError
from kiec.sampling import SamplingParams, kept, philox4x32, probabilities, sample, uniform
from tests.tiny_hf import make_tiny_hf

INCLUDE = os.path.join(os.path.dirname(kiec.__file__), "..", "templates", "include")


def test_philox_matches_the_published_known_answers():
    # Random123's kat_vectors for philox4x32 with 10 rounds
    assert philox4x32((0, 0, 0, 0), (0, 0)) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)
    assert philox4x32((0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF)) == (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)
    assert philox4x32((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0)) == \
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)


def test_the_cuda_header_draws_the_same_bits_on_the_host(tmp_path):
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not os.path.exists(nvcc):
        pytest.skip("nvcc not found")
    src = tmp_path / "t.cu"
    src.write_text('#include <cstdio>\n#include "kiec/sampling.cuh"\nint main() {\n'
                   '  unsigned long long seed, pos;\n  while (scanf("%llu %llu", &seed, &pos) == 2) {\n'
                   '    kiec::Philox4 r = kiec::philox4x32_10(kiec::Philox4{{(uint32_t)pos, (uint32_t)(pos >> 32), 0u, 0u}},'
                   ' (uint32_t)seed, (uint32_t)(seed >> 32));\n'
                   '    printf("%u %u %u %u %a\\n", r.x[0], r.x[1], r.x[2], r.x[3], kiec::sample_uniform(seed, pos));\n'
                   '  }\n}\n')
    r = subprocess.run([nvcc, "-O2", "-std=c++17", "-I", INCLUDE, str(src), "-o", str(tmp_path / "t")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rng = np.random.default_rng(0)
    pairs = [(0, 0), ((1 << 64) - 1, (1 << 32) + 5)] + [(int(a), int(b)) for a, b in
                                                     zip(rng.integers(0, 1 << 63, 200), rng.integers(0, 1 << 40, 200))]
    out = subprocess.run([str(tmp_path / "t")], input="".join(f"{a} {b}\n" for a, b in pairs), capture_output=True,
                         text=True).stdout.split("\n")
    for (seed, pos), line in zip(pairs, out):
        words = line.split()
        assert tuple(int(w) for w in words[:4]) == philox4x32((pos & 0xFFFFFFFF, pos >> 32, 0, 0),
                                                               (seed & 0xFFFFFFFF, seed >> 32))
        assert float.fromhex(words[4]) == uniform(seed, pos)  # exact: 24 bits fit a float


def test_top_p_keeps_the_smallest_head_with_that_mass_and_its_ties():
    p = np.array([0.2, 0.5, 0.3])
    assert kept(p, 0.5).tolist() == [False, True, False]
    assert kept(p, 0.6).tolist() == [False, True, True]
    assert kept(p, 1.0).tolist() == [True, True, True]
    assert kept(np.array([0.4, 0.2, 0.4]), 0.3).tolist() == [True, False, True]  # tied with the last kept


def test_draws_follow_the_kept_distribution():
    logits = np.array([2.0, 1.0, 0.5, -1.0, 0.0], np.float32)
    params = SamplingParams(temperature=0.7, top_p=0.9, seed=1234)
    p = probabilities(logits, 0.7)
    mask = kept(p, 0.9)
    expect = np.where(mask, p, 0) / p[mask].sum()
    n = 20000
    counts = np.bincount([sample(logits, params, pos) for pos in range(n)], minlength=len(logits))
    assert counts[~mask].sum() == 0
    sd = np.sqrt(n * expect * (1 - expect))
    assert np.all(np.abs(counts - n * expect) <= 5 * sd + 1), (counts, n * expect)


def test_greedy_is_the_first_largest_and_params_are_checked():
    assert sample(np.array([1.0, 3.0, 3.0]), SamplingParams(), 7) == 1
    for kw, what in ((dict(temperature=-1), "temperature -1"), (dict(temperature=float("nan")), "temperature nan"),
                     (dict(top_p=0), "top_p 0"), (dict(top_p=1.5), "top_p 1.5"), (dict(seed=-3), "seed -3")):
        with pytest.raises(KiecError, match=what):
            SamplingParams(**kw)


def test_reference_sampling_is_reproducible_and_follows_the_seed(tmp_path):
    make_tiny_hf(tmp_path / "hf", "llama")
    ref = kiec.Reference(kiec.load(str(tmp_path / "hf")))
    prompt = [3, 1, 4, 1, 5]
    a = ref.generate(prompt, 12, sampling=SamplingParams(1.0, 0.95, seed=7))
    assert a == ref.generate(prompt, 12, sampling=SamplingParams(1.0, 0.95, seed=7))
    assert a != ref.generate(prompt, 12, sampling=SamplingParams(1.0, 0.95, seed=8))
    assert ref.generate(prompt, 12, sampling=SamplingParams(0.0)) == ref.generate(prompt, 12)
    # each token is the draw over the logits of the step before it
    seq = list(prompt)
    ref.reset()
    for pos in range(len(prompt) + len(a) - 1):
        logits = ref.step(seq[pos], pos)
        if pos >= len(prompt) - 1:
            seq.append(sample(logits, SamplingParams(1.0, 0.95, seed=7), pos))
    assert seq[len(prompt):] == a


@pytest.mark.parametrize("args, message", [
    (["--prompt-ids", "1,2", "--temperature", "-1"], "temperature -1.0 must be a finite number >= 0"),
    (["--prompt-ids", "1,x"], "--prompt-ids '1,x': comma-separated token ids"),
    (["--prompt-ids", "1,2", "--max-new-tokens", "0"], "--max-new-tokens 0: at least 1")])
def test_run_refuses_bad_requests_before_loading_anything(tmp_path, args, message):
    # (the artifact does not exist: each error must come before the engine looks for it)
    r = CliRunner().invoke(main, ["run", str(tmp_path / "missing"), *args])
    assert r.exit_code != 0 and message in r.output and "Traceback" not in r.output, r.output
