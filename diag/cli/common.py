"""Options and error handling shared by every command (imports only click and the core)."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import select
import sys
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

import click

from diag.errors import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OPERATIONAL,
    DiagError,
    clip,
    echo,
)


def log(msg: str) -> None:
    """Progress and logs go to stderr; stdout holds only the report."""
    click.echo(f"diag: {msg}", err=True)


# A run directory option: a path click does not judge (its readability check would make a
# directory owned by another user a usage error, exit 2); `rundir.check_run_dir` refuses it with
# the reason, exit 3, like every unusable run directory.
RUN_DIR = click.Path(readable=False)

MAX_STEPS = 64  # --speculative-num-steps: SGLang runs 1-10 in practice; more is a typo


def _server_url(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """--server checked where it is parsed: http(s), a host, a port 1-65535 (a usage error)."""
    if value is None:
        return None
    from diag.server import check_url

    try:
        url = check_url(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    if value.strip().rstrip("/") not in (url, url.split("://", 1)[1]):
        log(f"--server {clip(value)}: reading its server {url} (diag reads /server_info and "
            "/metrics there)")
    return url


class Seconds(click.FloatRange):
    """A number of seconds: a finite number in the range (never `nan` nor `inf`, which compare
    false with every bound and would wait forever), at most `max` (a day by default: more is a
    typo, and `time.sleep` overflows on huge values)."""

    name = "seconds"

    def __init__(self, min: float = 0.0, min_open: bool = False, max: float = 86400.0) -> None:
        super().__init__(min=min, min_open=min_open, max=max)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> float:
        import math

        v = value if isinstance(value, float) else click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(v):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return super().convert(v, param, ctx)


PID_MAX = 1 << 22  # Linux's largest pid_max


def _name(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A backend or algorithm name: not empty, no spaces (the release judges the name itself,
    `diag.cli.validate`)."""
    if value is None:
        return None
    if not value.strip() or any(c.isspace() for c in value):
        raise click.BadParameter(f"{echo(value)} is not a name")
    return value


def given(_ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A path, version or id option given as an empty string is a usage error (it would
    quietly mean the default: another tree, every live run)."""
    for v in value if isinstance(value, tuple) else (value,):
        if isinstance(v, str) and not v.strip():
            raise click.BadParameter(f"{v!r} is empty")
    return value


def target_options(f: Callable) -> Callable:
    """--sglang, --platform and the configuration under audit."""
    opts = [
        click.option("--sglang", "sglang", metavar="PATH|VERSION", callback=given,
                     help="SGLang to diagnose: a directory holding the sglang package, or a "
                          "release version (downloaded once into the cache). Default: the "
                          "importable sglang, else the pinned default release."),
        click.option("--platform", type=click.Choice(["hip", "cuda"]), default=None,
                     help="Evaluate for this platform. Default: the local torch's; hip without a GPU."),
        click.option("--attention-backend", metavar="NAME", callback=_name,
                     help="The --attention-backend the server runs (e.g. dsv4, dsa, aiter)."),
        click.option("--speculative-num-steps", type=click.IntRange(1, MAX_STEPS), metavar="N",
                     help="The server's --speculative-num-steps. Default: not given, read as "
                          "SGLang's own choice for the --model (with no --speculative-eagle-topk "
                          "or --speculative-num-draft-tokens; with either, SGLang refuses to "
                          "start)."),
        click.option("--speculative-algorithm", metavar="NAME", callback=_name,
                     help="The server's --speculative-algorithm (EAGLE, EAGLE3, NEXTN, ...)."),
        click.option("--server", "server_url", metavar="URL", callback=_server_url,
                     help="A live SGLang server to read /server_info and /metrics from."),
        click.option("--run-dir", "run_dir", metavar="DIR", type=RUN_DIR, callback=given,
                     help="A run directory written by the in-engine agent (diag run)."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def _env_pairs(_ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]
               ) -> dict[str, str] | None:
    """--env K=V (repeatable) -> {K: V}; none given -> None (the process environment)."""
    out: dict[str, str] = {}
    for item in value:
        key, sep, val = item.partition("=")
        if not sep or not key.strip() or any(c.isspace() for c in key):
            raise click.BadParameter(f"{echo(item)} is not KEY=VALUE")
        out[key] = val
    return out if value else None


def _gpu_arch(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """--gpu-arch gfx942 (a gcnArchName, feature suffix allowed: gfx942:sramecc+:xnack-)."""
    from diag.gpu_platform import GPU_ARCH

    if value is None:
        return None
    v = value.strip().lower()
    if not GPU_ARCH.match(v):
        raise click.BadParameter(f"{echo(value)} is not an AMD GPU arch (gfx942, gfx950, ...)")
    return v


def _triton_version(_ctx: click.Context, _param: click.Parameter, value: str | None
                    ) -> str | None:
    """--triton-version 3.5.0 (a PEP 440 version, as triton.__version__ spells one)."""
    from packaging.version import InvalidVersion, Version

    if value is None:
        return None
    try:
        Version(value)
    except InvalidVersion:
        raise click.BadParameter(f"{echo(value)} is not a version (3.5.0, 3.4.0+rocm...)") from None
    return value.strip()


def config_options(f: Callable) -> Callable:
    """The facts SGLang resolves a configuration from (diagnose, probe, fix check)."""
    from diag.context import MAX_COUNT  # past it no server runs a count (a typo: exit 2)

    pos = click.IntRange(min=1, max=MAX_COUNT)
    opts = [
        click.option("--speculative-eagle-topk", type=pos, metavar="N",
                     help="The server's --speculative-eagle-topk."),
        click.option("--speculative-num-draft-tokens", type=pos, metavar="N",
                     help="The server's --speculative-num-draft-tokens."),
        click.option("--page-size", type=pos, metavar="N", help="The server's --page-size."),
        click.option("--model", metavar="PATH|FAMILY",
                     help="The served model: a directory with config.json (its architectures "
                          "are read), or an architecture/family name (e.g. deepseek-v32)."),
        click.option("--draft-model", metavar="PATH|ARCH",
                     help="The draft model: a directory with config.json, or its architecture "
                          "name (e.g. LlamaForCausalLMEagle3): it decides the draft backend's "
                          "model facts (its sliding window only from a config.json); a server "
                          "gives its own."),
        click.option("--env", "environ", multiple=True, metavar="K=V", callback=_env_pairs,
                     help="The server's SGLANG_* environment (repeatable; default: this "
                          "process's environment)."),
        click.option("--tp", "tp_size", type=pos, metavar="N", help="The server's --tp."),
        click.option("--enable-dp-attention/--no-dp-attention", default=None,
                     help="The server runs with --enable-dp-attention (or not: some models "
                          "refuse it). Default: not given."),
        click.option("--disable-overlap-schedule/--overlap-schedule", default=None,
                     help="The server runs without the overlap scheduler (or with it). "
                          "Default: not given (SGLang turns it off by itself in some cases)."),
        click.option("--enable-two-batch-overlap/--no-two-batch-overlap", default=None,
                     help="The server runs with --enable-two-batch-overlap (or not). Default: "
                          "not given, read as SGLang's default (off)."),
        click.option("--speculative-adaptive/--no-speculative-adaptive", default=None,
                     help="The server runs with --speculative-adaptive (or not): its runners "
                          "are swapped per step count. Default: not given."),
        click.option("--dp", "dp_size", type=pos, metavar="N", help="The server's --dp-size."),
        click.option("--dcp", "dcp_size", type=pos, metavar="N",
                     help="The server's --dcp-size. Default: not given, read as SGLang's "
                          "default (1) where the release has it."),
        click.option("--triton-version", metavar="X.Y.Z", callback=_triton_version,
                     help="The server's Triton (on ROCm the DSA page size follows it). Default: "
                          "this Python's, on a host with an AMD GPU."),
        click.option("--gpu-arch", metavar="GFX", callback=_gpu_arch,
                     help="The server's AMD GPU arch (gfx942: MI300X/MI325X, gfx950: "
                          "MI350/MI355): it decides SGLang's is_gfx95_supported() branches. "
                          "Default: this host's GPU on hip (read from the KFD topology)."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def output_options(f: Callable) -> Callable:
    opts = [
        click.option("--json", "as_json", is_flag=True, help="Print the versioned JSON report."),
        click.option("--fail-on", type=click.Choice(["warn", "fail"]), default="fail",
                     show_default=True, help="Exit 1 when a finding is at or above this."),
        click.option("--allow-unrecognised", is_flag=True,
                     help="A gate diag cannot read (not recognised: it cannot tell) is a warning "
                          "only; without it the run exits 3 naming the file."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def exit_broken_pipe() -> NoReturn:
    """The reader went away (`diag ... | head`): exit 141 like a shell, no message, no
    traceback; stdout goes to /dev/null so the interpreter's last flush cannot fail again."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    sys.exit(EXIT_BROKEN_PIPE)


def stdout_gone() -> bool:
    """fd 1 closed (`>&-`: Python then has no sys.stdout) or a pipe whose reader left.

    Why poll: a write into a pipe that closes mid-report returns short, and Python's buffered
    stdout drops the rest without an error; the write end then polls POLLERR."""
    if sys.stdout is None:
        return True
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):  # not a real file (CliRunner, a wrapper)
        return False
    try:
        os.fstat(fd)
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except OSError as e:
        return e.errno == errno.EBADF
    except ValueError:
        return False


def check_stdout() -> None:
    """After a report: flush it and exit 141 if any of it could not reach the reader."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        exit_broken_pipe()
    except OSError as e:
        exit_os_error(e)
    if stdout_gone():
        exit_broken_pipe()


# OSError classes that are the machine's state, not a bug in diag: one line, exit 3.
OPERATIONAL_ERRNOS = frozenset(getattr(errno, n) for n in (
    "ENOSPC", "EDQUOT", "EROFS", "EACCES", "EPERM", "EIO", "EMFILE", "ENFILE", "ENOENT",
    "ENOTDIR", "EISDIR", "EEXIST", "ENOTEMPTY", "EBUSY", "ETXTBSY", "ENAMETOOLONG",
    "ELOOP", "EXDEV", "ENXIO", "ENODEV") if hasattr(errno, n))


def exit_os_error(e: OSError, verbose: bool = False) -> NoReturn:
    """The one policy for an OSError that reached the top: a closed stdout is 141 (EPIPE, or
    EBADF with fd 1 gone), the machine's state (disk full, read-only, no permission, ...) is
    one line and exit 3, anything else is a bug (70)."""
    if isinstance(e, BrokenPipeError) or e.errno == errno.EPIPE or (
            e.errno == errno.EBADF and stdout_gone()):
        exit_broken_pipe()
    if verbose:
        traceback.print_exc()
    where = f": {clip(e.filename)}" if e.filename else ""  # a 100,000-character path: cut
    if e.errno in OPERATIONAL_ERRNOS:
        what = e.strerror or str(e)
        if not e.filename:
            where = " (writing the output)" if e.errno in (errno.ENOSPC, errno.EDQUOT,
                                                            errno.EIO) else ""
        _echo_err(f"diag: error: {what}{where}")
        sys.exit(EXIT_OPERATIONAL)
    _echo_err(f"diag: internal error: {type(e).__name__}: {e} (run with -v for the traceback)")
    sys.exit(EXIT_INTERNAL)


def _echo_err(msg: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        click.echo(msg, err=True)


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
            # a user's input echoed back (a 100,000-character path or URL) is cut to 80
            click.echo(f"diag: error: {re.sub(r'[^ ]{200,}', lambda m: clip(m[0]), str(e))}",
                       err=True)
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            click.echo("diag: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except OSError as e:
            exit_os_error(e, verbose)
        except (click.ClickException, click.exceptions.Exit, click.Abort, SystemExit):
            raise
        except Exception as e:
            if verbose:
                traceback.print_exc()
            click.echo(f"diag: internal error: {type(e).__name__}: {e} (run with -v for the "
                       "traceback)", err=True)
            sys.exit(EXIT_INTERNAL)

    return wrapper


def _need_config(option: str, path: str, give: str) -> None:
    """A model path must hold a config.json (or be one): else a usage error (exit 2)."""
    from pathlib import Path

    from diag.errors import EXIT_USAGE

    p = Path(path)
    if not (p / "config.json").is_file() and not (p.name == "config.json" and p.is_file()):
        raise DiagError(f"{option} {path}: no config.json there (give {give})",
                        exit_code=EXIT_USAGE)


def _check_model(tgt: Any, model: str) -> None:
    """--model names a path (it must hold a readable config.json naming an architecture) or a
    family; a bad path is a usage error (exit 2), not a traceback."""
    from pathlib import Path

    from diag.errors import EXIT_USAGE
    from diag.probes.draft_extend_graph.phases import read_model

    if os.sep in model or Path(model).exists():
        _need_config("--model", model, "a model directory or a family name such as deepseek-v32")
    try:
        read_model(tgt, model)
    except ValueError as e:
        raise DiagError(str(e), exit_code=EXIT_USAGE) from None


def build_context(sglang: str | None, platform: str | None, attention_backend: str | None,
                  speculative_num_steps: int | None, speculative_algorithm: str | None,
                  server_url: str | None, run_dir: str | None, execute: bool = True,
                  full: bool = False, **facts: Any):
    """Resolve the target and platform into a Context (imports torch only for the platform).

    `facts`: the configuration options (`config_options`), SpecConfig field names."""
    from diag import target as target_mod
    from diag.context import Context, SpecConfig
    from diag.gpu_platform import default_platform

    if run_dir:  # named, so it must be there (and safe): exit 3, as in `fix status` and `tui`
        from diag.engine.rundir import check_run_dir

        check_run_dir(run_dir)
    cfg = SpecConfig(attention_backend=attention_backend,
                     speculative_num_steps=speculative_num_steps,
                     speculative_algorithm=speculative_algorithm,
                     **{k: v for k, v in facts.items() if v is not None})
    info, server_err = _server_info(server_url) if server_url else (None, None)
    res = None
    if run_dir or info is not None:  # the engine's own release, platform and configuration
        from diag.engine.facts import resolve as engine_facts

        res = engine_facts(sglang, platform, cfg, run_dir, info, server_url)
        sglang, platform = res.sglang, res.platform
    tgt = _resolve_target(sglang, res)
    target_mod.check_tree(tgt)
    if res and "model" in res.sources:  # the engine's model path is here but is no model
        log(res.sources["model"])
    plat = platform or default_platform()
    from diag.gpu_platform import fill_host_facts

    fill_host_facts(cfg, plat, server_url)  # this host's GPU arch and Triton, where not given
    from diag.cli.validate import check_config

    check_config(tgt, plat, attention_backend, speculative_algorithm)  # what was typed
    if facts.get("model") is not None:  # typed (the engine's own is checked where it is taken)
        _check_model(tgt, cfg.model)
    draft = facts.get("draft_model")
    if draft is not None and (os.sep in draft or os.path.exists(draft)):
        # typed as a path: it must hold a config.json (exit 2); else an architecture name
        _need_config("--draft-model", draft, "the draft model's directory or an architecture "
                     "name")
    ctx = Context(target=tgt, platform=plat, config=cfg, server_url=server_url,
                  run_dir=run_dir, execute=execute, full=full, log=log)
    if info is not None:
        ctx.cache["server_info"] = info
    ctx.cache["sources"] = dict(res.sources) if res else {}
    if server_url:  # read once for every probe; unreachable → ServerError (exit 3)
        from diag import server

        if server_err is None:
            server.attach(ctx)
        else:  # not asked twice (a server past the timeout would cost it twice)
            ctx.server_url = server.normalize_url(server_url)
            ctx.cache["server_error"] = server_err
    return ctx


def _server_info(url: str) -> tuple[dict | None, str | None]:
    """(`/server_info`, None) once; nothing answering is exit 3 (as `server.attach`), and so
    is a server that takes the connection but sends no whole answer in time, or redirects
    elsewhere (no more audited than a refused one: exit 0 on warnings would pass a CI gate);
    an answer that says something failed (HTTP 500, a body that is not JSON) is left to the
    probes: (None, what failed)."""
    from diag import server
    from diag.errors import ServerError

    try:
        return server.get_server_info(url), None
    except (server.ServerUnreachable, server.NotSGLang, server.ServerTimeout,
            server.Redirected):
        raise
    except ServerError as e:
        return None, str(e)


def _resolve_target(sglang: str | None, res: Any):
    """The target; an engine's release that cannot be had here (not cached, no network) is
    said, and the default resolution audited instead."""
    from diag import target as target_mod

    src = (res.sources.get("release") if res else None) or "--sglang"
    if sglang is None or src == "--sglang":
        return target_mod.resolve(sglang, log=log)
    try:
        return target_mod.resolve(sglang, log=log)
    except DiagError as e:
        log(f"the engine's release {sglang} ({src}) cannot be had here: {e}; auditing the "
            "default instead")
        res.sources["release"] = f"{src}, not available here ({e}): the default instead"
        return target_mod.resolve(None, log=log)
