"""The run directory: private creation, refusal of unsafe ones, capped event files with exact
totals, control requests and acknowledgements, discovery through the registry."""

from __future__ import annotations

import json
import os
import stat
import time

import pytest

from diag.engine import rundir
from diag.errors import DiagError


def test_created_private_even_with_open_umask(tmp_path):
    old = os.umask(0)
    try:
        d = rundir.create_run_dir(tmp_path / "a" / "run")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(d / "control").st_mode) == 0o700
    assert rundir.create_run_dir(d) == d  # an existing safe one is accepted


def test_default_location_under_runtime_dir(tmp_path, monkeypatch):
    rt = tmp_path / "xdg"
    rt.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(rt))
    d = rundir.create_run_dir()
    assert d.parent == rt / "diag" / "runs" and d.name.startswith("run-")
    rundir.register(d)
    assert [json.loads(p.read_text())["run_dir"] for p in (rt / "diag" / "registry").iterdir()
            ] == [str(d)]


@pytest.mark.parametrize("mode", [0o750, 0o705, 0o777])
def test_refuses_open_dir(tmp_path, mode):
    d = tmp_path / "d"
    d.mkdir()
    os.chmod(d, mode)
    for call in (rundir.create_run_dir, rundir.read_state, rundir.check_run_dir):
        with pytest.raises(DiagError, match=f"mode {mode:04o} lets group/others in"):
            call(d)
    with pytest.raises(DiagError, match="lets group/others in"):
        rundir.request(d, "x", "apply")


@pytest.mark.skipif(os.getuid() != 0, reason="only root can make a directory someone else's")
def test_refuses_foreign_owner(tmp_path):
    d = tmp_path / "d"
    d.mkdir(mode=0o700)
    os.chown(d, 65534, 65534)
    with pytest.raises(DiagError, match="owned by uid 65534, not by you"):
        rundir.read_state(d)


def test_refuses_file_and_missing(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(DiagError, match="is not a directory"):
        rundir.check_run_dir(tmp_path / "f")
    with pytest.raises(DiagError, match="does not exist"):
        rundir.read_state(tmp_path / "nope")


def test_cap_rotates_and_keeps_exact_totals(tmp_path):
    d = rundir.create_run_dir(tmp_path / "d")
    w = rundir.EventWriter(d, pid=999999991, max_bytes=8192)
    w({"kind": "start", "ppid": 1, "started": time.time(), "argv": ["x"],
       "fixes": {"f": {"state": "applied", "reason": ""}}})
    for i in range(500):
        w({"kind": "syncs", "builder": "B.build", "count": 2, "seconds": 0.001})
        w({"kind": "draft_extend", "mode": "eager" if i % 5 else "graph", "seconds": 0.002,
           "batch": 8})
    w({"kind": "fix", "fix": "f", "state": "reverted", "reason": "asked"})
    files = sorted(p.name for p in d.glob("events-999999991*"))
    assert files == ["events-999999991.1.jsonl", "events-999999991.jsonl"]
    assert all(p.stat().st_size <= 8192 for p in d.glob("events-999999991*"))
    ps = rundir.read_process(d, 999999991)
    assert ps.counters["syncs"]["B.build"]["calls"] == 500
    assert ps.counters["syncs"]["B.build"]["syncs"] == 1000
    assert ps.counters["draft_extend"]["graph"]["passes"] == 100
    assert ps.counters["draft_extend"]["eager"]["passes"] == 400
    assert ps.counters["draft_extend"]["eager"]["seconds"] == pytest.approx(0.8)
    assert ps.fixes == {"f": {"state": "reverted", "reason": "asked"}}
    assert ps.argv == ["x"] and ps.ppid == 1  # start info survives the rotation
    assert ps.alive is False  # no such pid


def test_partial_last_line_and_garbage_are_skipped(tmp_path):
    d = rundir.create_run_dir(tmp_path / "d")
    w = rundir.EventWriter(d)
    w({"kind": "start", "ppid": 1, "started": time.time()})
    with open(d / f"events-{os.getpid()}.jsonl", "a") as fh:
        fh.write("not json\n{\"kind\": \"syncs\", \"builder\": \"b\", \"cou")
    ps = rundir.read_state(d).processes[os.getpid()]
    assert ps.alive is True and ps.counters["events"] == {"start": 1}


def test_request_and_ack(tmp_path):
    d = rundir.create_run_dir(tmp_path / "d")
    w = rundir.EventWriter(d)
    w({"kind": "start", "ppid": 1, "started": time.time()})
    r1 = rundir.request(d, "fx", "apply")
    r2 = rundir.request(d, "fx", "revert", pid=os.getpid())
    reqs = rundir.read_requests(d)
    assert [r["id"] for r in reqs] == [r1, r2]
    assert reqs[1] == {"schema_version": 1, "id": r2, "run": None, "fix": "fx",
                       "action": "revert", "pid": os.getpid(), "ts": reqs[1]["ts"]}
    assert stat.S_IMODE(os.stat(d / "control" / f"{r1}.json").st_mode) == 0o600
    t0 = time.monotonic()
    assert rundir.wait_ack(d, r1, timeout=0.3) == {os.getpid(): None}
    assert time.monotonic() - t0 >= 0.3
    w({"kind": "control_ack", "request": r1, "fix": "fx", "action": "apply", "ok": True,
       "state": "applied", "reason": ""})
    acks = rundir.wait_ack(d, r1, timeout=5)
    assert acks[os.getpid()]["ok"] is True
    assert rundir.read_state(d).processes[os.getpid()].fixes["fx"]["state"] == "applied"
    with pytest.raises(DiagError, match="unknown control action"):
        rundir.request(d, "fx", "toggle")


def test_wait_ack_returns_at_once_with_nothing_live(tmp_path):
    d = rundir.create_run_dir(tmp_path / "d")
    rundir.EventWriter(d, pid=999999992)({"kind": "start", "started": time.time()})
    t0 = time.monotonic()
    assert rundir.wait_ack(d, rundir.request(d, "fx", "apply"), timeout=10) == {}
    assert time.monotonic() - t0 < 5


def test_discover_via_registry_only_live(tmp_path, monkeypatch):
    rt = tmp_path / "xdg"
    rt.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(rt))
    live = rundir.create_run_dir(tmp_path / "live")
    dead = rundir.create_run_dir(tmp_path / "dead")
    rundir.EventWriter(live)({"kind": "start", "started": time.time()})
    rundir.EventWriter(dead, pid=999999993)({"kind": "start", "started": time.time()})
    rundir.register(live)
    rundir.register(dead)
    found = rundir.discover()
    assert live in found and dead not in found
