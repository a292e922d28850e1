"""`diag env`: the facts a bug report needs (imports only click at module level)."""

from __future__ import annotations

import json

import click

from diag.cli_common import guarded, log


@click.command()
@click.option("--sglang", "sglang", metavar="PATH|VERSION",
              help="Report this SGLang instead of the importable one.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema_version 1).")
@guarded
def env(sglang: str | None, as_json: bool) -> None:
    """Torch/HIP/CUDA versions, GPUs, the SGLang release, relevant variables, running servers."""
    from diag.envinfo import collect, render

    doc = collect(sglang, log=log)
    click.echo(json.dumps(doc, indent=2, default=str) if as_json else render(doc))
