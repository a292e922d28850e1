"""The agent tells the truth about itself under faults (issue 19), fast: real agents in real
subprocesses (the STAND-IN programs of tests/agent_standins, no SGLang), the real writer, fold
and CLI. The same faults on the real server: tests/test_engine_faults.py.

Faults are real: a full disk is the kernel's ENOSPC from /dev/full (the events file replaced by
a link to it), a FIFO is a FIFO; only the CLI's full-disk write is simulated (json.dump raising
ENOSPC), since no full filesystem can be had here without privileges.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from report_schema import check_events

from diag.cli import main
from diag.engine import control, eventlog, events, rundir

HERE = Path(__file__).resolve().parent
STANDINS = HERE / "agent_standins"
PID = 999999051  # a pid no process has: a writer's own events, read back


def _wait(what, check_, timeout=20.0, interval=0.05):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check_()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


# ----------------------------------------------------------------------------- lost writes


def test_full_disk_is_counted_logged_once_and_resynced(tmp_path, caplog):
    d = rundir.create_run_dir(tmp_path / "d")
    w = rundir.EventWriter(d, pid=PID, run_id="run-a")
    w({"kind": "start", "ppid": 1, "started": time.time(), "argv": ["x"],
       "fixes": {"f": {"state": "applied", "reason": ""}}})
    path = d / f"events-{PID}.jsonl"
    path.unlink()
    os.symlink("/dev/full", path)  # every write now fails with ENOSPC
    w.check()
    with caplog.at_level(logging.WARNING, logger="diag.agent"):
        w({"kind": "fix", "fix": "f", "state": "reverted", "reason": "asked"})
        for _ in range(5):
            w({"kind": "syncs", "builder": "B", "count": 2, "seconds": 0.001})
        w({"kind": "control_ack", "request": "R1", "fix": "f", "action": "revert", "ok": True,
           "state": "reverted", "reason": ""})
    assert w.failed and "ENOSPC" in w.failed
    # logged once for the whole outage, not once per event (the check's own line came before)
    assert sum("cannot write events" in r.message for r in caplog.records) <= 1
    # during the outage: the state file tells the truth, never the last known `applied`
    ps = rundir.read_process(d, PID)
    assert ps.fixes["f"]["state"] == "reverted"
    assert ps.acks["R1"]["ok"] is True
    assert ps.counters["lost"]["events"] >= 7 and "ENOSPC" in ps.counters["lost"]["reason"]
    assert "events lost since" in events.lost_text(ps.counters)
    path.unlink()  # space again
    time.sleep(eventlog.RETRY_S + 0.05)
    w.check()
    w({"kind": "syncs", "builder": "B", "count": 2, "seconds": 0.001})
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["kind"] for x in lines] == ["gap", "snapshot", "syncs"]
    assert lines[0]["lost"] >= 7 and lines[0]["since"] is not None
    ns = [x["n"] for x in lines]
    assert ns == sorted(ns) and ns[1] == ns[0] + 1 and ns[2] == ns[1] + 1
    ps = rundir.read_process(d, PID)
    assert ps.fixes["f"] == {"state": "reverted", "reason": ""}
    assert ps.counters["syncs"]["B"]["calls"] == 6  # the lost ones are in the totals
    assert ps.counters["lost"]["events"] == lines[0]["lost"]
    assert check_events(d) == 3


def test_a_jump_in_the_sequence_is_counted_and_makes_states_unknown():
    f = events.Fold()
    f.add({"ts": 1.0, "kind": "start", "pid": 1, "n": 0,
           "fixes": {"f": {"state": "applied", "reason": ""}}})
    f.add({"ts": 2.0, "kind": "syncs", "pid": 1, "n": 1, "builder": "B", "count": 1})
    f.add({"ts": 3.0, "kind": "syncs", "pid": 1, "n": 5, "builder": "B", "count": 1})
    assert f.counters["lost"]["events"] == 3 and f.counters["lost"]["since"] == 2.0
    assert f.fixes["f"]["state"] == events.UNKNOWN and "applied" in f.fixes["f"]["reason"]
    f.add({"ts": 4.0, "kind": "gap", "pid": 1, "n": 6, "lost": 3, "since": 2.0, "reason": "x"})
    assert f.counters["lost"]["events"] == 3  # the gap explains the jump, no double count
    f.add({"ts": 5.0, "kind": "snapshot", "pid": 1, "n": 7, "fixes": {"f": {
        "state": "reverted", "reason": ""}}, "counters": {"lost": {"events": 3, "since": 2.0,
                                                                   "reason": "x"}}})
    assert f.fixes["f"]["state"] == "reverted"


def test_rotation_keeps_the_sequence_unbroken(tmp_path):
    d = rundir.create_run_dir(tmp_path / "d")
    w = rundir.EventWriter(d, pid=PID, max_bytes=4096)
    w({"kind": "start", "ppid": 1, "started": time.time()})
    for _ in range(200):
        w({"kind": "syncs", "builder": "B", "count": 1, "seconds": 0.0})
    ps = rundir.read_process(d, PID)
    assert ps.counters["lost"]["events"] == 0 and ps.counters["syncs"]["B"]["calls"] == 200


# ----------------------------------------------------------------------------- real agents


def _agent(tmp_path: Path, d: Path, *extra: str, run_id: str | None = None):
    stop = tmp_path / "stop"
    boot = str(Path(__import__("diag.engine.bootstrap", fromlist=["x"]).directory()))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIAG_")}
    env.update(PYTHONPATH=os.pathsep.join([boot, str(STANDINS)]), DIAG_RUN_DIR=str(d),
               DIAG_CONTROL_POLL="0.05", DIAG_AGENT="1",
               DIAG_BATCH_HOOK="standin_scheduler:StandinScheduler.run_batch")
    if run_id:
        env["DIAG_RUN_ID"] = run_id
    p = subprocess.Popen([sys.executable, str(STANDINS / "standin_idle.py"), str(stop), *extra],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid = int(p.stdout.readline())
    _wait("the agent's start event", lambda: (d / f"events-{pid}.jsonl").exists()
          and rundir.read_process(d, pid).start)
    return p, pid, stop


def _end(p, stop):
    stop.touch()
    out, err = p.communicate(timeout=30)
    return err


def _junk(ctl: Path, name: str, data: bytes) -> None:
    (ctl / name).write_bytes(data)


def test_control_requests_are_validated_and_a_fifo_does_not_hang(tmp_path):
    d = rundir.create_run_dir(tmp_path / "d")
    run_id = rundir.write_meta(d, cmd=["x"])
    p, pid, stop = _agent(tmp_path, d, run_id=run_id)
    ctl = d / "control"
    try:
        os.mkfifo(ctl / "00000000000000000001-fifo.json")
        good = {"schema_version": 1, "run": run_id, "fix": "standin-toggle",
                "action": "apply", "pid": None, "ts": time.time()}
        bad = {
            "00000000000000000002-a": b"{not json",
            "00000000000000000002-b": b"[1, 2]",
            "00000000000000000002-c": bytes(range(256)),
            "00000000000000000002-d": b" " * (control.MAX_BYTES + 1),
            "00000000000000000002-e": {**good, "fix": "made-up-fix"},
            "00000000000000000002-f": {**good, "pid": "x"},
            "00000000000000000002-g": {**good, "schema_version": 99},
            "00000000000000000002-h": {**good, "action": "toggle"},
            "00000000000000000002-i": {**good, "run": "another-run", "pid": pid},
        }  # (-i names the pid: the next request, run-wide, would prune it as superseded)
        for name, doc in bad.items():
            data = doc if isinstance(doc, bytes) else json.dumps({**doc, "id": name}).encode()
            _junk(ctl, f"{name}.json", data)
        rid = rundir.request(d, "standin-toggle", "apply")
        acks = rundir.wait_ack(d, rid, timeout=20)
        assert acks[pid] and acks[pid]["ok"], acks  # the FIFO did not block the control thread
        ps = rundir.read_process(d, pid)
        assert set(bad) <= set(ps.acks), (sorted(ps.acks), ps.last_events[-5:])
        reasons = {n: ps.acks[n]["reason"] for n in bad}
        assert all(ps.acks[n]["state"] == "rejected" and not ps.acks[n]["ok"] for n in bad)
        assert "not JSON" in reasons["00000000000000000002-a"]
        assert "not a JSON object (list)" in reasons["00000000000000000002-b"]
        assert "not JSON" in reasons["00000000000000000002-c"]
        assert "over the 4096-byte limit" in reasons["00000000000000000002-d"]
        assert "unknown fix 'made-up-fix'" in reasons["00000000000000000002-e"]
        assert "pid 'x'" in reasons["00000000000000000002-f"]
        assert "schema_version 99" in reasons["00000000000000000002-g"]
        assert "unknown action 'toggle'" in reasons["00000000000000000002-h"]
        assert "another-run" in reasons["00000000000000000002-i"]
        assert "00000000000000000001-fifo" not in ps.acks  # skipped unread, not rejected
        assert set(ps.fixes) == {"standin-toggle"}  # nothing made up, nothing overwritten
        # the next request prunes the one it supersedes
        rid2 = rundir.request(d, "standin-toggle", "revert")
        assert not (ctl / f"{rid}.json").exists() and (ctl / f"{rid2}.json").exists()
        assert rundir.wait_ack(d, rid2, timeout=20)[pid]["ok"]
    finally:
        _end(p, stop)
    assert check_events(d) > 0


def test_a_process_that_runs_no_loop_still_applies_requests(tmp_path):
    """The launcher imports the scheduler module (the per-batch hook goes in) but runs no loop:
    it must apply requests on its poll thread, or its state is stale for good."""
    d = rundir.create_run_dir(tmp_path / "d")
    p, pid, stop = _agent(tmp_path, d, "import-scheduler")
    try:
        _wait("batch mode", lambda: rundir.read_process(d, pid).control == "batch")
        for action, state in (("apply", "applied"), ("revert", "reverted")):
            rid = rundir.request(d, "standin-toggle", action)
            ack = rundir.wait_ack(d, rid, timeout=20)[pid]
            assert ack and ack["ok"] and ack["state"] == state, ack
        assert rundir.read_process(d, pid).fixes["standin-toggle"]["state"] == "reverted"
    finally:
        _end(p, stop)


def test_a_recreated_run_directory_is_not_obeyed(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # where the agent moves (its registry)
    d = rundir.create_run_dir(tmp_path / "d")
    run_id = rundir.write_meta(d, cmd=["x"])
    p, pid, stop = _agent(tmp_path, d, run_id=run_id)
    try:
        import shutil

        shutil.rmtree(d)
        d2 = rundir.create_run_dir(tmp_path / "d")  # a new run reusing the path
        rundir.write_meta(d2, cmd=["y"])
        rundir.EventWriter(d2)({"kind": "start", "ppid": 1, "started": time.time()})  # live
        rid = rundir.request(d2, "standin-toggle", "apply")
        time.sleep(1.0)  # 20 polls
        assert rundir.read_requests(d2)[0]["id"] == rid
        assert not (d2 / f"events-{pid}.jsonl").exists()  # it writes nothing there
        assert pid not in rundir.read_state(d2).processes
        assert p.poll() is None
    finally:
        err = _end(p, stop)
    assert "was removed and another one made under its path" in err  # it went elsewhere


def test_a_live_run_directory_is_refused_to_a_new_run(tmp_path):
    d = rundir.create_run_dir(tmp_path / "d")
    rundir.write_meta(d, cmd=["x"], run_id="old")
    rundir.EventWriter(d)({"kind": "start", "ppid": 1, "started": time.time(), "run": "old"})
    r = CliRunner().invoke(main, ["run", "--run-dir", str(d), "--", "true"])
    assert r.exit_code == 3, r.output
    assert "in use by run old" in r.output and "Traceback" not in r.output


def test_processes_of_an_earlier_run_are_left_out(tmp_path):
    d = rundir.create_run_dir(tmp_path / "d")
    rundir.write_meta(d, cmd=["x"], run_id="new")
    rundir.EventWriter(d, pid=PID, run_id="old")({"kind": "start", "started": 1.0})
    rundir.EventWriter(d, pid=PID + 1, run_id="new")({"kind": "start", "started": 1.0})
    st = rundir.read_state(d)
    assert set(st.processes) == {PID + 1} and st.other_runs == 1


# ----------------------------------------------------------------------------- the CLI


def _live_run(tmp_path: Path) -> Path:
    d = rundir.create_run_dir(tmp_path / "d")
    rundir.EventWriter(d)({"kind": "start", "ppid": 1, "started": time.time()})
    return d


def test_full_disk_in_a_control_write_is_exit_3_and_leaves_no_temp_file(tmp_path, monkeypatch):
    d = _live_run(tmp_path)

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(json, "dump", full)
    for action in ("apply", "revert"):
        r = CliRunner().invoke(main, ["fix", action, "standin-toggle", "--run-dir", str(d)])
        assert r.exit_code == 3, r.output
        assert "cannot write the control request" in r.output and "ENOSPC" in r.output
        assert "internal error" not in r.output
    assert sorted(p.name for p in (d / "control").iterdir()) == []


def test_helpers_that_cannot_hold_a_fix_are_not_waited_for():
    def ps(pid, engine=False, sglang=None):
        return rundir.ProcessState(pid, 1, [], 0.0, sglang, True, {}, {}, [], {},
                                   engine=engine)

    helper, launcher, sched = ps(1), ps(2, sglang="0.5.23"), ps(3, engine=True, sglang="0.5.23")
    assert rundir.waited_for({1: helper, 2: launcher}, [1, 2]) == {2}
    assert rundir.waited_for({1: helper, 2: launcher, 3: sched}, [1, 2, 3]) == {3}
    assert rundir.waited_for({1: helper}, [1]) == {1}  # nothing better known: wait for it
    assert "never imported SGLang" in rundir.not_waited_reason(helper, False)


# ----------------------------------------------------------------------------- the TUI


def test_an_idle_run_dir_series_is_idle_not_stale():
    from diag.tui.model import Model

    now = [100.0]
    m = Model(now=lambda: now[0])
    m.series_src["syncs"] = "run dir"
    m.series_at["syncs"] = 100.0
    now[0] = 200.0
    m.set_source("run dir D", True, "ok")  # the source answers: nothing new, not stale
    assert m.series_state("syncs") == (100.0, "idle")
    now[0] = 300.0  # the source has not answered for 100 s
    assert m.series_state("syncs")[1] == "stale"


@pytest.mark.parametrize("name", ["run.json", "events-1.jsonl"])
def test_readers_never_open_a_fifo(tmp_path, name):
    d = rundir.create_run_dir(tmp_path / "d")
    os.mkfifo(d / name)
    t0 = time.monotonic()
    rundir.read_state(d)
    assert time.monotonic() - t0 < 5


def test_an_unchanged_control_folder_costs_one_stat(tmp_path, monkeypatch):
    d = rundir.create_run_dir(tmp_path / "d")
    rundir.request(d, "standin-toggle", "apply")
    past = time.time() - 10
    os.utime(d / "control", (past, past))  # settled: older than a clock tick's doubt
    r = control.Reader(d)
    assert len(r.new()) == 1
    monkeypatch.setattr(control.os, "listdir", lambda _p: pytest.fail("listed again"))
    assert r.new() == []
    monkeypatch.undo()
    rundir.request(d, "standin-toggle", "revert")  # the folder changes: only the new one is read
    assert [doc["action"] for _n, doc, _w, _q in r.new()] == ["revert"]


def test_the_tui_says_events_were_lost(tmp_path):
    from diag.tui import data

    d = rundir.create_run_dir(tmp_path / "d")
    w = rundir.EventWriter(d, pid=PID)
    w({"kind": "start", "ppid": 1, "started": time.time()})
    w({"kind": "syncs", "builder": "B", "count": 1, "seconds": 0.0})
    lines = (d / f"events-{PID}.jsonl").read_text().splitlines()
    (d / f"events-{PID}.jsonl").write_text(lines[0] + "\n")  # the second event is gone
    w.close()
    w2 = rundir.EventWriter(d, pid=PID)  # same numbering continued by hand: n=2 follows n=0
    next(w2._n), next(w2._n)
    w2({"kind": "syncs", "builder": "B", "count": 1, "seconds": 0.0})
    state = rundir.read_state(d)
    (view,) = data.engine_processes(state)
    assert view.lost.startswith("events lost since") and ": 1 (events 1-1 missing)" in view.lost
    assert data.lost_suffix(state) == ", 1 events lost"
    doc = data.export_doc(data.Header(), [], [], [], [], [], [view])
    assert doc["engine_processes"][0]["events_lost"] == view.lost


@pytest.fixture
def full_fs(tmp_path):
    """A real, tiny tmpfs (root only), filled up after the caller's set-up: the kernel's own
    ENOSPC. Skipped where mounting is not allowed."""
    where = tmp_path / "fs"
    where.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(where)],
                       capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")

    def fill() -> None:
        fd = os.open(where / "fill", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            with pytest.raises(OSError) as e:
                while True:
                    os.write(fd, b"x" * 4096)
        finally:
            os.close(fd)
        assert e.value.errno == errno.ENOSPC

    try:
        yield where, fill
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_on_a_really_full_disk_the_state_file_and_the_cli_tell_the_truth(full_fs):
    where, fill = full_fs
    d = rundir.create_run_dir(where / "d")
    w = rundir.EventWriter(d)  # this process: live
    w({"kind": "start", "ppid": 1, "started": time.time(),
       "fixes": {"f": {"state": "applied", "reason": ""}}})
    fill()
    for _ in range(200):  # past the events file's last page
        w({"kind": "syncs", "builder": "B", "count": 1, "seconds": 0.0})
    assert w.failed and "ENOSPC" in w.failed
    w({"kind": "fix", "fix": "f", "state": "reverted", "reason": "asked"})
    ps = rundir.read_process(d, os.getpid())
    assert ps.fixes["f"]["state"] == "reverted"  # the preallocated state file was written
    assert ps.counters["lost"]["events"] > 0
    r = CliRunner().invoke(main, ["fix", "apply", "standin-toggle", "--run-dir", str(d)])
    assert r.exit_code == 3, r.output
    assert "cannot write the control request" in r.output and "ENOSPC" in r.output
    assert [p.name for p in (d / "control").iterdir()] == []  # no temporary file left
    raw = (d / f"events-{os.getpid()}.jsonl").read_bytes()  # whole lines only, none cut
    assert raw.endswith(b"\n") and all(json.loads(x) for x in raw.splitlines())


def test_writer_never_writes_into_a_directory_made_again_under_its_path(tmp_path):
    """Another run re-creating the path between the removal and the writer's next open (the
    engine lane saw it once under load): the writer opens relative to the directory it was
    given, and creating a file in a removed directory fails, so nothing lands in the new one."""
    import shutil

    d = rundir.create_run_dir(tmp_path / "run")
    w = eventlog.EventWriter(d, pid=4242)
    w.write({"kind": "error", "where": "t", "message": "before"})
    shutil.rmtree(d)
    d2 = rundir.create_run_dir(d)  # the same path, another directory
    w.check()  # the poll thread: the file is gone, reopen
    for _ in range(3):
        w.write({"kind": "error", "where": "t", "message": "after"})
        w.check()
    assert sorted(p.name for p in d2.iterdir()) == ["control"]  # what create_run_dir made
    assert w.lost_total >= 3
    w.close()
