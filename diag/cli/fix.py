"""`diag fix ...`: applicability of every fix to a target, apply/revert, status of a run, check."""

from __future__ import annotations

import json
import sys

import click

from diag.cli.common import (
    PID_MAX,
    RUN_DIR,
    Seconds,
    _server_url,
    build_context,
    config_options,
    echo,
    given,
    guarded,
    target_options,
)
from diag.schemas import SCHEMA_VERSION, finite


@click.group()
def fix() -> None:
    """List, apply, revert and check fixes."""


@fix.command("list")
@target_options
@config_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON: a `fixes` list.")
@guarded
def list_(as_json: bool, **target_kw) -> None:
    """Every registered fix and whether it applies to the target, platform and configuration
    (the options `diag diagnose` takes, or --server / --run-dir)."""
    from diag import fixes
    from diag.engine.facts import describe
    from diag.fixes.advice import resolve

    ctx = _server_read(build_context(**target_kw, execute=False))
    resolved = resolve(ctx)
    live_view = _engine_live(ctx.run_dir, ctx.server_url, ctx.cache.get("server_info"))
    preds = {p.fix: p for p in live_view.predictions} if live_view else {}
    rows = []
    for fid, a in resolved.items():
        s = fixes.spec(fid)
        p = preds.get(fid)
        rows.append({"id": fid, "title": s.title, "status": a.status, "reason": a.reason,
                     "instead": a.instead or None, "depends_on": list(s.depends_on),
                     "addresses": list(s.addresses),
                     "prediction": None if p is None else {
                         **p.to_dict(), "percent_of_token": live_view.to_dict()["predictions"][
                             live_view.predictions.index(p)]["percent_of_token"],
                         "source": live_view.label}})
    sources = ctx.cache.get("sources") or {}
    if as_json:
        click.echo(json.dumps(finite({"schema_version": SCHEMA_VERSION,
                                      "target": ctx.target.to_dict(),
                                      "platform": ctx.platform, "config": vars(ctx.config),
                                      "sources": sources,
                                      "live": live_view.to_dict() if live_view else None,
                                      "fixes": rows}), indent=2))
        return
    click.echo(click.style(f"{ctx.target.describe()}, platform {ctx.platform}"
                           + _config_text(ctx.config), bold=True))
    for line in describe(sources):
        click.echo(f"  {line}")
    for r in rows:
        click.echo(f"{r['id']:<32} {r['status']:<11} {r['reason']}")
        if r["instead"] and r["status"] != "applicable":
            click.echo(f"{'':<32} {'':<11} instead: {r['instead']}")
        if r["id"] in preds:
            click.echo(f"{'':<32} {'':<11} predicted from {live_view.label}: "
                       f"{live_view.prediction_text(preds[r['id']])}")


def _server_read(ctx):
    """The context, when the --server given could be read. A server that answered with a
    failure (HTTP 500, no whole answer within the timeout) has no finding to carry it here (as
    `diagnose` has): its configuration would silently be none, so it is exit 3, one line."""
    from diag.errors import ServerError

    err = ctx.cache.get("server_error") if ctx.server_url else None
    if err:
        raise ServerError(f"--server: {err}: the server's configuration cannot be read (give "
                          "it as options, without --server)")
    return ctx


def _engine_live(run_dir: str | None, server_url: str | None, info: dict | None = None):
    """The engine's live figures (`diag.engine.live`): a run directory's engine processes
    pooled, with the server's accept length and per-token time where --server is given too;
    else the server's own diag_* series. None when nothing was counted."""
    from diag.engine import live
    from diag.errors import ServerError

    if run_dir:
        from diag.engine import rundir

        speed = live.server_speed(server_url, info=info)[0] if server_url else None
        return live.of_run(rundir.read_state(run_dir), speed)
    if server_url:
        try:
            return live.of_server(server_url, info=info)
        except ServerError:
            return None
    return None


def _config_text(cfg) -> str:
    parts = [f"--{k.replace('_', '-')} {v}" for k, v in vars(cfg).items()
             if k in ("attention_backend", "draft_attention_backend", "speculative_num_steps",
                      "speculative_algorithm", "speculative_eagle_topk",
                      "speculative_num_draft_tokens", "page_size", "model") and v is not None]
    if cfg.disable_cuda_graph:
        parts.append("--disable-cuda-graph")
    if cfg.disable_overlap_schedule is not None:  # it picks the worker in some releases
        parts.append("--disable-overlap-schedule" if cfg.disable_overlap_schedule
                     else "--overlap-schedule")
    return f", {' '.join(parts)} ({cfg.source})" if parts else ", no configuration given"


# ----------------------------------------------------------------------------- apply / revert
# (in this process, or in a running engine through its run directory)


def _check_engine_id(fix_id: str, procs: list) -> None:
    """A usage error (exit 2) for an id that neither this diag nor any live process of the run
    knows, where every process that can hold a fix announced its registry; an engine that did
    not announce one decides itself (exit 4 when it refuses)."""
    from diag import fixes

    holders = [p for p in procs if p.holds_fixes] or procs
    if fix_id in fixes.all_ids() or not holders or any(p.registry is None for p in holders):
        return
    known = sorted({f for p in holders for f in p.registry})
    if fix_id not in known:
        raise click.UsageError(f"unknown fix {echo(fix_id)} (known to this run's engine: "
                               f"{', '.join(known)})")


def _control(fix_id: str, action: str, run_dir: str, pid: int | None, timeout: float,
             as_json: bool, yes: bool = False) -> None:
    from diag.engine import rundir
    from diag.errors import EXIT_FIX_FAILED, DiagError

    d = rundir.check_run_dir(run_dir)
    state = rundir.read_state(d)
    live = [p.pid for p in state.live]
    if state.moved_to:  # removed or replaced under a live engine: its agents went on there
        raise DiagError(f"run directory {d} was removed or replaced under a live engine: its "
                        f"agents now write to {state.moved_to[0]} (pass --run-dir "
                        f"{state.moved_to[0]})")
    if pid is not None and pid not in live:
        raise DiagError(f"no live diag agent with pid {pid} in {d} (live: "
                        f"{', '.join(map(str, live)) or 'none'})")
    if not live:
        raise DiagError(f"no live engine process in {d} (is the engine running under diag run?)")
    _check_engine_id(fix_id, [state.processes[p] for p in live if p in state.processes])
    if action == "revert" and not yes:
        _warn_revert_risk(fix_id, state.meta)
    rid = rundir.request(d, fix_id, action, pid)
    # Only the processes that can hold the fix are waited for (rundir.waited_for): the engine
    # processes once the run has one, else those that imported SGLang; the launcher, detokenizer
    # and helpers are listed with what they answered by then, and do not decide the exit code.
    acks = rundir.wait_ack(d, rid, pid=pid, timeout=timeout, engines_only=pid is None)
    procs = rundir.read_state(d).processes
    # a process live at the request that exited before it answered (killed mid-wait) is
    # listed as such: it never holds the fix, and the exit 4 says why
    gone = {p for p in live if p not in acks and (pid is None or p == pid)}
    acks = {**acks, **dict.fromkeys(gone)}
    waited = rundir.waited_for(procs, acks) if pid is None else set(acks)
    engines = {p for p in acks if procs.get(p) and procs[p].engine}
    rows = []
    for p, ev in sorted(acks.items()):
        reason = ev.get("reason") if ev else (
            "exited before it acknowledged" if p in gone
            else f"no acknowledgement within {timeout:g} s" if p in waited
            else rundir.not_waited_reason(procs.get(p), bool(engines)))
        rank = procs[p].rank if procs.get(p) else None
        rows.append({"pid": p, "engine": p in engines, "rank": rank, "acknowledged": ev is not None,
                     "ok": bool(ev and ev.get("ok")), "state": ev.get("state") if ev else None,
                     "reason": reason, "waited": p in waited})
    if as_json:
        click.echo(json.dumps({"schema_version": SCHEMA_VERSION, "run_dir": str(d), "request": rid,
                               "fix": fix_id, "action": action, "processes": rows}, indent=2))
    else:
        for r in rows:
            mark = "ok" if r["ok"] else ("refused" if r["acknowledged"] else
                                         ("no ack" if r["waited"] else "skipped"))
            role = "engine" if r["engine"] else "other"
            if r["rank"]:  # the scheduler's ranks as SGLang's log prefix names them
                role += f" {r['rank']}"
            click.echo(f"pid {r['pid']:<8} {role:<6} {action} {fix_id}: {mark:<8} "
                       f"{r['state'] or '-'}" + (f"  ({r['reason']})" if r["reason"] else ""))
    counted = [r for r in rows if r["waited"]]
    if not counted or not all(r["ok"] for r in counted):
        sys.exit(EXIT_FIX_FAILED)


def _warn_revert_risk(fix_id: str, meta: object) -> None:
    """One stderr line per fix this revert takes off (its dependants first) whose revert
    re-exposes what it prevents in this engine (`Fix.revert_risk`, from the environment its
    run.json recorded: `env`). `--yes` leaves it out; the exit code is the revert's own."""
    from diag import fixes
    from diag.fixes import orchestrator

    env = meta.get("env") if isinstance(meta, dict) else None
    if not isinstance(env, dict):
        return
    env = {k: v for k, v in env.items() if isinstance(k, str) and isinstance(v, str)}
    for fid in [*orchestrator.dependants(fix_id), fix_id]:
        risk = fixes.get(fid).revert_risk(env)
        if risk:
            click.echo(f"diag: warning: {risk} (--yes: no warning)", err=True)


def _here(fix_id: str, action: str, as_json: bool, target_kw: dict) -> None:
    """In this diag process, through the orchestrator (dependencies first; dependants reverted
    first). Revert of a fix that is not applied here: one line, exit 4."""
    from diag.errors import EXIT_FIX_FAILED
    from diag.fixes import orchestrator

    if action == "apply":
        ctx = _server_read(build_context(**target_kw, run_dir=None, execute=False))
        res = orchestrator.apply([fix_id], platform=ctx.platform, config=ctx.config)
        o = res[fix_id]
        state, reason, ok = o.state, o.reason, o.ok
        if o.state in ("applied", "pending"):
            reason = "in this diag process only; use --run-dir for a running engine, or " \
                     "`diag run --fix` to start one with it"
    else:
        res = orchestrator.revert([fix_id])
        o = res[fix_id]
        state, reason, ok = o.state, o.reason, o.ok and all(r.ok for r in res.values())
        if ok:
            reason = "in this diag process only"
    others = {d: r for d, r in res.items() if d != fix_id}
    if as_json:
        doc = {"schema_version": SCHEMA_VERSION, "fix": fix_id, "action": action, "ok": ok, "state": state,
               "reason": reason}
        if others:
            doc["with"] = [{"fix": d, "state": r.state, "reason": r.reason, "ok": r.ok}
                           for d, r in others.items()]
        click.echo(json.dumps(doc, indent=2))
    else:
        if state == "not-applied":
            click.echo(f"diag: {reason}", err=True)
        else:
            click.echo(f"{fix_id}: {state}" + (f"  ({reason})" if reason else ""))
        for d, r in others.items():
            click.echo(f"  {'dependency' if action == 'apply' else 'dependant'} {d}: {r.state}"
                       + (f"  ({r.reason})" if r.reason else ""))
    if not ok:
        sys.exit(EXIT_FIX_FAILED)


def _check_id(fix_id: str) -> str:
    from diag import fixes

    if fix_id not in fixes.all_ids():
        raise click.UsageError(f"unknown fix {echo(fix_id)} (known: {', '.join(fixes.all_ids())})")
    return fix_id


def _control_command(action: str):
    @fix.command(action, help=f"{action.capitalize()} fix ID in a running engine (--run-dir DIR: "
                 "every process acknowledges; exit 4 when one refuses or does not answer), or "
                 "in this diag process.")
    @click.argument("fix_id", metavar="ID", callback=given)
    @click.option("--pid", type=click.IntRange(min=1, max=PID_MAX), default=None,
                  help="Only this process of the run (with --run-dir; default: every live "
                       "process).")
    @click.option("--timeout", type=Seconds(min=0, min_open=True), default=30.0,
                  show_default=True, help="Seconds to wait for every process to acknowledge.")
    @click.option("--json", "as_json", is_flag=True, help="Print JSON.")
    @target_options
    @guarded
    def command(fix_id: str, pid: int | None, timeout: float, as_json: bool, run_dir: str | None,
                yes: bool = False, **target_kw) -> None:
        if pid is not None and not run_dir:
            raise click.UsageError("--pid names a process of a run: give --run-dir DIR too")
        if run_dir:  # the engine's own registry decides (plugins may add fixes): exit 4
            _control(fix_id, action, run_dir, pid, timeout, as_json, yes)
        else:
            _check_id(fix_id)
            _here(fix_id, action, as_json, target_kw)

    if action == "revert":
        command = click.option(
            "--yes", is_flag=True,
            help="No warning when the revert re-exposes what the fix prevents in this engine "
                 "(profiler-controlled-teardown on a server with SGLANG_PROFILE_V2).")(command)
    return command


apply_cmd = _control_command("apply")
revert_cmd = _control_command("revert")


# ----------------------------------------------------------------------------- status


@fix.command("status")
@click.option("--run-dir", type=RUN_DIR, metavar="DIR", callback=given,
              help="The run directory (default: every live run found on this machine).")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: {schema_version, runs: [{run_dir, meta, processes}]}.")
@click.option("--log", "log_file", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="The engine's log (its stderr): names how an engine process died when its "
                   "own fatal-error dump went there (SGLang's scheduler enables faulthandler on "
                   "stderr itself).")
@click.option("--server", "server_url", metavar="URL", callback=_server_url,
              help="The engine's server: its accept length (/server_info) makes the predictions "
                   "per token, its inter-token latency (/metrics) a per cent of it.")
@guarded
def status(run_dir: str | None, as_json: bool, log_file: str | None,
           server_url: str | None) -> None:
    """Per engine process: fixes, runtime counters, last events (from the run directory), and
    how a dead one died when it left last words."""
    from diag.cli.common import log
    from diag.engine import last_words, live, rundir
    from diag.engine.events import describe_counters
    from diag.engine.facts import describe

    engine_log = _read_log(log_file) if log_file else None
    dirs = [run_dir] if run_dir else [str(p) for p in rundir.discover()]
    states = [rundir.read_state(d) for d in dirs]
    died = {s.run_dir: last_words.deaths(s, engine_log, log_file or "") for s in states}
    speed, problems = live.server_speed(server_url) if server_url else (None, [])
    for what in problems:
        log(f"--server: {what}")
    views = {(s.run_dir, p.pid): live.of_process(p, s.run_dir, speed)
             for s in states for p in s.processes.values()}
    engines = {s.run_dir: _engine_facts(s.run_dir, server_url) for s in states}
    if as_json:
        runs = []
        for s in states:
            doc = s.to_dict()
            doc["engine"] = engines[s.run_dir]
            for proc in doc["processes"]:
                d = died[s.run_dir].get(proc["pid"])
                proc["death"] = d.as_dict() if d else None
                v = views.get((s.run_dir, proc["pid"]))
                proc["predictions"] = [x.to_dict() for x in v.predictions] if v else []
                proc["live"] = v.to_dict() if v else None
            runs.append(doc)
        click.echo(json.dumps(finite({"schema_version": SCHEMA_VERSION, "runs": runs}),
                              indent=2, default=str))
        return
    if not states:
        log("no running engine started under `diag run` found (pass --run-dir DIR)")
        return
    for s in states:
        meta = s.meta if isinstance(s.meta, dict) else {}
        cmd = _words(meta.get("cmd"))
        click.echo(click.style(f"{s.run_dir}", bold=True) + (f"  {cmd}" if cmd else ""))
        eng = engines[s.run_dir]
        click.echo(f"  engine: sglang {_shown(eng['sglang'])}, platform {_shown(eng['platform'])}"
                   f"{_config_text_of(eng['config'])}")
        for line in describe(eng["sources"]):
            click.echo(f"    {line}")
        if s.other_runs:
            click.echo(f"  {s.other_runs} processes of an earlier run in this directory left out")
        for moved in s.moved_to:
            click.echo(f"  removed or replaced under a live engine: its agents now write to "
                       f"{moved} (diag fix status --run-dir {moved})")
        if not s.processes:
            click.echo("  no process has written events yet")
        for p in s.processes.values():
            argv = _words(p.argv)[:60]
            unread = any(k.endswith("not a file: not read") for k in (p.problems or {}))
            role = "engine process" if p.engine else (
                "role not known (its events were not read)" if unread else "not an engine process")
            if p.rank:
                role += f" {p.rank}"
            d = died[s.run_dir].get(p.pid)
            click.echo(f"  pid {p.pid} (parent {_shown(p.ppid)}) "
                       f"{'died' if d and not p.alive else p.status}  {role}  control at "
                       f"{_shown(p.control)}  {argv}".rstrip())
            if d is not None:
                who = "engine process" if p.engine else "process"
                click.echo(click.style(f"    {who} {p.pid} died: {d.summary}", fg="red")
                           + f"  [from {d.source}]")
                if d.hint:
                    click.echo(f"      hint: {d.hint}")
            for fid, st in sorted(_items(p.fixes)):
                click.echo(f"    fix {fid:<30} {_state_text(st)}")
            for pid_, st in sorted(_items(p.probes)):
                click.echo(f"    counter {pid_:<26} {_state_text(st)}")
            for line in describe_counters(p.counters):
                click.echo(f"    {line}")
            v = views.get((s.run_dir, p.pid))
            for line in v.lines() if v and (v.phases or v.predictions) else ():
                click.echo(f"    {line}")
            for what, count in sorted(_items_n(p.problems)):
                click.echo(f"    read problem: {what} ({count}x)")
            if p.last_events:
                kinds = ", ".join(_shown(e.get("kind") if isinstance(e, dict) else None)
                                  for e in p.last_events[-5:])
                click.echo(f"    last events: {kinds}")


def _engine_facts(run_dir: str, server_url: str | None) -> dict:
    """The engine's release, platform and configuration as `fix list --run-dir` resolves them
    (`diag.engine.facts`), with where each came from; nothing resolved or downloaded here."""
    from diag.context import SpecConfig
    from diag.engine import facts

    info = None
    if server_url:
        from diag import server
        from diag.errors import ServerError

        try:
            info = server.get_server_info(server_url)
        except ServerError:
            info = None
    cfg = SpecConfig()
    res = facts.resolve(None, None, cfg, run_dir, info, server_url)
    version = next((f.sglang_version for f in res.facts if f.sglang_version), None)
    return {"sglang": version, "platform": res.platform,
            "config": {k: v for k, v in vars(cfg).items() if v not in (None, False)},
            "sources": res.sources}


def _config_text_of(cfg: dict) -> str:
    parts = [f"--{k.replace('_', '-')} {v}" for k, v in cfg.items()
             if k in ("attention_backend", "draft_attention_backend", "speculative_num_steps",
                      "speculative_algorithm")]
    return f", {' '.join(parts)}" if parts else ", no configuration recorded"


def _read_log(path: str) -> str:
    """The end of the engine's log (unreadable: one line, exit 3)."""
    import os

    from diag.engine.last_words import MAX_READ
    from diag.errors import DiagError

    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - 4 * MAX_READ))
            return fh.read().decode("utf-8", "replace")
    except OSError as e:
        raise DiagError(f"cannot read the engine log {path}: {e.strerror}") from None


def _shown(v: object) -> str:
    """A value a run directory gave, as text: what is missing or garbled reads `?`, never
    Python's `None`."""
    return "?" if v is None or v == "" else str(v)


def _words(v: object) -> str:
    """A command line (a list of strings) as one line; anything else is not shown."""
    return " ".join(str(w) for w in v) if isinstance(v, list) else ""


def _items(d: object) -> list[tuple[str, dict]]:
    return [(str(k), v if isinstance(v, dict) else {}) for k, v in d.items()] \
        if isinstance(d, dict) else []


def _items_n(d: object) -> list[tuple[str, int]]:
    return [(str(k), v) for k, v in d.items() if isinstance(v, int)] if isinstance(d, dict) else []


def _state_text(st: dict) -> str:
    reason = f"  ({st.get('reason')})" if st.get("reason") else ""
    return f"{_shown(st.get('state'))}{reason}"


# ----------------------------------------------------------------------------- check (CI)


@fix.command("check")
@click.option("--require", "required", multiple=True, metavar="ID|all", callback=given,
              help="Fixes that must be applicable or upstream (repeatable; default: all, "
                   "or none with --require-phase).")
@click.option("--dry/--no-dry", default=True, show_default=True,
              help="Also apply each applicable fix in a child interpreter with the release's "
                   "code loaded; a fix whose dry run cannot run there is unverified (exit 4). "
                   "--no-dry accepts the static check alone.")
@click.option("--python", "python", metavar="PATH", callback=given,
              help="Interpreter for the dry application (one with SGLang's requirements).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: {ok, verdict, fixes: [...]}.")
@click.option("--require-phase", "phase_req", multiple=True, metavar="PHASE=MODE",
              callback=lambda _c, _p, v: _phase_reqs(v),
              help="A phase that must run in this mode for the configuration under audit "
                   "(repeatable), e.g. draft-extend=graph; needs --attention-backend or "
                   "--server. Not met: exit 1.")
@target_options
@config_options
@guarded
def check(required: tuple[str, ...], dry: bool, python: str | None, as_json: bool,
          phase_req: dict[str, str], **target_kw) -> None:
    """For CI: exit 0 only when every required fix is `applicable` or `upstream` for the target
    and platform and, unless --no-dry, each applicable one's dry application fits; else 4
    (a dry application that could not run leaves the fix unverified, also 4). With
    --require-phase, a phase of the configuration under audit in another mode exits 1."""
    import shutil

    from diag import fixes
    from diag.engine.agent import _split
    from diag.engine.fix_check import dry_apply
    from diag.errors import EXIT_FINDINGS, EXIT_FIX_FAILED, EXIT_USAGE, DiagError
    from diag.fixes.base import APPLICABLE, UPSTREAM

    req = _split(",".join(required) or ("" if phase_req else "all"), fixes.all_ids())
    for r in req:
        _check_id(r)
    if python is not None:
        found = shutil.which(python)
        if found is None:
            raise DiagError(f"--python {python}: no such interpreter (not found or not "
                            "executable)", exit_code=EXIT_USAGE)
        python = found
    from diag.fixes.advice import resolve

    ctx = _server_read(build_context(**target_kw, execute=False))
    phase_rows = None
    if phase_req:
        from diag.engine.fix_check import phase_requirements

        backend = ctx.config.draft_attention_backend or ctx.config.attention_backend
        if not backend:
            raise DiagError("--require-phase needs the attention backend under audit: pass "
                            "--attention-backend or --server", exit_code=EXIT_USAGE)
        phase_rows = phase_requirements(ctx, backend, phase_req)
    rows = [{"id": fid, "required": fid in req, "status": a.status, "reason": a.reason,
             "dry": None} for fid, a in resolve(ctx).items()]
    todo = [r["id"] for r in rows if r["status"] == APPLICABLE]
    if dry and todo:
        res = dry_apply(str(ctx.target.root), todo, ctx.platform, python=python)
        for r in rows:
            if r["id"] in res:
                r["dry"] = res[r["id"]]
    for r in rows:
        r["verdict"] = _check_verdict(r, dry, APPLICABLE, UPSTREAM)
        r["ok"] = r["verdict"] == "ok"
    verdicts = {r["verdict"] for r in rows if r["required"]}
    verdict = "fail" if "fail" in verdicts else "unverified" if "unverified" in verdicts else "ok"
    ok = verdict == "ok"
    unverified = [r for r in rows if r["required"] and r["verdict"] == "unverified"]
    phases_ok = all(r["ok"] for r in phase_rows or [])
    if as_json:
        doc = {"schema_version": SCHEMA_VERSION, "target": ctx.target.to_dict(),
               "platform": ctx.platform, "ok": ok and phases_ok, "verdict": verdict,
               "fixes": rows}
        if phase_rows is not None:
            doc["phases"] = phase_rows
        click.echo(json.dumps(doc, indent=2))
    else:
        click.echo(click.style(f"{ctx.target.describe()}, platform {ctx.platform}", bold=True))
        marks = {"ok": "ok  ", "fail": "FAIL", "unverified": "UNVERIFIED"}
        for r in rows:
            mark = marks[r["verdict"]] if r["required"] else "-   "
            click.echo(f"{mark} {r['id']:<32} {r['status']:<11} {r['reason']}")
            if r["dry"]:
                click.echo(f"     dry application: {r['dry']['status']}: {r['dry']['reason']}")
        click.echo({"ok": "all required fixes fit", "fail": "a required fix does not fit",
                    "unverified": "a required fix is unverified: its dry application could "
                                  "not run"}[verdict])
        for r in phase_rows or []:
            where = f" ({r['file']}:{r['line']})" if r.get("file") \
                and f"{r['file']}:{r['line']}" not in r["reason"] else ""
            click.echo(f"{'ok  ' if r['ok'] else 'FAIL'} phase {r['phase']:<14} {r['mode']:<8} "
                       f"(required {r['required_mode']}) {r['backend']}: {r['reason']}{where}")
        if phase_rows:
            click.echo("every required phase is met" if phases_ok
                       else "a required phase is not met")
    if unverified and verdict == "unverified":  # one line on stderr says why, in text and JSON
        r = unverified[0]
        click.echo(f"diag: fix check: {r['id']} unverified: {r['dry']['reason']} (or --no-dry "
                   "to accept the static check alone)", err=True)
    if not ok:
        sys.exit(EXIT_FIX_FAILED)
    if not phases_ok:
        sys.exit(EXIT_FINDINGS)


def _phase_reqs(values: tuple[str, ...]) -> dict[str, str]:
    """--require-phase PHASE=MODE (repeatable) -> {phase: mode}; a bad one is a usage error."""
    from diag.probes.draft_extend_graph.phases import MODES, PHASES

    out: dict[str, str] = {}
    for v in values:
        phase, sep, mode = v.partition("=")
        if not sep or phase not in PHASES or mode not in MODES:
            raise click.BadParameter(f"{v!r}: expected PHASE=MODE, PHASE one of "
                                     f"{', '.join(PHASES)}, MODE one of {', '.join(MODES)}")
        out[phase] = mode
    return out


def _check_verdict(r: dict, dry: bool, applicable: str, upstream: str) -> str:
    """ok | fail | unverified for one row of `fix check`."""
    if r["status"] == upstream:
        return "ok"  # nothing to apply: upstream has it
    if r["status"] != applicable:
        return "fail"
    if not dry:
        return "ok"  # --no-dry: the static check is what was asked for
    st = (r["dry"] or {}).get("status")
    return "ok" if st == "fits" else "fail" if st == "does-not-fit" else "unverified"
