"""`diag run -- CMD...`: run a command with the diag agent in every Python process it starts."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from diag.cli.common import RUN_DIR, given, guarded
from diag.errors import EXIT_USAGE, DiagError, echo


def build_env(run_dir: Path, fix_ids: list[str], probe_ids: list[str],
              base: dict[str, str] | None = None, run_id: str | None = None) -> dict[str, str]:
    """The environment CMD runs in: bootstrap first on PYTHONPATH, the agent's DIAG_* settings."""
    from diag.engine import bootstrap, rundir

    env = dict(os.environ if base is None else base)
    boot = str(bootstrap.directory())
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != boot]
    env["PYTHONPATH"] = os.pathsep.join([boot, *parts])
    env[rundir.ENV_RUN_DIR] = str(run_dir)
    env["DIAG_HOME"] = str(bootstrap.home())  # where `diag` is importable
    env[rundir.ENV_AGENT] = "1"
    if run_id:
        env[rundir.ENV_RUN_ID] = run_id  # every agent of this run carries it
    else:
        env.pop(rundir.ENV_RUN_ID, None)
    if fix_ids:
        env[rundir.ENV_FIXES] = ",".join(fix_ids)
    else:
        env.pop(rundir.ENV_FIXES, None)
    if probe_ids:
        env[rundir.ENV_PROBES] = ",".join(probe_ids)
    else:
        env.pop(rundir.ENV_PROBES, None)
    return env


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--fix", "fix_ids", multiple=True, metavar="ID|all",
              help="Apply this fix in every engine process (repeatable; `all` for every fix).")
@click.option("--probe", "probe_ids", multiple=True, metavar="ID|all",
              help="Switch on the runtime counter of this probe (repeatable; `all`; `diag probe "
                   "--list` shows which probes have one).")
@click.option("--run-dir", type=RUN_DIR, metavar="DIR", callback=given,
              help="Where the agents write events (created mode 0700). Default: a new directory "
                   "under $XDG_RUNTIME_DIR/diag/runs or ~/.cache/diag/runs.")
@click.option("--exact-syncs", is_flag=True,
              help="The metadata-syncs counter counts every builder call (default: every call "
                   "until a count is stable, then one in 256, the others scaled and labelled "
                   "sampled). Sets DIAG_SYNC_SAMPLE=1.")
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED, required=True)
@guarded
def run(fix_ids: tuple[str, ...], probe_ids: tuple[str, ...], run_dir: str | None,
        exact_syncs: bool, cmd: tuple[str, ...]) -> None:
    """Run CMD (after `--`) with the diag agent loaded in every Python process it starts.

    The process becomes CMD (exec): its exit code and signals are CMD's own. The run directory
    is printed on stderr; read it with `diag fix status --run-dir DIR`.
    """
    from diag import fixes, probes
    from diag.engine import agent, rundir

    for opt, values in (("--fix", fix_ids), ("--probe", probe_ids)):
        for value in values:  # `--fix ''` or `--fix a,,b` would quietly ask for nothing
            if any(not part.strip() for part in value.split(",")):
                raise DiagError(f"{opt} {echo(value)}: an empty id (give an id, a comma list of "
                                "ids, or all)", exit_code=EXIT_USAGE)
    if not cmd[0].strip():
        raise DiagError("the command to run is an empty string (diag run -- CMD ARGS...)",
                        exit_code=127)
    known_fixes = fixes.all_ids()
    fx = agent._split(",".join(fix_ids), known_fixes)
    bad = [f for f in fx if f not in known_fixes]
    if bad:
        raise DiagError(f"unknown fix {echo(bad[0])} (known: {', '.join(known_fixes)}, all)",
                        exit_code=EXIT_USAGE)
    counters = probes.with_counter()
    pr = agent._split(",".join(probe_ids), counters)
    bad = [p for p in pr if p not in counters]
    if bad:
        raise DiagError(f"unknown runtime counter {echo(bad[0])} (known: "
                        f"{', '.join(counters)}, all)", exit_code=EXIT_USAGE)
    existed = run_dir is not None and Path(run_dir).expanduser().exists()
    d, run_id = _make_run_dir(run_dir, existed, cmd=list(cmd), fixes=fx, probes=pr,
                              launcher_pid=os.getpid(), env=recorded_env())
    rundir.register(d)
    env = build_env(d, fx, pr, run_id=run_id)
    if exact_syncs:
        env["DIAG_SYNC_SAMPLE"] = "1"  # probes.metadata_syncs.sync_counter.ENV_SAMPLE
    click.echo(f"diag: run directory {d}", err=True)
    sys.stderr.flush()
    sys.stdout.flush()
    try:
        os.execvpe(cmd[0], list(cmd), env)
    except OSError as e:  # nothing ran: leave no run directory or registry entry behind
        rundir.discard(d, remove_dir=not existed)
        raise DiagError(f"cannot run {cmd[0]!r}: {e.strerror}",
                        exit_code=127 if isinstance(e, FileNotFoundError) else 126) from None


def recorded_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The SGLang switches the engine starts with that change what diag looks at (the SGLANG_*
    names of `diag.envinfo.RELEVANT_VARS`, those set), for run.json's `env`: `fix revert` reads
    it (SGLANG_PROFILE_V2). Only these names: other variables may hold secrets."""
    from diag.envinfo import RELEVANT_VARS

    env = os.environ if environ is None else environ
    return {k: env[k] for k in RELEVANT_VARS if k.startswith("SGLANG_") and k in env}


def _make_run_dir(run_dir: str | None, existed: bool, **meta) -> tuple[Path, str]:
    """Create the run directory and its run.json with a new run id; (directory, run id). An
    unusable place (a file, read-only, no permission) or a directory a live run still uses is
    one line and exit 3, never a traceback."""
    from diag.engine import rundir

    d = None
    try:
        d = rundir.create_run_dir(run_dir)
        if existed:
            rundir.claim(d)
        run_id = rundir.write_meta(d, **meta)
    except OSError as e:
        if d is not None:
            rundir.discard(d, remove_dir=not existed)
        where = e.filename or d or run_dir
        default = "" if run_dir else " (the default place: pass --run-dir DIR, or set " \
                                     "XDG_RUNTIME_DIR or DIAG_CACHE_DIR)"
        raise DiagError(f"cannot create the run directory {where}: {e.strerror}{default}") \
            from None
    return d, run_id
