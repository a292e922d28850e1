"""Issue 41, item 5: `/metrics` counted multiprocessing's resource tracker as a live engine
process with every requested fix `pending` (its agent answers control requests like any
process's, and SGLang is importable there): diag_fix_state{state="pending"} and
diag_agent_processes were one too high for every engine. The tracker is no engine process: it
records nothing. A real launcher under `diag run` starts a real resource tracker (the way
multiprocessing does for SGLang's launcher), a real `diag fix apply` reaches both, and the
multiprocess directory is read with prometheus_client's own collector."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_metrics_multiprocess import COLLECT

from diag.engine import rundir

pytestmark = pytest.mark.release

ROOT = Path(__file__).resolve().parent.parent
DIAG = [sys.executable, "-m", "diag"]
FIX = "profiler-controlled-teardown"
LAUNCHER = """
import sys
from multiprocessing import resource_tracker
resource_tracker.ensure_running()
print(resource_tracker._resource_tracker._pid, flush=True)
sys.stdin.read()
"""


def test_the_resource_tracker_is_not_counted_on_metrics(tmp_path, release):
    d, prom = tmp_path / "D", tmp_path / "prom"
    prom.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIAG_")}
    env.update(PYTHONPATH=f"{ROOT}{os.pathsep}{release('0.5.23').root}",  # sglang importable
               PROMETHEUS_MULTIPROC_DIR=str(prom), DIAG_CONTROL_POLL="0.05")
    p = subprocess.Popen([*DIAG, "run", "--run-dir", str(d), "--", sys.executable, "-c",
                          LAUNCHER], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        tracker = int(p.stdout.readline())
        deadline = time.monotonic() + 60
        while {x.pid for x in rundir.read_state(d).live} != {p.pid, tracker}:
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()
            time.sleep(0.05)
        r = subprocess.run([*DIAG, "fix", "apply", FIX, "--run-dir", str(d), "--timeout", "30",
                            "--json"], env=env, capture_output=True, text=True, timeout=120)
        rows = {x["pid"]: (x["ok"], x["state"]) for x in json.loads(r.stdout)["processes"]}
        assert rows == {p.pid: (True, "pending"), tracker: (True, "pending")}, r.stderr
        got = subprocess.run([sys.executable, "-c", COLLECT + "print(json.dumps(collect()))"],
                             env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                             timeout=60, cwd=ROOT)
        samples = json.loads(got.stdout)
        # the launcher alone: one process, the fix pending in it (the tracker made it 2 and 2)
        assert {k: v for k, v in samples.items() if k.startswith(("diag_agent", "diag_fix"))} \
            == {'diag_agent_processes{}': 1.0,
                'diag_fix_state{"fix": "' + FIX + '", "state": "pending"}': 1.0}, samples
    finally:
        p.communicate(timeout=60)  # closes stdin: the launcher ends, its tracker after it
