"""An engine process's last words: how it died, kept where `diag fix status` can read them.

Why: a process that dies of a fatal signal or of SGLang's own fatal exception leaves nothing in
its event file; the user sees "exited". Two witnesses, one file per process in the run
directory (`fatal-<pid>.txt`, appended, bounded when read):
- Python's faulthandler, enabled by the agent on that file where the program has not enabled
  its own (SGLang's scheduler enables faulthandler on stderr itself, 0.5.23
  managers/scheduler.py:6295: there the dump stays in the engine's log, which `diag fix status
  --log FILE` reads);
- a logging handler (ERROR records only) that copies SGLang's fatal scheduler exception ("Scheduler
  hit an exception: <traceback>", 0.5.23 managers/scheduler.py:6372) into the file before the
  scheduler exits.
The reader names the causes diag knows: SIGSEGV in the profiler teardown (the stopped profiler
freed by the cyclic GC: issue 29), and SGLang's V2 profiler refusing a plain /start_profile
(`AssertionError: only support profile_by_stage=true now`, 0.5.23 utils/profile_utils.py:111).
Nothing here may raise into the engine.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FILE = "fatal-{pid}.txt"
MAX_READ = 256 * 1024  # the end of a file that grew (a process that logged many errors)

# faulthandler's format (CPython Python/traceback.c, Modules/faulthandler.c)
FATAL = re.compile(r"Fatal Python error: (?P<sig>Segmentation fault|Aborted|Bus error|"
                   r"Floating point exception|Illegal instruction)")
SIGNALS = {"Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT", "Bus error": "SIGBUS",
           "Floating point exception": "SIGFPE", "Illegal instruction": "SIGILL"}
THREAD = re.compile(r"^(?P<current>Current thread|Thread) 0x[0-9a-f]+ .*\(most recent call first\):")
FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
# torch's profiler: its Python package, or the C++ result named in issue 29's native frames
PROFILER_MARK = re.compile(r"ProfilerResult|torch/profiler/|torch/autograd/profiler")
# SGLang's log line at each profiler stop (0.5.23 utils/profile_utils.py:163 "Stop profiling...",
# managers/scheduler_components/profiler_manager.py:339 "Stop profiling" + stage + "...")
PROFILE_STOP = re.compile(r"Stop profiling")

# SGLang's V2 profiler (SGLANG_PROFILE_V2=1) refusing a request; 0.5.23 utils/profile_utils.py
V2_REFUSALS = (
    ("only support profile_by_stage=true now",
     "SGLang's V2 profiler refused a plain /start_profile (AssertionError: only support "
     "profile_by_stage=true now; sglang/srt/utils/profile_utils.py:111 in 0.5.23)",
     "send profile_by_stage=true with /start_profile, or start the server without "
     "SGLANG_PROFILE_V2"),
    ("manually stop is only supported yet",
     "SGLang's V2 profiler refused /stop_profile (NotImplementedError: manually stop is only "
     "supported yet; sglang/srt/utils/profile_utils.py:141 in 0.5.23)",
     "with SGLANG_PROFILE_V2 a stage profile stops by itself after num_steps: never send "
     "/stop_profile"),
    ("manually start is only supported yet",
     "SGLang's V2 profiler refused a manual start (NotImplementedError: manually start is only "
     "supported yet; sglang/srt/utils/profile_utils.py:138 in 0.5.23)",
     "send profile_by_stage=true with /start_profile"),
)
SCHEDULER_EXCEPTION = "Scheduler hit an exception"
# SGLang's launcher on a child's death (0.5.23 utils/watchdog.py:216-219, SubprocessWatchdog):
# "Subprocess {name} (pid={pid}) crashed with exit code {exitcode}. Triggering SIGQUIT ..."
CHILD_DIED = re.compile(r"Subprocess (?P<name>\S+) \(pid=(?P<pid>\d+)\) crashed with exit code "
                        r"(?P<code>-?\d+)")
LOGGER = "sglang"  # every SGLang module logs under it (logging.getLogger(__name__))


@dataclass
class Crash:
    """One faulthandler dump: the signal, the crashing thread's frames (most recent first,
    "file:line in func"), whether the cyclic GC was running there, whether profiler code is in
    the dump."""

    signal: str
    frames: list[str] = field(default_factory=list)
    garbage_collecting: bool = False
    profiler: bool = False
    after_profile_stop: bool = False  # the text logs a profiler stop before the dump

    @property
    def teardown(self) -> bool:
        """The profiler-teardown signature: profiler code in the dump, or a crash inside a cyclic
        collection after a profiler stop was logged (faulthandler prints Python frames only: the
        native `~ProfilerResult` frame of issue 29 is not in its dump). A collection alone is not
        it: any object's finaliser can crash one."""
        return self.profiler or (self.garbage_collecting and self.after_profile_stop)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "teardown": self.teardown}


def crashes(text: str) -> list[Crash]:
    """Every faulthandler dump in a text (a log, a fatal file), in order."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        m = FATAL.search(line)
        if not m:
            continue
        frames: list[str] = []
        gcing = in_current = False
        dump: list[str] = []
        for nxt in lines[i + 1:i + 400]:
            if FATAL.search(nxt) or nxt.startswith("Extension modules:"):
                break
            dump.append(nxt)
            t = THREAD.match(nxt)
            if t:
                in_current = t.group("current") == "Current thread"
                continue
            if in_current:
                if nxt.strip() == "Garbage-collecting":
                    gcing = True
                f = FRAME.match(nxt)
                if f:
                    frames.append(f"{f.group('file')}:{f.group('line')} in {f.group('func')}")
                elif not nxt.strip():
                    in_current = False
        out.append(Crash(m.group("sig"), frames[:20], gcing,
                         bool(PROFILER_MARK.search("\n".join(dump))),
                         any(PROFILE_STOP.search(ln) for ln in lines[:i])))
    return out


@dataclass
class Death:
    """How a process died, as far as its last words tell."""

    cause: str  # profiler-teardown | profiler | fatal-signal | v2-profiler-refused | exception | exit
    summary: str  # one line, after "died: "
    source: str  # where it was read: the fatal file, a log
    hint: str = ""
    signal: str | None = None
    frames: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def classify(text: str, source: str) -> Death | None:
    """The cause of death a text shows, most specific first; None when it shows none."""
    for needle, summary, hint in V2_REFUSALS:
        if needle in text:
            return Death("v2-profiler-refused", summary, source, hint)
    found = crashes(text)
    if found:
        c = next((c for c in found if c.teardown), found[0])
        sig = SIGNALS.get(c.signal, c.signal)
        top = c.frames[0] if c.frames else "no Python frame"
        fix = "apply profiler-controlled-teardown (`diag run --fix profiler-controlled-teardown`)"
        if c.profiler and c.garbage_collecting:
            return Death("profiler-teardown", f"{sig} in the profiler teardown (cyclic GC freed "
                         "a stopped profiler)", source, fix, sig, c.frames)
        if c.teardown and not c.profiler:
            return Death("profiler-teardown", f"{sig} in a cyclic collection after a profiler "
                         "stop (the stopped profiler is left to the cyclic GC: the "
                         f"profiler-teardown crash; top frame {top})", source, fix, sig, c.frames)
        if c.teardown:
            prof = next((f for f in c.frames if PROFILER_MARK.search(f)), top)
            return Death("profiler", f"{sig} in torch's profiler ({prof})", source,
                         "", sig, c.frames)
        return Death("fatal-signal", f"{sig} ({top})", source, "", sig, c.frames)
    if SCHEDULER_EXCEPTION in text:
        tail = [ln.strip() for ln in text[text.rindex(SCHEDULER_EXCEPTION):].splitlines()
                if ln.strip() and not ln.startswith((" ", "\t"))]
        last = next((ln for ln in reversed(tail) if re.match(r"^[A-Za-z_.]+(Error|Exception)\b",
                                                             ln)), tail[-1] if tail else "")
        return Death("exception", f"SGLang's scheduler hit an exception ({last[:200]})", source)
    return None


# ------------------------------------------------------------------------------ in the engine


class _Recorder(logging.Handler):
    """Copies SGLang's fatal scheduler exception (and the V2 refusals) into the fatal file."""

    def __init__(self, path: Path) -> None:
        super().__init__(level=logging.ERROR)
        self.path = path

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = record.getMessage()
            if SCHEDULER_EXCEPTION not in msg and not CHILD_DIED.search(msg) \
                    and not any(n in msg for n, _, _ in V2_REFUSALS):
                return
            if record.exc_info and record.exc_info[1] is not None:
                msg += "\n" + "".join(logging.Formatter().formatException(record.exc_info))
            with open(self.path, "a", encoding="utf-8", errors="replace") as fh:
                fh.write(f"[{record.name}] {msg[-16000:]}\n")
        except Exception:  # never into the engine
            pass

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        pass


_installed: dict[int, Any] = {}  # pid -> the open file faulthandler writes to


def install(run_dir: str | os.PathLike) -> Path | None:
    """Start keeping this process's last words in `run_dir` (idempotent per process). Returns
    the file, or None when it cannot be made (then nothing is kept; never raises)."""
    pid = os.getpid()
    try:
        path = Path(run_dir) / FILE.format(pid=pid)
        if pid in _installed:
            return path
        import faulthandler

        fh = None
        # a program's own choice (a file, stderr) stays; ours, inherited by a forked child from
        # its parent, is pointed at the child's own file
        inherited = any(f is not None for p, f in _installed.items() if p != pid)
        if not faulthandler.is_enabled() or inherited:
            fh = _open_append(path)
            faulthandler.enable(file=fh, all_threads=True)
        _register_stacks_signal(path)
        # on the package's logger: SGLang's configure_logger calls basicConfig(force=True),
        # which drops the root logger's handlers (0.5.23 utils/common.py:2631)
        logging.getLogger(LOGGER).addHandler(_Recorder(path))
        _installed[pid] = fh
        return path
    except Exception:
        return None


ENV_STACKS_SIGNAL = "DIAG_STACKS_SIGNAL"  # e.g. USR2: that signal dumps every thread's stack
_stack_files: list[Any] = []  # kept open: faulthandler writes to the descriptor at the signal


def _register_stacks_signal(path: Path) -> None:
    """Opt in (`DIAG_STACKS_SIGNAL=USR2`, never by default: it changes what that signal does to
    the user's process): the signal appends every thread's Python stack to the fatal file and
    the process goes on (a handler the program had is chained). Why: a process that hangs says
    nothing on its own; the test lane sends it to a server that never became ready."""
    import signal

    name = os.environ.get(ENV_STACKS_SIGNAL, "").strip().upper()
    if not name:
        return
    sig = getattr(signal, name if name.startswith("SIG") else "SIG" + name, None)
    if not isinstance(sig, signal.Signals):
        return
    import faulthandler

    # chain only to a handler of the program's own: chaining to the default action would end the
    # process right after the dump (SIGUSR2's default is to terminate)
    prev = signal.getsignal(sig)
    chain = prev not in (signal.SIG_DFL, signal.SIG_IGN, None)
    fh = _open_append(path)
    faulthandler.register(sig, file=fh, all_threads=True, chain=chain)
    _stack_files.append(fh)


def _open_append(path: Path) -> Any:
    """The fatal file, opened for appending (never through a symlink), owner-only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0),
                 0o600)
    return os.fdopen(fd, "a")


# ------------------------------------------------------------------------------ reading


def read_file(run_dir: str | os.PathLike, pid: int) -> str:
    """The end of a process's fatal file ('' when there is none or it is not a regular file)."""
    from diag.engine.rundir import open_regular

    fh = open_regular(Path(run_dir) / FILE.format(pid=pid))
    if fh is None:
        return ""
    with fh, contextlib.suppress(OSError):
        size = os.fstat(fh.fileno()).st_size
        if size > MAX_READ:
            fh.seek(size - MAX_READ)
        return fh.read().decode("utf-8", "replace")
    return ""


def death(run_dir: str | os.PathLike, pid: int, log: str | None = None,
          log_name: str = "the engine log") -> Death | None:
    """How process `pid` of a run died: its own fatal file first, else the engine's log (the
    dump SGLang's own faulthandler wrote to stderr). Only asked about processes not alive."""
    own = read_file(run_dir, pid)
    d = classify(own, FILE.format(pid=pid)) if own.strip() else None
    if d is None and log:
        d = classify(log, log_name)
    return d


def seen_by_parent(run_dir: str | os.PathLike, pids: list[int]) -> dict[int, Death]:
    """Children's deaths as SGLang's launcher logged them (its own fatal file): pid -> death by
    the exit code (a negative one is the signal)."""
    import signal as _signal

    out: dict[int, Death] = {}
    for parent in pids:
        for m in CHILD_DIED.finditer(read_file(run_dir, parent)):
            pid, code = int(m.group("pid")), int(m.group("code"))
            try:
                sig = _signal.Signals(-code).name if code < 0 else None
            except ValueError:
                sig = f"signal {-code}"
            what = sig or f"exit code {code}"
            out[pid] = Death("fatal-signal" if sig else "exit", f"{what} (SGLang's launcher, "
                             f"pid {parent}, saw {m.group('name')} end with exit code {code}; "
                             f"its frames, if any, are in the engine's log: --log FILE)",
                             FILE.format(pid=parent), "", sig)
    return out


def deaths(state: Any, log: str | None = None, log_name: str = "the engine log") -> dict[int, Death]:
    """pid -> how it died, for each process of a run (`rundir.RunState`) that is not alive and
    left words: its own file; then, for an engine process, the engine's log (the launcher that
    SGLang's scheduler takes down with it would otherwise be blamed for the scheduler's death);
    then what SGLang's launcher logged about it."""
    out: dict[int, Death] = {}
    parent_saw: dict[int, Death] | None = None
    for p in state.processes.values():
        if p.alive:
            continue
        with contextlib.suppress(Exception):  # a reader never fails on a damaged file
            d = death(state.run_dir, p.pid, log if p.engine else None, log_name)
            if d is None:
                if parent_saw is None:
                    parent_saw = seen_by_parent(state.run_dir, list(state.processes))
                d = parent_saw.get(p.pid)
            if d is not None:
                out[p.pid] = d
    return out
