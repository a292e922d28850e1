"""Adversarial sweep, run directories: damaged files a crash, a disk or a hand leaves behind are
read problems shown as such, never exit 70, never a TUI source marked `unreadable: SomeError`,
never `NaN`/`Infinity` in a JSON output (not JSON), and what diag says matches the files.

The run directory is written by the real `EventWriter`, then damaged; the commands are real
`diag` processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diag.engine import rundir

DIAG = str(Path(sys.executable).with_name("diag"))
FIX = "profiler-controlled-teardown"
PID = 4_000_001  # no such process here: the run has exited


def _diag(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([DIAG, *argv], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200"})


def _strict_json(text: str):
    def no(const: str):
        raise AssertionError(f"{const} in a JSON output: not JSON")
    return json.loads(text, parse_constant=no)


def _run_dir(tmp_path: Path, run_id: str = "r1") -> Path:
    d = rundir.create_run_dir(tmp_path / "run")
    rundir.write_meta(d, run_id=run_id, cmd=["python", "-m", "sglang.launch_server",
                                             "--attention-backend", "triton"])
    w = rundir.EventWriter(d, pid=PID, run_id=run_id)
    w({"kind": "start", "ppid": 1, "started": time.time(), "argv": ["x"], "run": run_id,
       "fixes": {FIX: {"state": "applied", "reason": ""}}})
    w.close()
    return d


def _append_raw(d: Path, *lines: str) -> None:
    with open(d / f"events-{PID}.jsonl", "a", encoding="utf-8") as fh:
        for ln in lines:
            fh.write(ln + "\n")


def _state(d: Path, since: str) -> None:
    """A state file as the writer lays it out (16 KiB, padded), with `lost.since` as given."""
    text = (f'{{"pid": {PID}, "run": "r1", "n": 50, "ts": 1.0, "lost": {{"events": 3, '
            f'"since": {since}, "reason": "disk full", "now": true}}, "fixes": {{}}, '
            '"engine": true, "rank": null, "acks": []}')
    (d / f"state-{PID}.json").write_text(text.ljust(16384))


@pytest.mark.parametrize("since", ["NaN", "Infinity", "1e300", "1" + "0" * 30])
def test_a_state_file_loss_time_no_clock_gives_is_never_exit_70(tmp_path, since):
    d = _run_dir(tmp_path)
    _state(d, since)
    r = _diag("fix", "status", "--run-dir", str(d))
    assert r.returncode == 0, r.stderr
    assert "internal error" not in r.stderr
    if since in ("NaN", "Infinity"):  # not a number: the file is not trusted for losses
        assert "read problem: state file: lost.since is not a number or null (1x)" in r.stdout
    else:  # a number, past any clock: the loss is said, without a time
        assert "events lost: " in r.stdout and "(disk full)" in r.stdout
    _strict_json(_diag("fix", "status", "--run-dir", str(d), "--json").stdout)


def test_nan_and_infinity_in_events_are_read_problems_and_no_json_carries_them(tmp_path):
    d = _run_dir(tmp_path)
    _append_raw(d, f'{{"ts": NaN, "kind": "syncs", "builder": "B", "phase": "draft-extend", '
                   f'"count": 1, "calls": 1, "seconds": Infinity, "pid": {PID}, "n": 1}}',
                f'{{"ts": 1.0, "kind": "draft_extend", "mode": "eager", "passes": 1, '
                f'"seconds": 1e999, "pid": {PID}, "n": 2}}')
    r = _diag("fix", "status", "--run-dir", str(d))
    assert r.returncode == 0, r.stderr
    assert "read problem: syncs.seconds is not float (1x)" in r.stdout
    assert "read problem: draft_extend.seconds is not float | None (1x)" in r.stdout
    for cmd in (("fix", "status"), ("fix", "list")):
        j = _diag(*cmd, "--run-dir", str(d), "--json")
        assert j.returncode == 0, j.stderr
        _strict_json(j.stdout)


def test_sums_past_the_largest_float_are_null_in_json_not_infinity(tmp_path):
    d = _run_dir(tmp_path)
    _append_raw(d, *(json.dumps({"ts": 1.0, "kind": "draft_extend", "mode": "eager",
                                 "passes": 1, "seconds": 1.7e308, "pid": PID, "n": n})
                     for n in (1, 2)))
    for cmd in (("fix", "status"), ("fix", "list")):
        j = _diag(*cmd, "--run-dir", str(d), "--json")
        assert j.returncode == 0, j.stderr
        _strict_json(j.stdout)


@pytest.mark.parametrize("make, what", [
    (lambda p: p.mkdir(), "a directory"),
    (lambda p: p.symlink_to("/dev/zero"), "a link"),
    (lambda p: os.mkfifo(p), "a FIFO"),
])
def test_an_events_file_that_is_no_file_is_said_not_silently_empty(tmp_path, make, what):
    d = _run_dir(tmp_path)
    p = d / f"events-{PID}.jsonl"
    p.unlink()
    make(p)
    r = _diag("fix", "status", "--run-dir", str(d))
    assert r.returncode == 0, r.stderr
    assert f"read problem: events-{PID}.jsonl is {what}, not a file: not read (1x)" in r.stdout
    # its role is not guessed from events that were never read
    assert "role not known (its events were not read)" in r.stdout
    assert "not an engine process" not in r.stdout


@pytest.mark.parametrize("line", [
    # a count of another type: the TUI took it as written (float("abc"))
    f'{{"ts": 2.0, "kind": "syncs", "builder": "B", "phase": "draft-extend", "count": "abc", '
    f'"calls": 1, "seconds": 0.001, "pid": {PID}, "n": 1}}',
    # an acknowledgement whose time is a string: compared with a float
    f'{{"ts": "x", "kind": "control_ack", "request": "q1", "fix": "{FIX}", "action": "apply", '
    f'"ok": true, "state": "applied", "reason": "", "pid": {PID}, "n": 1}}',
    # NaN in the raw event
    f'{{"ts": 2.0, "kind": "draft_extend", "mode": "eager", "passes": NaN, "seconds": 0.1, '
    f'"pid": {PID}, "n": 1}}',
])
def test_the_tui_reads_damaged_events_as_fix_status_does(tmp_path, line):
    d = _run_dir(tmp_path)
    _append_raw(d, line)
    r = _diag("tui", "--run-dir", str(d), "--once", "--no-execute", "--width", "200")
    assert r.returncode == 0, r.stderr
    assert "unreadable" not in r.stdout, [ln for ln in r.stdout.splitlines() if "unreadable" in ln]
    assert "read problem" in r.stdout or "read problems" in r.stdout


def test_a_run_id_of_another_type_leaves_no_process_out(tmp_path):
    d = _run_dir(tmp_path)
    meta = json.loads((d / "run.json").read_text())
    (d / "run.json").write_text(json.dumps({**meta, "run_id": [1]}))
    r = _diag("fix", "status", "--run-dir", str(d))
    assert r.returncode == 0, r.stderr
    assert "earlier run" not in r.stdout
    assert f"pid {PID}" in r.stdout


def test_a_command_line_with_items_of_another_type_is_not_read_as_one(tmp_path):
    d = _run_dir(tmp_path)
    meta = json.loads((d / "run.json").read_text())
    meta["cmd"] = ["python", "--attention-backend", ["x"], "--speculative-num-steps", "2"]
    (d / "run.json").write_text(json.dumps(meta))
    r = _diag("fix", "list", "--run-dir", str(d))
    assert r.returncode == 0, r.stderr
    assert "['x']" not in r.stdout + r.stderr
    assert "run.json" not in r.stdout.splitlines()[2]  # the configuration is not from it


def test_the_engine_agent_takes_no_run_id_of_another_type(tmp_path, monkeypatch):
    """A run.json damaged before the engine starts (`run_id` a list): the agent binds no run id
    rather than one that never equals a string (it would then call the run another's)."""
    from diag.engine import agent as agent_mod

    d = rundir.create_run_dir(tmp_path / "run")
    (d / "run.json").write_text(json.dumps({"run_id": ["x"], "cmd": []}))
    monkeypatch.delenv(rundir.ENV_RUN_ID, raising=False)
    a = agent_mod.Agent("api")
    try:
        a._bind(d)
        assert a.run_id is None
    finally:
        from diag import telemetry

        telemetry.remove_sink(a.writer)


@pytest.mark.parametrize("option", ["--tp", "--dp", "--dcp", "--page-size",
                                    "--speculative-eagle-topk"])
def test_a_count_no_server_runs_is_a_usage_error(option):
    r = _diag("diagnose", "--sglang", "/nonexistent", option, "99999999999999999999999")
    assert r.returncode == 2 and option in r.stderr and "Traceback" not in r.stderr
