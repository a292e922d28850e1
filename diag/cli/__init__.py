"""The `diag` command line: the composition root. Probes, fixes and the TUI load lazily."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

import click

from diag import __version__
from diag.cli.common import (
    build_context,
    check_stdout,
    config_options,
    exit_broken_pipe,
    exit_os_error,
    guarded,
    log,
    output_options,
    stdout_gone,
    target_options,
)
from diag.errors import EXIT_FIX_FAILED, EXIT_USAGE, echo


class LazyGroup(click.Group):
    """Subcommands that live in other modules, imported only when named (or listed by --help).

    It also owns the closed-pipe exit for every command: click's own handler exits 1 when
    `--help` or `--version` meets a closed stdout; here that is 141 and quiet, as in `guarded`,
    also for a stdout closed before the start (`>&-`) or by its reader mid-report; an OSError
    of the machine (disk full, read-only) is one line and exit 3 (`exit_os_error`).
    """

    def __init__(self, *args, lazy: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy = lazy or {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        present = {n for n, path in self.lazy.items()
                   if importlib.util.find_spec(path.split(":")[0]) is not None}
        return sorted(set(super().list_commands(ctx)) | present)

    def main(self, args=None, *rest, standalone_mode: bool = True, **kwargs):
        try:
            return super().main(args, *rest, standalone_mode=standalone_mode, **kwargs)
        except SystemExit as e:
            if args is None and standalone_mode and _LEAVE_AT_ONCE[0]:  # the process's own
                leave_at_once(e.code)  # command line (a console script, `python -m diag`)
            raise

    def make_context(self, *args, **kwargs) -> click.Context:
        if stdout_gone():  # `diag env >&-`: nowhere to write the report
            exit_broken_pipe()
        try:  # `diag --help`, `diag --version` print while parsing
            return super().make_context(*args, **kwargs)
        except OSError as e:
            exit_os_error(e)

    def invoke(self, ctx: click.Context):
        try:  # every subcommand, its --help and its output, guarded or not
            rv = super().invoke(ctx)
        except OSError as e:
            exit_os_error(e)
        except click.exceptions.Exit as e:  # a subcommand's --help
            if e.exit_code == 0:
                check_stdout()
            raise
        except SystemExit as e:
            if e.code in (None, 0, 1, EXIT_FIX_FAILED):  # a report was written: did it arrive?
                check_stdout()
            raise
        check_stdout()
        return rv

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
    "trace": "diag.cli.trace:trace",
    "kit": "diag.cli.kit:kit",
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


def _start_worker(ids: list[str], execute: bool) -> tuple[list[str], object | None]:
    """(the probes for the torch worker, the started worker), or ([], None) when none is
    needed or it cannot start. Called before the target is resolved: the worker's torch import
    is the longest step of a cold run, so it starts first."""
    remote = _worker_probes(execute, ids)
    if not remote:
        return [], None
    from diag.cli import probe_worker

    proc = probe_worker.start(remote)
    return (remote, proc) if proc is not None else ([], None)


def _stop_worker(worker: tuple[list[str], object | None]) -> None:
    if worker[1] is not None:
        from diag.cli import probe_worker

        probe_worker.stop(worker[1])


_GC_WAS = [True]  # whether the cyclic GC was on when `_diagnose` paused it
_LEAVE_AT_ONCE = [False]  # `_emit`: the report is out; the parse heap needs no teardown


def leave_at_once(code: object) -> None:
    """End the process with `code` as the interpreter would (exit functions run, output
    flushed), without its teardown: after a diagnose that is ~30 ms of freeing the cached parse
    trees and modules, one object at a time, for nothing (the torch worker ends the same way).
    Returns, leaving the exit to the interpreter, where that teardown could matter: a code
    that is no number, a profiler or tracer (coverage, cProfile: they write their data then),
    a thread that is no daemon still running, or output that does not flush."""
    import atexit
    import threading

    if not (code is None or isinstance(code, int)):
        return
    if sys.getprofile() is not None or sys.gettrace() is not None:
        return
    main_thread = threading.main_thread()
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not main_thread):
        return
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        atexit._run_exitfuncs()  # they run once: a return below leaves none to run again
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return
    os._exit(code or 0)


def _collector_for(probe):
    """The collector as the process had it before `_diagnose` paused it, for a probe that runs
    torch (the profiler checks measure collections); nothing changes for one that reads
    source only."""
    import contextlib
    import gc

    if not probe.needs_torch or gc.isenabled() or not _GC_WAS[0]:
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def resumed():
        gc.enable()
        try:
            yield
        finally:
            gc.disable()

    return resumed()


def _run_probes(ctx, ids: list[str], verbose: bool,
                worker: tuple[list[str], object | None] | None = None):
    """Run the probes `ids` and return their findings in that order.

    When a probe that runs torch has work to do (nothing cached), those probes run in the torch
    worker (`diag.cli.probe_worker`, `worker` when the caller started it already), started
    first so that its torch import overlaps the parsing here (the census it needs is computed
    here and handed over); the others run here, in the meantime. This process never imports
    torch then. A worker that fails changes nothing: its probes run here.
    """
    from diag.findings import Finding, Status
    from diag.probes import get
    from diag.probes.base import run_probe

    remote, proc = worker if worker is not None else _start_worker(ids, ctx.execute)
    results: dict[str, list] = {pid: [] for pid in ids}
    probes = []
    for pid in ids:
        try:
            probes.append(get(pid))
        except Exception as e:  # a probe that cannot load is reported like one that crashed
            results[pid].append(Finding(probe=pid, status=Status.ERROR, title=pid,
                                        summary=f"probe cannot load: {type(e).__name__}: {e}",
                                        hint="re-run with -v for the traceback and report it"))
    local = [p for p in probes if p.id not in remote]
    if proc is not None and not _hand_over(proc, ctx, remote, verbose):
        proc, remote, local = None, [], probes
    for probe in local:
        try:
            with _collector_for(probe):
                probe.prepare(ctx)
        except Exception as e:  # run() then does the work itself
            log(f"{probe.id}: background start failed ({type(e).__name__}: {e})")
    key = (ctx.target, ctx.platform, ctx.config)
    for probe in local:
        lent = _borrowed(proc, probe.id, key)
        if lent is not None:  # run whole in the worker's wait for the census (Head.borrow)
            results[probe.id].extend(lent)
            continue
        with _collector_for(probe):
            results[probe.id].extend(run_probe(probe, ctx, verbose=verbose))
    if proc is not None:
        from diag.cli import probe_worker

        # the fixes' applicability: the worker's, judged in its wait for the census, or
        # judged here while the worker still runs
        judged = probe_worker.resolved_early(proc, key)
        if judged is not None:
            ctx.cache[RESOLVED] = judged
        else:
            _resolve_early(ctx)
        got = probe_worker.collect(proc)
        if got is None:  # the worker failed: run its probes here, as without it
            log("torch worker failed; running its probes here")
        for probe in (p for p in probes if p.id in remote):
            mine = [f for f in got if f.probe == probe.id] if got is not None else None
            if mine is None:
                with _collector_for(probe):
                    mine = run_probe(probe, ctx, verbose=verbose)
            results[probe.id].extend(mine)
    return [f for pid in ids for f in results[pid]]


def _borrowed(proc, probe_id: str, key: tuple) -> list | None:
    """The findings of `probe_id` the worker ran in its wait, when they are here now."""
    if proc is None:
        return None
    from diag.cli import probe_worker

    return probe_worker.borrowed(proc, probe_id, key)


def _lent(ids: list[str], remote: list[str], ctx) -> tuple[str, ...]:
    """The probes of this process the torch worker may run whole in its wait for the census
    (`Probe.runs_early`): none where a server is read (its probes read what it answered)."""
    if ctx.server_url:
        return ()
    from diag.probes import spec

    out = []
    for pid in ids:
        try:
            if pid not in remote and spec(pid).runs_early:
                out.append(pid)
        except Exception:  # reported where it is run
            continue
    return tuple(out)


ENV_WORKER = "DIAG_PROBE_WORKER"  # "0": run every probe in this process (no torch worker)


def _worker_probes(execute: bool, ids: list[str]) -> list[str]:
    """The probes to run in the torch worker: those that run torch, when torch is there and
    something is to be measured (caching off, or the profiler cycle check not cached)."""
    import importlib.util

    from diag.probes import spec

    wanted = [p for p in ids if spec(p).needs_torch]
    if not execute or not wanted or importlib.util.find_spec("torch") is None \
            or "torch" in sys.modules or os.environ.get(ENV_WORKER, "") == "0":
        return []
    from diag import cache

    if cache.enabled():  # else nothing cached is read: asking (probe imports, torch's
        from diag.probes import get  # fingerprint) would only delay the worker's start

        told = [t for t in (get(p).measured_already() for p in wanted) if t is not None]
        if told and all(told):
            return []  # a warm run: the results are cached, no torch needed
    return wanted


def _hand_over(proc, ctx, remote: list[str], verbose: bool) -> bool:
    """Send the worker its job (with the census computed here meanwhile); False if it failed."""
    import pickle

    from diag.cli import probe_worker
    from diag.probes import get

    extra = {}
    for pid in remote:
        try:
            extra.update(get(pid).handover(ctx))
        except Exception:  # the probe computes (and reports) it itself
            pass
    shared = {}
    for k, v in {**ctx.cache, **extra}.items():
        try:
            pickle.dumps(v)
        except Exception:
            continue
        shared[k] = v
    job = probe_worker.Job(remote, ctx.target, ctx.platform, ctx.config, ctx.server_url,
                           ctx.run_dir, ctx.execute, ctx.full, verbose, shared)
    if not probe_worker.send(proc, job):
        return False
    for k, v in extra.items():  # the same census serves the probes here too
        ctx.cache.setdefault(k, v)
    return True


RESOLVED = "advice.resolved"  # ctx.cache: the fixes' applicability, judged once per run


def _resolve_early(ctx) -> None:
    """Judge every fix for the target now (it needs no finding), so that the report does not
    wait for it after the torch worker's answer."""
    from diag.fixes.advice import resolve

    try:
        ctx.cache[RESOLVED] = resolve(ctx)
    except Exception:  # judged again (and reported) by _advise
        ctx.cache.pop(RESOLVED, None)


def _advise(ctx, findings):
    """Each finding names only the fixes that apply here and would change it (one resolution,
    shared with `diag fix list`, `fix check` and the TUI: `diag.fixes.advice`)."""
    from diag.fixes.advice import advise, resolve

    resolved = ctx.cache.pop(RESOLVED, None)
    return advise(findings, resolved if resolved is not None else resolve(ctx))


def _emit(ctx, findings, as_json: bool, fail_on: str, verbose: bool,
          allow_unrecognised: bool = False) -> None:
    from diag.report import exit_code, render_human, to_json, unrecognised, unrecognised_line

    findings = _advise(ctx, findings)

    if as_json:
        header = {"target": ctx.target.to_dict(), "platform": ctx.platform,
                  "config": vars(ctx.config), "server": ctx.server_url}
        click.echo(to_json(findings, header, fail_on, allow_unrecognised))
    else:
        from diag.report import verdict

        cfg = ctx.config
        line = f"diag {__version__}: {ctx.target.describe()}, platform {ctx.platform}" + (
            f" ({cfg.gpu_arch})" if cfg.gpu_arch and ctx.platform == "hip" else "")
        configured = bool(ctx.server_url) or any(
            getattr(cfg, n, None) is not None for n in (
                "attention_backend", "draft_attention_backend", "speculative_num_steps",
                "speculative_algorithm"))
        notes = []
        if ctx.execute and importlib.util.find_spec("torch") is None:
            notes.append("measured checks skipped: no torch here; `pip install torch` (the ROCm "
                         "build on an AMD host), or install diag where SGLang runs, measures them")
        click.echo(render_human(findings, line, verbose=verbose, notes=notes,
                                last=verdict(findings, configured, fail_on, allow_unrecognised)))
    for f in unrecognised(findings, allow_unrecognised):  # in text and JSON alike
        log(f"error: {unrecognised_line(f)}")
    import gc

    gc.freeze()  # exiting: no final collection walk over the parsed sources (~0.5 s)
    _LEAVE_AT_ONCE[0] = True  # nor the teardown of them, run from the command line
    sys.exit(exit_code(findings, fail_on, allow_unrecognised))


def run_options(f):
    """--execute/--no-execute and --full, shared by `diagnose` and `probe`."""
    f = click.option("--full", is_flag=True,
                     help="Also the slow parts (the whole crash reproducer).")(f)
    return click.option("--execute/--no-execute", default=True, show_default=True,
                        help="Run real SGLang builders and cheap runtime checks on the local "
                             "torch.")(f)


@main.command()
@target_options
@config_options
@output_options
@run_options
@click.pass_context
@guarded
def diagnose(cctx: click.Context, as_json: bool, fail_on: str, allow_unrecognised: bool,
             execute: bool, full: bool, **target_kw) -> None:
    """Run every probe against the target and report."""
    from diag.probes import all_ids

    verbose = cctx.find_root().params["verbose"]
    _diagnose(all_ids(), verbose, as_json, fail_on, execute, full, target_kw, allow_unrecognised)


def _diagnose(ids: list[str], verbose: bool, as_json: bool, fail_on: str, execute: bool,
              full: bool, target_kw: dict, allow_unrecognised: bool = False) -> None:
    """Start the torch worker, resolve the target meanwhile, run `ids` and report.

    The cyclic GC stays paused in this process from here to the exit (`_emit` freezes the
    heap): what it does here is read sources (the census, the gate, the fixes' resolution),
    whose parse trees stay alive in the caches to the end, so every collection only walks
    them again. Each pause of `gc_paused` (the census, a source-only probe) used to end in a
    young-generation collection over everything parsed meanwhile: ~0.4 s of a cold run's
    critical path on 0.5.23, for nothing freed. A probe that runs torch here (no worker)
    gets the collector back as it was (`_collector_for`)."""
    import gc

    _GC_WAS[0] = gc.isenabled()
    gc.disable()
    try:
        worker = _start_worker(ids, execute)
        try:
            ctx = build_context(**target_kw, execute=execute, full=full)
        except BaseException:
            _stop_worker(worker)
            raise
        if worker[1] is not None:  # what the worker can do before the census arrives
            from diag.cli import probe_worker

            probe_worker.send_head(worker[1], probe_worker.Head(
                ctx.target, ctx.platform, ctx.config, ctx.execute, _lent(ids, worker[0], ctx),
                ctx.run_dir, ctx.full, verbose))
        _emit(ctx, _run_probes(ctx, ids, verbose, worker), as_json, fail_on, verbose,
              allow_unrecognised)
    finally:  # the exit (after the freeze: nothing left to walk), or a caller in-process
        if _GC_WAS[0]:
            gc.enable()


@main.command()
@click.argument("probe_id", required=False)
@click.option("--list", "list_", is_flag=True, help="List the probes and exit.")
@target_options
@config_options
@output_options
@run_options
@click.pass_context
@guarded
def probe(cctx: click.Context, probe_id: str | None, list_: bool, as_json: bool, fail_on: str,
          allow_unrecognised: bool, execute: bool, full: bool, **target_kw) -> None:
    """Run one probe (PROBE_ID), or list them with --list."""
    import json

    from diag.probes import REGISTRY

    if list_ and probe_id:
        raise click.UsageError(f"--list takes no PROBE_ID (got {echo(probe_id)})")
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
        raise click.UsageError(f"unknown probe {echo(probe_id)} (known: {', '.join(REGISTRY)})")
    verbose = cctx.find_root().params["verbose"]
    _diagnose([probe_id], verbose, as_json, fail_on, execute, full, target_kw, allow_unrecognised)


if __name__ == "__main__":
    main()
