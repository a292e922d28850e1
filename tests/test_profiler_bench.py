"""`diag bench profiler-controlled-teardown`: the cycles run in child processes; a smoke run."""

from __future__ import annotations

import pytest

from diag import fixes
from diag.fixes.bench_profiler import run

pytest.importorskip("torch")


@pytest.mark.slow
def test_bench_runs_both_series_in_children():
    assert fixes.get("profiler-controlled-teardown").bench == "diag.fixes.bench_profiler:run"
    msgs: list[str] = []
    res = run({"quick": True, "cycles": 4, "gpu": "0", "heap_objects": 20000,
               "teardown": "cycle"}, msgs.append)
    assert res.skipped is None and res.device == "cpu"
    rows = {r.metric.split(" after")[0].split(",")[0]: r for r in res.rows}
    stop = rows["stop (incl. teardown when on)"]
    assert stop.before.n == 4 and stop.after.n == 4
    crashes = rows["crashed or hung children"]
    assert crashes.before.median == 0 and crashes.after.median == 0, res.notes
    alive = rows["stopped profilers not yet freed"]
    assert alive.after.median == 0  # the controlled teardown frees each one at its stop
    upstream = next(r for r in res.rows if r.metric.startswith("stop, upstream"))
    assert upstream.after.n == 4  # the third series: 0.5.18's drop + gc.collect() stop
    assert any("fix teardown: cycle-broken 4/4" in n for n in res.notes), res.notes
    assert res.params["heap_objects"] == 20000 and res.params["teardown"] == "cycle"
    assert len(msgs) == 2  # the side-by-side pair, then upstream
    # the crash on real servers, from the GPU lane's record, beside the timings
    from diag.fixes import profiler_crash_record

    rec = profiler_crash_record.load()
    assert rec is not None
    assert profiler_crash_record.note(rec) in res.notes
