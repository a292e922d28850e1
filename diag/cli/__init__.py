"""The `diag` command line: the composition root. Probes, fixes and the TUI load lazily."""

from __future__ import annotations

import importlib
import importlib.util
import sys

import click

from diag import __version__
from diag.cli.common import (
    build_context,
    exit_broken_pipe,
    guarded,
    log,
    output_options,
    target_options,
)
from diag.errors import EXIT_USAGE


class LazyGroup(click.Group):
    """Subcommands that live in other modules, imported only when named (or listed by --help).

    It also owns the closed-pipe exit for every command: click's own handler exits 1 when
    `--help` or `--version` meets a closed stdout; here that is 141 and quiet, as in `guarded`.
    """

    def __init__(self, *args, lazy: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy = lazy or {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        present = {n for n, path in self.lazy.items()
                   if importlib.util.find_spec(path.split(":")[0]) is not None}
        return sorted(set(super().list_commands(ctx)) | present)

    def make_context(self, *args, **kwargs) -> click.Context:
        try:  # `diag --help`, `diag --version` print while parsing
            return super().make_context(*args, **kwargs)
        except BrokenPipeError:
            exit_broken_pipe()

    def invoke(self, ctx: click.Context):
        try:  # every subcommand, its --help and its output, guarded or not
            return super().invoke(ctx)
        except BrokenPipeError:
            exit_broken_pipe()

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy:
            module, attr = self.lazy[name].split(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)


LAZY = {
    "env": "diag.cli.env:env",
    "fix": "diag.cli.fix:fix",
    "run": "diag.cli.run:run",
    "bench": "diag.cli.bench:bench",
    "tui": "diag.cli.tui:tui",
    "fleet": "diag.cli.fleet:fleet",
}


@click.group(cls=LazyGroup, lazy=LAZY, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="More detail; tracebacks on errors.")
@click.version_option(__version__, prog_name="diag")
def main(verbose: bool) -> None:
    """Diagnose, fix and time SGLang speculative decoding (EAGLE/MTP) on AMD GPUs.

    Exit codes: 0 nothing at/above --fail-on, 1 findings at/above it, 2 usage,
    3 operational error (target, download, server), 4 a fix failed to apply or verify,
    70 internal error, 130 interrupted, 141 stdout closed early (`| head`).
    """


def _run_probes(ctx, ids: list[str], verbose: bool):
    from diag.findings import Finding, Status
    from diag.probes import get
    from diag.probes.base import run_probe

    findings = []
    probes = []
    for pid in ids:
        try:
            probes.append(get(pid))
        except Exception as e:  # a probe that cannot load is reported like one that crashed
            findings.append(Finding(probe=pid, status=Status.ERROR, title=pid,
                                    summary=f"probe cannot load: {type(e).__name__}: {e}",
                                    hint="re-run with -v for the traceback and report it"))
    for probe in probes:
        try:
            probe.prepare(ctx)
        except Exception as e:  # run() then does the work itself
            log(f"{probe.id}: background start failed ({type(e).__name__}: {e})")
    for probe in probes:
        findings.extend(run_probe(probe, ctx, verbose=verbose))
    return findings


def _emit(ctx, findings, as_json: bool, fail_on: str, verbose: bool) -> None:
    from diag.report import exit_code, render_human, to_json

    if as_json:
        header = {"target": ctx.target.to_dict(), "platform": ctx.platform,
                  "config": vars(ctx.config), "server": ctx.server_url}
        click.echo(to_json(findings, header, fail_on))
    else:
        line = f"diag {__version__}: {ctx.target.describe()}, platform {ctx.platform}"
        click.echo(render_human(findings, line, verbose=verbose))
    sys.exit(exit_code(findings, fail_on))


@main.command()
@target_options
@output_options
@click.option("--execute/--no-execute", default=True, show_default=True,
              help="Run real SGLang builders and cheap runtime checks on the local torch.")
@click.option("--full", is_flag=True, help="Also the slow parts (the whole crash reproducer).")
@click.pass_context
@guarded
def diagnose(cctx: click.Context, as_json: bool, fail_on: str, execute: bool, full: bool,
             **target_kw) -> None:
    """Run every probe against the target and report."""
    from diag.probes import all_ids

    verbose = cctx.find_root().params["verbose"]
    ctx = build_context(**target_kw, execute=execute, full=full)
    _emit(ctx, _run_probes(ctx, all_ids(), verbose), as_json, fail_on, verbose)


@main.command()
@click.argument("probe_id", required=False)
@click.option("--list", "list_", is_flag=True, help="List the probes and exit.")
@target_options
@output_options
@click.option("--execute/--no-execute", default=True, show_default=True,
              help="Run real SGLang builders and cheap runtime checks on the local torch.")
@click.option("--full", is_flag=True, help="Also the slow parts (the whole crash reproducer).")
@click.pass_context
@guarded
def probe(cctx: click.Context, probe_id: str | None, list_: bool, as_json: bool, fail_on: str,
          execute: bool, full: bool, **target_kw) -> None:
    """Run one probe (PROBE_ID), or list them with --list."""
    import json

    from diag.probes import REGISTRY

    if list_ or not probe_id:
        from diag.probes import specs
        from diag.schemas import SCHEMA_VERSION

        rows = [{"id": s.id, "title": s.title, "fixes": list(s.fixes), "concern": s.concern,
                 "counter": list(s.counter.events) if s.counter is not None else None}
                for s in specs()]
        if as_json:
            click.echo(json.dumps({"schema_version": SCHEMA_VERSION, "probes": rows}, indent=2))
        else:
            for r in rows:
                fixes = f"  (fix: {', '.join(r['fixes'])})" if r["fixes"] else ""
                counter = "  [runtime counter]" if r["counter"] is not None else ""
                click.echo(f"{r['id']:<22} {r['title']}{fixes}{counter}")
        if not list_:
            log("name a probe to run it: diag probe ID")
            sys.exit(EXIT_USAGE)
        return
    if probe_id not in REGISTRY:
        raise click.UsageError(f"unknown probe {probe_id!r} (known: {', '.join(REGISTRY)})")
    verbose = cctx.find_root().params["verbose"]
    ctx = build_context(**target_kw, execute=execute, full=full)
    _emit(ctx, _run_probes(ctx, [probe_id], verbose), as_json, fail_on, verbose)


if __name__ == "__main__":
    main()
