"""Control requests (`control/<id>.json`): their schema, how the CLI writes them, how agents read
them — only what is new, only regular files of a bounded size, each checked before it is obeyed.

A request: ``{"schema_version": 1, "id", "run", "fix", "action": "apply"|"revert",
"pid": int|null, "ts"}``. An agent rejects (a `control_ack` with `ok: false`, state `rejected`
and the reason) anything else: JSON that does not parse, another shape, another schema version,
another run's id, an unknown fix or action. A FIFO, a directory or a link is skipped unread (it
could block the agent's thread), a file over `MAX_BYTES` is rejected unread.

Handled requests are pruned by the writer of the next one: a request superseded by a newer one
for the same fix and process once an agent acknowledged it and no live command waits for it, a
request to a process that is gone, and anything rejected older than `JUNK_AGE_S` (every agent
has seen it by then). A request no agent has acknowledged is never pruned (two commands racing
each get their own answer). A command that waits for its request's answers says so with
``control/.wait-<id>`` (its pid) from before the request exists until it has its answers. So
the folder holds about one request per fix, and a process that starts later replays only what
still matters.

A writer puts a request in place with a temporary file and a rename (``.<id>.json.<pid>.tmp``);
one killed between the two leaves the temporary file behind. The next command that reads or
writes the folder removes it (`sweep_tmp`) once its writer is gone or it is older than
`JUNK_AGE_S`, never one a live writer may still rename.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

VERSION = 1
ACTIONS = ("apply", "revert")
MAX_BYTES = 4096
JUNK_AGE_S = 60.0
REJECTED = "rejected"
SETTLED_NS = 1_000_000_000  # a folder mtime older than this at listing time is trusted


def problem(doc: Any, name: str, known_fixes: Iterable[str] | None,
            run_id: str | None) -> str | None:
    """Why a decoded request must not be obeyed (None: it is valid)."""
    if not isinstance(doc, dict):
        return f"not a JSON object ({type(doc).__name__})"
    if doc.get("schema_version") != VERSION:
        return f"schema_version {doc.get('schema_version')!r} is not {VERSION}"
    rid, fix, action, pid = doc.get("id"), doc.get("fix"), doc.get("action"), doc.get("pid")
    if not isinstance(rid, str) or rid != name:
        return f"id {rid!r} does not match the file name {name!r}"
    if not isinstance(fix, str) or not fix:
        return f"fix {fix!r} is not a fix id"
    if action not in ACTIONS:
        return f"unknown action {action!r} (apply or revert)"
    if pid is not None and (isinstance(pid, bool) or not isinstance(pid, int)):
        return f"pid {pid!r} is not an integer or null"
    if run_id and doc.get("run") not in (None, run_id):
        return f"for run {doc.get('run')!r}, not this run ({run_id})"
    known = list(known_fixes) if known_fixes is not None else None
    if known is not None and fix not in known:
        return f"unknown fix {fix!r} (known here: {', '.join(known)})"
    return None


def read_one(path: Path) -> tuple[Any, str | None, bool]:
    """(decoded document, why it is unreadable, whether to skip it silently). Never blocks: a
    FIFO or device is not opened for reading data, a link is not followed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError as e:
        return None, f"cannot open: {e.strerror}", True
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, "not a regular file", True
        if st.st_size > MAX_BYTES:
            return None, f"{st.st_size} bytes, over the {MAX_BYTES}-byte limit", False
        raw = os.read(fd, MAX_BYTES + 1)
    except OSError as e:
        return None, f"cannot read: {e.strerror}", True
    finally:
        os.close(fd)
    try:
        return json.loads(raw.decode("utf-8")), None, False
    except (UnicodeDecodeError, ValueError) as e:
        return None, f"not JSON: {type(e).__name__}", False


class Reader:
    """The new entries of one control folder, each name read once; an unchanged folder costs
    one stat."""

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.folder = Path(run_dir) / "control"
        self.seen: set[str] = set()
        self._mtime: int | None = None

    def new(self) -> list[tuple[str, Any, str | None, bool]]:
        """[(name without .json, document, why it is unreadable, skip silently)] in id order."""
        import time

        try:
            mtime = os.stat(self.folder).st_mtime_ns
        except OSError:
            return []
        if mtime == self._mtime:
            return []
        listed = time.time_ns()
        try:
            names = sorted(n for n in os.listdir(self.folder)
                           if n.endswith(".json") and not n.startswith(".") and n not in self.seen)
        except OSError:
            return []
        # Timestamps are coarse (a clock tick): a rename in the same tick as this listing leaves
        # the same mtime, so an mtime that recent is listed again at the next call.
        self._mtime = mtime if listed - mtime > SETTLED_NS else None
        out = []
        for n in names:
            self.seen.add(n)
            doc, why, quiet = read_one(self.folder / n)
            out.append((n[: -len(".json")], doc, why, quiet))
        return out


WAIT_PREFIX = ".wait-"


def waiting(folder: Path, rid: str) -> bool:
    """Whether a live command waits for the answers to request `rid`."""
    try:
        pid = int((folder / f"{WAIT_PREFIX}{rid}").read_text(encoding="ascii").strip() or 0)
    except (OSError, ValueError):
        return False
    return _pid_alive(pid)


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, not ours to signal
    return True


TMP_NAME = re.compile(r"\..+\.json\.(\d+)\.tmp")  # rundir._atomic_write's temporary file


def sweep_tmp(folder: Path, now: float | None = None) -> int:
    """Remove the temporary files of writers killed between writing and renaming (their pid is
    gone, or the file is older than `JUNK_AGE_S`); how many. A file whose writer lives and that
    is younger stays: that writer may still rename it. Quiet: nothing here raises."""
    import time

    now = time.time() if now is None else now
    gone = 0
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    for n in names:
        m = TMP_NAME.fullmatch(n)
        if m is None:
            continue
        path = folder / n
        try:
            st = os.lstat(path)
            if stat.S_ISDIR(st.st_mode):
                continue
            if now - st.st_mtime <= JUNK_AGE_S and _pid_alive(int(m.group(1))):
                continue  # a live writer's, maybe not renamed yet
            os.unlink(path)
            gone += 1
        except (OSError, ValueError):
            continue
    return gone


def prune(folder: Path, keep: str, alive: Any = None, now: float | None = None,
          acked: Any = None) -> int:
    """Remove requests that no longer matter (see the module docstring); how many.
    `alive(pid)`: whether an addressed process lives; `acked(id)`: whether any agent
    acknowledged a request (without it, no superseded request is removed)."""
    import time

    now = time.time() if now is None else now
    with contextlib.suppress(OSError):
        for n in os.listdir(folder):  # markers of commands that died waiting
            if n.startswith(WAIT_PREFIX) and not waiting(folder, n[len(WAIT_PREFIX):]):
                with contextlib.suppress(OSError):
                    os.unlink(folder / n)
    latest: dict[tuple[Any, Any], str] = {}
    gone = 0
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".json")
                       and not n.startswith("."))
    except OSError:
        return 0
    for n in reversed(names):  # newest first
        path = folder / n
        if n == f"{keep}.json":
            doc, _why, _q = read_one(path)
            if isinstance(doc, dict):
                latest.setdefault((doc.get("fix"), doc.get("pid")), n)
            continue
        doc, why, _quiet = read_one(path)
        drop = False
        if why is not None or problem(doc, n[: -len(".json")], None, None) is not None:
            with contextlib.suppress(OSError):
                drop = now - os.lstat(path).st_mtime > JUNK_AGE_S
        else:
            key, rid = (doc.get("fix"), doc.get("pid")), n[: -len(".json")]
            if doc.get("pid") is not None and alive is not None and not alive(doc["pid"]):
                drop = True
            elif key in latest:
                drop = acked is not None and acked(rid) and not waiting(folder, rid)
            else:
                latest[key] = n
        if drop:
            with contextlib.suppress(OSError):
                os.unlink(path)
                gone += 1
    return gone
