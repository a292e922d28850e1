"""The agent's own work (control poll, counters' flush) runs at batch boundaries in an engine
process, falls back to its poll thread when no boundary comes, and is accounted: `agent_time`
events, folded per process (`diag fix status`), on the `diag_agent_seconds_total` series.

The engine is the stand-in of test_agent_control (tests/agent_standins: a scheduler whose
`run_batch` the per-batch hook wraps), run under the real `diag run` in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import report_schema

from diag.engine import rundir
from diag.engine.events import AgentTime, describe_counters

STANDINS = Path(__file__).resolve().parent / "agent_standins"


def _run(tmp_path: Path, batches: int, pause: float) -> tuple[Path, int]:
    d, out, stop = tmp_path / "D", tmp_path / "out.jsonl", tmp_path / "stop"
    env = {**os.environ, "PYTHONPATH": str(STANDINS), "DIAG_CONTROL_POLL": "0.05",
           "DIAG_BATCH_HOOK": "standin_scheduler:StandinScheduler.run_batch"}
    p = subprocess.run([sys.executable, "-m", "diag", "run", "--run-dir", str(d), "--",
                        sys.executable, str(STANDINS / "standin_engine.py"), str(out), str(stop),
                        str(batches), str(pause)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    child = json.loads(out.read_text().splitlines()[0])["pid"]
    return d, child


def _agent_events(d: Path, pid: int) -> list[dict]:
    path = next(d.glob(f"events-{pid}*.jsonl"))
    return [e for e in map(json.loads, path.read_text().splitlines())
            if e["kind"] == "agent_time"]


def test_work_runs_at_batch_boundaries_and_is_accounted(tmp_path):
    # 100 batches of 20 ms: a boundary every 20 ms, a poll due every 50 ms; 1 s between
    # agent_time events (20 polls)
    d, child = _run(tmp_path, batches=100, pause=0.02)
    evs = _agent_events(d, child)
    assert evs, "no agent_time event in 2 s"
    for e in evs:
        report_schema.check("event-v1.json", e)
    st = rundir.read_state(d).processes[child]
    agent = st.counters["agent"]
    # once the engine ran its first batch, the work waited for the boundaries: most of it ran
    # there (the poll thread only before the first batch)
    assert agent["boundary"]["runs"] >= 10, agent
    assert agent.get("thread", {"runs": 0})["runs"] < agent["boundary"]["runs"], agent
    assert agent["boundary"]["seconds"] > 0
    assert any(line.startswith("diag agent at boundary: ") for line in describe_counters(st.counters))


def test_an_engine_without_boundaries_gets_the_work_on_the_poll_thread(tmp_path):
    # batches of 1.5 s: a boundary comes later than IDLE_S (1 s) after the work fell due
    d, child = _run(tmp_path, batches=2, pause=1.5)
    agent = rundir.read_state(d).processes[child].counters["agent"]
    assert agent["thread"]["runs"] >= 1, agent  # (the last second is not emitted before exit)


def test_agent_time_feeds_its_series():
    seen: list[tuple[str, dict, float]] = []

    class Recorder:
        def __init__(self, name):
            self.name = name

        def labels(self, **kw):
            self.kw = kw
            return self

        def inc(self, v):
            seen.append((self.name, self.kw, v))

    ev = AgentTime(where="boundary", runs=3, seconds=0.002)
    ev.record(Recorder, lambda _n, v: str(v))
    assert seen == [("agent_seconds", {"where": "boundary"}, 0.002)]
    assert [s.name for s in AgentTime.series] == ["agent_seconds"]  # diag_agent_seconds_total
