"""`diag tui`: the live view. Textual is imported inside the command, never by `diag --help`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import click

from diag.cli.common import Seconds, config_options, given, guarded, target_options
from diag.errors import EXIT_USAGE, DiagError


@click.command()
@target_options
@config_options
@click.option("--execute/--no-execute", default=True, show_default=True,
              help="Let probes run real SGLang builders and cheap runtime checks on local torch.")
@click.option("--poll", "poll_interval", type=Seconds(min=0.25, max=3600), default=1.0,
              show_default=True, help="Seconds between reads of the run dir / server.")
@click.option("--export", "export_path", default="diag-tui.json", show_default=True,
              callback=given,
              metavar="FILE", help="Where `e` writes the JSON export.")
@click.option("--once", is_flag=True,
              help="Render one frame (every tab) as text to stdout and exit (logs, CI).")
@click.option("--trace", "trace_paths", multiple=True, metavar="PATH",
              help="Also show these torch-profiler traces (a file, or a directory of them) per phase "
                   "(tab 5, key 5; as `diag trace`).")
@click.option("--width", type=click.IntRange(min=40, max=10000), default=None,
              help="Width of the --once frame. Default: the terminal's (80 without one).")
@guarded
def tui(sglang: str | None, platform: str | None, attention_backend: str | None,
        speculative_num_steps: int | None, speculative_algorithm: str | None,
        server_url: str | None, run_dir: str | None, execute: bool, poll_interval: float,
        export_path: str, once: bool, width: int | None, trace_paths: tuple[str, ...],
        **facts: object) -> None:
    """Live view: findings, fixes (apply/revert), before/after timings and sync counts.

    With --run-dir, a/u apply/revert fixes in that engine; with --server, its /metrics (SGLang's
    and diag's own series) are polled. Keys: 1-4 tabs, r rerun, a apply, u revert, b bench,
    e export JSON, q quit, ?/F1 help, Ctrl+P commands.
    """
    from diag.cli.common import _need_config

    for option, key in (("--model", "model"), ("--draft-model", "draft_model")):
        path = facts.get(key)  # a path must hold a config.json (exit 2), as in `diagnose`
        if isinstance(path, str) and (os.sep in path or os.path.exists(path)):
            _need_config(option, path, "a model directory" if key == "draft_model" else
                         "a model directory or a family name such as deepseek-v32")
    if run_dir:  # a run directory that is not there (or unsafe) is exit 3, not a frame
        from diag.engine.rundir import check_run_dir

        check_run_dir(run_dir)
    for p in trace_paths:  # what `diag trace` reads (a directory too); else exit 3 up front
        if not os.path.exists(p):
            raise DiagError(f"--trace {p}: no such file or directory")
    if trace_paths:  # a folder with no trace in it: the same one-line error (exit 3)
        from diag.probes.trace.report import expand

        expand(list(trace_paths))
    import importlib.util

    for need in ("rich", "textual"):
        if importlib.util.find_spec(need) is None:
            raise DiagError(f"`diag tui` needs {need}, which is not installed here "
                            "(pip install textual); `diag diagnose` and `diag bench` work without it")
    config = {"attention_backend": attention_backend,
              "speculative_num_steps": speculative_num_steps,
              "speculative_algorithm": speculative_algorithm,
              **{k: v for k, v in facts.items() if v is not None}}  # what diagnose takes
    if once:
        from diag.tui.once import render_once

        if width is None:
            width = shutil.get_terminal_size((80, 24)).columns
        frame = render_once(sglang=sglang, platform=platform, run_dir=run_dir,
                            server_url=server_url, execute=execute, width=width, config=config)
        if run_dir:  # removed or renamed while the frame was read: exit 3, as when not there
            from diag.engine.rundir import check_run_dir

            check_run_dir(run_dir)
        click.echo(frame, nl=False)
        if trace_paths:  # tab 5's content, as `diag trace` prints it
            from diag.probes.trace.render import render
            from diag.probes.trace.report import build

            click.echo(render(build(list(trace_paths))))
        return
    if not sys.stdout.isatty() or not sys.stdin.isatty():
        raise DiagError("`diag tui` needs a terminal (use --once for a text frame)",
                        exit_code=EXIT_USAGE)
    from diag.tui.app import make_app

    app = make_app(sglang, platform, run_dir, server_url, execute=execute,
                   poll_interval=poll_interval, export_path=export_path, config=config,
                   trace_paths=trace_paths)
    from diag.releases import cache_root

    loop = asyncio.new_event_loop()  # not asyncio.run: it would wait for every worker thread
    with stray_output_to(cache_root() / "tui-stderr.log") as log_file:
        app.run(loop=loop)
    if log_file and log_file.stat().st_size:
        click.echo(f"diag: output that libraries wrote during the session: {log_file}", err=True)
    code = app.return_code or 0
    if any(t.is_alive() and not t.daemon for t in threading.enumerate()
           if t is not threading.main_thread()):
        # A probe still running in a worker thread cannot be stopped; the screen is restored
        # and a running bench's processes are ended, so leave now instead of waiting for it.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    if code:
        sys.exit(code)


@contextlib.contextmanager
def stray_output_to(path: Path) -> Iterator[Path | None]:
    """Send fd 2 to a log while the app draws on the terminal through a duplicate of it.

    Textual draws on `sys.__stderr__`; C/C++ libraries (the profiler's Kineto, ROCm) and child
    processes write to fd 2 directly and would scribble over the screen.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError:
        yield None  # no log possible: run as is
        return
    try:
        sys.stderr.flush()
        tty_fd = os.dup(2)
    except OSError:
        os.close(log_fd)
        yield None
        return
    tty = os.fdopen(tty_fd, "w", encoding=getattr(sys.__stderr__, "encoding", None) or "utf-8")
    saved_dunder = sys.__stderr__
    os.dup2(log_fd, 2)
    os.close(log_fd)
    sys.__stderr__ = tty  # type: ignore[misc]
    try:
        yield path
    finally:
        sys.__stderr__ = saved_dunder  # type: ignore[misc]
        tty.flush()
        os.dup2(tty_fd, 2)
        tty.close()
