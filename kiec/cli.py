"""The `kiec` command line."""
from __future__ import annotations

import json
import sys

import click

from kiec.errors import KiecError, ModeUnsupported
from kiec.modes import DEFAULT_MODE, MODES


@click.group()
def main():
    """kiec: compile LLM decode steps into bandwidth-saturating GPU programs."""


@main.command()
@click.argument("model")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--context", default=0, show_default=True, help="Tokens already in the KV cache.")
@click.option("--bandwidth", default=4.8, show_default=True, help="Memory bandwidth in TB/s for the floor.")
@click.option("--dtype", type=click.Choice(["bf16", "fp16", "f32"]), default=None,
              help="Parameter dtype (default: the checkpoint's; bf16 for registry names).")
@click.option("--max-seq-len", type=int, default=None, help="KV-cache length (default: min(model's, 4096)).")
def inspect(model, as_json, context, bandwidth, dtype, max_seq_len):
    """IR summary of MODEL: parameters, bytes read per token, the bandwidth floor, op counts."""
    from kiec.frontend import load
    from kiec.summary import format_summary, summarize

    from kiec.errors import Unlifted

    try:
        m = load(model, dtype={"fp16": "f16"}.get(dtype, dtype), max_seq_len=max_seq_len)
        s = summarize(m, context=context, bandwidth_tbps=bandwidth)
    except Unlifted as e:  # show every node left unlifted, not only the first few
        listing = "\n".join(f"  {n}" for n in e.nodes)
        raise click.ClickException(f"{e.source}: {len(e.nodes)} nodes no rule lifts:\n{listing}") from None
    except KiecError as e:
        raise click.ClickException(str(e)) from None
    click.echo(json.dumps(s.to_dict(), indent=2) if as_json else format_summary(s))


DTYPES = {"bf16": "bf16", "fp16": "f16"}


@main.command()
@click.argument("model")
@click.option("-o", "--out", "out_dir", required=True, help="Artifact directory to write.")
@click.option("--target", type=click.Choice(["cuda", "hip"]), default="cuda", show_default=True)
@click.option("--arch", default="sm_90", show_default=True)
@click.option("--tp", default=1, show_default=True, help="Tensor-parallel GPUs.")
@click.option("--mode", type=click.Choice(list(MODES)), default=None,
              help=f"Default: {DEFAULT_MODE}, or graph where persistent mode cannot build the model (said on stderr).")
@click.option("--dtype", type=click.Choice(list(DTYPES)), default="bf16", show_default=True)
@click.option("--max-seq-len", type=int, default=None, help="KV-cache length (default: min(model's, 4096)).")
@click.option("--dump-ir", is_flag=True, help="Write the IR after each pass to OUT/ir/NN_pass.kir.")
@click.option("--weights-like", default=None, metavar="ARTIFACT",
              help="An artifact compiled from this same, unchanged checkpoint (e.g. the other mode's): its packed "
                   "tensors are copied instead of converted again (its model name, source and dtype are checked, "
                   "the values are not); a weights.bin that would be its byte for byte is a hard link to it.")
def compile(model, out_dir, target, arch, tp, mode, dtype, max_seq_len, dump_ir, weights_like):
    """Compile MODEL into an artifact directory (needs nvcc; no GPU)."""
    import os

    from kiec.build import check_toolchain, compile as build
    from kiec.frontend import load

    if weights_like is not None and not os.path.isfile(os.path.join(weights_like, "manifest.json")):
        raise click.ClickException(f"--weights-like {weights_like}: not an artifact directory (no manifest.json)")
    try:
        check_toolchain(target, arch)  # before anything is loaded or written
        m = load(model, max_seq_len=max_seq_len)
        path = build(m, out_dir, target=target, arch=arch, tp=tp, mode=mode, dtype=DTYPES[dtype], dump_ir=dump_ir,
                     weights_like=weights_like)
    except ModeUnsupported as e:
        raise click.ClickException(f"{e}; compile with --mode graph") from None
    except KiecError as e:
        raise click.ClickException(str(e)) from None
    click.echo(path)


def _tokenizer(manifest: dict):
    tok = manifest.get("tokenizer")
    if not tok:
        raise click.ClickException("this artifact has no tokenizer (a registry model): use --prompt-ids")
    try:
        import transformers
    except ImportError:
        raise click.ClickException("text prompts need the transformers package; or use --prompt-ids") from None
    if tok["kind"] == "gguf":
        import os
        return transformers.AutoTokenizer.from_pretrained(os.path.dirname(tok["path"]),
                                                          gguf_file=os.path.basename(tok["path"]))
    return transformers.AutoTokenizer.from_pretrained(tok["path"])


@main.command()
@click.argument("artifact")
@click.option("--prompt", default=None, help="Text; the model's chat template is applied when it has one.")
@click.option("--prompt-ids", default=None, help="Comma-separated token ids.")
@click.option("--max-new-tokens", default=128, show_default=True)
@click.option("--device", default=0, show_default=True)
@click.option("--temperature", default=0.0, show_default=True, help="0: greedy.")
@click.option("--top-p", default=1.0, show_default=True, help="Sample from the smallest set with this mass.")
@click.option("--seed", default=0, show_default=True)
def run(artifact, prompt, prompt_ids, max_new_tokens, device, temperature, top_p, seed):
    """Generate from a compiled ARTIFACT, streaming the text as it comes."""
    import time

    from kiec.runtime import Engine
    from kiec.sampling import SamplingParams

    if (prompt is None) == (prompt_ids is None):
        raise click.UsageError("give exactly one of --prompt and --prompt-ids")
    if max_new_tokens < 1:
        raise click.UsageError(f"--max-new-tokens {max_new_tokens}: at least 1")
    if prompt_ids is not None:  # (checked before any GPU work, as the sampling below)
        try:
            ids = [int(t) for t in prompt_ids.split(",")]
        except ValueError:
            raise click.UsageError(f"--prompt-ids {prompt_ids!r}: comma-separated token ids") from None
    try:
        sampling = SamplingParams(temperature, top_p, seed)  # checked before any GPU work
        eng = Engine(artifact, device)
        tok = None
        if prompt is not None:
            tok = _tokenizer(eng.manifest)
            if tok.chat_template:
                ids = list(tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                                   tokenize=True, return_dict=True)["input_ids"])
            else:
                ids = tok.encode(prompt)
        if len(ids) + max_new_tokens > eng.max_seq_len:
            raise KiecError(f"prompt ({len(ids)} tokens) + --max-new-tokens {max_new_tokens} exceeds the artifact's "
                            f"max_seq_len {eng.max_seq_len}")
        out, t0 = [], time.perf_counter()
        for t in eng.stream(ids, max_new_tokens, sampling, stop_at_eos=True):
            out.append(t)
            click.echo(tok.decode([t]) if tok else f"{t},", nl=False)
        dt = time.perf_counter() - t0
    except KiecError as e:
        raise click.ClickException(str(e)) from None
    click.echo("")
    n = len(out)
    click.echo(f"[{len(ids)} prompt tokens, {n} new; first token {eng.last_ttft_s * 1e3:.1f} ms; "
               f"{(n - 1) / max(dt - eng.last_ttft_s, 1e-9):.0f} tok/s after it]", err=True)


@main.command()
@click.argument("target")
@click.option("--vs", default="eager,torch-compile", show_default=True, help="Peers: eager, torch-compile.")
@click.option("--prompt-len", default=32, show_default=True)
@click.option("--new-tokens", default=256, show_default=True)
@click.option("--context", "contexts", multiple=True, type=int, default=(0, 8192), show_default=True,
              help="Tokens already in the KV cache when timing starts; repeat for several (default: short and 8k).")
@click.option("--json", "json_path", default=None, help="Also write the results to this JSON file.")
@click.option("--work-dir", default="build/bench", show_default=True, help="Where a MODEL is compiled.")
@click.option("--mode", "modes", default=None,
              help="Modes a MODEL is compiled in and timed side by side: graph, persistent or graph,persistent "
                   f"(default: {DEFAULT_MODE}, or graph where persistent mode cannot build the model).")
def bench(target, vs, prompt_len, new_tokens, contexts, json_path, work_dir, modes):
    """Side-by-side decode benchmark of an artifact DIR or a MODEL, with MBU against the measured ceiling."""
    from kiec.bench import format_table, run_bench

    peers = [p for p in vs.split(",") if p]
    bad = [p for p in peers if p not in ("eager", "torch-compile")]
    if bad:
        raise click.UsageError(f"--vs: unknown peer {bad[0]!r} (eager, torch-compile)")
    if modes is not None:
        modes = tuple(m for m in modes.split(",") if m)
        if not modes or any(m not in MODES for m in modes):
            raise click.UsageError(f"--mode {','.join(modes)!r}: give graph, persistent or both (comma-separated)")
    try:
        rep = run_bench(target, peers, prompt_len, new_tokens, list(contexts), work_dir, json_path, modes=modes)
    except ModeUnsupported as e:
        raise click.ClickException(f"{e}; bench it with --mode graph") from None
    except KiecError as e:
        raise click.ClickException(str(e)) from None
    click.echo(format_table(rep))


if __name__ == "__main__":
    sys.exit(main())
