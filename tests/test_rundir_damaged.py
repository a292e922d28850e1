"""Issue 41, item 1: run-directory data of the wrong type (a snapshot's counters, negative
counts, a state file of the wrong shape) is a counted, shown read problem, never exit 70.

The files are written by the real `EventWriter` and then damaged as a crash or a hand would;
the commands are real `diag` processes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diag.engine import eventlog, rundir

DIAG = str(Path(sys.executable).with_name("diag"))
FIX = "profiler-controlled-teardown"


def _diag(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([DIAG, *argv], capture_output=True, text=True, timeout=120)


@pytest.fixture
def live_pid():
    """A real live process whose pid the run's events carry (so `fix apply` reaches the wait)."""
    proc = subprocess.Popen(["sleep", "60"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def _run_dir(tmp_path: Path, pid: int) -> tuple[Path, rundir.EventWriter]:
    d = rundir.create_run_dir(tmp_path / "run")
    w = rundir.EventWriter(d, pid=pid, run_id="r1")
    w({"kind": "start", "ppid": 1, "started": time.time(), "argv": ["x"],
       "fixes": {FIX: {"state": "applied", "reason": ""}}})
    return d, w


def _append(d: Path, pid: int, *docs: dict) -> None:
    with open(d / f"events-{pid}.jsonl", "a", encoding="utf-8") as fh:
        for doc in docs:
            fh.write(json.dumps({"ts": time.time(), "pid": pid, **doc}) + "\n")


def _problems(out: str) -> list[str]:
    return [ln.strip() for ln in out.splitlines() if "read problem:" in ln]


@pytest.mark.parametrize("counters, problem", [
    ({"lost": "x"}, "read problem: snapshot.counters.lost is not an object (1x)"),
    ({"syncs": 5}, "read problem: snapshot.counters.syncs is not an object (1x)"),
    ({"profiler_stop": 3}, "read problem: snapshot.counters.profiler_stop is not an object (1x)"),
    ({"syncs": {"B": {"calls": "many", "syncs": 1, "seconds": 0.0}}},
     "read problem: snapshot.counters.syncs.*.calls is not a count (1x)"),
    ({"errors": -4}, "read problem: snapshot.counters.errors is negative (1x)"),
])
def test_a_snapshot_of_the_wrong_shape_is_a_read_problem(tmp_path, live_pid, counters, problem):
    d, w = _run_dir(tmp_path, live_pid)
    w.close()
    _append(d, live_pid, {"kind": "snapshot", "n": 1, "counters": counters},
            {"kind": "syncs", "n": 2, "builder": "B", "count": 1},
            {"kind": "profiler_stop", "n": 3, "seconds": 0.5})
    r = _diag("fix", "status", "--run-dir", str(d))
    assert r.returncode == 0, r.stderr
    assert _problems(r.stdout) == [problem]
    syncs = 2 if "syncs" in counters and isinstance(counters["syncs"], dict) else 1
    assert f"syncs B: {syncs} in 1 calls" in r.stdout  # the events after it still count
    doc = json.loads(_diag("fix", "status", "--run-dir", str(d), "--json").stdout)
    proc = doc["runs"][0]["processes"][0]
    assert proc["problems"] == {problem.split(": ", 1)[1].rsplit(" (", 1)[0]: 1}
    r = _diag("fix", "apply", FIX, "--run-dir", str(d), "--timeout", "0.5")
    assert r.returncode == 4, (r.returncode, r.stderr)  # no answer from the process: exit 4
    assert "internal error" not in r.stderr
    assert f"apply {FIX}: no ack" in r.stdout


def test_negative_counts_are_read_problems_never_shown(tmp_path):
    pid = 999999072
    d, w = _run_dir(tmp_path, pid)
    w({"kind": "syncs", "builder": "B", "count": -5, "calls": 2, "seconds": -1.0})
    w({"kind": "gap", "lost": -3})
    w({"kind": "profiler_stop", "seconds": 0.25, "collected": -4})
    w.close()
    r = _diag("fix", "status", "--run-dir", str(d))
    assert r.returncode == 0, r.stderr
    assert _problems(r.stdout) == [
        "read problem: gap.lost is negative (1x)",
        "read problem: profiler_stop.collected is negative (1x)",
        "read problem: syncs.count is negative (1x)",
        "read problem: syncs.seconds is negative (1x)"]
    assert "syncs B: 0 in 2 calls, 0.00 ms" in r.stdout
    assert "profiler stops: 1, 0.250 s, 0 objects collected" in r.stdout
    assert "-" not in "".join(ln for ln in r.stdout.splitlines() if "syncs B" in ln)
    assert "events lost" not in r.stdout


def test_a_state_file_of_the_wrong_shape_is_a_read_problem_not_a_loss(tmp_path):
    """The variant of the issue: `n` 99, `lost.events` 3, `lost.since` a string: it showed
    `events lost: 98`; the file is not trusted for losses, and says what is wrong with it."""
    pid = 999999073
    d, w = _run_dir(tmp_path, pid)
    w.close()
    eventlog.state_path(d, pid).write_text(json.dumps(
        {"pid": pid, "n": 99, "lost": {"events": 3, "now": True, "since": "then"},
         "fixes": {FIX: "applied"}, "acks": {"not": "a list"}}).ljust(eventlog.STATE_BYTES))
    r = _diag("fix", "status", "--run-dir", str(d))
    assert r.returncode == 0, r.stderr
    assert "events lost" not in r.stdout
    assert f"fix {FIX:<30} applied" in r.stdout
    assert _problems(r.stdout) == [
        "read problem: state file: acks is not a list (1x)",
        "read problem: state file: fixes.* is not a fix state (1x)",
        "read problem: state file: lost.since is not a number or null (1x)"]


def test_a_well_formed_state_file_still_gives_the_loss(tmp_path):
    """The writer's own state file, ahead of the events: its loss is still taken."""
    pid = 999999074
    d, w = _run_dir(tmp_path, pid)
    w.close()
    eventlog.state_path(d, pid).write_text(json.dumps(
        {"pid": pid, "run": "r1", "n": 3, "ts": time.time(),
         "lost": {"events": 3, "now": True, "since": time.time(), "reason": "ENOSPC"},
         "fixes": {FIX: {"state": "applied", "reason": ""}}, "engine": False, "rank": None,
         "acks": []}).ljust(eventlog.STATE_BYTES))
    r = _diag("fix", "status", "--run-dir", str(d))
    assert r.returncode == 0 and _problems(r.stdout) == []
    assert "events lost since " in r.stdout and ": 3 (ENOSPC)" in r.stdout
