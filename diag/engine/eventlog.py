"""One process's event file and its state file: every event numbered, every loss accounted for.

`events-<pid>.jsonl` gets one JSON line per event, flushed. Each event takes the next sequence
number `n` whether or not its line could be written, so a reader sees lost events as a jump.
A write that fails (a full disk, the file removed or replaced, the directory gone) and a file
truncated under the writer (the events in it gone) are counted, logged once (then at most once
a minute, with the count), and the engine goes on; at the first write that works again the
writer puts a `gap` event (how many, since when, why) and a `snapshot` (the true totals and
states) before it, so readers stop showing what they last knew.

`state-<pid>.json` is a small file preallocated at start and rewritten in place (same blocks, so
it can still be written when the disk is full): the last `n`, the loss, the fix states, the last
acknowledgements. A reader that finds `n` there ahead of the events knows events are being lost
now, and takes the states and acknowledgements from it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from diag.engine.events import Fold, empty_lost
from diag.schemas import loads_finite

ENV_MAX_BYTES = "DIAG_EVENTS_MAX_BYTES"  # cap of one events file (default 8 MiB)
DEFAULT_MAX_BYTES = 8 * 1024 * 1024
STATE_BYTES = 16384  # the state file's fixed size
STATE_KINDS = frozenset({"start", "sglang", "fix", "control", "control_ack", "gap", "probe"})
LOG_EVERY_S = 60.0  # a write failure is logged at once, then at most this often
RETRY_S = 0.2  # after a failure, the file is reopened at most this often
MAX_ACKS = 16

log = logging.getLogger("diag.agent")


def state_path(run_dir: Path, pid: int) -> Path:
    return Path(run_dir) / f"state-{pid}.json"


def read_state_file(run_dir: Path, pid: int) -> dict[str, Any] | None:
    """A process's state file, or None (absent, being rewritten, not ours)."""
    try:
        fd = os.open(state_path(run_dir, pid), os.O_RDONLY | os.O_NONBLOCK
                     | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        doc = loads_finite(os.read(fd, STATE_BYTES).decode("utf-8", "replace").strip() or "null")
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return doc if isinstance(doc, dict) and doc.get("pid") == pid else None


def _why(e: BaseException) -> str:
    if isinstance(e, OSError) and e.errno is not None:
        import errno as _errno

        return f"{_errno.errorcode.get(e.errno, e.errno)}: {e.strerror}"
    return f"{type(e).__name__}: {e}"


class EventWriter:
    """Appends one process's events to `events-<pid>.jsonl`, flushed per event, capped; never
    raises. At the cap the file becomes `events-<pid>.1.jsonl` and a new one starts with a
    `snapshot` of the totals."""

    def __init__(self, run_dir: str | os.PathLike, pid: int | None = None,
                 max_bytes: int | None = None, run_id: str | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.pid = pid or os.getpid()
        self.run_id = run_id
        if max_bytes is None:
            try:
                max_bytes = int(os.environ.get(ENV_MAX_BYTES, DEFAULT_MAX_BYTES))
            except ValueError:
                max_bytes = DEFAULT_MAX_BYTES
        self.max_bytes = max(4096, max_bytes)
        self.path = self.run_dir / f"events-{self.pid}.jsonl"
        self.agg = Fold(check_sequence=False)
        self._n = itertools.count()
        self._last_n = -1
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._size = 0
        self.failed: str | None = None  # the latest write failure (None: writing)
        self.lost = 0  # events not written since the last gap marker
        self.lost_total = 0
        self.lost_since: float | None = None
        self._logged_at = 0.0
        self._logged_lost = 0
        self._retry_at = 0.0
        self._since_check = 0  # events written since the last `check()`
        self._in_file = 0  # events this writer put into the current file since it opened it
        self.on_lost: Callable[[int, str], None] | None = None  # (how many, why): metrics
        self.detached = False  # the run directory is not ours any more: write nothing
        self._acks: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._state_fd: int | None = None
        self._state_dirty = False
        # The run directory itself, held open: files are (re)created in it by name relative to
        # this descriptor, so a directory removed and made again under the same path (another
        # run's) never gets this process's events; creating a file in a removed one fails.
        self._dir_fd: int | None = None
        with contextlib.suppress(OSError):
            self._dir_fd = os.open(self.run_dir, os.O_RDONLY | os.O_DIRECTORY)
        self._open_state()

    # ------------------------------------------------------------------ writing

    def write(self, event: dict[str, Any]) -> None:
        try:
            with self._lock:
                if self.detached:
                    return
                if self._fd is None:
                    self._try_open()
                if self._fd is not None and self._size > self.max_bytes - 512:
                    self._try(self._rotate)
                n = next(self._n)
                self._last_n = n
                ev = {"ts": time.time(), **event, "pid": self.pid, "n": n}
                if self.run_id and ev.get("kind") == "start":
                    ev.setdefault("run", self.run_id)
                self.agg.add(ev)
                if ev.get("kind") == "control_ack":
                    self._acks[str(ev.get("request"))] = ev
                    while len(self._acks) > MAX_ACKS:
                        self._acks.popitem(last=False)
                if self._fd is None:
                    self._lose(1, self.failed or "events file not open")
                else:
                    self._try(self._put, ev)
                    self._since_check += 1
                if ev.get("kind") in STATE_KINDS or self._state_dirty:
                    self._write_state()
        except Exception as e:  # never into the engine
            self.failed = f"{type(e).__name__}: {e}"

    __call__ = write  # usable as a telemetry sink

    def _try(self, fn: Callable[..., None], *args: Any) -> bool:
        """Run one write step; a failure is a lost event (this one), never an exception."""
        try:
            fn(*args)
            return True
        except Exception as e:
            self._lose(1 if args else 0, _why(e))
            return False

    def _put(self, *docs: dict[str, Any]) -> None:
        """Whole lines or nothing: a write cut short (a disk that fills mid-line) is retried for
        its errno, and the part written is cut off again, so no half line stays in the file."""
        data = "".join(json.dumps(d, default=str) + "\n" for d in docs).encode()
        before, done = self._size, 0
        try:
            while done < len(data):
                k = os.write(self._fd, data[done:])
                if k <= 0:
                    raise OSError("the write wrote nothing")
                done += k
        except OSError:
            if done:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, before)
            raise
        self._size = before + done
        self._in_file += len(docs)

    def _open_in_dir(self, path: Path, flags: int) -> int:
        if self._dir_fd is None:
            return os.open(path, flags, 0o600)
        return os.open(path.name, flags, 0o600, dir_fd=self._dir_fd)

    def _open_fd(self) -> None:
        self._fd = self._open_in_dir(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self._size = os.fstat(self._fd).st_size
        self._in_file = 0

    def _try_open(self) -> None:
        """(Re)open the file; after a loss, first a `gap` marker and a `snapshot` of the truth."""
        if time.monotonic() < self._retry_at:
            return
        try:
            self._open_fd()
            if self.lost:
                gap = {"ts": time.time(), "kind": "gap", "pid": self.pid, "n": next(self._n),
                       "lost": self.lost, "since": self.lost_since, "reason": self.failed or ""}
                snap = self.agg.snapshot(time.time(), self.pid, next(self._n))
                self._last_n = snap["n"]
                try:
                    self._put(gap, snap)
                except OSError as e:
                    self._lose(2, _why(e))  # the markers were numbered too: lost like any event
                    raise
                log.warning("diag agent: events are written again to %s (%d lost since %s)",
                            self.path, self.lost,
                            time.strftime("%H:%M:%S", time.localtime(self.lost_since)))
                self.lost, self.lost_since, self.failed = 0, None, None
                self._state_dirty = True
        except Exception as e:
            self._lose(0, _why(e))

    def _rotate(self) -> None:
        """The current file becomes `.1`; the new one starts with a snapshot of the totals."""
        os.close(self._fd)
        self._fd = None
        older = f"events-{self.pid}.1.jsonl"
        if self._dir_fd is None:
            os.replace(self.path, self.path.with_name(older))
        else:
            os.replace(self.path.name, older, src_dir_fd=self._dir_fd, dst_dir_fd=self._dir_fd)
        self._open_fd()
        snap = self.agg.snapshot(time.time(), self.pid, next(self._n))
        self._last_n = snap["n"]
        self._put(snap)

    def _lose(self, count: int, why: str) -> None:
        """Count `count` events no reader will see; log the first loss, then once a minute."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = None
        self._retry_at = time.monotonic() + RETRY_S
        self.failed = why
        self._state_dirty = True
        if not count:
            return
        if not self.lost:
            self.lost_since = time.time()
        self.lost += count
        self.lost_total += count
        lost = self.agg.counters.setdefault("lost", empty_lost())
        lost["events"] = int(lost.get("events") or 0) + count
        lost["since"] = lost.get("since") or self.lost_since
        lost["reason"] = why
        now = time.monotonic()
        if not self._logged_at or now - self._logged_at >= LOG_EVERY_S:
            log.warning("diag agent: cannot write events to %s: %s (%d lost so far; the engine "
                        "goes on; logged again at most every %g s)", self.path, why,
                        self.lost_total, LOG_EVERY_S)
            self._logged_at = now
        if self.on_lost is not None:
            with contextlib.suppress(Exception):
                self.on_lost(count, why)

    def check(self) -> None:
        """From the poll thread: an events file removed or replaced under us is reopened (the
        events written into it since the last check are lost to readers); the state file is
        rewritten when it fell behind."""
        try:
            with self._lock:
                if self.detached:
                    return
                if self._fd is not None and self._replaced():
                    self._lose(self._since_check, "events file removed or replaced")
                    self._retry_at = 0.0
                elif self._fd is not None and self._truncated():
                    # what readers can no longer see; written again after a gap and snapshot
                    self._lose(max(1, self._in_file - self._lines_now()), "events file truncated")
                    self._retry_at = 0.0
                self._since_check = 0
                if self._fd is None and self.lost:
                    self._try_open()
                if self._state_dirty:
                    self._write_state()
        except Exception as e:
            self.failed = f"{type(e).__name__}: {e}"

    def _truncated(self) -> bool:
        """Cut shorter than what this writer wrote into it (by hand, a log tool)."""
        try:
            return os.fstat(self._fd).st_size < self._size
        except OSError:
            return False

    def _lines_now(self) -> int:
        """Lines left in the (truncated, so small) current file."""
        try:
            fd = self._open_in_dir(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return 0
        try:
            count = 0
            while chunk := os.read(fd, 1 << 16):
                count += chunk.count(b"\n")
            return count
        except OSError:
            return 0
        finally:
            os.close(fd)

    def _replaced(self) -> bool:
        try:
            mine = os.fstat(self._fd)
            there = os.stat(self.path)
        except OSError:
            return True
        return (mine.st_dev, mine.st_ino) != (there.st_dev, there.st_ino) or mine.st_nlink == 0

    # ------------------------------------------------------------------ the state file

    def _open_state(self) -> None:
        try:
            fd = self._open_in_dir(state_path(self.run_dir, self.pid), os.O_RDWR | os.O_CREAT)
        except OSError:
            return
        try:
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(fd, 0, STATE_BYTES)
            else:
                os.pwrite(fd, b" " * STATE_BYTES, 0)
            self._state_fd = fd
        except OSError:
            os.close(fd)

    def state_doc(self) -> dict[str, Any]:
        return {"pid": self.pid, "run": self.run_id, "n": self._last_n, "ts": time.time(),
                "lost": {"events": self.lost_total, "since": self.lost_since,
                         "reason": self.failed or "", "now": bool(self.lost)},
                "fixes": self.agg.fixes, "engine": self.agg.engine, "rank": self.agg.rank,
                "acks": list(self._acks.values())}

    def _write_state(self) -> None:
        if self._state_fd is None:
            return
        doc = self.state_doc()
        data = json.dumps(doc, default=str).encode()
        while len(data) > STATE_BYTES and doc["acks"]:
            doc["acks"] = doc["acks"][1:]
            data = json.dumps(doc, default=str).encode()
        if len(data) > STATE_BYTES:
            return
        try:
            os.pwrite(self._state_fd, data.ljust(STATE_BYTES), 0)
            self._state_dirty = False
        except OSError:
            self._state_dirty = True

    def removed(self) -> bool:
        """Whether the run directory this writer holds open was removed (for good: a removed
        directory never comes back; one made under its path is another)."""
        try:
            return self._dir_fd is not None and os.fstat(self._dir_fd).st_nlink == 0
        except OSError:
            return False

    def move_to(self, run_dir: str | os.PathLike) -> None:
        """Write from now on into `run_dir` (the agent's directory was removed or replaced under
        it): the new events file starts with a snapshot of everything so far, the numbering
        goes on. Raises OSError when the new directory cannot be used."""
        new = Path(run_dir)
        dir_fd = os.open(new, os.O_RDONLY | os.O_DIRECTORY)
        with self._lock:
            for name in ("_fd", "_state_fd", "_dir_fd"):
                fd = getattr(self, name)
                if fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(fd)
                    setattr(self, name, None)
            self.run_dir, self.path, self._dir_fd = new, new / self.path.name, dir_fd
            self._open_state()
            self._open_fd()
            snap = self.agg.snapshot(time.time(), self.pid, next(self._n))
            self._last_n = snap["n"]
            self._put(snap)
            self.lost, self.lost_since, self.failed = 0, None, None
            self.detached = False
            self._write_state()

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._fd)
                self._fd = None
            if self._state_fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._state_fd)
                self._state_fd = None
            if self._dir_fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._dir_fd)
                self._dir_fd = None
