"""Issue 41, item 5: a request writer killed between writing its temporary file and renaming it
(`rundir._atomic_write`) left `control/.<id>.json.<pid>.tmp` behind for good. The next command
that reads or writes the control folder removes it, quietly, when its writer is gone or it is
older than a minute, and never one a live writer may still rename. Real writers in real
subprocesses: one killed (SIGKILL) at its rename, one held at its rename, then let go; a real
`diag fix apply` against a real agent."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from diag.engine import control, rundir

ROOT = Path(__file__).resolve().parent.parent
DIAG = [sys.executable, "-m", "diag"]

# A writer stopped at its rename: killed there, or held until its stdin closes.
WRITER = """
import os, sys
from diag.engine import rundir
real = os.replace
def at_rename(src, dst):
    if sys.argv[2] == "kill":
        os.kill(os.getpid(), 9)
    print(src, flush=True)
    sys.stdin.read()
    real(src, dst)
os.replace = at_rename
print(rundir.request(sys.argv[1], "repeat-interleave-output-size", "apply", wait=False), flush=True)
"""


def _writer(d: Path, how: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(d), how], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def _killed_tmp(d: Path) -> Path:
    """The temporary file a writer killed at its rename left (a real one, its pid dead)."""
    w = _writer(d, "kill")
    w.communicate(timeout=60)
    assert w.returncode == -9
    left = [p for p in (d / "control").iterdir() if p.name.endswith(f".{w.pid}.tmp")]
    assert len(left) == 1 and control.TMP_NAME.fullmatch(left[0].name), left
    return left[0]


def _tmps(d: Path) -> list[str]:
    return sorted(p.name for p in (d / "control").iterdir() if p.name.endswith(".tmp"))


def test_a_killed_writers_tmp_goes_a_live_writers_stays_and_is_renamed(tmp_path):
    d = rundir.create_run_dir(tmp_path / "d")
    held = _writer(d, "hold")  # alive, its temporary file written, not renamed yet
    try:
        live = Path(held.stdout.readline().strip())
        assert live.exists()
        dead = _killed_tmp(d)  # that writer swept the folder first: the live writer's stayed
        assert live.exists() and live.name != dead.name
        # one whose pid lives again (pid reuse), older than a minute: it goes too
        rid = dead.name[1:].split(".json.")[0]
        reused = d / "control" / f".{rid}-r.json.{os.getpid()}.tmp"
        shutil.copyfile(dead, reused)
        os.utime(reused, (time.time() - 61, time.time() - 61))
        assert _tmps(d) == sorted([dead.name, live.name, reused.name])
        rundir.request(d, "repeat-interleave-output-size", "revert", wait=False)  # writes
        assert _tmps(d) == [live.name]  # the live writer's is kept
        held.stdin.close()
        rid = held.stdout.readline().strip()
        assert held.wait(60) == 0
        assert (d / "control" / f"{rid}.json").is_file()  # its rename went through
        assert _tmps(d) == []
        again = _killed_tmp(d)
        assert [(r["fix"], r["action"]) for r in rundir.read_requests(d)] == \
            [("repeat-interleave-output-size", "apply"), ("repeat-interleave-output-size", "revert")]
        assert not again.exists()  # a reader of the folder removes it too
    finally:
        if held.poll() is None:
            held.kill()
            held.wait()


def test_diag_fix_apply_removes_it_quietly(tmp_path):
    d = tmp_path / "D"
    stop = tmp_path / "stop"
    prog = ("import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.05)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DIAG_CONTROL_POLL": "0.05"}
    p = subprocess.Popen([*DIAG, "run", "--run-dir", str(d), "--", sys.executable, "-c", prog,
                          str(stop)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        deadline = time.monotonic() + 60
        while not (d.is_dir() and rundir.read_state(d).live):
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()
            time.sleep(0.05)
        tmp = _killed_tmp(d)
        r = subprocess.run([*DIAG, "fix", "apply", "repeat-interleave-output-size", "--run-dir",
                            str(d), "--timeout", "30", "--json"], env=env, capture_output=True,
                           text=True, timeout=120)
        # the program never imports SGLang: its agent refuses (exit 4), as without the file
        assert r.returncode == 4, r.stdout + r.stderr
        assert r.stderr == ""  # quietly
        rows = json.loads(r.stdout)["processes"]
        assert [(x["pid"], x["ok"], x["state"], x["reason"]) for x in rows] == \
            [(p.pid, False, "refused", "sglang is not importable in this process: nothing to patch")]
        assert not tmp.exists() and _tmps(d) == []
    finally:
        stop.touch()
        p.communicate(timeout=60)
