"""Runs the kit's steps one after the other, each under a hard time limit, and owns what must
happen whatever the steps do: every server the kit started is stopped (its process group, never
another process), and the JSON is written, also after Ctrl-C, SIGTERM or a step that broke (the
interrupted step is marked, the checks it and later steps did not judge are `not-run` with the
reason).

Why signals and not threads for the limit: a step blocks in HTTP calls and child processes of its
own; SIGALRM raises `StepTimeout` where the step is, the way Ctrl-C raises KeyboardInterrupt,
and the step's `finally` blocks and `subprocess.run` (which kills its child on any exception)
clean up on the way out.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diag.kit import report
from diag.kit.server import Server, stop_group


class StepTimeout(BaseException):
    """A step ran past its limit (BaseException: a step's `except Exception` must not eat it)."""


class Terminated(BaseException):
    """SIGTERM: stop like Ctrl-C."""


class Operational(Exception):
    """A step could not do its work (no SGLang, the server did not start): exit 3, said once."""


@dataclass
class Options:
    python: str
    model: str | None
    draft_model: str | None
    attention_backend: str | None
    device: str  # cuda | cpu (cuda is also what a ROCm build runs)
    speculative: tuple[str, ...]
    server_args: tuple[str, ...]
    out: Path
    crash: bool = False
    step_timeout: float = 600.0
    rounds: int = 20
    tokens: int = 32
    crash_servers: int = 2
    crash_profiles: int = 3

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["out"] = str(self.out)
        d["speculative"] = list(self.speculative)
        d["server_args"] = list(self.server_args)
        return d


@dataclass
class Kit:
    """What the steps share: the options, the document being filled, the servers started."""

    opts: Options
    doc: dict[str, Any]
    progress: Callable[[str], None]
    t0: float = field(default_factory=time.monotonic)
    servers: list[Server] = field(default_factory=list)
    main: Server | None = None  # the server every check reads
    models: dict[str, str] = field(default_factory=dict)
    gpu: bool = False
    platform: str | None = None  # hip | cuda | None (a CPU torch)
    state: dict[str, Any] = field(default_factory=dict)  # what one step hands a later one
    _step: str = ""

    @property
    def work(self) -> Path:
        return self.opts.out / "work"

    @property
    def server(self) -> Server:
        """The main server, for a step that `needs_server` (the runner runs none without it)."""
        assert self.main is not None
        return self.main

    def say(self, msg: str) -> None:
        self.progress(f"[{time.monotonic() - self.t0:7.1f} s] {self._step}: {msg}")

    def record(self, cid: str, status: str, detail: str, values: dict[str, Any] | None = None,
               reason: str | None = None) -> None:
        """One check's outcome; `not-run` needs its reason. The step's own checks only."""
        step = self.doc["_declared"].get(cid)
        if step != self._step:
            raise ValueError(f"check {cid!r} is not one of step {self._step!r}'s")
        if status == report.NOT_RUN and not (reason or "").strip():
            raise ValueError(f"check {cid!r}: not-run without a reason")
        entry = next(c for c in self.doc["checks"] if c["id"] == cid)
        entry.update(status=status, detail=detail, reason=reason if status == report.NOT_RUN
                     else None, values=values or {}, judged=True,
                     elapsed_s=round(time.monotonic() - self.t0, 1))
        self.say(f"{cid} {status}: {detail if status != report.NOT_RUN else reason}"[:200])

    def judge(self, cid: str, ok: bool | None, detail: str, values: dict[str, Any] | None = None,
              why_not: str | None = None) -> None:
        """A `diag.kit.checks.Check`-style verdict (None: could not be judged, the detail says
        why) recorded as pass / fail / not-run."""
        if ok is None:
            self.record(cid, report.NOT_RUN, detail, values, why_not or detail)
        else:
            self.record(cid, report.PASS if ok else report.FAIL, detail, values)

    def start(self, server: Server) -> Server:
        """Keep `server` to stop it at the end, whatever happens."""
        self.servers.append(server)
        return server


class Step:
    """One step: its id, a title, the checks it owns (id -> title), and `run`."""

    id = ""
    title = ""
    checks: dict[str, str] = {}
    needs_server = True

    def run(self, kit: Kit) -> None:  # pragma: no cover - every step overrides it
        raise NotImplementedError


@contextlib.contextmanager
def _limit(seconds: float) -> Iterator[None]:
    def fire(_sig: int, _frame: object) -> None:
        raise StepTimeout

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _on_term(_sig: int, _frame: object) -> None:
    raise Terminated


def _new_doc(kit_opts: Options, steps: list[Step]) -> dict[str, Any]:
    from diag import __version__
    from diag.schemas import SCHEMA_VERSION

    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "kind": report.KIND,
        "tool": {"name": "diag", "version": __version__},
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "options": kit_opts.to_dict(), "environment": {}, "server": None,
        "steps": [{"id": s.id, "title": s.title, "status": report.STEP_SKIPPED,
                   "elapsed_s": None, "message": "not reached"} for s in steps],
        "checks": [{"id": cid, "step": s.id, "title": title, "status": report.NOT_RUN,
                    "reason": "not reached", "detail": "", "values": {}, "elapsed_s": None}
                   for s in steps for cid, title in s.checks.items()],
        "interrupted": None, "operational": [], "processes_left": None,
        "wall_s": None, "exit_code": None, "json_path": None,
    }
    doc["_declared"] = {cid: s.id for s in steps for cid in s.checks}
    return doc


def _unjudged(doc: dict[str, Any], step: str, reason: str) -> None:
    for c in doc["checks"]:
        if c["step"] == step and not c.get("judged"):
            c.update(status=report.NOT_RUN, reason=reason)


def finish(kit: Kit) -> dict[str, Any]:
    """The document as written: counts, exit code, the private keys dropped."""
    doc = {k: v for k, v in kit.doc.items() if not k.startswith("_")}
    doc["checks"] = [{k: v for k, v in c.items() if k != "judged"} for c in doc["checks"]]
    doc["wall_s"] = round(time.monotonic() - kit.t0, 1)
    doc["counts"] = report.counts(doc)
    doc["exit_code"] = report.exit_code(doc)
    return doc


def write(kit: Kit) -> dict[str, Any]:
    """kit.json and summary.md under --out (atomically: a reader never sees half a file)."""
    out = kit.opts.out
    out.mkdir(parents=True, exist_ok=True)
    kit.doc["json_path"] = str(out / "kit.json")
    doc = finish(kit)
    for name, text in (("kit.json", json.dumps(doc, indent=1, default=str)),
                       ("summary.md", report.render(doc) + "\n")):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, out / name)
    return doc


def stop_all(kit: Kit) -> list[int]:
    """Stop every server the kit started (SIGTERM to its process group, then SIGKILL); the pids
    of those groups still alive afterwards (psutil), which should be none."""
    import psutil

    groups = [s.proc.pid for s in kit.servers]
    for s in kit.servers:
        stop_group(s.proc)

    def alive() -> list[int]:
        out = []
        for p in psutil.process_iter(["pid", "status"]):
            with contextlib.suppress(psutil.Error, OSError):
                if os.getpgid(p.pid) in groups and p.info["status"] != psutil.STATUS_ZOMBIE:
                    out.append(p.pid)
        return sorted(out)

    deadline = time.monotonic() + 15  # SIGKILLed processes take a moment to go
    left = alive()
    while left and time.monotonic() < deadline:
        time.sleep(0.3)
        left = alive()
    return left


def run(opts: Options, steps: list[Step], progress: Callable[[str], None]) -> dict[str, Any]:
    """Every step in order; returns the document written (kit.json)."""
    kit = Kit(opts=opts, doc=_new_doc(opts, steps), progress=progress)
    opts.out.mkdir(parents=True, exist_ok=True)
    kit.work.mkdir(parents=True, exist_ok=True)
    old_term = signal.signal(signal.SIGTERM, _on_term)
    rows = {r["id"]: r for r in kit.doc["steps"]}
    try:
        for i, step in enumerate(steps):
            row = rows[step.id]
            kit._step = step.id
            t = time.monotonic()
            if step.needs_server and kit.main is None:
                why = "the server did not start" if kit.doc["operational"] else "no server"
                row.update(status=report.STEP_SKIPPED, message=why, elapsed_s=0.0)
                _unjudged(kit.doc, step.id, why)
                continue
            kit.say("start")
            try:
                with _limit(opts.step_timeout):
                    step.run(kit)
                row.update(status=report.STEP_DONE, message="")
                _unjudged(kit.doc, step.id, "the step did not judge it (a bug: report it)")
            except (KeyboardInterrupt, Terminated) as e:
                sig = "SIGINT" if isinstance(e, KeyboardInterrupt) else "SIGTERM"
                row.update(status=report.STEP_INTERRUPTED, message=f"{sig} during this step")
                kit.doc["interrupted"] = {"step": step.id, "signal": sig}
                _unjudged(kit.doc, step.id, f"interrupted ({sig}) during this step")
                for later in steps[i + 1:]:
                    rows[later.id].update(message=f"not reached: interrupted ({sig})")
                    _unjudged(kit.doc, later.id, f"not reached: interrupted ({sig})")
                kit.say(f"interrupted by {sig}: stopping the servers it started")
                break
            except StepTimeout:
                why = f"the step ran past its limit of {opts.step_timeout:g} s (--step-timeout)"
                row.update(status=report.STEP_TIMED_OUT, message=why)
                kit.doc["operational"].append(f"{step.id}: {why}")
                _unjudged(kit.doc, step.id, why)
                kit.say(why)
            except Operational as e:
                row.update(status=report.STEP_ERROR, message=str(e)[:2000])
                kit.doc["operational"].append(f"{step.id}: {str(e)[:500]}")
                _unjudged(kit.doc, step.id, f"{step.id} could not run: {str(e)[:300]}")
                kit.say(f"could not run: {str(e).splitlines()[0][:200] if str(e) else ''}")
            except Exception as e:  # a broken step is said, the others still run
                msg = f"{type(e).__name__}: {e}"
                row.update(status=report.STEP_ERROR, message=msg[:2000])
                kit.doc["operational"].append(f"{step.id}: {msg[:500]}")
                _unjudged(kit.doc, step.id, f"the step broke: {msg[:300]}")
                kit.say(f"broke: {msg[:200]}")
            finally:
                row["elapsed_s"] = round(time.monotonic() - t, 1)
                with contextlib.suppress(OSError):
                    write(kit)  # what ran so far survives even a SIGKILL of the kit
    finally:
        # a second Ctrl-C must not leave servers running: ignored while they are stopped
        old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            kit._step = "stop"
            if kit.servers:
                kit.say(f"stopping {len(kit.servers)} server(s) it started")
            kit.doc["processes_left"] = stop_all(kit)
            doc = write(kit)
        finally:
            signal.signal(signal.SIGINT, old_int)
            signal.signal(signal.SIGTERM, old_term)
    kit.say(f"done: {doc['counts']} exit {doc['exit_code']}; {kit.doc['json_path']}")
    return doc


def stderr_progress(line: str) -> None:
    sys.stderr.write(f"diag kit {line}\n")
    sys.stderr.flush()
