"""The bench result model and its Compare-style table."""

from __future__ import annotations

from diag.bench import BenchResult, Row, Stats, render, time_calls


def test_stats_median_and_quartiles():
    s = Stats.of([5.0, 1.0, 3.0, 2.0, 4.0])
    assert s.median == 3.0 and s.min == 1.0 and s.n == 5
    assert s.p25 < s.median < s.p75


def test_ratio_and_round_trip():
    res = BenchResult("fix-x", "metadata build", "cpu", {"batch": 64}, [
        Row("host time per call", "s", Stats.of([10e-3] * 5), Stats.of([0.2e-3] * 5)),
        Row("syncs per call", "syncs", Stats.of([2.0]), Stats.of([0.0])),
    ])
    assert abs(res.rows[0].ratio - 0.02) < 1e-9
    assert res.rows[1].ratio == 0.0
    back = BenchResult.from_dict(res.to_dict())
    assert back.rows[0].before.median == res.rows[0].before.median
    assert back.to_dict()["rows"][0]["ratio"] == res.to_dict()["rows"][0]["ratio"]


def test_render_uses_one_readable_time_unit():
    res = BenchResult("fix-x", "step", "cuda", {}, [
        Row("step", "s", Stats.of([1107e-6] * 4), Stats.of([179e-6] * 4)),
    ])
    text = render([res])
    assert "microseconds (us)" in text
    assert "1.11e+03" in text or "1,107" in text or "1.1e+03" in text
    assert "0.162" in text  # 179/1107


def test_render_says_why_a_bench_did_not_run():
    text = render([BenchResult("fix-y", "graph replay", "cpu", skipped="no GPU")])
    assert "not run: no GPU" in text


def test_time_calls_counts_each_call_and_runs_sync_outside():
    calls = []
    samples = time_calls(lambda: calls.append(1), repeats=5, warmup=2,
                         sync=lambda: calls.append(0))
    assert len(samples) == 5 and all(s >= 0 for s in samples)
    assert calls.count(1) == 7 and calls.count(0) == 7
