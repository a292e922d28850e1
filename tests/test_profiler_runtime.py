"""profiler-teardown, runtime part: the reference cycle of a stopped profiler on the local torch."""

from __future__ import annotations

import gc
import weakref

import pytest

from diag.context import Context
from diag.findings import Status
from diag.probes.profiler_teardown.cycle import find_cycle, runtime_cycle
from diag.probes.profiler_teardown.probe import ProfilerTeardownProbe

torch = pytest.importorskip("torch")


def test_find_cycle_names_each_step():
    class Node:
        def __init__(self):
            self.table = {("a", 1): [self.method]}

        def method(self):
            return None

    n = Node()
    assert find_cycle(n)[1:] == [".table <dict>", "[('a', 1)] <list>",
                                 "[0] <bound method test_find_cycle_names_each_step.<locals>."
                                 "Node.method>", ".__self__ (the same object)"]
    assert find_cycle(object()) == []


def test_stopped_profiler_is_in_a_cycle_on_local_torch():
    rep = runtime_cycle()
    assert rep.torch_version == torch.__version__
    assert rep.alive_after_del and rep.freed_by_collect
    assert rep.collected > 0
    text = " ".join(rep.path)
    assert rep.path[0] == "torch.profiler.profiler.profile"
    assert ".action_map <dict>" in text and "<bound method" in text
    assert rep.path[-1] == ".__self__ (the same object)"
    cost = rep.collect_cost
    assert cost["tracked_objects"] > 1000 and cost["s_per_object"] > 0


def test_heap_watch_times_full_collections_it_did_not_run():
    """HeapWatch learns the cost of a full collection from one the interpreter runs (here the
    test's own gc.collect(), a generation-2 collection) and estimates from the heap size."""
    from diag.probes.profiler_teardown.cycle import HeapWatch

    w = HeapWatch().install()
    try:
        before = w.snapshot()
        assert before["full_gc_est_s"] is None and before["heap_blocks"] > 0
        assert "no automatic full collection" in before["full_gc_est_basis"]
        gc.collect(1)  # a younger generation: not a full collection
        assert w.full_collections == 0
        gc.collect()
        after = w.snapshot()
        assert w.full_collections == 1 and after["full_gc_last_s"] > 0
        assert after["full_gc_est_s"] > 0 and after["full_gc_est_basis"].startswith("estimate")
    finally:
        w.uninstall()
    assert gc.isenabled()


def test_probe_runtime_finding_carries_the_path(release):
    findings = ProfilerTeardownProbe().run(Context(target=release("0.5.17"), platform="hip"))
    assert len(findings) == 2  # static + runtime; the reproducer only with full
    rt = findings[1]
    assert rt.status == Status.WARN and "only gc.collect() frees it" in rt.summary
    values = {e.metric: e.value for e in rt.evidence if e.kind == "metric"}
    assert values["alive_after_del"] is True and values["collected_by_gc_collect"] > 0
    path = next(e for e in rt.evidence if e.kind == "row").data["path"]
    assert "action_map" in path


def test_profile_without_cycle_is_freed_at_del():
    """The check can tell the difference: a profile whose cycle is broken goes at `del`."""
    p = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    p.start()
    p.stop()
    p.action_map.clear()
    gc.disable()
    try:
        r = weakref.ref(p)
        del p
        assert r() is None
    finally:
        gc.enable()


def test_cycle_check_in_a_child_process_matches_and_feeds_the_probe(release, monkeypatch,
                                                                    tmp_path):
    """diagnose starts the runtime check in a child (prepare) so it overlaps other probes;
    its report is the same measurement, and the probe uses it instead of measuring inline."""
    from diag.probes.profiler_teardown import cycle as pt

    monkeypatch.setenv("DIAG_CACHE_DIR", str(tmp_path))  # an empty cache: the child must run
    child = pt.start_cycle_child()
    assert child is not None
    rep = pt.collect_cycle_child(child)
    assert rep is not None and rep.alive_after_del and rep.freed_by_collect
    assert "action_map" in " ".join(rep.path)
    assert pt.start_cycle_child() is None  # stored: the next run reuses it, no child

    monkeypatch.setenv("DIAG_CACHE_DIR", str(tmp_path / "again"))
    ctx = Context(target=release("0.5.17"), platform="hip")
    probe = ProfilerTeardownProbe()
    probe.prepare(ctx)
    assert ctx.cache["profiler-cycle-child"] is not None
    monkeypatch.setattr(pt, "runtime_cycle", lambda: pytest.fail("measured inline"))
    findings = probe.run(ctx)
    assert findings[1].status == Status.WARN and "profiler-cycle-child" not in ctx.cache
