"""The crash reproducer: scenarios in child processes with time limits; the parent survives."""

from __future__ import annotations

import os
import signal

import pytest

import diag.probes.profiler_teardown.reproducer as rp
from diag.context import Context
from diag.findings import Status
from diag.probes.profiler_teardown.probe import ProfilerTeardownProbe

pytest.importorskip("torch")


def test_scenarios_run_in_children_and_are_recorded():
    names = ["late-collection", "never-stopped", "controlled-teardown"]
    results = rp.run_scenarios(names, tries=1, gpu="0", timeout=120)
    assert [r.name for r in results] == names
    for r in results:
        (a,) = r.attempts
        assert not a.timed_out
        assert a.report is not None and a.report["done"] and a.report["device"] == "cpu"
        # a crash is a death by signal, and only that
        assert a.crashed == (a.returncode is not None and a.returncode < 0)
        assert r.crashes == int(a.crashed)
        assert r.verdict().startswith(r.name + ": ")
        if not a.crashed:
            assert a.returncode == 0, a.stderr_tail
    late, never, controlled = results
    # the late collection happened: the profiler outlived `del`, the automatic GC freed it
    rep = late.attempts[0].report
    assert rep["alive_after_del"] is True and rep["freed"]["thread"] == "MainThread"
    if not late.crashes:
        assert late.verdict() == "late-collection: precondition present, not reproduced in 1 tries"
    rep = controlled.attempts[0].report
    assert rep["collected"] > 0 and rep["freed"] is not None
    if never.crashes:
        assert never.attempts[0].outcome().endswith("at exit")  # reported, then died at exit
    assert os.getpid() > 0  # still here


def test_time_limit_kills_the_child_not_the_parent():
    a = rp.run_once("late-collection", gpu="0", timeout=0.3)
    assert a.timed_out and a.returncode is None and not a.crashed
    assert a.outcome() == "hang (killed at the time limit)"
    assert a.seconds < 30


def test_signal_names():
    assert rp._signal_name(-signal.SIGSEGV) == "SIGSEGV"
    assert rp._signal_name(0) is None and rp._signal_name(1) is None
    with pytest.raises(ValueError):
        rp.run_once("no-such-scenario")


@pytest.mark.slow
def test_probe_full_runs_the_reproducer(release, monkeypatch):
    # the wiring, on two scenarios (all of them: test above and `python -m probes.profiler_teardown.reproducer`)
    subset = {k: rp.SCENARIOS[k] for k in ("stop-twice", "late-collection-thread")}
    monkeypatch.setattr(rp, "SCENARIOS", subset)
    monkeypatch.setattr(rp, "DEFAULT_TRIES", 1)
    findings = ProfilerTeardownProbe().run(
        Context(target=release("0.5.17"), platform="hip", full=True))
    repro = findings[2]
    rows = [e.data for e in repro.evidence if e.kind == "row"]
    assert [r["scenario"] for r in rows] == list(subset)
    assert all(r["tries"] == 1 for r in rows)
    late_crashed = any(r["crashes"] for r in rows if r["scenario"].startswith("late-collection"))
    other_crashed = any(r["crashes"] for r in rows if not r["scenario"].startswith("late"))
    expected = Status.FAIL if late_crashed else Status.WARN if other_crashed else Status.OK
    assert repro.status == expected
