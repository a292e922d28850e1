"""Options and error handling shared by every command (imports only click and the core)."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

import click

from diag.errors import EXIT_BROKEN_PIPE, EXIT_INTERNAL, EXIT_INTERRUPTED, DiagError


def log(msg: str) -> None:
    """Progress and logs go to stderr; stdout holds only the report."""
    click.echo(f"diag: {msg}", err=True)


def target_options(f: Callable) -> Callable:
    """--sglang, --platform and the configuration under audit."""
    opts = [
        click.option("--sglang", "sglang", metavar="PATH|VERSION",
                     help="SGLang to diagnose: a directory holding the sglang package, or a "
                          "release version (downloaded once into the cache). Default: the "
                          "importable sglang, else the pinned default release."),
        click.option("--platform", type=click.Choice(["hip", "cuda"]), default=None,
                     help="Evaluate for this platform. Default: the local torch's; hip without a GPU."),
        click.option("--attention-backend", metavar="NAME",
                     help="The --attention-backend the server runs (e.g. dsv4, dsa, aiter)."),
        click.option("--speculative-num-steps", type=click.IntRange(min=1), metavar="N",
                     help="The server's --speculative-num-steps."),
        click.option("--speculative-algorithm", metavar="NAME",
                     help="The server's --speculative-algorithm (EAGLE, EAGLE3, NEXTN, ...)."),
        click.option("--server", "server_url", metavar="URL",
                     help="A live SGLang server to read /server_info and /metrics from."),
        click.option("--run-dir", "run_dir", metavar="DIR", type=click.Path(),
                     help="A run directory written by the in-engine agent (diag run)."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def output_options(f: Callable) -> Callable:
    opts = [
        click.option("--json", "as_json", is_flag=True, help="Print the versioned JSON report."),
        click.option("--fail-on", type=click.Choice(["warn", "fail"]), default="fail",
                     show_default=True, help="Exit 1 when a finding is at or above this."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def exit_broken_pipe() -> NoReturn:
    """The reader went away (`diag ... | head`): exit 141 like a shell, no message, no
    traceback; stdout goes to /dev/null so the interpreter's last flush cannot fail again."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(EXIT_BROKEN_PIPE)


def guarded(f: Callable) -> Callable:
    """DiagError → one line on stderr and its exit code; Ctrl-C → 130; tracebacks only with -v."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        verbose = bool(click.get_current_context().find_root().params.get("verbose"))
        try:
            return f(*args, **kwargs)
        except DiagError as e:
            if verbose:
                traceback.print_exc()
            click.echo(f"diag: error: {e}", err=True)
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            click.echo("diag: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except BrokenPipeError:
            exit_broken_pipe()
        except (click.ClickException, click.exceptions.Exit, click.Abort, SystemExit):
            raise
        except Exception as e:
            if verbose:
                traceback.print_exc()
            click.echo(f"diag: internal error: {type(e).__name__}: {e} (run with -v for the "
                       "traceback)", err=True)
            sys.exit(EXIT_INTERNAL)

    return wrapper


def build_context(sglang: str | None, platform: str | None, attention_backend: str | None,
                  speculative_num_steps: int | None, speculative_algorithm: str | None,
                  server_url: str | None, run_dir: str | None, execute: bool = True,
                  full: bool = False):
    """Resolve the target and platform into a Context (imports torch only for the platform)."""
    from diag import target as target_mod
    from diag.context import Context, SpecConfig
    from diag.platform import default_platform

    tgt = target_mod.resolve(sglang, log=log)
    plat = platform or default_platform()
    cfg = SpecConfig(attention_backend=attention_backend,
                     speculative_num_steps=speculative_num_steps,
                     speculative_algorithm=speculative_algorithm)
    ctx = Context(target=tgt, platform=plat, config=cfg, server_url=server_url,
                  run_dir=run_dir, execute=execute, full=full, log=log)
    if server_url:  # read once for every probe; unreachable → ServerError (exit 3)
        from diag import server

        server.attach(ctx)
    return ctx
