"""The one reader of a run directory (`rundir.RunReader`, issues 27 and 31): it never trusts a
file, reads only new bytes per poll, and says what a fresh read says after every fault.

The files are written by the real `EventWriter` (the agent's); the faults are done to them as a
user or a crash would: a half line appended by hand, a file truncated, a rotation at the cap."""

from __future__ import annotations

import json
import os
import time

import pytest
from click.testing import CliRunner

from diag.cli import main
from diag.engine import eventlog, events, rundir

PID = 999999071  # a pid no process has: a writer's own events, read back
FIX = "f"


def _writer(tmp_path, **kw):
    d = rundir.create_run_dir(tmp_path / "d")
    w = rundir.EventWriter(d, pid=PID, run_id="r1", **kw)
    w({"kind": "start", "ppid": 1, "started": time.time(), "argv": ["x"],
       "fixes": {FIX: {"state": "applied", "reason": ""}}})
    return d, w


def _same(incremental: rundir.RunReader, d) -> dict:
    """The incremental reader's state equals a fresh read's (every count, every state)."""
    a = incremental.poll()[0].to_dict()
    b = rundir.read_state(d).to_dict()
    assert a == b
    return b["processes"][0]


def _status_json(d) -> dict:
    r = CliRunner().invoke(main, ["fix", "status", "--run-dir", str(d), "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)["runs"][0]["processes"][0]


def test_a_half_line_is_skipped_and_the_event_after_it_read(tmp_path):
    """Defect 1: a revert written after a half line is read (it was glued to the half and
    dropped: `fix status` said applied)."""
    d, w = _writer(tmp_path)
    inc = rundir.RunReader(d)
    _same(inc, d)
    with open(d / f"events-{PID}.jsonl", "ab") as fh:  # as in the issue: a crash mid-write
        fh.write(b'{"ts": 1, "kind": "fix", "fix": "profiler-contr')
    w({"kind": "control_ack", "request": "R1", "fix": FIX, "action": "revert", "ok": True,
       "state": "reverted", "reason": ""})
    w({"kind": "syncs", "builder": "B", "count": 2, "seconds": 0.001})
    p = _same(inc, d)
    assert p["fixes"][FIX]["state"] == "reverted"
    assert p["problems"] == {"a half line skipped": 1}
    assert p["counters"]["lost"]["events"] == 0 and p["counters"]["syncs"]["B"]["syncs"] == 2
    assert _status_json(d)["fixes"][FIX]["state"] == "reverted"
    text = CliRunner().invoke(main, ["fix", "status", "--run-dir", str(d)]).output
    assert "read problem: a half line skipped (1x)" in text
    from diag.tui import data  # the TUI's header says it too, from the same reader

    tui = data.RunDirReader(str(d))
    state, _new = tui.poll()
    assert state.processes[PID].fixes[FIX]["state"] == "reverted"
    assert data.lost_suffix(state) == ", 1 read problems (diag fix status)"


def test_fields_of_the_wrong_type_are_counted_problems_never_an_exception(tmp_path):
    d, w = _writer(tmp_path)
    with open(d / f"events-{PID}.jsonl", "ab") as fh:
        for doc in ({"kind": "fix", "fix": ["x"], "state": "applied", "n": 1, "pid": PID},
                    {"kind": "control_ack", "request": 5, "ok": "yes", "n": 2, "pid": PID},
                    {"kind": "start", "argv": "not a list", "started": "now", "n": 3}):
            fh.write(json.dumps(doc).encode() + b"\n")
        fh.write(b"\xff\xfe not json\n[1, 2]\n")
    p = _status_json(d)
    assert p["problems"] == {"fix.fix is not str | None": 1,
                             "control_ack.request is not str | None": 1,
                             "control_ack.ok is not bool": 1,
                             "start.argv is not list[str]": 1,
                             "start.started is not float | None": 1,
                             "a line that is not JSON": 1, "a line that is not an object": 1}
    assert p["fixes"] == {FIX: {"state": "applied", "reason": ""}}  # no made-up fix
    assert p["argv"] == []  # the later start's argv is unreadable: none shown, not the string


def test_a_truncated_file_makes_the_state_unknown_with_the_loss_counted_until_a_snapshot(
        tmp_path):
    """Defect 2: the first event read is numbered 6: six are lost and the fix state is
    unknown (it said nothing and restarted the counters at 0); the writer notices at its next
    check and writes a gap and a snapshot, which every reader and the state file agree on."""
    d, w = _writer(tmp_path)
    inc = rundir.RunReader(d)
    for _ in range(5):
        w({"kind": "profiler_stop", "seconds": 0.01, "collected": 1, "path": "p"})
    assert _same(inc, d)["counters"]["profiler_stop"]["stops"] == 5
    os.truncate(d / f"events-{PID}.jsonl", 0)
    w({"kind": "profiler_stop", "seconds": 0.01, "collected": 1, "path": "p"})
    p = _same(inc, d)
    assert p["counters"]["lost"]["events"] == 6  # events 0-5 are gone: the first read is n=6
    assert p["fixes"][FIX]["state"] == events.UNKNOWN
    assert p["fixes"][FIX]["reason"] == "events lost; last known: applied"
    w.check()  # the agent's poll thread: the truncation is seen, a gap and a snapshot written
    p = _same(inc, d)
    st = eventlog.read_state_file(d, PID)
    assert p["fixes"][FIX]["state"] == "applied"
    assert p["counters"]["profiler_stop"]["stops"] == 6  # the totals are back
    assert p["counters"]["lost"]["events"] == st["lost"]["events"] == 6
    assert _status_json(d)["counters"]["lost"]["events"] == 6


def test_rotation_read_incrementally_equals_a_fresh_read_and_repeats_no_event(tmp_path):
    d, w = _writer(tmp_path, max_bytes=4096)
    inc = rundir.RunReader(d)
    seen: list[int] = []
    for i in range(300):
        w({"kind": "syncs", "builder": "B", "count": 1, "seconds": 0.0})
        if i % 37 == 0:
            seen += [e.n for e in inc.poll()[1]]
            _same(rundir.RunReader(d), d)
    seen += [e.n for e in inc.poll()[1]]
    assert (d / f"events-{PID}.1.jsonl").exists()  # it did rotate
    assert len(seen) == len(set(seen))  # no event handed out twice
    p = _same(inc, d)
    assert p["counters"]["syncs"]["B"]["calls"] == 300 and p["counters"]["lost"]["events"] == 0


def test_a_poll_reads_only_the_new_bytes(tmp_path, monkeypatch):
    d, w = _writer(tmp_path)
    for _ in range(200):
        w({"kind": "syncs", "builder": "B", "count": 1, "seconds": 0.0})
    inc = rundir.RunReader(d)
    inc.poll()
    read: list[int] = []
    real = rundir.open_regular

    class Spy:
        def __init__(self, fh):
            self.fh = fh

        def __getattr__(self, name):
            return getattr(self.fh, name)

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.fh.close()

        def read(self, n=-1):
            data = self.fh.read(n)
            read.append(len(data))
            return data

    monkeypatch.setattr(rundir, "open_regular", lambda p: None if (fh := real(p)) is None
                        else Spy(fh) if p.name.startswith("events-") else fh)
    inc.poll()
    assert sum(read) == 0  # nothing new: nothing read
    w({"kind": "syncs", "builder": "B", "count": 1, "seconds": 0.0})
    inc.poll()
    last = (d / f"events-{PID}.jsonl").read_bytes().splitlines(keepends=True)[-1]
    assert sum(read) == len(last), (read, len(last))


@pytest.mark.parametrize("bad", [
    {"pid": PID, "n": "x", "lost": {"events": "many", "now": True}, "fixes": [1]},
    {"pid": PID, "n": 99, "lost": {"events": 3, "now": True, "since": "then"},
     "fixes": {FIX: "applied"}, "acks": {"not": "a list"}},
    {"pid": PID, "n": 99, "lost": [], "acks": [1, {"request": 2}], "engine": "yes"},
])
def test_a_damaged_state_file_is_never_an_exception(tmp_path, bad):
    """Defect 6: a state file whose fields have the wrong types crashed `fix status` (exit 70)."""
    d, w = _writer(tmp_path)
    w.close()
    path = eventlog.state_path(d, PID)
    path.write_text(json.dumps(bad).ljust(eventlog.STATE_BYTES))
    p = _status_json(d)
    assert p["fixes"][FIX]["state"] in ("applied", events.UNKNOWN)
    assert isinstance(p["counters"]["lost"]["events"], int)
    r = CliRunner().invoke(main, ["fix", "status", "--run-dir", str(d)])
    assert r.exit_code == 0 and "Traceback" not in r.output


def test_a_state_file_ack_of_the_wrong_shape_is_never_taken_for_an_answer(tmp_path):
    d, w = _writer(tmp_path)
    w.close()
    eventlog.state_path(d, PID).write_text(json.dumps({"pid": PID, "n": 0, "acks": [
        {"request": "R9", "ok": "yes", "state": "applied", "reason": ""},
        {"request": "R8", "ok": True, "state": "applied", "reason": ""}]}))
    ps = rundir.read_process(d, PID)
    assert "R9" not in ps.acks and ps.acks["R8"]["ok"] is True
    assert ps.problems == {"state file: control_ack.ok is not bool": 1}


def test_lost_counts_agree_after_failed_reopens_on_a_full_disk(tmp_path):
    """Defect 4: the gap and snapshot markers numbered on each failed reopen were counted by
    the readers (a jump) but not by the state file nor `diag_events_lost_total`."""
    d, w = _writer(tmp_path)
    metric: list[int] = []
    w.on_lost = lambda n, why: metric.append(n)
    path = d / f"events-{PID}.jsonl"
    path.rename(d / "kept")
    os.symlink("/dev/full", path)  # the kernel's ENOSPC on every write
    w.check()
    for _ in range(4):
        w({"kind": "syncs", "builder": "B", "count": 1, "seconds": 0.0})
        w._retry_at = 0.0  # the writer retries at most every RETRY_S: do not sleep for it
        w.check()  # a reopen that fails: its gap and snapshot are lost too
    path.unlink()
    (d / "kept").rename(path)
    w._retry_at = 0.0
    w({"kind": "syncs", "builder": "B", "count": 1, "seconds": 0.0})  # written again
    p = _status_json(d)
    st = eventlog.read_state_file(d, PID)
    assert p["counters"]["lost"]["events"] == st["lost"]["events"] == sum(metric) > 4
    assert p["counters"]["syncs"]["B"]["calls"] == 5 and p["fixes"][FIX]["state"] == "applied"


@pytest.mark.parametrize("entry", [b"[1, 2]", b'{"run_dir": 5}', b"{}", b"\xff\xfe",
                                   b'{"run_dir": ""}', b'{"run_dir": "a\\u0000b"}',
                                   b'{"run_dir": {"x": 1}}'])
def test_a_damaged_registry_entry_never_breaks_discovery(tmp_path, monkeypatch, entry):
    """Defect 6: one damaged registry entry broke discovery (`fix status` with no --run-dir)."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    d = rundir.create_run_dir(tmp_path / "live")
    w = rundir.EventWriter(d, pid=os.getpid())  # this test's own process: a live one
    w({"kind": "start", "ppid": 1, "started": time.time() - 1, "argv": ["x"]})
    rundir.register(d)
    (rundir.registry_dir() / "0000damaged.json").write_bytes(entry)
    assert d in rundir.discover()  # (with any other live run of this user's processes)
    r = CliRunner().invoke(main, ["fix", "status", "--json"])
    assert r.exit_code == 0, r.output
    assert str(d) in [x["run_dir"] for x in json.loads(r.output)["runs"]]
    w.close()
