"""The `kiec` command line."""
from __future__ import annotations

import json
import sys

import click

from kiec.errors import KiecError


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

    try:
        m = load(model, dtype={"fp16": "f16"}.get(dtype, dtype), max_seq_len=max_seq_len)
        s = summarize(m, context=context, bandwidth_tbps=bandwidth)
    except KiecError as e:
        raise click.ClickException(str(e)) from None
    click.echo(json.dumps(s.to_dict(), indent=2) if as_json else format_summary(s))


if __name__ == "__main__":
    sys.exit(main())
