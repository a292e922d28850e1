"""The `engine` lane, faults (issue 19): on the real SGLang 0.5.23 CPU server under `diag run`,
each fault in turn, asserting that the engine serves the same greedy tokens and that what diag
reports is true. One server for the module (started like tests/test_engine_server.py's, with
`--fix profiler-controlled-teardown`); tests run in file order, the last one removes the run
directory.

Faults are real: the scheduler's events file replaced by a link to /dev/full (the kernel's
ENOSPC on every write the agent makes), garbage and a FIFO in the control folder, the run
directory removed and made again by another run.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import engine_models  # noqa: E402
import engine_server  # noqa: E402
import report_schema  # noqa: E402
from test_engine_server import FIX, PROMPT, _cli, _scheduler, _valid, _wait  # noqa: E402, I001

from diag.engine import eventlog, rundir  # noqa: E402

pytestmark = [pytest.mark.engine, pytest.mark.release, pytest.mark.slow,
              pytest.mark.timeout(600)]

N = 12
_seen: dict[str, list[int]] = {}
_moved: list[Path] = []


@pytest.fixture(scope="module")
def server(release, models, tmp_path_factory):
    t = release("0.5.23")
    tmp = tmp_path_factory.mktemp("faults")
    s = engine_server.start(t.root, models["bigram"], tmp / "server.log", draft=models["draft"],
                            run_dir=tmp / "run", diag_args=("--probe", "all", "--fix", FIX),
                            extra_env={"SGLANG_PROFILE_V2": "1"})
    sys.stderr.write(f"engine faults: server ready in {s.ready_s:.1f} s\n")
    # the reference tokens, from the same model outside any server: every test compares to
    # them (here, not in the first test, so one test run alone with -k has them too)
    _seen["greedy"] = engine_models.in_env(engine_server.VENV_PY, "greedy", models["bigram"],
                                           PROMPT[-1], N)
    try:
        yield s
    finally:
        s.stop()
        for moved in _moved:  # the directory the engine's agents moved to: gone with them
            rundir.discard(moved, remove_dir=False)
            shutil.rmtree(moved, ignore_errors=True)


def _same_tokens(server) -> None:
    out = server.generate(PROMPT, N)["output_ids"]
    assert out == _seen["greedy"], (out, _seen["greedy"])


def test_greedy_tokens_before_any_fault(server):
    _same_tokens(server)


def _status(server) -> dict[int, dict]:
    r = _cli("fix", "status", "--run-dir", str(server.run_dir), "--json")
    assert r.returncode == 0, r.stderr
    (run,) = _valid(json.loads(r.stdout), "fix-status")["runs"]
    return {p["pid"]: p for p in run["processes"]}


def test_full_disk_events_lost_are_reported_and_status_stays_true(server):
    sched = _scheduler(server.run_dir)
    path = server.run_dir / f"events-{sched.pid}.jsonl"
    path.unlink()
    os.symlink("/dev/full", path)
    try:
        def lost() -> bool:  # an idle engine writes nothing: serve, so it has events to lose
            server.generate(PROMPT, 2)
            return rundir.read_process(server.run_dir, sched.pid).counters["lost"]["events"] > 0

        _wait("the loss to show", lost)
        r = _cli("fix", "revert", FIX, "--run-dir", str(server.run_dir), "--json",
                 "--timeout", "60")
        assert r.returncode == 0, r.stdout + r.stderr  # acknowledged through the state file
        rows = {x["pid"]: x for x in _valid(json.loads(r.stdout), "fix-action")["processes"]}
        assert rows[sched.pid]["ok"] and rows[sched.pid]["state"] == "reverted"
        for row in rows.values():  # nobody that cannot hold the fix decided the exit code
            assert row["waited"] == (row["pid"] == sched.pid), row
        procs = _status(server)
        assert procs[sched.pid]["fixes"][FIX]["state"] == "reverted"  # not the stale `applied`
        lost = procs[sched.pid]["counters"]["lost"]
        assert lost["events"] > 0 and lost["since"] and "ENOSPC" in lost["reason"]
        text = _cli("fix", "status", "--run-dir", str(server.run_dir)).stdout
        assert "events lost since" in text
        _same_tokens(server)
        m = server.metrics()
        assert m.get("diag_events_lost_total", 0) > 0, sorted(k for k in m if "diag" in k)
    finally:
        path.unlink()
    evs = _wait("the gap marker", lambda: [e for e in rundir._read_lines(path)
                                           if e.get("kind") in ("gap", "snapshot")])
    assert [e["kind"] for e in evs[:2]] == ["gap", "snapshot"] and evs[0]["lost"] > 0
    ps = rundir.read_process(server.run_dir, sched.pid)
    assert ps.fixes[FIX]["state"] == "reverted" and ps.counters["lost"]["events"] > 0
    _same_tokens(server)


def test_the_launcher_processes_its_queue(server):
    """It imports the scheduler module but runs no loop: its state follows the requests."""
    launcher = server.proc.pid  # `diag run` exec'd into the launcher: same pid
    for action, state in (("apply", "applied"), ("revert", "reverted")):
        rid = rundir.request(server.run_dir, FIX, action)
        ack = rundir.wait_ack(server.run_dir, rid, pid=launcher, timeout=30)[launcher]
        assert ack is not None and ack["state"] in (state, "pending"), ack
        assert _status(server)[launcher]["fixes"][FIX]["state"] == ack["state"]


def test_garbage_control_requests_are_rejected_and_a_fifo_does_not_hang(server):
    sched = _scheduler(server.run_dir)
    ctl = server.run_dir / "control"
    os.mkfifo(ctl / "00000000000000000001-fifo.json")
    junk = {"00000000000000000002-json": b"{not json", "00000000000000000002-list": b"[1]",
            "00000000000000000002-big": b" " * 5_000_000,
            "00000000000000000002-fix": json.dumps({
                "schema_version": 1, "id": "00000000000000000002-fix", "fix": "made-up",
                "action": "apply", "pid": None, "ts": 0}).encode(),
            "00000000000000000002-ver": json.dumps({
                "schema_version": 7, "id": "00000000000000000002-ver", "fix": FIX,
                "action": "revert", "pid": sched.pid, "ts": 0}).encode()}
    for name, data in junk.items():
        (ctl / f"{name}.json").write_bytes(data)
    t0 = time.monotonic()
    r = _cli("fix", "apply", FIX, "--run-dir", str(server.run_dir), "--json", "--timeout", "60")
    assert r.returncode == 0, r.stdout + r.stderr
    assert time.monotonic() - t0 < 30
    ps = rundir.read_process(server.run_dir, sched.pid)
    for name in junk:
        assert ps.acks[name]["state"] == "rejected" and ps.acks[name]["reason"], name
    assert "made-up" not in ps.fixes and ps.fixes[FIX]["state"] == "applied"
    assert "00000000000000000001-fifo" not in ps.acks
    _same_tokens(server)
    assert report_schema.check_events(server.run_dir) > 0


# ----------------------------------------------------------------------------- issue 31


def _agree(d: Path) -> dict[int, dict]:
    """`fix status` says what each process's state file says: fix states, events lost (once
    the writer has put its gap and snapshot after a fault)."""
    def same() -> dict[int, dict] | None:
        r = _cli("fix", "status", "--run-dir", str(d), "--json")
        assert r.returncode == 0, r.stderr
        procs = {p["pid"]: p for p in _valid(json.loads(r.stdout), "fix-status")["runs"][0][
            "processes"]}
        for pid, p in procs.items():
            st = eventlog.read_state_file(d, pid)
            if st is None or not p["alive"]:
                continue
            if p["fixes"] != st["fixes"] or \
                    p["counters"]["lost"]["events"] != st["lost"]["events"]:
                return None
        return procs
    return _wait("fix status to agree with every state file", same)


def test_after_the_full_disk_every_surface_counts_the_same_loss(server):
    """Defect 4: status and the TUI said 316 lost, the state file and /metrics 216."""
    procs = _agree(server.run_dir)
    files = [eventlog.read_state_file(server.run_dir, pid) for pid in procs]
    lost = sum(st["lost"]["events"] for st in files if st)
    assert lost > 0 and lost == sum(p["counters"]["lost"]["events"] for p in procs.values())
    assert server.metrics().get("diag_events_lost_total") == lost


def test_a_half_line_does_not_hide_a_revert(server):
    """Defect 1: after a half line the revert's acknowledgement was glued to it and dropped:
    `fix status` said applied while the state file and /metrics said reverted."""
    d = server.run_dir
    sched = _scheduler(d)
    r = _cli("fix", "apply", FIX, "--run-dir", str(d), "--json", "--timeout", "60")
    assert r.returncode == 0, r.stdout + r.stderr
    with open(d / f"events-{sched.pid}.jsonl", "ab") as fh:  # the issue's own command
        fh.write(b'{"ts": 1, "kind": "fix", "fix": "profiler-contr')
    r = _cli("fix", "revert", FIX, "--run-dir", str(d), "--json", "--timeout", "60")
    assert r.returncode == 0, r.stdout + r.stderr
    p = _agree(d)[sched.pid]
    assert p["fixes"][FIX]["state"] == "reverted"
    assert p["problems"].get("a half line skipped") == 1
    _same_tokens(server)


def test_a_truncated_events_file_is_a_counted_loss_and_the_totals_come_back(server):
    """Defect 2: a truncated file reset the story (the fix gone from status, 22 profiler stops
    read as 0, lost 0). The writer sees the cut, counts the events in it as lost and writes a
    snapshot: the states and totals are back, and the loss is counted everywhere alike."""
    d = server.run_dir
    sched = _scheduler(d)
    before = _agree(d)[sched.pid]
    path = d / f"events-{sched.pid}.jsonl"
    lines = path.read_bytes().count(b"\n")
    os.truncate(path, 0)
    after = _wait("the snapshot after the cut", lambda: (
        p := _agree(d)[sched.pid])["counters"]["lost"]["events"] > before["counters"]["lost"][
        "events"] and p)
    assert after["fixes"] == before["fixes"]
    assert after["counters"]["profiler_stop"] == before["counters"]["profiler_stop"]
    assert after["counters"]["lost"]["events"] - before["counters"]["lost"]["events"] >= 1
    assert lines > 0
    _same_tokens(server)


def test_concurrent_commands_each_get_their_own_answer(server):
    """Defect 3: a request was pruned as superseded before any agent read it; its command
    waited out its timeout (exit 4, no acknowledgement)."""
    from concurrent.futures import ThreadPoolExecutor

    d = server.run_dir
    sched = _scheduler(d)
    actions = ["apply", "revert"] * 3
    with ThreadPoolExecutor(len(actions)) as pool:
        results = list(pool.map(lambda a: _cli("fix", a, FIX, "--run-dir", str(d), "--json",
                                               "--timeout", "120"), actions))
    for r in results:
        assert r.returncode in (0, 4), r.stdout + r.stderr
        rows = {x["pid"]: x for x in json.loads(r.stdout)["processes"]}
        assert rows[sched.pid]["acknowledged"], rows  # its own answer, done or refused
        assert r.returncode == (0 if all(x["ok"] for x in rows.values() if x["waited"]) else 4)
    _agree(d)
    _same_tokens(server)


def test_a_command_killed_at_any_point_leaves_no_request_behind(server):
    """`fix apply` / `fix revert` SIGKILLed at 0.05-0.8 s (while writing its request, waiting,
    or reading the answer): the next command answers (exit 0, no traceback), no temporary
    request is left in the control folder, status agrees with the state files and the engine
    serves the same tokens."""
    import random
    import signal
    import subprocess

    d = server.run_dir
    rng = random.Random(7)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIAG_")}
    for i in range(6):
        p = subprocess.Popen([sys.executable, "-m", "diag", "fix", ("apply", "revert")[i % 2],
                              FIX, "--run-dir", str(d), "--timeout", "30"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        time.sleep(rng.uniform(0.05, 0.8))
        p.send_signal(signal.SIGKILL)
        p.wait()
        r = _cli("fix", "status", "--run-dir", str(d), "--json")
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert not list((d / "control").glob(".*.tmp"))
    r = _cli("fix", "apply", FIX, "--run-dir", str(d), "--json", "--timeout", "60")
    assert r.returncode == 0, r.stdout + r.stderr
    assert _agree(d)[_scheduler(d).pid]["fixes"][FIX]["state"] == "applied"
    _same_tokens(server)


def test_a_timeout_that_is_not_a_number_is_refused_at_once(server):
    """Defect 7: `--timeout nan` against a process that does not answer never returned."""
    for bad in ("nan", "inf", "-inf", "1e999"):
        r = _cli("fix", "apply", FIX, "--run-dir", str(server.run_dir), "--timeout", bad,
                 timeout=60)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr


def test_a_recreated_run_directory_is_not_obeyed(server):  # last: it removes the run dir
    """Defect 5: after `rm -rf D && mkdir -m 700 D` the live engine was unreachable and nothing
    said where it went: its agents now go on in a directory that names D, and diag says so."""
    sched = _scheduler(server.run_dir)
    d = server.run_dir
    for _ in range(50):  # the live agents write into D while it goes: `rm -rf` again, as a
        try:             # person would (one file created mid-removal: ENOTEMPTY, CI 9c383fb)
            shutil.rmtree(d)
            break
        except OSError:
            time.sleep(0.02)
    d2 = rundir.create_run_dir(d)  # another run takes the path
    rundir.write_meta(d2, cmd=["another run"])
    rid = rundir.request(d2, FIX, "revert", wait=False)
    time.sleep(2.0)  # 40 polls of every agent
    assert not list(d2.glob(f"events-{sched.pid}*")), sorted(p.name for p in d2.iterdir())
    assert rundir.read_process(d2, sched.pid).acks.get(rid) is None
    assert _status(server) == {}  # nobody there: and that is true
    moved = _wait("where the engine went", lambda: rundir.moved_to(d))
    _moved.extend(moved)
    r = _cli("fix", "revert", FIX, "--run-dir", str(d))
    assert r.returncode == 3 and f"its agents now write to {moved[0]}" in r.stderr, r.stderr
    r = _cli("fix", "revert", FIX, "--run-dir", str(moved[0]), "--json", "--timeout", "60")
    rows = {x["pid"]: x for x in json.loads(r.stdout)["processes"]}
    assert rows[sched.pid]["acknowledged"], r.stdout + r.stderr  # reachable again
    _agree(moved[0])
    _same_tokens(server)
    assert server.proc.poll() is None
