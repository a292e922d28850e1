"""Control requests reach a running spawned child and switch fixes between batches.

The engine is the STAND-IN in tests/agent_standins (a launcher + a spawned scheduler child with a
per-batch `run_batch`); the fixes toggled are stand-in fixes patched through the real patcher.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from report_schema import check, check_events

from diag.engine import rundir

HERE = Path(__file__).resolve().parent
STANDINS = HERE / "agent_standins"
DIAG = [sys.executable, str(Path(__file__).resolve().parent / "agent_standins" / "diag_with_standins.py")]  # noqa: E501


def _start(tmp_path: Path, *extra: str, batches: int = 400, pause: float = 0.02):
    d = tmp_path / "D"
    out, stop = tmp_path / "out.jsonl", tmp_path / "stop"
    env = {**os.environ, "PYTHONPATH": str(STANDINS), "DIAG_CONTROL_POLL": "0.05",
           "DIAG_BATCH_HOOK": "standin_scheduler:StandinScheduler.run_batch"}
    p = subprocess.Popen([*DIAG, "run", "--run-dir", str(d), "--", sys.executable,
                          str(STANDINS / "standin_engine.py"), str(out), str(stop),
                          str(batches), str(pause), *extra], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if out.exists() and out.read_text().count("\n") >= 3:
            break
        assert p.poll() is None, p.communicate()
        time.sleep(0.05)
    child = json.loads(out.read_text().splitlines()[0])["pid"]
    return p, d, out, stop, child


def _batches(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines()]


def _fix_cli(action: str, fix: str, d: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([*DIAG, "fix", action, fix, "--run-dir", str(d), "--json", *extra],
                          capture_output=True, text=True, timeout=120)


def test_toggle_in_running_child_between_batches(tmp_path):
    p, d, out, stop, child = _start(tmp_path)
    try:
        st = rundir.read_state(d)
        assert st.processes[child].control == "batch"  # the per-batch hook is in
        r = _fix_cli("apply", "standin-toggle", d, "--pid", str(child))
        assert r.returncode == 0, r.stdout + r.stderr
        check("fix-action-v1.json", json.loads(r.stdout))
        ack = json.loads(r.stdout)["processes"]
        assert ack == [{"pid": child, "engine": True, "rank": None, "acknowledged": True, "ok": True,
                        "state": "applied", "reason": "", "waited": True}]
        n_applied = len(_batches(out))
        time.sleep(0.3)
        r = _fix_cli("revert", "standin-toggle", d, "--pid", str(child))
        assert r.returncode == 0, r.stdout + r.stderr
        n_reverted = len(_batches(out))
        time.sleep(0.3)
    finally:
        stop.touch()
        p.communicate(timeout=60)
    assert p.returncode == 0
    b = _batches(out)
    # never switched in the middle of a batch
    assert all(x["first"] == x["last"] for x in b)
    seq = [x["first"] for x in b]
    # plain ... fixed ... plain: once on, once off
    changes = [i for i in range(1, len(seq)) if seq[i] != seq[i - 1]]
    assert len(changes) == 2 and seq[0] == "plain" and seq[changes[0]] == "fixed"
    assert changes[0] <= n_applied and n_applied <= changes[1] <= n_reverted + 1
    st = rundir.read_state(d)
    acks = [e for e in st.processes[child].last_events if e["kind"] == "control_ack"]
    assert [(a["action"], a["ok"], a["state"]) for a in acks] == [
        ("apply", True, "applied"), ("revert", True, "reverted")]
    assert st.processes[child].fixes["standin-toggle"]["state"] == "reverted"
    # the run's events and `fix status --json` validate against their schemas
    assert check_events(d) > 0
    status = subprocess.run([*DIAG, "fix", "status", "--run-dir", str(d), "--json"],
                            capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stderr
    doc = json.loads(status.stdout)
    check("fix-status-v1.json", doc)
    assert {p["pid"] for p in doc["runs"][0]["processes"]} >= {child}


def test_whole_run_request_and_refusal(tmp_path):
    """pid=None reaches every live process (launcher in poll mode, child at its batch); an
    unexpected exception inside a fix's apply is contained, refused with exit 4."""
    p, d, out, stop, child = _start(tmp_path)
    try:
        r = _fix_cli("apply", "standin-toggle", d)
        assert r.returncode == 0, r.stdout + r.stderr
        check("fix-action-v1.json", json.loads(r.stdout))
        doc = json.loads(r.stdout)
        rows = {x["pid"]: x for x in doc["processes"]}
        assert set(rows) >= {p.pid, child}  # + multiprocessing's resource tracker
        assert rows[child]["state"] == "applied" and rows[child]["ok"] and rows[child]["waited"]
        # the others are not waited for once the engine answered (cli/fix.py `_control`): each is
        # listed with what it answered by then; the launcher (poll mode) answers too
        for row in rows.values():
            assert row["ok"] or (not row["acknowledged"] and not row["waited"]), row
        late = rundir.wait_ack(d, doc["request"], pid=p.pid, timeout=30)
        # the launcher never imports the module the stand-in fix patches
        assert late[p.pid]["ok"] and late[p.pid]["state"] == "pending", late
        rid = rundir.request(d, "standin-broken", "apply", child)
        acks = rundir.wait_ack(d, rid, pid=child, timeout=30)
        assert acks[child]["ok"] is False and acks[child]["state"] == "failed"
        assert "injected failure in apply" in acks[child]["reason"]
        r = _fix_cli("apply", "no-such-fix", d, "--pid", str(child))
        # the engine announced its registry (start event): an id it lacks is a usage error,
        # and nothing is sent
        assert r.returncode == 2 and "unknown fix 'no-such-fix'" in r.stderr, r.stderr
        assert "known to this run's engine" in r.stderr
        # a request that reaches the engine anyway: its own registry rejects it
        rid = rundir.request(d, "no-such-fix", "apply", child)
        acks = rundir.wait_ack(d, rid, pid=child, timeout=30)
        assert acks[child]["ok"] is False and acks[child]["state"] == "rejected"
        assert "unknown fix 'no-such-fix'" in acks[child]["reason"]
        assert "no-such-fix" not in rundir.read_process(d, child).fixes  # no made-up fix
        n = len(_batches(out))
        time.sleep(0.3)
        assert len(_batches(out)) > n  # the child goes on
    finally:
        stop.touch()
        p.communicate(timeout=60)
    assert p.returncode == 0
    st = rundir.read_state(d)
    assert st.processes[child].counters["errors"] >= 1
    assert any(e["kind"] == "error" and "standin-broken" in e["where"]
               for e in st.processes[child].last_events)


def test_exception_in_hook_leaves_child_running(tmp_path):
    p, d, out, stop, child = _start(tmp_path, "inject-hook-error")
    try:
        r = _fix_cli("apply", "standin-toggle", d, "--pid", str(child), "--timeout", "1.5")
        assert r.returncode == 4  # not acknowledged: the hook failed
        row = json.loads(r.stdout)["processes"][0]
        assert row["acknowledged"] is False
        n = len(_batches(out))
        time.sleep(0.3)
        assert len(_batches(out)) > n
    finally:
        stop.touch()
        p.communicate(timeout=60)
    assert p.returncode == 0
    b = _batches(out)
    assert all(x["first"] == "plain" == x["last"] for x in b)  # left unpatched
    errs = [e for e in rundir.read_state(d).processes[child].last_events if e["kind"] == "error"]
    assert [e["where"] for e in errs] == ["per-batch hook"]  # once, not once per batch
    assert "injected failure in the per-batch hook" in errs[0]["message"]


def test_late_process_replays_run_wide_requests(tmp_path):
    """A process that starts after a run-wide request converges on the requested state."""
    d = rundir.create_run_dir(tmp_path / "D")
    rid = rundir.request(d, "standin-toggle", "apply")
    env = {**os.environ, "PYTHONPATH": str(STANDINS), "DIAG_RUN_DIR": str(d),
           "DIAG_CONTROL_POLL": "0.05"}
    prog = ("import standin_fixes, time; standin_fixes.register()\n"
            "import standin_scheduler as s\n"
            "deadline = time.time() + 20\n"
            "while s.compute() != 'fixed' and time.time() < deadline: time.sleep(0.02)\n"
            "print(s.compute())\n")
    boot = str(Path(__import__("diag.engine.bootstrap", fromlist=["x"]).directory()))
    env["PYTHONPATH"] = os.pathsep.join([boot, str(STANDINS)])
    r = subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "fixed"
    (pid,) = rundir.pids_in(d)
    assert rundir.read_process(d, pid).acks[rid]["ok"] is True


def test_batch_hook_serves_the_current_agent_after_fork(monkeypatch):
    """A forked child gets a new agent (`_after_fork`) but keeps the per-batch wrapper its parent
    installed: that wrapper must apply the child's pending requests, not the parent's."""
    from diag.engine import agent as agent_mod

    parent, child = agent_mod.Agent("api"), agent_mod.Agent("api")
    served = []
    monkeypatch.setattr(parent, "safe_point", lambda: served.append("parent"))
    monkeypatch.setattr(child, "safe_point", lambda: served.append("child"))
    wrapped = parent._make_batch_wrapper(lambda x: x + 1)
    monkeypatch.setattr(agent_mod, "_agent", child)
    child.pending = True
    assert wrapped(1) == 2 and served == ["child"]


def test_a_probe_switch_is_skipped_quietly_where_no_counter_runs(tmp_path, caplog):
    """`probe:<id>` requests (diag bench overhead, before every window) are for the processes
    that run that counter: a process that is no engine and has none skips them without an
    answer or a warning (the server log was full of rejections); an engine process without the
    counter still refuses, so the bench hears why."""
    import logging

    from diag.engine import agent as agent_mod
    from diag.engine import control

    d = rundir.create_run_dir(tmp_path / "run")
    doc = {"schema_version": control.VERSION, "id": "1-2-3", "run": rundir.read_meta(d).get(
        "run_id"), "fix": "probe:metadata-syncs", "action": "apply", "pid": None, "ts": 1.0}
    a = agent_mod.Agent("api")
    a.run_id = doc["run"]
    emitted: list = []
    caplog.set_level(logging.DEBUG, logger="diag.engine.agent")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(agent_mod.ev, "emit", emitted.append)
        assert a._checked("1-2-3", doc, None, False) is None
        assert emitted == [] and not [r for r in caplog.records if r.levelno >= logging.WARNING]
        a.engine = True
        assert a._checked("1-2-3", doc, None, False) is None
    (ack,) = emitted
    assert ack.ok is False and "unknown fix 'probe:metadata-syncs'" in ack.reason
