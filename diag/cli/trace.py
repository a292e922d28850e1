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
@click.option("--fail-on", type=click.Choice(["warn", "fail", "never"]), default="fail",
              show_default=True, help="Exit 1 when a finding is at or above this.")
@click.option("--sglang", "sglang", metavar="PATH|VERSION",
              help="With --attention-backend: the release the traced server ran, whose source "
                   "verdict the trace is checked against.")
@click.option("--attention-backend", metavar="NAME",
              help="The traced server's draft attention backend: check the trace's draft-extend "
                   "against the release's source verdict.")
@click.option("--speculative-num-steps", type=click.IntRange(1, 64), metavar="N",
              help="The traced server's --speculative-num-steps.")
@click.option("--kill-switch", is_flag=True,
              help="The traced server ran with the draft-extend kill switch set "
                   "(SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH=1).")
@click.option("--max-captured-bs", type=click.IntRange(1), metavar="N",
              help="The traced server's largest captured batch: eager passes above it say so.")
@guarded
def trace(paths: tuple[str, ...], baseline: tuple[str, ...], as_json: bool, fail_on: str,
          sglang: str | None, attention_backend: str | None, speculative_num_steps: int | None,
          kill_switch: bool, max_captured_bs: int | None) -> None:
    """Read torch-profiler traces (Chrome JSON, .json.gz; one per rank or stage; a directory
    stands for the traces in it) per speculative phase: graph replays, eager passes, host
    waits, completeness.

    Exit codes: 0 read, 1 findings at/above --fail-on, 2 usage, 3 a path that is not a
    readable trace (or a release that cannot be found).
    """
    from diag.probes.trace.report import build

    source = None
    if attention_backend:
        source = _source(sglang, attention_backend, speculative_num_steps, kill_switch)
    elif sglang or speculative_num_steps or kill_switch:
        raise click.UsageError("--sglang, --speculative-num-steps and --kill-switch describe "
                               "the server for the source check: give --attention-backend too")
    doc = build(list(paths), list(baseline) or None, source, max_captured_bs)
    if as_json:
        click.echo(json.dumps(doc, indent=1))
    else:
        from diag.probes.trace.render import render

        click.echo(render(doc))
    levels = {"warn": {"warn", "fail"}, "fail": {"fail"}, "never": set()}[fail_on]
    sys.exit(EXIT_FINDINGS if any(f["status"] in levels for f in doc["findings"]) else EXIT_OK)


def _source(sglang: str | None, backend: str, steps: int | None, kill_switch: bool):
    """The release's draft-extend verdict, per platform, for the traced configuration."""
    from diag import target as target_mod
    from diag.cli.common import log
    from diag.probes.trace.verdict import source_verdict

    tgt = target_mod.resolve(sglang, log=log)
    target_mod.check_tree(tgt)

    def verdict_for(platform: str) -> dict:
        from diag.cli.validate import check_config

        check_config(tgt, platform, backend, None)
        return source_verdict(tgt, platform, backend, steps, kill_switch)

    return verdict_for
