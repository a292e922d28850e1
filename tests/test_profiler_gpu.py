"""profiler teardown on a GPU: reproducer scenarios with CUDA/HIP activity, and the bench."""

from __future__ import annotations

import pytest

import diag.probes.profiler_teardown.reproducer as rp
from diag.fixes.bench_profiler import run

pytestmark = pytest.mark.gpu


def test_reproducer_with_gpu_activity():
    names = ["late-collection", "late-collection-thread", "controlled-teardown"]
    results = rp.run_scenarios(names, tries=1, gpu="1", timeout=300)
    for r in results:
        (a,) = r.attempts
        assert not a.timed_out, r.name
        assert a.report is not None and a.report["device"] == "cuda", a.stderr_tail
        assert a.crashed == (a.returncode is not None and a.returncode < 0)
        print(r.verdict(), r.freed_where(), a.seconds, "s")


def test_bench_on_gpu():
    res = run({"quick": True, "cycles": 5, "gpu": "1"}, print)
    assert res.skipped is None and res.device != "cpu"
    alive = next(r for r in res.rows if r.metric.startswith("stopped profilers"))
    assert alive.after.median == 0
