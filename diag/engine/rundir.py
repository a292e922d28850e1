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

A directory removed under a live engine (`rm -rf D`, with or without a new `D` made after):
its agents go on in ``runs/moved-<run id>`` beside the default run directories, whose run.json
names ``D`` under ``replaces``; readers of ``D`` say where (`moved_to`).

Readers: `RunReader` is the one reader (incremental, typed, never trusting a file: see
`ProcessReader`); `read_state` is its first poll.

Discovery: `diag run` registers its run directory in a per-user registry
(``$XDG_RUNTIME_DIR/diag/registry`` when that exists, else ``registry`` in diag's cache
directory, `diag.releases.cache_root()`, by default ``~/.cache/diag``), and
engine processes carry ``DIAG_RUN_DIR`` in their environment; `discover()` uses both.

Size (over ~600 lines, kept whole): the run directory's whole protocol (layout, registry,
readers, control requests) sits in one module so that its writers and readers cannot drift apart.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import json
import math
import os
import secrets
import stat
import time
from collections.abc import Callable, Iterable
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
from diag.schemas import SCHEMA_VERSION, loads_finite

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
        doc = loads_finite(fh.read(1 << 20).decode("utf-8", "replace"))
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


def relocate(old: Path, run_id: str | None, pid: int) -> Path:
    """Where a live engine's agents go on when their run directory `old` was removed or
    replaced under them: one new private directory per run (every process of the run computes
    the same one), whose run.json names the directory it replaces, registered for discovery
    and for `moved_to`."""
    name = f"moved-{run_id}" if run_id else f"moved-pid-{pid}"
    d = create_run_dir(_base() / "runs" / name)
    if not read_meta(d):
        write_meta(d, run_id=run_id, replaces=str(old), moved=time.time())
    register(d)
    return d


def moved_to(run_dir: str | os.PathLike) -> list[Path]:
    """Directories the live agents of a run moved to after `run_dir` was removed or replaced
    under them (registered, their run.json naming `run_dir` as the one they replace)."""
    key = str(Path(run_dir).absolute())
    out = []
    for d in _registered():
        if read_meta(d).get("replaces") == key and _has_live_process(d):
            out.append(d)
    return out


def _registered() -> list[Path]:
    """The run directories of the user's registry (a damaged entry is skipped)."""
    out: list[Path] = []
    with contextlib.suppress(OSError):
        for entry in sorted(registry_dir().glob("*.json")):
            fh = open_regular(entry)  # a damaged entry is skipped, never the end of discovery
            if fh is None:
                continue
            with contextlib.suppress(OSError, ValueError, RecursionError), fh:
                doc = json.loads(fh.read(1 << 16).decode("utf-8", "replace"))
                if isinstance(doc, dict) and isinstance(doc.get("run_dir"), str) \
                        and doc["run_dir"].strip() and "\0" not in doc["run_dir"]:
                    out.append(Path(doc["run_dir"]))
    return out


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


def _write_marker(marker: Path) -> None:
    """The waiting marker, whole from the start: its pid is written to a temporary file that is
    renamed in. A marker made empty and filled after (open, then write) was seen empty by
    another command's prune, taken for one whose command died, and removed: the request was
    pruned before every agent had read it (tests/test_control_race.py). The temporary name
    matches `control.TMP_NAME`, so a writer killed before its rename leaves nothing for good."""
    tmp = marker.with_name(f".w{marker.name[len(control.WAIT_PREFIX) - 1:]}.json."
                           f"{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(str(os.getpid()))
        os.replace(tmp, marker)
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
    problems: dict[str, int] = field(default_factory=dict)  # what was wrong in what was read
    rank: str | None = None  # a scheduler's ranks as SGLang names them ("TP1"; "" single-rank)
    stopped: bool = False  # alive but stopped (SIGSTOP, a tracer): it answers nothing until continued

    @property
    def status(self) -> str:
        """LIVE, STOPPED or EXITED (how `fix status` and the TUI name it)."""
        return STOPPED if self.alive and self.stopped else LIVE if self.alive else EXITED

    @property
    def registry(self) -> list[str] | None:
        """The fix ids this process's registry announced at start (None: not announced)."""
        r = (self.start or {}).get("registry")
        return r if isinstance(r, list) and all(isinstance(x, str) for x in r) else None

    @property
    def holds_fixes(self) -> bool:
        """Whether a fix can be in this process: it is an engine process or imported SGLang.
        A helper that never imports SGLang (multiprocessing's resource tracker) cannot."""
        return self.engine or bool(self.sglang)

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "ppid": self.ppid, "argv": self.argv, "started": self.started,
                "sglang": self.sglang, "alive": self.alive, "fixes": self.fixes,
                "probes": self.probes, "control": self.control, "engine": self.engine,
                "counters": self.counters, "run": self.run, "problems": self.problems, "rank": self.rank,
                "status": self.status, "last_events": self.last_events}


@dataclass
class RunState:
    run_dir: str
    meta: dict[str, Any]
    processes: dict[int, ProcessState] = field(default_factory=dict)
    other_runs: int = 0  # processes of an earlier run in this directory, left out
    # with no live process here: where the live agents of the run went (`moved_to`)
    moved_to: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "run_dir": self.run_dir, "meta": self.meta,
                "other_runs": self.other_runs, "moved_to": self.moved_to,
                "processes": [p.to_dict() for p in self.processes.values()]}

    @property
    def live(self) -> list[ProcessState]:
        return [p for p in self.processes.values() if p.alive]


LIVE, STOPPED, EXITED = "live", "stopped", "exited"  # ProcessState.status


def _liveness(pid: int, started: float | None) -> str:
    """LIVE, STOPPED (SIGSTOP, or a tracer's stop: it exists but runs nothing, answers nothing,
    until continued) or EXITED (gone, a zombie, or its pid reused by a later process)."""
    try:
        import psutil

        proc = psutil.Process(pid)
        if started is not None and proc.create_time() > started + 2.0:
            return EXITED  # the pid was reused by a later process
        st = proc.status()
        if st == psutil.STATUS_ZOMBIE:
            return EXITED
        return STOPPED if st in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP) else LIVE
    except Exception:
        return EXITED


def _alive(pid: int, started: float | None) -> bool:
    return _liveness(pid, started) != EXITED


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


def _not_regular(path: Path) -> str | None:
    """What is at `path` when it is there and not a regular file (never followed); None when
    nothing is there or it is a regular file."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    for test, what in ((stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a link"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device")):
        if test(mode):
            return what
    return None


def _first_event(path: Path) -> dict[str, Any] | None:
    """The first complete event of a file, without reading the rest (up to 8 MiB)."""
    fh = open_regular(path)
    if fh is None:
        return None
    try:
        with fh:
            line = fh.readline(DEFAULT_MAX_BYTES)
        ev = loads_finite(line.decode("utf-8", "replace")) if line.endswith(b"\n") else None
    except (OSError, ValueError):
        return None
    return ev if isinstance(ev, dict) else None


def decode_line(raw: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """(the event object of one complete line, the problem with it). A line that starts with a
    half line (a writer that died mid-line, a full disk, a hand-made append: the next event was
    written after it) gives the event written after the half, and says a half line was
    skipped; a line that is no event at all gives None."""
    try:
        doc = loads_finite(raw)
        return (doc, None) if isinstance(doc, dict) else (None, "a line that is not an object")
    except (ValueError, RecursionError):
        pass
    at = raw.find(b'{"', 1)
    while at > 0:  # the event glued after the half: its object starts at a later '{"'
        try:
            doc = loads_finite(raw[at:])
            if isinstance(doc, dict) and "kind" in doc:
                return doc, "a half line skipped"
        except (ValueError, RecursionError):
            pass
        at = raw.find(b'{"', at + 1)
    return None, "a line that is not JSON"


def _read_lines(path: Path) -> list[dict[str, Any]]:
    """The events of one file (complete lines only), read whole."""
    tail = _Tail(path)
    return [doc for doc, _why in (decode_line(raw) for raw in tail.read()[0]) if doc is not None]


class _Tail:
    """One events file, read from where the last read stopped. A file replaced (another inode:
    a rotation, a hand-made copy) or truncated under the reader is reported, not read on."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.ident: tuple[int, int] | None = None
        self.offset = 0

    def read(self) -> tuple[list[bytes], str | None]:
        """(new complete lines, None | "replaced" | "truncated" | "removed" | what the path is
        when it is there but no regular file: "a directory", "a link", ...)."""
        fh = open_regular(self.path)
        if fh is None:
            if self.ident is not None:
                return [], "removed"
            return [], _not_regular(self.path)
        try:
            with fh:
                st = os.fstat(fh.fileno())
                ident = (st.st_dev, st.st_ino)
                if self.ident is not None and ident != self.ident:
                    return [], "replaced"
                if st.st_size < self.offset:
                    return [], "truncated"
                self.ident = ident
                fh.seek(self.offset)
                data = fh.read(st.st_size - self.offset)
        except OSError:
            return [], None
        end = data.rfind(b"\n") + 1  # a line being written now waits for the next read
        self.offset += end
        return data[:end].splitlines(), None


class ProcessReader:
    """One process's events, folded as they are read: each read costs the new bytes only. When
    the file is replaced or truncated under it, the process is read again from the start (a
    rotation once per cap), so its state is always what a fresh read would say."""

    def __init__(self, run_dir: Path, pid: int) -> None:
        self.run_dir, self.pid = run_dir, pid
        self.delivered = -1  # the highest sequence number handed out as new
        self._reset()

    def _reset(self) -> None:
        self.fold = Fold()
        self.problems: dict[str, int] = {}
        self.tails = [_Tail(self.run_dir / f"events-{self.pid}.1.jsonl"),
                      _Tail(self.run_dir / f"events-{self.pid}.jsonl")]

    def poll(self) -> list[events.Event]:
        """The events read now that were not handed out before."""
        got = self._read()
        if got is None:  # a file replaced or truncated: read everything again
            self._reset()
            got = self._read() or []
        new = [e for e in got if e.n is None or e.n > self.delivered]
        self.delivered = max([self.delivered] + [e.n for e in got if e.n is not None])
        return new

    def _read(self) -> list[events.Event] | None:
        out: list[events.Event] = []
        first = self.tails[0].ident is None and self.tails[1].ident is None
        for i, tail in enumerate(self.tails):
            if i == 0 and not first:
                continue  # the rotated file is read once; a new rotation replaces the current
            lines, what = tail.read()
            if what in ("replaced", "truncated"):
                return None
            if what and what != "removed":  # said once, however often it is polled
                self.problems[f"{tail.path.name} is {what}, not a file: not read"] = 1
            for raw in lines:
                doc, why = decode_line(raw)
                if why:
                    self._problem(why)
                if doc is None:
                    continue
                e = events.parse(doc)
                for p in e.problems:
                    self._problem(p)
                self.fold.add(e)
                for p in self.fold.problems:  # what a snapshot carried that was not usable
                    self._problem(p)
                self.fold.problems.clear()
                out.append(e)
        return out

    def _problem(self, what: str) -> None:
        self.problems[what] = self.problems.get(what, 0) + 1

    def state(self) -> ProcessState:
        """The process's state now: its events folded, with its state file where the file is
        ahead of the events (events being lost now). The fold itself is not changed."""
        agg = self.fold
        fixes = {k: dict(v) for k, v in agg.fixes.items()}
        acks = dict(agg.acks)
        counters = {**agg.counters, "lost": dict(agg.counters.get("lost") or events.empty_lost())}
        engine, rank = agg.engine, agg.rank
        st = read_state_file(self.run_dir, self.pid)
        problems = dict(self.problems)
        damaged = state_problems(st) if st else []
        for what in damaged:
            problems[f"state file: {what}"] = problems.get(f"state file: {what}", 0) + 1
        if st:
            for ack in st.get("acks") if isinstance(st.get("acks"), list) else ():
                e = events.parse({**ack, "kind": events.ControlAck.kind}) \
                    if isinstance(ack, dict) else None
                if e is None or e.problems or not e.request:  # never a made-up answer
                    bad = ", ".join(e.problems) if e and e.problems else "an ack that is not one"
                    problems[f"state file: {bad}"] = problems.get(f"state file: {bad}", 0) + 1
                elif e.request not in acks:
                    acks[e.request] = e.to_dict()
            engine = engine or st.get("engine") is True
            if rank is None and isinstance(st.get("rank"), str):
                rank = st["rank"]
            if not damaged:  # a state file of the wrong shape tells nothing about losses
                _merge_loss(counters, fixes, st, agg.next_n or 0)
            if counters["lost"].get("events") and not damaged:  # a fix the lost events named is not forgotten
                for fid, v in _known_fixes(st).items():
                    fixes.setdefault(fid, {"state": UNKNOWN,
                                           "reason": f"events lost; last known: {v['state']}"})
        s = agg.start or {}
        started = s.get("started") if isinstance(s.get("started"), (int, float)) else None
        liveness = _liveness(self.pid, started)
        return ProcessState(
            pid=self.pid, ppid=s.get("ppid") if isinstance(s.get("ppid"), int) else None,
            argv=[str(a) for a in s.get("argv") or []] if isinstance(s.get("argv"), list) else [],
            started=started, sglang=agg.sglang or _str(s.get("sglang")),
            alive=liveness != EXITED, stopped=liveness == STOPPED, fixes=fixes, counters=counters,
            last_events=list(agg.last), acks=acks, start=agg.start, probes=dict(agg.probes),
            control=agg.control, engine=engine, run=_str(s.get("run")),
            problems=problems, rank=rank)


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


_STATE_SHAPE = {"n": (int,), "run": (str, type(None)), "ts": (float, int), "lost": (dict,),
                "fixes": (dict,), "engine": (bool,), "rank": (str, type(None)), "acks": (list,)}
_LOST_SHAPE = {"events": (int,), "since": (float, int, type(None)), "reason": (str,),
               "now": (bool,)}


_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", type(None): "null",
               dict: "an object", list: "a list", bool: "true/false"}


def state_problems(st: dict[str, Any]) -> list[str]:
    """What in a state file is not of the shape its writer gives it (`EventWriter.state_doc`):
    a bounded name per field. A file with any is not trusted for losses."""
    out = []

    def bad(doc: dict[str, Any], shape: dict[str, tuple[type, ...]], where: str) -> None:
        for k, types in shape.items():
            v = doc.get(k)
            if k not in doc:
                continue
            if (isinstance(v, bool) and bool not in types) or not isinstance(v, types) or (
                    isinstance(v, float) and not math.isfinite(v)):  # NaN, Infinity
                names = [_TYPE_NAMES[t] for t in types if not (t is int and float in types)]
                out.append(f"{where}{k} is not {' or '.join(names)}")
            elif isinstance(v, (int, float)) and not isinstance(v, bool) and v < (
                    -1 if k == "n" else 0):
                out.append(f"{where}{k} is negative")

    bad(st, _STATE_SHAPE, "")
    if isinstance(st.get("lost"), dict):
        bad(st["lost"], _LOST_SHAPE, "lost.")
    if isinstance(st.get("fixes"), dict) and not all(
            isinstance(v, dict) and isinstance(v.get("state"), str)
            for v in st["fixes"].values()):
        out.append("fixes.* is not a fix state")
    return out


def _merge_loss(counters: dict[str, Any], fixes: dict[str, dict[str, Any]],
                st: dict[str, Any], read: int) -> None:
    """The state file is ahead of the events when events are being lost now: its loss count
    and fix states are the truth then; a fix it does not name is unknown."""
    lost = st.get("lost") if isinstance(st.get("lost"), dict) else {}
    n = st.get("n")
    if not (isinstance(n, int) and not isinstance(n, bool) and n >= read and lost.get("now") is True):
        return
    sec = counters["lost"]
    was = lost.get("events") if isinstance(lost.get("events"), int) else 0
    sec["events"] = max(int(sec.get("events") or 0), was, n - read + 1)
    since = lost.get("since")
    sec["since"] = sec.get("since") or (since if isinstance(since, (int, float)) else None)
    sec["reason"] = _str(lost.get("reason")) or sec.get("reason") or ""
    known = _known_fixes(st)
    for fid in set(fixes) | set(known):
        fixes[fid] = known.get(fid) or {"state": UNKNOWN, "reason": "events lost"}


def _known_fixes(st: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The well-formed fix states of a state file."""
    known = st.get("fixes") if isinstance(st.get("fixes"), dict) else {}
    return {str(f): v for f, v in known.items()
            if isinstance(v, dict) and isinstance(v.get("state"), str)}


def read_process(run_dir: Path, pid: int) -> ProcessState:
    reader = ProcessReader(Path(run_dir), pid)
    reader.poll()
    return reader.state()


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


class RunReader:
    """THE reader of a run directory (`diag fix status`, `diag fix apply|revert`, the TUI, `diag
    env`): each `poll` reads only what the event files gained since the last one and gives the
    run's state (typed per process) and the events new since then. Raises DiagError on an
    unsafe or missing directory."""

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.run_dir = check_run_dir(run_dir)
        self.procs: dict[int, ProcessReader] = {}

    def poll(self) -> tuple[RunState, list[events.Event]]:
        d = check_run_dir(self.run_dir)
        meta = read_meta(d)
        state = RunState(run_dir=str(d), meta=meta)
        rid = meta.get("run_id") if isinstance(meta.get("run_id"), str) else None  # else damaged
        new: list[events.Event] = []
        for pid in pids_in(d):
            reader = self.procs.get(pid)
            if reader is None:
                reader = self.procs[pid] = ProcessReader(d, pid)
            got = reader.poll()
            ps = reader.state()
            if rid and ps.run and ps.run != rid:
                state.other_runs += 1
                continue
            state.processes[pid] = ps
            new.extend(got)
        new.sort(key=lambda e: e.ts)
        if not state.live:
            state.moved_to = [str(p) for p in moved_to(d)]
        return state, new


def read_state(run_dir: str | os.PathLike) -> RunState:
    """Everything the run directory says now (a fresh `RunReader`'s first poll): per process
    start info, fixes, counters, last events, problems read.

    Processes of another run that used this directory before (their start names another run
    id) are left out and counted in `other_runs`."""
    return RunReader(run_dir).poll()[0]


# ----------------------------------------------------------------------------- control


_req_counter = itertools.count()


def request(run_dir: str | os.PathLike, fix_id: str, action: str, pid: int | None = None,
            wait: bool = True, acked: Callable[[str], bool] | None = None) -> str:
    """Ask the agents of a run (or the one process `pid`) to apply/revert a fix; the request id.

    With `wait` this process waits for the answers (`wait_ack`, which ends the wait): until
    then no other command prunes the request. A write that fails (a full disk, a read-only
    folder) is a DiagError (exit 3) naming the cause, and leaves no temporary file; requests
    that no longer matter are pruned (`control.prune`; `acked(id)` says which requests were
    answered, from the caller's own readers, else the run's state is read whole)."""
    if action not in control.ACTIONS:
        raise DiagError(f"unknown control action {action!r} (apply or revert)")
    d = check_run_dir(run_dir)
    ctl = d / "control"
    rid = f"{time.time_ns():020d}-{os.getpid()}-{next(_req_counter)}"
    doc = {"schema_version": control.VERSION, "id": rid, "run": read_meta(d).get("run_id"),
           "fix": fix_id, "action": action, "pid": pid, "ts": time.time()}
    marker = ctl / f"{control.WAIT_PREFIX}{rid}"
    try:
        ctl.mkdir(mode=0o700, exist_ok=True)
        control.sweep_tmp(ctl)  # left by writers killed before their rename
        if wait:  # before the request exists: no other command's prune can take it
            _write_marker(marker)
        _atomic_write(ctl / f"{rid}.json", doc)
    except OSError as e:
        with contextlib.suppress(OSError):
            marker.unlink()
        code = errno.errorcode.get(e.errno or 0, "")
        raise DiagError(f"cannot write the control request into {ctl}: {e.strerror or e}"
                        + (f" ({code})" if code else "")) from None
    with contextlib.suppress(Exception):
        if acked is None:  # the caller keeps no readers of its own: read the run's state
            acked = {r for ps in read_state(d).processes.values() for r in ps.acks}.__contains__
        control.prune(ctl, rid, alive=lambda p: _alive_in(d, p), acked=acked)
    return rid


def done_waiting(run_dir: str | os.PathLike, request_id: str) -> None:
    """This command has its answers to `request_id` (its request may be pruned now)."""
    with contextlib.suppress(OSError):
        (Path(run_dir) / "control" / f"{control.WAIT_PREFIX}{request_id}").unlink()


def read_requests(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The valid control requests in the order they were made (ids sort by time); stale
    temporary files of killed writers are removed first (`control.sweep_tmp`)."""
    control.sweep_tmp(Path(run_dir) / "control")
    out = []
    for name, doc, why, _quiet in control.Reader(run_dir).new():
        if why is None and control.problem(doc, name, None, None) is None:
            out.append(doc)
    return out


def wait_ack(run_dir: str | os.PathLike, request_id: str, pid: int | None = None,
             timeout: float = 10.0, interval: float = 0.05, engines_only: bool = False,
             readers: dict[int, ProcessReader] | None = None,
             ) -> dict[int, dict[str, Any] | None]:
    """Wait until the addressed live processes acknowledged `request_id`.

    Returns {pid: control_ack event or None (not acknowledged in time)} for every live process
    addressed (all live processes of the run when `pid` is None). With `engines_only` only the
    processes `waited_for` names are waited for; the others are in the result with whatever they
    acknowledged by then. `readers`: the caller's own, kept across calls (each read costs only
    what was written since), else new ones that read every events file from its start.
    """
    d = check_run_dir(run_dir)
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout >= 0):
        raise DiagError(f"timeout {timeout!r} is not a finite number of seconds >= 0")
    try:
        return _wait_ack(d, request_id, pid, timeout, interval, engines_only,
                         {} if readers is None else readers)
    finally:
        done_waiting(d, request_id)


def _wait_ack(d: Path, request_id: str, pid: int | None, timeout: float, interval: float,
              engines_only: bool, readers: dict[int, ProcessReader],
              ) -> dict[int, dict[str, Any] | None]:
    deadline = time.monotonic() + timeout
    while True:
        acks: dict[int, dict[str, Any] | None] = {}
        procs: dict[int, ProcessState] = {}
        for p in [pid] if pid is not None else pids_in(d):
            reader = readers.setdefault(p, ProcessReader(d, p))
            reader.poll()  # only what was written since the last round
            ps = procs[p] = reader.state()
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
    for d in _registered():
        consider(str(d))
    return found
