"""`diag_*` series per rank: a process that learns its ranks (the agent's `control` event, from
the scheduler's process title) labels every series it writes with them, so the server's
`/metrics` (prometheus_client's multiprocess merge, which sums counters over processes) shows
each rank instead of their sum. Real spawned processes, a real multiprocess directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from diag.engine.agent import rank_of

ROOT = Path(__file__).resolve().parent.parent
FIX = "profiler-controlled-teardown"

PROGRAM = textwrap.dedent('''
    import json, multiprocessing as mp, os, sys, tempfile

    FIX = %r

    def child(rank, ready, release):
        import diag.engine.metrics as metrics
        from diag import telemetry
        metrics.install()
        telemetry.emit("fix", fix=FIX, state="applied", reason="test")  # before the title is read
        if rank is not None:
            telemetry.emit("control", mode="batch", engine=True, reason="title", rank=rank)
            telemetry.emit("draft_extend", mode="eager", seconds=0.001, batch=1)
        ready.set()
        release.wait(60)

    if __name__ == "__main__":
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp()
        ctx = mp.get_context("spawn")
        release = ctx.Event()
        kids = []
        for rank in ("TP0", "TP1", None):  # two schedulers and a launcher-like process
            ready = ctx.Event()
            p = ctx.Process(target=child, args=(rank, ready, release))
            p.start()
            kids.append((p, ready))
        assert all(r.wait(60) for _, r in kids)
        from prometheus_client import CollectorRegistry, multiprocess
        reg = CollectorRegistry()
        multiprocess.MultiProcessCollector(reg)
        out = [[s.name, s.labels, s.value] for f in reg.collect() for s in f.samples
               if s.name.startswith("diag_")]
        print(json.dumps(out))
        release.set()
        for p, _ in kids:
            p.join(30)
''') % FIX


def test_rank_of_reads_sglangs_scheduler_titles():
    # 0.5.23 srt/managers/scheduler.py:6279-6294: prefix " DP{dp}" (when a dp rank is shown),
    # " TP{tp}" when tp_size > 1; title "sglang::scheduler" + prefix with spaces as "_"
    assert rank_of("sglang::scheduler_TP1") == "TP1"
    assert rank_of("sglang::scheduler_DP0_TP1") == "DP0 TP1"
    assert rank_of("sglang::scheduler") == ""


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs Linux /proc")
def test_the_title_is_read_as_ps_reads_it():
    """The agent reads a process's title from /proc/self/cmdline, never through setproctitle
    (whose first call, from the agent's thread, replaces `environ` under the engine): a process
    whose argv[0] is a scheduler title (set here by `exec -a`, as ps then shows it) is read
    with its rank."""
    code = ("from diag.engine.agent import process_title, rank_of; "
            "t = process_title(); print(t + '|' + rank_of(t))")
    p = subprocess.run(["bash", "-c", f'exec -a sglang::scheduler_DP0_TP1 "{sys.executable}" '
                        f'-c "{code}"'], capture_output=True, text=True, timeout=60,
                       cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "sglang::scheduler_DP0_TP1|DP0 TP1"


def test_series_carry_each_processs_rank(tmp_path):
    prog = tmp_path / "ranks_program.py"
    prog.write_text(PROGRAM)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DIAG_") and k != "PROMETHEUS_MULTIPROC_DIR"}
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run([sys.executable, str(prog)], env=env, capture_output=True, text=True,
                       timeout=180, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    got = {(n, tuple(sorted(labels.items()))): v for n, labels, v in json.loads(r.stdout)}

    def value(name: str, **labels: str) -> float | None:
        return got.get((name, tuple(sorted(labels.items()))))

    for rank in ("TP0", "TP1"):
        assert value("diag_draft_extend_passes_total", mode="eager", rank=rank) == 1
        assert value("diag_fix_state", fix=FIX, state="applied", rank=rank) == 1
        assert value("diag_agent_processes", rank=rank) == 1
    # no rank: the launcher-like process only; the schedulers' gauges written before they
    # learnt their rank were set back to 0, so the live sum does not count them twice
    assert value("diag_fix_state", fix=FIX, state="applied") == 1
    assert value("diag_agent_processes") == 1
    assert value("diag_draft_extend_passes_total", mode="eager") is None
    assert sum(v for (n, _), v in got.items() if n == "diag_draft_extend_passes_total") == 2


@pytest.mark.parametrize("title", ["sglang::scheduler_TP0", "sglang::scheduler"])
def test_agent_reports_the_rank_in_its_control_event(title, monkeypatch):
    """The agent reads the title (as /proc shows it) once and says the rank once; it never
    calls setproctitle itself (test_the_title_is_read_as_ps_reads_it says why)."""
    import types

    from diag import telemetry
    from diag.engine import agent as agent_mod

    def never() -> str:
        raise AssertionError("the agent called setproctitle.getproctitle()")

    seen: list[dict] = []
    monkeypatch.setitem(sys.modules, "setproctitle", types.SimpleNamespace(getproctitle=never))
    monkeypatch.setattr(agent_mod, "process_title", lambda: title)
    monkeypatch.setattr(telemetry, "emit", lambda kind, **kw: seen.append({"kind": kind, **kw}))
    monkeypatch.setattr(telemetry, "active", lambda: True)  # typed events go out only then
    a = agent_mod.Agent()
    a._mark_engine("runs the per-batch hook")  # the hook may come first: no rank yet
    a._check_engine_title()
    a._check_engine_title()
    assert a.engine and a.rank == rank_of(title)
    assert [e.get("rank") for e in seen] == [None, rank_of(title)]


def test_fix_status_names_each_schedulers_rank(tmp_path):
    """Two scheduler event files as two ranks' agents write them (a control event with the rank
    after the start): `diag fix status` names the rank beside each pid, in text and JSON."""
    import time

    sys.path.insert(0, str(ROOT / "tests"))
    import report_schema

    from diag.engine import rundir

    d = rundir.create_run_dir(tmp_path / "run")
    pids = {"TP0": 999999981, "TP1": 999999982}
    for rank, pid in pids.items():
        w = rundir.EventWriter(d, pid=pid)
        w({"kind": "start", "ppid": 1, "started": time.time(), "argv": ["-c"], "python": "3.11.7",
           "executable": sys.executable, "source": "bootstrap", "sglang": "0.5.23",
           "fixes_requested": [FIX], "probes": [], "probes_state": {}, "control": "poll",
           "fixes": {FIX: {"state": "applied", "reason": ""}}})
        w({"kind": "control", "mode": "batch", "engine": True, "reason": "title", "rank": rank})
        w({"kind": "draft_extend", "mode": "eager", "seconds": 0.002, "batch": 1})
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIAG_")}
    r = subprocess.run([sys.executable, "-m", "diag", "fix", "status", "--run-dir", str(d),
                        "--json"], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    report_schema.check("fix-status-v1.json", doc)
    got = {p["pid"]: p["rank"] for p in doc["runs"][0]["processes"]}
    assert got == {pid: rank for rank, pid in pids.items()}
    text = subprocess.run([sys.executable, "-m", "diag", "fix", "status", "--run-dir", str(d)],
                          capture_output=True, text=True, timeout=120, env=env).stdout
    for rank, pid in pids.items():
        assert f"pid {pid} (parent 1) exited  engine process {rank} " in text, text
    # the TUI's engine pane reads the same state: the same rank beside each pid
    from diag.tui import data as tui_data
    from diag.tui.fixes_view import engine_text
    from diag.tui.model import Model

    views = tui_data.engine_processes(rundir.read_state(d))
    assert {v.pid: v.rank for v in views} == got
    model = Model()
    model.engine_procs = views
    pane = engine_text(model).plain
    for rank, pid in pids.items():
        assert f"pid {pid} {rank} " in pane, pane
