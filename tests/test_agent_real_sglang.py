"""The agent inside a process that imports REAL SGLang 0.5.17 modules (the `.venv-sglang`
environment holds SGLang's CPU requirements; the release tree and the torchvision stand-in are
on PYTHONPATH). Nothing about SGLang is imitated here: the fix patches the real
`EagleDraftWorker`, the per-batch hook wraps the real `Scheduler.process_input_requests`. What
cannot run here is a real event loop (no GPU, no model), so the program calls that method itself
as the loop would, once per "batch" line on its stdin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diag.engine import rundir

pytestmark = [pytest.mark.sglang_import, pytest.mark.release, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
VENV_PY = REPO / ".venv-sglang" / "bin" / "python"
FIX = "draft-extend-allowlist"

PROG = r'''
import json, sys
import sglang.srt.speculative.eagle_worker_v2 as w
import sglang.srt.managers.scheduler as s
import setproctitle
from diag.patcher import marked

# as run_scheduler_process does first (0.5.17 srt/managers/scheduler.py:4859): the agent knows
# an engine process by it, and holds its control requests for the batch boundary
setproctitle.setproctitle("sglang::scheduler")
print("ready", flush=True)
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "batch":  # what the scheduler's event loop does at the top of every iteration
        try:
            s.Scheduler.process_input_requests(object.__new__(s.Scheduler), [])
        except Exception:
            pass  # the bare object has no state; the wrapper ran before the original
        print("batched", flush=True)
    elif cmd == "state":
        raw = vars(w.EagleDraftWorker)["_capture_cuda_graphs"]
        print(json.dumps({"patched": marked(raw, "draft-extend-allowlist")}), flush=True)
    else:
        break
'''


def _wait_for(pred, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    return pred()


def test_real_release_fix_applied_and_toggled_at_batch_boundary(tmp_path, release):
    if not VENV_PY.exists():
        pytest.skip(".venv-sglang is missing: run `bash scripts/sglang-env.sh` (scripts/test.sh does)")
    t = release("0.5.17")
    d = tmp_path / "D"
    prog = tmp_path / "prog.py"
    prog.write_text(PROG)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIAG_")}
    env.update(PYTHONPATH=os.pathsep.join([str(t.root), str(REPO / "tests" / "standins"), str(REPO)]),
               DIAG_CONTROL_POLL="0.05", DIAG_PLATFORM="hip")
    p = subprocess.Popen([sys.executable, "-m", "diag", "run", "--fix", FIX, "--probe", "all",
                          "--run-dir", str(d), "--", str(VENV_PY), str(prog)],
                         env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)

    def say(cmd: str) -> str:
        p.stdin.write(cmd + "\n")
        p.stdin.flush()
        return p.stdout.readline().strip()

    try:
        assert p.stdout.readline().strip() == "ready"
        ps = _wait_for(lambda: (lambda s: s if s.fixes.get(FIX, {}).get("state") == "applied"
                                and s.control == "batch" else None)(
            rundir.read_process(d, p.pid)))
        assert ps, rundir.read_process(d, p.pid).to_dict()
        assert ps.sglang == "0.5.17"
        assert not [k for k, v in ps.probes.items() if v["state"] == "failed"], ps.probes
        assert ps.probes["profiler-teardown"]["state"] == "on"
        assert json.loads(say("state")) == {"patched": True}

        rid = rundir.request(d, FIX, "revert", p.pid)
        # no batch yet: the request waits for the boundary
        assert rundir.wait_ack(d, rid, pid=p.pid, timeout=1.0) == {p.pid: None}
        assert json.loads(say("state")) == {"patched": True}
        assert say("batch") == "batched"
        ack = rundir.wait_ack(d, rid, pid=p.pid, timeout=10)[p.pid]
        assert ack["ok"] is True and ack["state"] == "reverted"
        assert json.loads(say("state")) == {"patched": False}

        rid = rundir.request(d, FIX, "apply", p.pid)
        for _ in range(100):  # batches run until the poll thread has queued the request
            assert say("batch") == "batched"
            ack = rundir.wait_ack(d, rid, pid=p.pid, timeout=0.1)[p.pid]
            if ack:
                break
        assert ack and ack["ok"] is True and ack["state"] == "applied", ack
        assert json.loads(say("state")) == {"patched": True}
    finally:
        p.stdin.write("quit\n")
        p.stdin.close()
        p.wait(timeout=60)
    assert p.returncode == 0
