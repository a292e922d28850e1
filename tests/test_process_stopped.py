"""Issue 41, item 5: a SIGSTOPped process of a run was listed `live` (psutil's status was only
asked whether it is a zombie), so a user waiting on it saw nothing wrong. A real agent under
`diag run`, stopped with SIGSTOP: `diag fix status` says `stopped` (text, and JSON `status`,
`alive` still true: it exists), the TUI's engine pane and export too; after SIGCONT: `live`;
killed: `exited`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from report_schema import check

from diag.engine import rundir

ROOT = Path(__file__).resolve().parent.parent
DIAG = [sys.executable, "-m", "diag"]
PROG = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.05)\n"


def _status(d: Path, env: dict[str, str]) -> tuple[str, dict]:
    text = subprocess.run([*DIAG, "fix", "status", "--run-dir", str(d)], env=env,
                          capture_output=True, text=True, timeout=120)
    js = subprocess.run([*DIAG, "fix", "status", "--run-dir", str(d), "--json"], env=env,
                        capture_output=True, text=True, timeout=120)
    assert text.returncode == 0 and js.returncode == 0, text.stderr + js.stderr
    doc = json.loads(js.stdout)
    check("fix-status-v1.json", doc)
    (proc,) = doc["runs"][0]["processes"]
    return text.stdout, proc


def _pane(d: Path) -> tuple[str, dict]:
    from diag.tui import data as tui_data
    from diag.tui.fixes_view import engine_text
    from diag.tui.model import Model

    model = Model()
    model.engine_procs = tui_data.engine_processes(rundir.read_state(d))
    doc = tui_data.export_doc(model.header, [], [], [], [], [], model.engine_procs)
    (proc,) = doc["engine_processes"]
    return engine_text(model).plain, proc


def test_a_stopped_process_is_shown_stopped(tmp_path):
    d, stop = tmp_path / "D", tmp_path / "stop"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIAG_")}
    env["PYTHONPATH"] = str(ROOT)
    p = subprocess.Popen([*DIAG, "run", "--run-dir", str(d), "--", sys.executable, "-c", PROG,
                          str(stop)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        deadline = time.monotonic() + 60
        while not (d.is_dir() and rundir.read_state(d).live):
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()
            time.sleep(0.05)
        line = f"\n  pid {p.pid} (parent {os.getpid()}) {{}}  not an engine process  control at poll  -c "
        text, proc = _status(d, env)
        assert line.format("live") in text and (proc["alive"], proc["status"]) == (True, "live")
        os.kill(p.pid, signal.SIGSTOP)
        while rundir.read_state(d).processes[p.pid].status != "stopped":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        text, proc = _status(d, env)
        assert line.format("stopped") in text, text
        assert (proc["alive"], proc["status"]) == (True, "stopped")
        pane, exported = _pane(d)
        assert f"pid {p.pid} stopped  sglang ?" in pane, pane
        assert (exported["alive"], exported["stopped"]) == (True, True)
        os.kill(p.pid, signal.SIGCONT)
        text, proc = _status(d, env)
        assert line.format("live") in text and (proc["alive"], proc["status"]) == (True, "live")
        pane, exported = _pane(d)
        assert f"pid {p.pid} live  sglang ?" in pane, pane
        assert (exported["alive"], exported["stopped"]) == (True, False)
        p.kill()
        p.wait(60)
        text, proc = _status(d, env)
        assert line.format("exited") in text and (proc["alive"], proc["status"]) == (False, "exited")
    finally:
        os.kill(p.pid, signal.SIGCONT) if p.poll() is None else None
        stop.touch()
        p.communicate(timeout=60)
