"""`diag trace`: the user's own torch-profiler traces, read per speculative phase."""

from __future__ import annotations

import json
import sys

import click

from diag.cli.common import guarded
from diag.errors import EXIT_FINDINGS, EXIT_OK


@click.command()
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@click.option("--baseline", "baseline", multiple=True, metavar="PATH",
              help="Trace(s) to compare against, per phase (repeat for several files).")
@click.option("--json", "as_json", is_flag=True, help="Print the versioned JSON (trace-v1).")
@click.option("--fail-on", type=click.Choice(["warn", "never"]), default="never",
              show_default=True, help="Exit 1 when a finding is at or above this.")
@guarded
def trace(paths: tuple[str, ...], baseline: tuple[str, ...], as_json: bool, fail_on: str) -> None:
    """Read torch-profiler traces (Chrome JSON, .json.gz; one per rank or stage) per
    speculative phase: graph replays, eager passes, host waits, completeness.

    Exit codes: 0 read, 1 findings with --fail-on warn, 2 usage, 3 a path that is not a
    readable trace.
    """
    from diag.probes.trace_report import build

    doc = build(list(paths), list(baseline) or None)
    if as_json:
        click.echo(json.dumps(doc, indent=1))
    else:
        from diag.probes.trace_render import render

        click.echo(render(doc))
    sys.exit(EXIT_FINDINGS if fail_on == "warn" and doc["findings"] else EXIT_OK)
