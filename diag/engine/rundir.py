"""The run directory: how engine processes (the agent) and diag's readers (CLI, TUI, fleet) talk.

A run directory is private to its user: mode 0700, owned by the current user. diag refuses one
that is owned by someone else or open to group/others (a one-line `DiagError`), because control
requests written there change code inside the engine.

Layout::

    D/run.json               written by `diag run`: {schema_version, created, cmd, fixes, probes}
    D/events-<pid>.jsonl     one file per process, JSON lines, flushed after every event
    D/events-<pid>.1.jsonl   the previous file of that process once the current one hit its cap
    D/control/<id>.json      control requests (written atomically: temp file + rename)

Events: one JSON object per line; the kinds, their fields and how a reader folds them are defined
in `diag.engine.events` (schema: `diag/schemas/event-v1.json`).

Control request (``control/<id>.json``): ``{"id", "fix", "action": "apply"|"revert", "pid":
int|null, "ts"}``. ``pid`` null means every process of the run. Each agent acts on a request once
and acknowledges it with a ``control_ack`` event; a process that starts later replays the
run-wide requests in order, so every process converges on the last requested state.

Discovery: `diag run` registers its run directory in a per-user registry
(``$XDG_RUNTIME_DIR/diag/registry`` when that exists, else ``registry`` in diag's cache
directory, `diag.releases.cache_root()`, by default ``~/.cache/diag``), and
engine processes carry ``DIAG_RUN_DIR`` in their environment; `discover()` uses both.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import json
import os
import secrets
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diag.engine import control, events
from diag.engine.eventlog import (  # noqa: F401  (the writer's names, where readers look)
    DEFAULT_MAX_BYTES,
    ENV_MAX_BYTES,
    EventWriter,
    read_state_file,
)
from diag.engine.events import UNKNOWN, Fold
from diag.errors import DiagError
from diag.schemas import SCHEMA_VERSION

# Environment the agent reads (set by `diag run`, or by hand for the plugin / in-process use).
ENV_RUN_DIR = "DIAG_RUN_DIR"  # where to write events and read control requests
ENV_FIXES = "DIAG_FIXES"  # comma list of fix ids, or "all"
ENV_PROBES = "DIAG_PROBES"  # comma list of runtime counters to switch on, or "all"
ENV_AGENT = "DIAG_AGENT"  # "1": load the agent even with no fixes/probes (events only); "0": never
ENV_POLL = "DIAG_CONTROL_POLL"  # seconds between control-directory polls (default 0.2)
ENV_RUN_ID = "DIAG_RUN_ID"  # the run this process belongs to (`run.json` `run_id`)


# ----------------------------------------------------------------------------- the directory


def _base() -> Path:
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg) and os.access(xdg, os.W_OK):
        return Path(xdg) / "diag"
    from diag.releases import cache_root

    return cache_root()


def registry_dir() -> Path:
    return _base() / "registry"


def check_run_dir(path: str | os.PathLike) -> Path:
    """The run directory if it is safe to use: a directory owned by us, closed to others."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise DiagError(f"run directory {p} does not exist") from None
    except OSError as e:
        raise DiagError(f"run directory {p}: {e.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise DiagError(f"run directory {p} is not a directory")
    if st.st_uid != os.getuid():
        raise DiagError(f"refusing run directory {p}: owned by uid {st.st_uid}, not by you "
                        f"(uid {os.getuid()})")
    if st.st_mode & 0o077:
        raise DiagError(f"refusing run directory {p}: mode {stat.S_IMODE(st.st_mode):04o} lets "
                        "group/others in (chmod 700 it)")
    return p


def create_run_dir(path: str | os.PathLike | None = None) -> Path:
    """Create (or accept an existing safe) run directory with mode 0700; the path, absolute."""
    if path is None:
        base = _base() / "runs"
        base.mkdir(parents=True, exist_ok=True, mode=0o700)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        p = base / f"run-{stamp}-{os.getpid()}"
    else:
        p = Path(path).expanduser()
    p = p.absolute()
    if not p.exists():
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.mkdir(mode=0o700)
            os.chmod(p, 0o700)  # mkdir's mode is filtered by the umask
        except FileExistsError:
            pass
        except OSError as e:
            raise DiagError(f"cannot create run directory {p}: {e.strerror}") from None
    check_run_dir(p)
    (p / "control").mkdir(mode=0o700, exist_ok=True)
    return p


def new_run_id() -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(4)}"


def write_meta(run_dir: Path, **meta: Any) -> str:
    """Write `run.json` with a new run id (the agents of this run carry it); the id."""
    rid = meta.pop("run_id", None) or new_run_id()
    doc = {"schema_version": SCHEMA_VERSION, "created": time.time(), "run_id": rid, **meta}
    _atomic_write(Path(run_dir) / "run.json", doc)
    return rid


def read_meta(run_dir: Path) -> dict[str, Any]:
    """run.json ({} when absent, not a regular file, or not JSON)."""
    fh = open_regular(Path(run_dir) / "run.json")
    if fh is None:
        return {}
    with contextlib.suppress(OSError, ValueError), fh:
        doc = json.loads(fh.read(1 << 20).decode("utf-8", "replace"))
        if isinstance(doc, dict):
            return doc
    return {}


def claim(run_dir: Path) -> None:
    """Refuse to start a new run in a directory a live run still uses (its agents would read
    the new run's requests): one line, exit 3. A finished run's directory is reused; its
    processes are then another run's and readers leave them out."""
    old = read_meta(run_dir)
    live = [p for p in pids_in(run_dir) if _alive_in(run_dir, p)]
    if live:
        raise DiagError(f"run directory {run_dir} is in use by run {old.get('run_id') or '?'} "
                        f"(live pid {', '.join(map(str, live[:5]))}): pass another --run-dir")


def _registry_entry(run_dir: Path) -> Path:
    return registry_dir() / f"{hashlib.sha1(str(run_dir).encode()).hexdigest()[:16]}.json"


def register(run_dir: Path) -> None:
    """Remember a run directory in the per-user registry (for `discover`)."""
    try:
        registry_dir().mkdir(parents=True, exist_ok=True, mode=0o700)
        _atomic_write(_registry_entry(run_dir),
                      {"run_dir": str(run_dir), "registered": time.time()})
    except OSError:
        pass  # discovery falls back to the process scan


def discard(run_dir: Path, remove_dir: bool) -> None:
    """Undo `create_run_dir` + `write_meta` + `register` for a run that never started."""
    run_dir = Path(run_dir)
    for path in (_registry_entry(run_dir), run_dir / "run.json"):
        with contextlib.suppress(OSError):
            path.unlink()
    if remove_dir:
        for d in (run_dir / "control", run_dir):
            with contextlib.suppress(OSError):
                d.rmdir()  # only when empty: never anything else that is in there


def _atomic_write(path: Path, doc: dict) -> None:
    """Temp file + rename; on any failure the temp file is removed and the error re-raised."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(doc, fh)
            fh.flush()
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# ----------------------------------------------------------------------------- writing events
# `EventWriter` (diag.engine.eventlog): numbered events, lost writes counted, the state file.

# ----------------------------------------------------------------------------- reading state


@dataclass
class ProcessState:
    pid: int
    ppid: int | None
    argv: list[str]
    started: float | None
    sglang: str | None
    alive: bool
    fixes: dict[str, dict[str, Any]]  # id -> {state, reason}
    counters: dict[str, Any]
    last_events: list[dict[str, Any]]
    acks: dict[str, dict[str, Any]]  # request id -> control_ack event
    start: dict[str, Any] | None = None
    probes: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> {state, reason}
    control: str = "poll"  # where control requests are applied: "batch" or "poll"
    engine: bool = False  # runs batches (a scheduler): control requests must reach it
    run: str | None = None  # the run id its agent was started with
    rank: str | None = None  # a scheduler's ranks as SGLang names them ("TP1"; "" single-rank)

    @property
    def holds_fixes(self) -> bool:
        """Whether a fix can be in this process: it is an engine process or imported SGLang.
        A helper that never imports SGLang (multiprocessing's resource tracker) cannot."""
        return self.engine or bool(self.sglang)

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "ppid": self.ppid, "argv": self.argv, "started": self.started,
                "sglang": self.sglang, "alive": self.alive, "fixes": self.fixes,
                "probes": self.probes, "control": self.control, "engine": self.engine,
                "counters": self.counters, "run": self.run, "rank": self.rank,
                "last_events": self.last_events}


@dataclass
class RunState:
    run_dir: str
    meta: dict[str, Any]
    processes: dict[int, ProcessState] = field(default_factory=dict)
    other_runs: int = 0  # processes of an earlier run in this directory, left out

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "run_dir": self.run_dir, "meta": self.meta,
                "other_runs": self.other_runs,
                "processes": [p.to_dict() for p in self.processes.values()]}

    @property
    def live(self) -> list[ProcessState]:
        return [p for p in self.processes.values() if p.alive]


def _alive(pid: int, started: float | None) -> bool:
    try:
        import psutil

        proc = psutil.Process(pid)
        if started is not None and proc.create_time() > started + 2.0:
            return False  # the pid was reused by a later process
        return proc.status() != psutil.STATUS_ZOMBIE
    except Exception:
        return False


def open_regular(path: Path):
    """A binary file object for a regular file at `path`, never following a link nor opening a
    FIFO or device for reading (a link to /dev/zero would never end); None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
    except OSError:
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


def _read_lines(path: Path) -> list[dict[str, Any]]:
    out = []
    fh = open_regular(path)
    if fh is None:
        return out
    try:
        with fh:
            for raw in fh:
                if not raw.endswith(b"\n"):
                    break  # a line being written right now
                with contextlib.suppress(ValueError):
                    ev = json.loads(raw.decode("utf-8", "replace"))
                    if isinstance(ev, dict):
                        out.append(ev)
    except OSError:
        pass
    return out


def _first_event(path: Path) -> dict[str, Any] | None:
    """The first complete event of a file, without reading the rest (up to 8 MiB)."""
    fh = open_regular(path)
    if fh is None:
        return None
    try:
        with fh:
            line = fh.readline(DEFAULT_MAX_BYTES)
        ev = json.loads(line.decode("utf-8", "replace")) if line.endswith(b"\n") else None
    except (OSError, ValueError):
        return None
    return ev if isinstance(ev, dict) else None


def read_process(run_dir: Path, pid: int) -> ProcessState:
    agg = Fold()
    for name in (f"events-{pid}.1.jsonl", f"events-{pid}.jsonl"):
        for ev in _read_lines(run_dir / name):
            agg.add(ev)
    _merge_state_file(agg, read_state_file(run_dir, pid))
    s = agg.start or {}
    return ProcessState(pid=pid, ppid=s.get("ppid"), argv=list(s.get("argv") or []),
                        started=s.get("started"), sglang=agg.sglang or s.get("sglang"),
                        alive=_alive(pid, s.get("started")), fixes=agg.fixes,
                        counters=agg.counters, last_events=list(agg.last), acks=agg.acks,
                        start=agg.start, probes=agg.probes, control=agg.control,
                        engine=agg.engine, run=s.get("run"), rank=agg.rank)


def _merge_state_file(agg: Fold, st: dict[str, Any] | None) -> None:
    """The state file is ahead of the events when events are being lost now: its loss count,
    acknowledgements and fix states are the truth then; a fix it does not name is unknown."""
    if not st:
        return
    for ack in st.get("acks") or []:
        if isinstance(ack, dict) and str(ack.get("request")) not in agg.acks:
            agg.acks[str(ack.get("request"))] = ack
    if st.get("engine"):
        agg.engine = True
    if agg.rank is None and isinstance(st.get("rank"), str):
        agg.rank = st["rank"]
    lost = st.get("lost") or {}
    n = st.get("n")
    read = agg.next_n or 0  # the sequence number after the last event read
    if not (isinstance(n, int) and n >= read and lost.get("now")):
        return
    sec = agg.counters.setdefault("lost", events.empty_lost())
    sec["events"] = max(int(sec.get("events") or 0), int(lost.get("events") or 0), n - read + 1)
    sec["since"] = sec.get("since") or lost.get("since")
    sec["reason"] = lost.get("reason") or sec.get("reason") or ""
    known = {f: v for f, v in (st.get("fixes") or {}).items() if isinstance(v, dict)}
    for fid in set(agg.fixes) | set(known):
        agg.fixes[fid] = known.get(fid) or {"state": UNKNOWN, "reason": "events lost"}


def pids_in(run_dir: Path) -> list[int]:
    pids = set()
    for pattern, prefix, suffix in (("events-*.jsonl", "events-", ".jsonl"),
                                    ("state-*.json", "state-", ".json")):
        for p in Path(run_dir).glob(pattern):
            core = p.name[len(prefix):-len(suffix)].split(".")[0]
            if core.isdigit():
                pids.add(int(core))
    return sorted(pids)


def _alive_in(run_dir: Path, pid: int) -> bool:
    started = None
    ev = _first_event(Path(run_dir) / f"events-{pid}.jsonl")  # a start, or a snapshot with it
    if ev is not None:
        started = events.started(events.parse(ev))
    return _alive(pid, started)


def read_state(run_dir: str | os.PathLike) -> RunState:
    """Everything the run directory says: per process start info, fixes, counters, last events.

    Processes of another run that used this directory before (their start names another run
    id) are left out and counted in `other_runs`."""
    d = check_run_dir(run_dir)
    meta = read_meta(d)
    state = RunState(run_dir=str(d), meta=meta)
    rid = meta.get("run_id")
    for pid in pids_in(d):
        ps = read_process(d, pid)
        if rid and ps.run and ps.run != rid:
            state.other_runs += 1
            continue
        state.processes[pid] = ps
    return state


# ----------------------------------------------------------------------------- control


_req_counter = itertools.count()


def request(run_dir: str | os.PathLike, fix_id: str, action: str, pid: int | None = None) -> str:
    """Ask the agents of a run (or the one process `pid`) to apply/revert a fix; the request id.

    A write that fails (a full disk, a read-only folder) is a DiagError (exit 3) naming the
    cause, and leaves no temporary file; requests that no longer matter are pruned."""
    if action not in control.ACTIONS:
        raise DiagError(f"unknown control action {action!r} (apply or revert)")
    d = check_run_dir(run_dir)
    ctl = d / "control"
    rid = f"{time.time_ns():020d}-{os.getpid()}-{next(_req_counter)}"
    doc = {"schema_version": control.VERSION, "id": rid, "run": read_meta(d).get("run_id"),
           "fix": fix_id, "action": action, "pid": pid, "ts": time.time()}
    try:
        ctl.mkdir(mode=0o700, exist_ok=True)
        _atomic_write(ctl / f"{rid}.json", doc)
    except OSError as e:
        code = errno.errorcode.get(e.errno or 0, "")
        raise DiagError(f"cannot write the control request into {ctl}: {e.strerror or e}"
                        + (f" ({code})" if code else "")) from None
    with contextlib.suppress(Exception):
        control.prune(ctl, rid, alive=lambda p: _alive_in(d, p))
    return rid


def read_requests(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The valid control requests in the order they were made (ids sort by time)."""
    out = []
    for name, doc, why, _quiet in control.Reader(run_dir).new():
        if why is None and control.problem(doc, name, None, None) is None:
            out.append(doc)
    return out


def wait_ack(run_dir: str | os.PathLike, request_id: str, pid: int | None = None,
             timeout: float = 10.0, interval: float = 0.05,
             engines_only: bool = False) -> dict[int, dict[str, Any] | None]:
    """Wait until the addressed live processes acknowledged `request_id`.

    Returns {pid: control_ack event or None (not acknowledged in time)} for every live process
    addressed (all live processes of the run when `pid` is None). With `engines_only` only the
    processes `waited_for` names are waited for; the others are in the result with whatever they
    acknowledged by then.
    """
    d = check_run_dir(run_dir)
    deadline = time.monotonic() + timeout
    while True:
        acks: dict[int, dict[str, Any] | None] = {}
        procs: dict[int, ProcessState] = {}
        for p in [pid] if pid is not None else pids_in(d):
            ps = procs[p] = read_process(d, p)
            if ps.acks.get(request_id) is not None:
                acks[p] = ps.acks[request_id]
            elif ps.alive:
                acks[p] = None
        waited = waited_for(procs, acks) if engines_only else set(acks)
        if not acks or all(acks[p] is not None for p in waited) or time.monotonic() > deadline:
            return acks  # nothing live to wait for, all acknowledged, or out of time
        time.sleep(interval)


def waited_for(procs: dict[int, ProcessState], pids: Iterable[int]) -> set[int]:
    """Of `pids`, the processes an apply/revert must hear from: the engine processes once the
    run has one, else those that can hold a fix (SGLang imported), else all of them."""
    pids = [p for p in pids if p in procs]
    engines = {p for p in pids if procs[p].engine}
    if engines:
        return engines
    holders = {p for p in pids if procs[p].holds_fixes}
    return holders or set(pids)


def not_waited_reason(ps: ProcessState | None, engines: bool) -> str:
    """Why `waited_for` left a process out."""
    if ps is not None and not ps.holds_fixes:
        return "never imported SGLang, so no fix can be in it: not waited for"
    return "not an engine process: not waited for" if engines else "not waited for"


# ----------------------------------------------------------------------------- discovery


def _has_live_process(d: Path) -> bool:
    return any(_alive_in(d, pid) for pid in pids_in(d))


def discover() -> list[Path]:
    """Run directories of live engines: the process scan (DIAG_RUN_DIR) and the user's registry."""
    found: list[Path] = []
    seen: set[str] = set()

    def consider(path: str) -> None:
        p = Path(path)
        key = str(p.absolute())
        if key in seen:
            return
        seen.add(key)
        try:
            check_run_dir(p)
        except DiagError:
            return
        if _has_live_process(p):
            found.append(p)

    try:
        import psutil

        me = os.getuid()
        for proc in psutil.process_iter(["pid", "uids"]):
            try:
                if proc.info["uids"] is None or proc.info["uids"].real != me:
                    continue
                env = proc.environ()
            except Exception:  # not ours, gone, or not readable
                continue
            if env.get(ENV_RUN_DIR):
                consider(env[ENV_RUN_DIR])
    except Exception:
        pass
    reg = registry_dir()
    with contextlib.suppress(OSError):
        for entry in sorted(reg.glob("*.json")):
            with contextlib.suppress(OSError, ValueError):
                consider(json.loads(entry.read_text(encoding="utf-8"))["run_dir"])
    return found
