"""The metadata-syncs counter samples its GPU sync-debug scope once a count is stable, and says
so on every surface: the `syncs` events (`sampled`, count scaled), the fold (`sampled_calls`),
`diag fix status` text, the `diag_metadata_builds_sampled_total` series, the event schema.

The scope itself needs a GPU (torch's sync debug mode): here it is a STAND-IN
(`standin_gpu_scope`) that reports a fixed number of syncs per call, so that what the sampler
does with the counts can be checked on CPU. Expected numbers follow from the sampling rule
(every call until the same count STABLE_RUN times in a row, then one in `every`)."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import report_schema

from diag import telemetry
from diag.engine.events import Fold, Syncs, describe_counters
from diag.probes.metadata_syncs import sync_counter as sc


def test_sampler_counts_every_call_until_stable_then_one_in_n():
    s = sc.Sampler(every=4, stable=3)
    decisions = []
    for _ in range(3 + 8):
        c = s.should_count("k")
        decisions.append(c)
        if c:
            s.counted("k", 2, ["a.py:1"])
    assert decisions == [True] * 3 + [False, False, False, True] * 2
    assert s.stable_count("k") == (2, ["a.py:1"])


def test_a_changed_count_starts_the_key_over():
    s = sc.Sampler(every=4, stable=2)
    for _ in range(2):
        assert s.should_count("k")
        s.counted("k", 2, [])
    assert not s.should_count("k")
    s.counted("k", 3, [])  # a counted call that differs (as the one-in-N would report)
    assert s.should_count("k") and s.should_count("k")  # every call again until stable


def test_exact_mode_and_the_env():
    assert sc.sample_every({"DIAG_SYNC_SAMPLE": "1"}) == 1
    assert sc.sample_every({"DIAG_SYNC_SAMPLE": "16"}) == 16
    assert sc.sample_every({}) == sc.SAMPLE_EVERY
    assert sc.sample_every({"DIAG_SYNC_SAMPLE": "x"}) == sc.SAMPLE_EVERY
    s = sc.Sampler(every=1)
    for _ in range(50):
        assert s.should_count("k")
        s.counted("k", 2, [])


@pytest.fixture
def standin_gpu(monkeypatch):
    """STAND-IN for torch's sync debug mode (no GPU here): 2 syncs per scope."""
    scopes = []

    @contextlib.contextmanager
    def standin_gpu_scope(report, blocking=True):
        scopes.append(1)
        yield True
        report.events.extend(sc.SyncEvent("sync", "build", "/x/backend.py", 10 + i)
                             for i in range(2))

    monkeypatch.setattr(sc, "gpu_available", lambda: True)
    monkeypatch.setattr(sc, "_gpu_scope", standin_gpu_scope)
    monkeypatch.setattr(sc, "_SAMPLER", sc.Sampler(every=8, stable=5))
    return scopes


def test_sampled_calls_are_scaled_and_labelled_everywhere(standin_gpu):
    got: list[dict] = []
    telemetry.add_sink(got.append)
    try:
        build = sc._telemetry_wrapper(lambda fb: fb, "StandinBackend.init_forward_metadata")
        fb = SimpleNamespace(forward_mode=SimpleNamespace(name="TARGET_VERIFY"), batch_size=4)
        for _ in range(5 + 16):
            build(fb)
        telemetry.flush()
    finally:
        telemetry.remove_sink(got.append)
    # 5 counted to reach stability, then 1 in 8 of the next 16 counted: 7 scopes, 14 sampled
    assert len(standin_gpu) == 7
    evs = [e for e in got if e["kind"] == "syncs"]
    counted = [e for e in evs if not e.get("sampled")]
    sampled = [e for e in evs if e.get("sampled")]
    assert sum(e["calls"] for e in counted) == 7 and sum(e["calls"] for e in sampled) == 14
    assert all(e["count"] == 2 * e["calls"] and e["per_call"] == 2 for e in evs)
    assert sampled[0]["sites"] == ["backend.py:10", "backend.py:11"]
    for i, e in enumerate(evs):
        report_schema.check("event-v1.json", {"ts": 1.0, "pid": 1, "n": i, **e})
    f = Fold()
    for i, e in enumerate(evs):
        f.add({"pid": 1, "n": i, **e})
    b = f.counters["syncs"]["StandinBackend.init_forward_metadata"]
    assert (b["calls"], b["syncs"], b["sampled_calls"]) == (21, 42, 14)
    ph = b["phases"]["target-verify"]  # per phase too, its time the events' time
    assert (ph["calls"], ph["syncs"]) == (21, 42)
    assert ph["seconds"] == pytest.approx(sum(e["seconds"] for e in evs)) == b["seconds"]
    (line,) = [t for t in describe_counters(f.counters) if t.startswith("syncs ")]
    assert "42 in 21 calls" in line and "14 calls sampled" in line


def test_sampled_series():
    inc: list[tuple[str, float]] = []

    class Recorder:
        def __init__(self, name):
            self.name = name

        def labels(self, **_kw):
            return self

        def inc(self, v):
            inc.append((self.name, v))

    Syncs(builder="B.f", count=6, calls=3, per_call=2, sampled=True).record(
        Recorder, lambda _n, v: str(v))
    assert ("metadata_builds_sampled", 3) in inc and ("metadata_builds", 3) in inc
    assert ("metadata_syncs", 6) in inc


def test_diag_run_exact_syncs_sets_the_env(tmp_path):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "diag", "run", "--exact-syncs", "--run-dir",
                        str(tmp_path / "d"), "--", sys.executable, "-c",
                        "import os; print(os.environ.get('DIAG_SYNC_SAMPLE'))"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "1"


def test_the_tui_says_which_builder_counts_are_sampled():
    from diag.tui import data

    ev = [{"ts": 1.0, "kind": "start", "pid": 1, "fixes": {}},
          {"ts": 2.0, "kind": "syncs", "pid": 1, "builder": "b", "count": 10, "calls": 5,
           "per_call": 2, "seconds": 0.01},
          {"ts": 3.0, "kind": "syncs", "pid": 1, "builder": "b", "count": 128, "calls": 64,
           "per_call": 2, "seconds": 0.1, "sampled": True},
          {"ts": 3.0, "kind": "syncs", "pid": 1, "builder": "c", "count": 0, "calls": 3,
           "per_call": 0, "seconds": 0.01}]
    _rows, syncs, _series = data.engine_view(ev)
    assert [(s.builder, s.before, s.source) for s in syncs] == [
        ("b", 2, "run dir, 64 calls sampled"), ("c", 0, "run dir")]


class _ClassAttrBatch:
    """A batch whose mode and size are class attributes (not in the instance's __dict__)."""

    forward_mode = SimpleNamespace(name="DRAFT_EXTEND")
    batch_size = 3


@pytest.mark.parametrize(("args", "kwargs"), [
    ((object(), SimpleNamespace(forward_mode=SimpleNamespace(name="TARGET_VERIFY"),
                                batch_size=16)), {}),
    ((object(), SimpleNamespace(forward_mode=SimpleNamespace(name="DECODE"))), {}),
    ((object(), SimpleNamespace(forward_mode=SimpleNamespace(name="EXTEND"), batch_size="x")),
     {}),
    ((object(), _ClassAttrBatch()), {}),
    ((object(),), {"forward_batch": SimpleNamespace(forward_mode=SimpleNamespace(name="IDLE"),
                                                    batch_size=2)}),
    ((object(), 4, SimpleNamespace(name="TARGET_VERIFY", is_target_verify=lambda: True)), {}),
    ((1, 2), {}),
    ((), {}),
])
def test_the_fast_key_is_the_general_one(args, kwargs):
    """`call_key` (the wrapper's one look at a call) gives what `call_phase` and `_call_batch`
    give, on the common shape and on every other."""
    assert sc.call_key(args, kwargs) == (sc.call_phase(args, kwargs), sc._call_batch(args, kwargs))


def test_sampled_calls_are_tallied_in_place(standin_gpu):
    """Once a key is stable its sampled calls go to one preallocated slot (no event built per
    call); the flush emits them as one `sampled` event per key with the scaled count."""
    got: list[dict] = []
    telemetry.add_sink(got.append)
    try:
        build = sc._telemetry_wrapper(lambda self, fb: fb, "StandinBackend.build_meta")
        fb = SimpleNamespace(forward_mode=SimpleNamespace(name="DRAFT_EXTEND"), batch_size=8)
        for _ in range(5):
            build(None, fb)
        st = sc._SAMPLER.keys[("StandinBackend.build_meta", "draft-extend", 8)]
        assert st.slot is not None and st.slot.n == 0
        for _ in range(7):  # the next 7 are sampled (the 8th would be counted)
            build(None, fb)
        assert st.slot.n == 7 and len(standin_gpu) == 5
        telemetry.flush()
    finally:
        telemetry.remove_sink(got.append)
    (e,) = [e for e in got if e["kind"] == "syncs" and e.get("sampled")
            and e["builder"] == "StandinBackend.build_meta"]
    assert (e["calls"], e["count"], e["per_call"], e["phase"]) == (7, 14, 2, "draft-extend")


def test_a_stable_key_is_found_by_the_batchs_own_mode_and_size(monkeypatch):
    """The common call shape (self, forward_batch): once a key is stable its calls find its state
    by the batch's mode object and size (no key built: `call_key` is not called for them), one
    in `every` is still counted, and a counted call that differs drops the fast entry (every
    call counted again, through the general path, until stable again)."""
    import enum

    class Mode(enum.Enum):  # SGLang's ForwardMode is an IntEnum; `.name` is what call_key reads
        TARGET_VERIFY = 1

    per_call = [2]
    scopes: list[int] = []

    @contextlib.contextmanager
    def standin_gpu_scope(report, blocking=True):  # STAND-IN: no GPU here (module docstring)
        scopes.append(per_call[0])
        yield True
        report.events.extend(sc.SyncEvent("sync", "build", "/x/b.py", 1)
                             for _ in range(per_call[0]))

    keys: list[int] = []
    real_key = sc.call_key
    monkeypatch.setattr(sc, "call_key", lambda a, k: keys.append(1) or real_key(a, k))
    monkeypatch.setattr(sc, "gpu_available", lambda: True)
    monkeypatch.setattr(sc, "_gpu_scope", standin_gpu_scope)
    monkeypatch.setattr(sc, "_SAMPLER", sc.Sampler(every=8, stable=5,
                                                   tally=telemetry.Tally("syncs-test", "calls")))

    class Backend:
        def init_forward_metadata(self, fb):
            return fb

    build = sc._telemetry_wrapper(Backend.init_forward_metadata, "Backend.init_forward_metadata")
    be, fb = Backend(), SimpleNamespace(forward_mode=Mode.TARGET_VERIFY, batch_size=16)
    got: list[dict] = []
    telemetry.add_sink(got.append)
    try:
        for _ in range(5):  # counted until stable: each builds its key
            build(be, fb)
        assert len(scopes) == 5 and len(keys) == 5
        st = sc._SAMPLER.fast[Mode.TARGET_VERIFY][16]["Backend.init_forward_metadata"]
        assert st is sc._SAMPLER.keys[("Backend.init_forward_metadata", "target-verify", 16)]
        for _ in range(7):  # sampled: found fast, no key built, no scope
            build(be, fb)
        assert len(scopes) == 5 and len(keys) == 5 and st.slot.n == 7
        per_call[0] = 3
        build(be, fb)  # the 8th: counted (key built now), and its count differs
        assert len(scopes) == 6 and len(keys) == 6 and st.slot is None
        for _ in range(3):  # started over: every call counted, through the general path
            build(be, fb)
        assert len(scopes) == 9 and len(keys) == 9
        assert sc._SAMPLER.keys[("Backend.init_forward_metadata", "target-verify", 16)].count == 3
    finally:
        telemetry.remove_sink(got.append)
