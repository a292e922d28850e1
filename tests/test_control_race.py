"""Control requests that cannot be lost (issue 31, defect 3): pruning never removes a request
no agent has acknowledged or that a live command waits for, so concurrent commands each get
their own answer. Real agents in real subprocesses (the STAND-IN programs of
tests/agent_standins, no SGLang) and the installed `diag` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from test_agent_faults import PID, _agent, _end

from diag.engine import control, rundir

DIAG = [sys.executable, str(Path(__file__).resolve().parent / "agent_standins" / "diag_with_standins.py")]  # noqa: E501


def _ack(d, request: str) -> None:
    """An agent's acknowledgement of `request` (the real writer, a pid no process has)."""
    w = rundir.EventWriter(d, pid=PID)
    w({"kind": "control_ack", "request": request, "fix": "standin-toggle", "action": "apply",
       "ok": True, "state": "applied", "reason": ""})
    w.close()


def test_a_superseded_request_stays_until_acknowledged_and_no_live_command_waits(tmp_path):
    d = rundir.create_run_dir(tmp_path / "d")
    ctl = d / "control"
    a = rundir.request(d, "standin-toggle", "apply")
    assert (ctl / f"{control.WAIT_PREFIX}{a}").read_text() == str(os.getpid())
    b = rundir.request(d, "standin-toggle", "revert", wait=False)
    assert (ctl / f"{a}.json").exists()  # no agent acknowledged it: kept (it was pruned)
    _ack(d, a)
    rundir.request(d, "standin-toggle", "apply", wait=False)
    assert (ctl / f"{a}.json").exists()  # acknowledged, but this command still waits for it
    rundir.done_waiting(d, a)
    rundir.request(d, "standin-toggle", "revert", wait=False)
    assert not (ctl / f"{a}.json").exists()  # acknowledged and no one waits: pruned
    assert (ctl / f"{b}.json").exists()  # never acknowledged: kept
    # a waiting command that died leaves a marker that keeps nothing
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    (ctl / f"{control.WAIT_PREFIX}{b}").write_text(dead)
    assert not control.waiting(ctl, b)
    control.prune(ctl, "none", acked=lambda rid: True)
    assert not (ctl / f"{control.WAIT_PREFIX}{b}").exists()


def test_a_wait_with_a_timeout_that_is_not_a_number_is_refused(tmp_path):
    import pytest

    from diag.errors import DiagError

    d = rundir.create_run_dir(tmp_path / "d")
    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(DiagError, match="not a finite number"):
            rundir.wait_ack(d, "x", timeout=bad)


def test_many_concurrent_commands_against_real_agents_each_get_their_answer(tmp_path):
    d = rundir.create_run_dir(tmp_path / "d")
    run_id = rundir.write_meta(d, cmd=["x"])
    agents = [_agent(tmp_path / f"a{i}", d, run_id=run_id) for i in range(2)
              if (tmp_path / f"a{i}").mkdir() is None]
    try:
        actions = ["apply", "revert"] * 5

        def one(action: str) -> subprocess.CompletedProcess:
            return subprocess.run([*DIAG, "fix", action, "standin-toggle", "--run-dir", str(d),
                                   "--timeout", "90", "--json"],
                                  capture_output=True, text=True, timeout=180)

        t0 = time.monotonic()
        with ThreadPoolExecutor(len(actions)) as pool:
            results = list(pool.map(one, actions))
        took = time.monotonic() - t0
        for action, r in zip(actions, results, strict=True):
            assert r.returncode in (0, 4), (action, r.stdout, r.stderr, took)
            doc = json.loads(r.stdout)
            rows = [p for p in doc["processes"] if p["waited"]]
            # its own answer from every agent: done, or refused with the reason (a revert of
            # a fix another command reverted first: exit 4); never "no acknowledgement"
            assert len(rows) == 2 and all(p["acknowledged"] for p in rows), doc
            assert r.returncode == (0 if all(p["ok"] for p in rows) else 4), doc
        pids = {pid for _p, pid, _s in agents}
        st = rundir.read_state(d)
        for pid in pids:
            assert {json.loads(r.stdout)["request"] for r in results} <= set(
                st.processes[pid].acks)
        assert not list((d / "control").glob(f"{control.WAIT_PREFIX}*"))  # all done waiting
    finally:
        for p, _pid, stop in agents:
            _end(p, stop)


def test_the_waiting_marker_appears_whole(tmp_path, monkeypatch):
    """The marker that keeps a request from being pruned is never on disk empty: made empty
    and filled after, another command's prune read it as a dead command's (pid 0) and removed
    it, and the request was pruned before the second agent had read it (the concurrent test
    above failed 3 times in 27 runs that way). Every time a `.wait-` name appears, it already
    holds this process's pid."""
    d = rundir.create_run_dir(tmp_path / "d")
    ctl = d / "control"
    real = os.replace
    seen: list[str] = []

    def replace(src, dst, *a, **k):
        dst = Path(dst)
        if dst.name.startswith(control.WAIT_PREFIX):
            assert not dst.exists()  # nothing of it before the rename
        real(src, dst, *a, **k)
        if dst.name.startswith(control.WAIT_PREFIX):
            seen.append(dst.read_text())

    monkeypatch.setattr(os, "replace", replace)
    rid = rundir.request(d, "standin-toggle", "apply")
    assert seen == [str(os.getpid())]
    assert (ctl / f"{control.WAIT_PREFIX}{rid}").read_text() == str(os.getpid())
    assert not [n for n in os.listdir(ctl) if n.endswith(".tmp")]  # no temporary file left
