"""A fix's bench in a child process, so `q` can end it and everything it started at once.

The TUI runs `python -m diag.tui.bench_child MODULE:FUNCTION PARAMS_JSON` in a new session
(its own process group); the child calls the bench (`function(params, progress)`) and writes
each progress message and the final `BenchResult` as prefixed lines on stdout. Quitting sends
SIGTERM to the whole group (the bench's own children included), then SIGKILL to what is left.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from diag.bench import BenchResult
from diag.errors import DiagError

PROGRESS = "@@diag-bench-progress "
RESULT = "@@diag-bench-result "


class Children:
    """The bench processes running now; `stop_all` ends each one's process group."""

    def __init__(self) -> None:
        self._procs: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self.stopping = False

    def add(self, p: subprocess.Popen) -> None:
        with self._lock:
            self._procs.add(p)

    def discard(self, p: subprocess.Popen) -> None:
        with self._lock:
            self._procs.discard(p)

    @property
    def running(self) -> list[int]:
        with self._lock:
            return [p.pid for p in self._procs if p.poll() is None]

    def stop_all(self, grace: float = 0.3) -> None:
        """SIGTERM each bench's process group, SIGKILL whatever is still there after `grace`."""
        self.stopping = True
        with self._lock:
            procs = list(self._procs)
        for p in procs:
            _signal_group(p, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for p in procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(p, signal.SIGKILL)  # the group: children that outlived the leader
            try:
                p.wait(1.0)
            except subprocess.TimeoutExpired:
                pass


def _signal_group(p: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(p.pid, sig)  # the child leads its own session: pgid == pid
    except (ProcessLookupError, PermissionError):
        pass


def _child_env() -> dict[str, str]:
    """This process's import path for the child (a checkout or a test directory on sys.path)."""
    env = dict(os.environ)
    roots = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)}
    extra = [p for p in sys.path if p and os.path.isdir(p)
             and not any(os.path.realpath(p).startswith(r) for r in roots)]
    if env.get("PYTHONPATH"):
        extra.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(extra))
    return env


def run_in_child(path: str, params: dict[str, Any], progress: Callable[[str], None],
                 children: Children) -> BenchResult:
    """Run the bench `path` ("module:function") in a child; its result, or DiagError."""
    if children.stopping:
        raise DiagError("quitting: bench not started")
    p = subprocess.Popen([sys.executable, "-m", "diag.tui.bench_child", path, json.dumps(params)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
                         encoding="utf-8", errors="replace", start_new_session=True,
                         env=_child_env())
    children.add(p)
    result: dict[str, Any] | None = None
    error = ""
    try:
        assert p.stdout is not None
        for line in p.stdout:
            if line.startswith(PROGRESS):
                progress(line[len(PROGRESS):].rstrip("\n"))
            elif line.startswith(RESULT):
                doc = json.loads(line[len(RESULT):])
                if "error" in doc:
                    error = doc["error"]
                else:
                    result = doc
        rc = p.wait()
    finally:
        children.discard(p)
    if result is not None:
        return BenchResult.from_dict(result)
    if children.stopping:
        raise DiagError("bench stopped (quitting)")
    raise DiagError(error or f"bench process exited with {rc} and no result")


def main(argv: list[str]) -> int:
    path, params = argv[0], json.loads(argv[1])

    def progress(msg: str) -> None:
        print(PROGRESS + " ".join(str(msg).splitlines()), flush=True)

    try:
        module, attr = path.split(":")
        res = getattr(importlib.import_module(module), attr)(params, progress)
        print(RESULT + json.dumps(res.to_dict(), default=str), flush=True)
    except Exception as e:
        text = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(RESULT + json.dumps({"error": f"{type(e).__name__}: {text}" if text
                                   else type(e).__name__}), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
