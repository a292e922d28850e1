"""diag.engine.metrics in real processes: spawned children's diag_* series read by MultiProcessCollector.

Everything runs in fresh interpreters: prometheus_client picks its value class at import, so the
order of "variable set" and "import" is the thing under test and must not leak from pytest.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "tests" / "metrics_programs.py"
FIX = "repeat-interleave-output-size"
BUILDER = "DeepseekV4HipRadixBackend._attach_unified_kv_prefill_meta"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DIAG_") and k != "PROMETHEUS_MULTIPROC_DIR"}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def _samples(lines: list[dict], key: str) -> dict[tuple[str, tuple], float]:
    doc = next(d for d in lines if key in d)
    return {(s["name"], tuple(sorted(s["labels"].items()))): s["value"] for s in doc[key]}


def _run_spawn(cmd: list[str], env: dict[str, str]) -> list[dict]:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def _check_children_series(lines: list[dict]) -> None:
    parent = next(d for d in lines if "samples_live" in d)
    assert parent["children_ready"]
    assert parent["prometheus_client_loaded_before_var"] is False
    children = [d for d in lines if "child" in d]
    assert len(children) == 2
    assert all(c["status"].startswith("recording into ") for c in children)
    live = _samples(lines, "samples_live")
    b = (("builder", BUILDER),)
    assert live[("diag_metadata_builds_total", b)] == 3 + 4  # child i emits 3 + i builds
    assert live[("diag_metadata_syncs_total", b)] == 2 * 7
    assert live[("diag_metadata_build_seconds_total", b)] == pytest.approx(0.07)
    assert live[("diag_draft_extend_passes_total", (("mode", "eager"),))] == 2
    assert live[("diag_draft_extend_passes_total", (("mode", "graph"),))] == 2
    assert live[("diag_draft_extend_seconds_count", (("mode", "eager"),))] == 2
    assert live[("diag_draft_extend_seconds_sum", (("mode", "eager"),))] == pytest.approx(0.0022)
    assert live[("diag_draft_extend_seconds_bucket", (("le", "0.0025"), ("mode", "eager")))] == 2
    assert live[("diag_draft_extend_seconds_bucket", (("le", "0.001"), ("mode", "eager")))] == 0
    assert live[("diag_profiler_stops_total", ())] == 2
    assert live[("diag_profiler_stop_seconds_sum", ())] == pytest.approx(0.5)
    assert live[("diag_profiler_stop_collected_objects_total", ())] == 154
    assert live[("diag_profiler_teardowns_total", (("how", "cycle-broken"),))] == 2
    assert live[("diag_fix_state", (("fix", FIX), ("state", "applied")))] == 2  # livesum
    assert live[("diag_agent_processes", ())] == 2
    # After the children exit, their live gauges are gone (mark_process_dead at exit) and the
    # counters stay, as SGLang's /metrics would show them.
    after = _samples(lines, "samples_after_exit")
    assert next(d for d in lines if "exitcodes" in d)["exitcodes"] == [0, 0]
    assert ("diag_fix_state", (("fix", FIX), ("state", "applied"))) not in after
    assert after.get(("diag_agent_processes", ()), 0) == 0  # the parent's own is 0 under diag run
    assert after[("diag_metadata_syncs_total", b)] == 14


@pytest.mark.slow
def test_spawned_children_series_read_by_parent():
    lines = _run_spawn([sys.executable, str(PROGRAM), "spawn", "--children", "2"], _env())
    _check_children_series(lines)


@pytest.mark.slow
def test_under_diag_run_children_series_read_by_parent(tmp_path):
    """The bar: under `diag run`, the agent (not the program) installs the sink in each child."""
    diag = shutil.which("diag", path=str(Path(sys.executable).parent))
    assert diag, "the diag console script is installed next to the test interpreter"
    run_dir = tmp_path / "run"
    lines = _run_spawn([diag, "run", "--run-dir", str(run_dir), "--", sys.executable,
                        str(PROGRAM), "spawn", "--children", "2", "--via-agent"], _env())
    _check_children_series(lines)
    # The agent ran in the children: each wrote its own event file into the run directory.
    children = {d["pid"] for d in lines if "child" in d}
    written = {int(p.stem.split("-")[1]) for p in run_dir.glob("events-*.jsonl")}
    assert children <= written


COLLECT = """
import json


def collect():
    from prometheus_client import CollectorRegistry, multiprocess
    reg = CollectorRegistry()
    multiprocess.MultiProcessCollector(reg)
    return {s.name + json.dumps(s.labels, sort_keys=True): s.value
            for f in reg.collect() for s in f.samples if s.name.startswith("diag_")}
"""


def _py(code: str, env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", COLLECT + textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])




def test_no_import_until_variable_then_backlog_replayed(tmp_path):
    """The launcher case: events before the variable are kept, nothing imported, then recorded."""
    out = _py(f"""
        import json, os, sys
        import diag.engine.metrics as m
        from diag import telemetry
        assert m.install() is True
        telemetry.emit("fix", fix="{FIX}", state="pending", reason="x")
        telemetry.emit("fix", fix="{FIX}", state="applied", reason="x")
        telemetry.emit("syncs", builder="b", count=2, seconds=0.01)
        telemetry.emit("syncs", builder="b", count=2, seconds=0.01)
        before = {{"loaded": "prometheus_client" in sys.modules, "status": m.status(),
                   "active": m.active()}}
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = {str(tmp_path)!r}
        telemetry.emit("draft_extend", mode="eager", seconds=0.001, batch=4)
        print(json.dumps({{"before": before, "active": m.active(), "series": collect()}}))
    """, _env())
    assert out["before"] == {"loaded": False, "active": False,
                             "status": "waiting for PROMETHEUS_MULTIPROC_DIR (2 events kept)"}
    assert out["active"] is True
    s = out["series"]
    assert s['diag_metadata_builds_total{"builder": "b"}'] == 2
    assert s['diag_metadata_syncs_total{"builder": "b"}'] == 4
    assert s['diag_draft_extend_passes_total{"mode": "eager"}'] == 1
    assert s[f'diag_fix_state{{"fix": "{FIX}", "state": "applied"}}'] == 1
    # Only the latest state before the variable is replayed.
    assert f'diag_fix_state{{"fix": "{FIX}", "state": "pending"}}' not in s
    assert s["diag_agent_processes{}"] == 1


def test_engine_importing_prometheus_client_starts_recording(tmp_path):
    """No further event needed: SGLang's own import of prometheus_client (after it set the
    variable) switches recording on, so the launcher publishes the fix states it already has."""
    out = _py(f"""
        import json, os, sys
        import diag.engine.metrics as m
        from diag import telemetry
        m.install()
        telemetry.emit("fix", fix="{FIX}", state="applied", reason="x")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = {str(tmp_path)!r}
        import prometheus_client  # what SGLang does after set_prometheus_multiproc_dir
        print(json.dumps({{"active": m.active(), "series": collect()}}))
    """, _env())
    assert out["active"] is True
    assert out["series"][f'diag_fix_state{{"fix": "{FIX}", "state": "applied"}}'] == 1


def test_state_change_moves_the_gauge_and_unknown_labels_fold(tmp_path):
    out = _py(f"""
        import json, os
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = {str(tmp_path)!r}
        import diag.engine.metrics as m
        from diag import telemetry
        m.install()
        telemetry.emit("fix", fix="{FIX}", state="applied", reason="")
        telemetry.emit("control_ack", fix="{FIX}", state="reverted", ok=True)
        telemetry.emit("draft_extend", mode="weird", seconds="nan?", batch=1)
        for i in range(m.MAX_BUILDERS + 3):
            telemetry.emit("syncs", builder=f"b{{i}}", count=1, seconds=None)
        telemetry.emit("profiler_stop", seconds=1.5, collected=None)
        telemetry.emit("start", sglang=None, fixes={{"x": {{"state": "pending"}}}})
        print(json.dumps({{"series": collect()}}))
    """, _env())
    s = out["series"]
    assert s[f'diag_fix_state{{"fix": "{FIX}", "state": "reverted"}}'] == 1
    assert s[f'diag_fix_state{{"fix": "{FIX}", "state": "applied"}}'] == 0
    assert s['diag_draft_extend_passes_total{"mode": "other"}'] == 1
    assert 'diag_draft_extend_seconds_count{"mode": "other"}' not in s  # no usable time
    assert s['diag_metadata_builds_total{"builder": "other"}'] == 3
    assert sum(1 for k in s if k.startswith("diag_metadata_builds_total")) == 32 + 1
    assert s["diag_profiler_stops_total{}"] == 1
    assert s["diag_profiler_stop_seconds_sum{}"] == 1.5
    # A start event from a process without SGLang carries only placeholders: not recorded.
    assert not any('"fix": "x"' in k for k in s)


def test_prometheus_client_imported_too_early_is_reported_not_raised(tmp_path):
    out = _py(f"""
        import json, os
        import prometheus_client  # imported before the variable: values stay in memory
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = {str(tmp_path)!r}
        import diag.engine.metrics as m
        from diag import telemetry
        ok = m.install()
        telemetry.emit("syncs", builder="b", count=2, seconds=0.01)
        print(json.dumps({{"ok": ok, "active": m.active(), "status": m.status(),
                           "files": os.listdir({str(tmp_path)!r})}}))
    """, _env())
    assert out["ok"] is True and out["active"] is False
    assert out["status"].startswith("off: prometheus_client was imported before")
    assert out["files"] == []


def test_variable_not_a_directory(tmp_path):
    missing = tmp_path / "nope"
    out = _py(f"""
        import json, os
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = {str(missing)!r}
        import diag.engine.metrics as m
        from diag import telemetry
        m.install()
        telemetry.emit("syncs", builder="b", count=2, seconds=0.01)
        print(json.dumps({{"active": m.active(), "status": m.status()}}))
    """, _env())
    assert out["active"] is False
    assert out["status"] == f"off: PROMETHEUS_MULTIPROC_DIR={missing} is not a directory"
