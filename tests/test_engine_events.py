"""The one fold of a process's events (`diag.engine.events.Fold`): counter sections as
`diag fix status` and the run-dir readers show them, fix states, a snapshot's totals."""

from __future__ import annotations

from diag.engine.events import Fold, describe_counters, replay


def _fold(*evs: dict) -> Fold:
    f = Fold()
    for i, e in enumerate(evs):
        f.add({"ts": float(i), "pid": 7, "n": i, **e})
    return f


def test_counter_sections_and_their_text():
    f = _fold({"kind": "syncs", "builder": "B.f", "count": 2, "seconds": 0.001},
              {"kind": "syncs", "builder": "B.f", "count": 1, "seconds": 0.002},
              {"kind": "draft_extend", "mode": "eager", "seconds": 0.004, "batch": 8},
              {"kind": "profiler_stop", "seconds": 0.5, "collected": 10, "path": "v2",
               "teardown": "cycle-broken", "teardown_s": 0.01, "heap_blocks": 1000,
               "full_gc_est_s": 0.2},
              {"kind": "error", "where": "x", "message": "y"})
    c = f.counters
    assert c["syncs"] == {"B.f": {"calls": 2, "syncs": 3, "seconds": 0.003}}
    assert c["draft_extend"] == {"eager": {"passes": 1, "seconds": 0.004}}
    assert c["profiler_stop"] == {"stops": 1, "seconds": 0.5, "collected": 10,
                                  "teardown": {"cycle-broken": 1}, "teardown_s": 0.01,
                                  "heap_blocks": 1000, "full_gc_est_s": 0.2}
    assert c["errors"] == 1 and c["events"]["syncs"] == 2
    assert describe_counters(c) == [
        "syncs B.f: 3 in 2 calls, 3.00 ms", "draft-extend eager: 1 passes, 4.00 ms",
        "profiler stops: 1, 0.500 s, 10 objects collected; teardown: cycle-broken 1; "
        "a full collection now: ~0.200 s (estimate)", "agent errors: 1"]


def test_fix_states_acks_and_snapshot():
    f = _fold({"kind": "start", "fixes": {"a": {"state": "pending", "reason": "r"}},
               "started": 5.0},
              {"kind": "fix", "fix": "a", "state": "applied", "reason": ""},
              {"kind": "control_ack", "request": "q1", "fix": "b", "action": "apply",
               "ok": False, "state": "refused", "reason": "no"},
              {"kind": "probe", "probe": "p", "state": "on", "reason": ""},
              {"kind": "control", "mode": "batch"},
              {"kind": "control", "mode": "batch", "engine": True, "rank": "TP1"})
    assert f.fixes == {"a": {"state": "applied", "reason": ""},
                       "b": {"state": "refused", "reason": "no"}}
    assert f.acks["q1"]["ok"] is False and f.probes == {"p": {"state": "on", "reason": ""}}
    assert f.control == "batch" and f.start["started"] == 5.0 and f.rank == "TP1"
    again = Fold()
    again.add(f.snapshot(9.0, 7, 99))  # what a rotated file starts with
    assert (again.counters, again.fixes, again.probes, again.control, again.start, again.rank) \
        == (f.counters, f.fixes, f.probes, f.control, f.start, f.rank)


def test_replay_marks_events_after_a_fix_of_their_probe():
    """`fixed` follows the fixes that address the probe whose counter emits the kind
    (declarations: metadata-syncs emits `syncs` and names its fix)."""
    from diag import probes

    spec = next(s for s in probes.specs() if s.counter and "syncs" in s.counter.events)
    fix = spec.fixes[0]
    evs = [{"kind": "syncs", "pid": 1, "count": 2},
           {"kind": "fix", "pid": 1, "fix": fix, "state": "applied"},
           {"kind": "syncs", "pid": 1, "count": 0},
           {"kind": "syncs", "pid": 2, "count": 2}]
    assert [fixed for e, fixed in replay(evs) if e.name == "syncs"] == [False, True, False]
