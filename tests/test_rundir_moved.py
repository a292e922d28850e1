"""A run directory removed or replaced under a live engine (issue 31, defect 5): the agents go
on in a new private directory that names the one it replaces, and diag says where. A real agent
in a real subprocess (the STAND-IN programs of tests/agent_standins, no SGLang) and `diag`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from test_agent_faults import _agent, _end, _wait

from diag.engine import rundir

DIAG = [sys.executable, "-m", "diag"]


def _diag(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([*DIAG, *argv], capture_output=True, text=True, timeout=120)


def test_a_replaced_directory_says_where_the_live_engine_went(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # the registry and the new directory
    d = rundir.create_run_dir(tmp_path / "D")
    run_id = rundir.write_meta(d, cmd=["x"])
    p, pid, stop = _agent(tmp_path, d, run_id=run_id)
    try:
        r = _diag("fix", "apply", "standin-toggle", "--run-dir", str(d), "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        shutil.rmtree(d)
        d.mkdir(mode=0o700)  # as in the issue: rm -rf D && mkdir -m 700 D
        moved = tmp_path / "diag" / "runs" / f"moved-{run_id}"
        _wait("the agent's new directory", lambda: rundir.moved_to(d) == [moved])
        r = _diag("fix", "revert", "standin-toggle", "--run-dir", str(d))
        assert r.returncode == 3
        assert r.stderr.strip().splitlines()[-1] == (
            f"diag: error: run directory {d} was removed or replaced under a live engine: its "
            f"agents now write to {moved} (pass --run-dir {moved})")
        status = _diag("fix", "status", "--run-dir", str(d), "--json")
        assert json.loads(status.stdout)["runs"][0]["moved_to"] == [str(moved)]
        assert f"its agents now write to {moved}" in _diag("fix", "status", "--run-dir",
                                                            str(d)).stdout
        assert rundir.read_meta(moved)["replaces"] == str(d)
        from diag.tui import data

        assert data.lost_suffix(rundir.read_state(d)) == (
            f", replaced under a live engine: now {moved}")
        # the engine's own directory: its state carried over, reachable again
        r = _diag("fix", "revert", "standin-toggle", "--run-dir", str(moved), "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        st = rundir.read_state(moved)
        assert st.processes[pid].fixes["standin-toggle"]["state"] == "reverted"
        assert st.processes[pid].start is not None and st.processes[pid].alive
        assert not list(d.iterdir())  # nothing written into the directory made again
    finally:
        err = _end(p, stop)
    assert f"events and control requests are in {moved} now" in err
