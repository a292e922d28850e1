"""The phase counters inside an engine: target-verify and draft-decode passes by mode (graph
replay or eager) and why eager, the draft-extend eager reasons, the in-process fold that keeps a
write off every pass, and the metadata-syncs counter's phase of a call.

The wrappers are the real ones (`probes.draft_extend_graph.phase_counter`, `probes.draft_extend_graph.runtime`);
what they wrap are stand-ins (classes named *Standin*), because SGLang's ModelRunner and EAGLE
worker need a GPU and a loaded model: they carry only what the wrappers read, with the names
SGLang 0.5.23 gives them (ForwardMode.TARGET_VERIFY, `ModelRunnerOutput.can_run_graph`,
`cuda_graph_runner.max_bs`, `cuda_graph_runner_for_draft_extend`). On a real server on the H200 the
GPU engine lane (benchmarks/gpu_engine) checks the same counters. The hooks' targets are checked
to exist in every release below, by AST."""

from __future__ import annotations

import ast
import enum
import json
from types import SimpleNamespace

import pytest
import report_schema

from diag import telemetry
from diag.engine.events import Fold, describe_counters
from diag.patcher import find_def
from diag.probes.draft_extend_graph import phase_counter as gpr
from diag.probes.draft_extend_graph import runtime as der
from diag.probes.metadata_syncs import sync_counter


class StandinForwardMode(enum.IntEnum):  # sglang/srt/model_executor/forward_batch_info.py
    EXTEND = 1
    DECODE = 2
    TARGET_VERIFY = 4
    DRAFT_EXTEND_V2 = 7

    def is_target_verify(self) -> bool:
        return self is StandinForwardMode.TARGET_VERIFY

    def is_draft_extend_v2(self) -> bool:
        return self is StandinForwardMode.DRAFT_EXTEND_V2


class StandinModelRunner:
    def __init__(self, runner=None):
        self.decode_cuda_graph_runner = runner

    def forward(self, forward_batch):
        bs = forward_batch.batch_size
        r = self.decode_cuda_graph_runner
        return SimpleNamespace(can_run_graph=bool(r and bs <= r.max_bs))


class StandinDraftWorker:
    def __init__(self, runner, model_runner):
        self.cuda_graph_runner = runner
        self.draft_runner = model_runner

    def draft(self, batch):
        if self.cuda_graph_runner is not None and batch.batch_size() <= self.cuda_graph_runner.max_bs:
            return "replayed"
        for _ in range(2):  # steps - 1 eager inner forwards
            self.draft_runner.forward(SimpleNamespace(forward_mode=StandinForwardMode.DECODE,
                                                      batch_size=batch.batch_size()))
        return "eager"


@pytest.fixture
def events():
    got: list[dict] = []
    telemetry.add_sink(got.append)
    yield got
    telemetry.flush()
    telemetry.remove_sink(got.append)


def _fold(evs: list[dict]) -> dict:
    f = Fold()
    for i, e in enumerate(evs):
        f.add({"pid": 1, "n": i, **e})
    return f.counters


def _batch(n: int, mode=StandinForwardMode.TARGET_VERIFY):
    return SimpleNamespace(forward_mode=mode, batch_size=n)


def test_target_verify_by_mode_with_the_reason(events):
    captured = SimpleNamespace(max_bs=8)
    runner = StandinModelRunner(captured)
    fwd = gpr._wrap_forward(StandinModelRunner.forward)
    for bs in (1, 4, 8, 12):  # 12 > the largest captured batch (8): eager
        fwd(runner, _batch(bs))
    fwd(runner, _batch(3, StandinForwardMode.EXTEND))  # not a verify pass: not counted
    fwd(StandinModelRunner(None), _batch(1))  # no runner captured
    telemetry.flush()
    c = _fold(events)["graph_phases"]["target-verify"]
    assert c["graph"]["passes"] == 3
    assert c["eager"]["passes"] == 2
    assert c["eager"]["reasons"] == {"batch-above-captured": 1, "no-runner": 1}
    for e in events:
        report_schema.check("event-v1.json", {"ts": 1.0, "pid": 1, "n": 0, **e})


def test_an_eager_draft_extend_forward_is_timed_apart(events):
    """The draft model runner's forward in DRAFT_EXTEND_V2 mode (an eager draft-extend pass's
    model forward) is counted as `draft-extend-forward`; other non-verify forwards are not."""
    fwd = gpr._wrap_forward(StandinModelRunner.forward)
    runner = StandinModelRunner(None)
    for _ in range(3):
        fwd(runner, _batch(2, StandinForwardMode.DRAFT_EXTEND_V2))
    fwd(runner, _batch(2, StandinForwardMode.EXTEND))
    fwd(runner, _batch(2, StandinForwardMode.DECODE))
    telemetry.flush()
    c = _fold(events)["graph_phases"]
    assert set(c) == {gpr.DE_FORWARD}
    assert c[gpr.DE_FORWARD]["eager"]["passes"] == 3
    assert c[gpr.DE_FORWARD]["eager"]["seconds"] >= 0


def test_draft_decode_graph_or_eager_seen_through_the_inner_forwards(events):
    mr = StandinModelRunner(None)
    worker = StandinDraftWorker(SimpleNamespace(max_bs=8), mr)
    draft = gpr._wrap_draft(StandinDraftWorker.draft)
    # the inner forwards go through the (wrapped) ModelRunner.forward, as in SGLang
    StandinModelRunner.forward, orig = gpr._wrap_forward(StandinModelRunner.forward), \
        StandinModelRunner.forward
    try:
        assert draft(worker, SimpleNamespace(batch_size=lambda: 2)) == "replayed"
        assert draft(worker, SimpleNamespace(batch_size=lambda: 16)) == "eager"
        worker.cuda_graph_runner = None
        assert draft(worker, SimpleNamespace(batch_size=lambda: 1)) == "eager"
    finally:
        StandinModelRunner.forward = orig
    telemetry.flush()
    c = _fold(events)["graph_phases"]
    assert set(c) == {"draft-decode"}  # the inner DECODE forwards are not verify passes
    assert c["draft-decode"]["graph"]["passes"] == 1
    assert c["draft-decode"]["eager"]["reasons"] == {"batch-above-captured": 1, "no-runner": 1}
    text = describe_counters(_fold(events))
    assert any(t.startswith("draft-decode eager: 2 passes") and "no-runner 1" in t for t in text)


def test_draft_extend_eager_reasons(events, monkeypatch):
    class StandinWorker:
        cuda_graph_runner_for_draft_extend = None

        def _draft_extend_for_decode(self, batch):
            return batch

    wrapped = der._wrap_pass(StandinWorker._draft_extend_for_decode)
    w = StandinWorker()
    monkeypatch.setenv(der.KILL_SWITCH, "1")
    wrapped(w, SimpleNamespace(batch_size=2))
    monkeypatch.setenv(der.KILL_SWITCH, "0")
    wrapped(w, SimpleNamespace(batch_size=2))
    w.cuda_graph_runner_for_draft_extend = SimpleNamespace(max_bs=8)  # a runner that says no
    wrapped(w, SimpleNamespace(batch_size=12))
    wrapped(w, SimpleNamespace(batch_size=3))
    telemetry.flush()
    de = _fold(events)["draft_extend"]
    assert de["eager"]["passes"] == 4
    assert de["eager"]["reasons"] == {"kill-switch": 1, "no-runner": 1,
                                      "batch-above-captured": 1, "runner-declined": 1}
    for e in events:
        report_schema.check("event-v1.json", {"ts": 1.0, "pid": 1, "n": 0, **e})


def test_folder_holds_passes_until_the_flush(events, monkeypatch):
    f = telemetry.Folder("graph_phase", "passes", every=3600)
    for _ in range(1000):
        f.add({"phase": "target-verify", "mode": "graph", "reason": None}, seconds=0.001)
    assert events == []  # held in-process
    telemetry.flush()  # what the agent's poll thread calls
    (e,) = events
    assert e["passes"] == 1000 and e["seconds"] == pytest.approx(1.0)


def test_sync_counter_names_the_phase_of_a_call():
    fb = SimpleNamespace(forward_mode=StandinForwardMode.TARGET_VERIFY)
    assert sync_counter.call_phase((object(), fb), {}) == "target-verify"
    assert sync_counter.call_phase((), {"forward_mode": StandinForwardMode.DECODE}) == \
        "draft-decode"
    assert sync_counter.call_phase((1, 2), {}) is None
    f = _fold([{"kind": "syncs", "builder": "B.f", "count": 6, "calls": 3, "per_call": 2,
                "seconds": 0.003, "phase": "draft-extend"}])
    assert f["syncs"]["B.f"] == {"calls": 3, "syncs": 6, "seconds": 0.003,
                                 "phases": {"draft-extend": {"calls": 3, "syncs": 6,
                                                             "seconds": 0.003}}}


@pytest.mark.release
@pytest.mark.parametrize("version", ("0.5.11", "0.5.13.post1", "0.5.17", "0.5.18", "0.5.23"))
def test_phase_hooks_exist_in_the_releases(release, version):
    t = release(version)
    for module, qualname in gpr.hook_targets():
        rel = module.split(".", 1)[1].replace(".", "/") + ".py"
        fn = find_def(ast.parse(t.source(rel)), qualname)
        assert [a.arg for a in fn.args.args][:2] in (
            ["self", "forward_batch"], ["self", "batch"], ["self", "model_worker_batch"])
    # the target runner's attribute the eager reason reads: in every release one of these
    src = t.source("srt/model_executor/model_runner.py")
    assert any(f"self.{a} =" in src for a in gpr.TARGET_RUNNER_ATTRS)
    # and TARGET_VERIFY is a ForwardMode with is_target_verify
    fbi = ast.parse(t.source("srt/model_executor/forward_batch_info.py"))
    assert find_def(fbi, "ForwardMode.is_target_verify")
    assert json.dumps(gpr.hook_targets())


def test_tally_emits_the_passes_added_since_the_last_flush(events):
    t = telemetry.Tally("graph_phase", "passes")
    s = t.slot(("target-verify", None), phase="target-verify", mode="graph", reason=None)
    assert t.slot(("target-verify", None)) is s  # one slot per key, made once
    for _ in range(3):
        s.n += 1
        s.s += 0.5
    telemetry.flush()
    telemetry.flush()  # nothing new: nothing emitted
    s.n += 1
    s.s += 0.25
    telemetry.flush()
    mine = [e for e in events if e["kind"] == "graph_phase" and e["phase"] == "target-verify"]
    assert [(e["passes"], e["seconds"]) for e in mine] == [(3, 1.5), (1, 0.25)]
    assert t.totals() == [({"phase": "target-verify", "mode": "graph", "reason": None}, 4, 1.75)]


def test_passes_before_a_first_sink_are_not_reported():
    t = telemetry.Tally("graph_phase", "passes")
    s = t.slot("k", phase="draft-decode", mode="graph", reason=None)
    s.n += 5  # no sink yet: nobody is listening
    got: list[dict] = []
    telemetry.add_sink(got.append)
    try:
        s.n += 1
        telemetry.flush()
    finally:
        telemetry.remove_sink(got.append)
    assert [e["passes"] for e in got if e["kind"] == "graph_phase"] == [1]
