"""SGLang's own V2 profiler refusal on a real server (0.5.23, CPU), named before and after.

A server started with SGLANG_PROFILE_V2=1 under `diag run` is sent a plain `/start_profile`
(no profile_by_stage: io_struct.py:2387 defaults it to False). SGLang 0.5.23 routes it to
`ProfileManager.configure` (managers/scheduler_components/profiler_manager.py:106), whose
`assert profile_by_stage` (utils/profile_utils.py:111) fails in the scheduler's event loop; the
scheduler logs "Scheduler hit an exception" (managers/scheduler.py:6372) and signals its parent,
and the server goes down. Before: `diag probe profiler-teardown` names that request as one that
kills the server. After: `diag fix status` names the cause on the dead scheduler, from the last
words its agent kept (diag/engine/last_words.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import engine_server  # noqa: E402
import report_schema  # noqa: E402

pytestmark = [pytest.mark.engine, pytest.mark.release, pytest.mark.slow,
              pytest.mark.timeout(900)]

DIAG = [sys.executable, "-m", "diag"]
PLAIN = "plain /start_profile (profile_by_stage false, the default)"


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("DIAG_") or k == "DIAG_CACHE_DIR"}
    return subprocess.run([*DIAG, *args], capture_output=True, text=True, timeout=300,
                          env={**base, **(env or {})})


def test_plain_start_profile_on_a_v2_server(release, models, tmp_path):
    t = release("0.5.23")
    # before: the probe, for this release and SGLANG_PROFILE_V2=1, names the request
    r = _cli("probe", "profiler-teardown", "--sglang", str(t.root), "--no-execute", "--json",
             env={"SGLANG_PROFILE_V2": "1"})
    doc = json.loads(r.stdout)
    report_schema.check_report(doc)
    rows = [e for f in doc["findings"] for e in f["evidence"]
            if (e.get("data") or {}).get("request") == PLAIN]
    assert rows and rows[0]["data"]["risk"] == "kills the server"
    assert rows[0]["data"]["location"] == "sglang/srt/utils/profile_utils.py:111"

    d = tmp_path / "run"
    s = engine_server.start(t.root, models["bigram"], tmp_path / "server.log", run_dir=d,
                            diag_args=("--fix", "profiler-controlled-teardown"),
                            extra_env={"SGLANG_PROFILE_V2": "1"})
    try:
        try:  # whatever the HTTP answer (an error, or none: the server goes down)
            s.post("/start_profile", {"output_dir": str(tmp_path / "prof")}, timeout=60)
        except OSError:
            pass
        deadline = time.monotonic() + 120
        while s.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
        log = s.log.read_text(errors="replace")
        assert "AssertionError: only support profile_by_stage=true now" in log, log[-3000:]
        assert s.proc.poll() is not None, "the server outlived SGLang's assertion"
    finally:
        s.stop()
    r = _cli("fix", "status", "--run-dir", str(d), "--json")
    doc = json.loads(r.stdout)
    report_schema.check("fix-status-v1.json", doc)
    dead = [p for p in doc["runs"][0]["processes"] if p["engine"] and not p["alive"]]
    assert dead, doc
    deaths = [p["death"] for p in dead]
    assert any(x and x["cause"] == "v2-profiler-refused" for x in deaths), deaths
    text = _cli("fix", "status", "--run-dir", str(d)).stdout
    assert "died: SGLang's V2 profiler refused a plain /start_profile (AssertionError: only " \
           "support profile_by_stage=true now" in text, text
