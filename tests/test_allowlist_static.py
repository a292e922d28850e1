"""Fix `draft-extend-allowlist` read against real SGLang release sources (no sglang import):
applicability per release, the output_size dependency per backend, the run-time hook targets."""

from __future__ import annotations

import ast
import json

import pytest
from click.testing import CliRunner

from diag import fixes, telemetry
from diag.errors import FixError
from diag.fixes.base import APPLICABLE, NOT_NEEDED, UPSTREAM
from diag.fixes.capture_syncs import capture_sync_sites
from diag.fixes.draft_extend_allowlist import DraftExtendAllowlistFix, class_locations, parse_extra
from diag.probes.draft_extend_graph import phase_counter as graph_phase_runtime
from diag.probes.draft_extend_graph import runtime as rt

pytestmark = pytest.mark.release

HOOK_RELEASES = ("0.5.9", "0.5.12.post1", "0.5.13.post1", "0.5.15.post1", "0.5.17", "0.5.18",
                 "0.5.19", "0.5.23")


@pytest.mark.parametrize("version,status", [
    ("0.5.9", NOT_NEEDED), ("0.5.12.post1", NOT_NEEDED), ("0.5.13.post1", APPLICABLE),
    ("0.5.15.post1", APPLICABLE), ("0.5.17", APPLICABLE), ("0.5.18", APPLICABLE),
    ("0.5.19", UPSTREAM), ("0.5.23", UPSTREAM)])
def test_applies_to_per_release(release, version, status):
    a = DraftExtendAllowlistFix().applies_to(release(version), "hip")
    assert a.status == status, a.reason


def test_reasons_name_what_is_missing(release):
    f = DraftExtendAllowlistFix()
    r17 = f.applies_to(release("0.5.17"), "hip").reason
    assert "supports_hip_aiter_draft_extend_graph" in r17
    assert "DeepseekV4HipRadixBackend, DeepseekSparseAttnBackend" in r17
    assert "DeepseekV4HipRadixBackend only with fix repeat-interleave-output-size" in r17
    r18 = f.applies_to(release("0.5.18"), "hip").reason
    assert "does not admit DeepseekSparseAttnBackend;" in r18 and "output-size" not in r18
    assert "v1 EAGLE worker" in f.applies_to(release("0.5.9"), "hip").reason
    # CUDA: 0.5.17's tuple (srt/speculative/eagle_worker_v2.py:407-432) lacks
    # FlashAttentionBackend (srt/layers/attention/flashattention_backend.py:120), which 0.5.23
    # appends (eagle_worker_v2.py:112-119)
    cuda = f.applies_to(release("0.5.17"), "cuda")
    assert cuda.status == APPLICABLE and cuda.changes == ("FlashAttentionBackend",), cuda.reason
    assert "0.5.23" in cuda.reason


@pytest.mark.parametrize("version,backend,status", [
    # fa3 -> FlashAttentionBackend: not in the CUDA tuple of 0.5.19 (eagle_worker_v2.py:
    # graph_supported_backend_types, no FlashAttentionBackend) nor 0.5.22 (:535-559); appended in
    # 0.5.23 (:112-119). triton: TritonAttnBackend heads the tuple in every release.
    ("0.5.19", "fa3", APPLICABLE), ("0.5.22", "fa3", APPLICABLE), ("0.5.23", "fa3", UPSTREAM),
    ("0.5.19", "triton", NOT_NEEDED), ("0.5.22", "triton", NOT_NEEDED),
    ("0.5.23", "triton", NOT_NEEDED)])
def test_cuda_gate_per_backend(release, version, backend, status):
    from diag.context import SpecConfig

    a = DraftExtendAllowlistFix().applies_to(release(version), "cuda",
                                             SpecConfig(attention_backend=backend))
    assert a.status == status, a.reason
    if status == APPLICABLE:
        assert a.changes == ("FlashAttentionBackend",)


def test_extra_class_turns_upstream_into_applicable(release, monkeypatch):
    monkeypatch.setenv("DIAG_ALLOWLIST_EXTRA", "TritonAttnBackend")
    a = DraftExtendAllowlistFix().applies_to(release("0.5.23"), "hip")
    assert a.status == APPLICABLE and "TritonAttnBackend" in a.reason
    monkeypatch.delenv("DIAG_ALLOWLIST_EXTRA")
    a = DraftExtendAllowlistFix(extra=["pkg.mod:NoSuchBackend"]).applies_to(release("0.5.23"), "hip")
    assert a.status == UPSTREAM  # a class the release does not have is not counted


def test_parse_extra():
    assert parse_extra(" A , pkg.mod:B ,") == {"A": None, "B": "pkg.mod"}
    with pytest.raises(FixError):
        parse_extra("not a class")


@pytest.mark.parametrize("version,cls,expected", [
    ("0.5.15.post1", "DeepseekV4HipRadixBackend", ["_attach_unified_kv_prefill_meta"]),
    ("0.5.17", "DeepseekV4HipRadixBackend", ["_attach_unified_kv_prefill_meta"]),
    ("0.5.18", "DeepseekV4HipRadixBackend", []),  # #29202: output_size on the draft-extend path
    ("0.5.23", "DeepseekV4HipRadixBackend", []),
    ("0.5.13.post1", "DeepseekSparseAttnBackend", ["_apply_cuda_graph_metadata"]),
    ("0.5.17", "DeepseekSparseAttnBackend", []),
    ("0.5.18", "DeepseekSparseAttnBackend", []),
    ("0.5.19", "DeepseekSparseAttnBackend", []),  # upstream captures it on HIP from here
    ("0.5.17", "TritonAttnBackend", []),  # int repeats (num_group = a // b) do not sync
])
def test_capture_path_syncs_per_backend_and_release(release, version, cls, expected):
    t = release(version)
    rel = class_locations(t, [cls])[cls]
    sites = capture_sync_sites(t.source(rel), cls)
    assert sorted({s.function for s in sites}) == expected


def test_dependencies_map(release):
    f = DraftExtendAllowlistFix()
    assert list(f.dependencies(release("0.5.17"))) == ["DeepseekV4HipRadixBackend"]
    assert f.dependencies(release("0.5.18")) == {}
    assert "repeat-interleave-output-size" in f.depends_on


def test_apply_to_a_release_without_a_hip_gate_patches_nothing(release):
    f = DraftExtendAllowlistFix()
    st = f.apply(release("0.5.9"), "hip")  # v1 worker (eagle_worker.py): no gate to extend
    assert st.state == "not-needed" and "v1 EAGLE worker" in st.reason
    assert not f.is_applied() and f.patches() == []


def _resolves(root, module: str, qualname: str) -> bool:
    path = root.joinpath(*module.split(".")).with_suffix(".py")
    node: ast.AST = ast.parse(path.read_text())
    for part in qualname.split("."):
        node = next((c for c in ast.iter_child_nodes(node)
                     if isinstance(c, (ast.ClassDef, ast.FunctionDef)) and c.name == part), None)
        if node is None:
            return False
    return isinstance(node, ast.FunctionDef)


@pytest.mark.parametrize("version", HOOK_RELEASES)
def test_runtime_hook_targets_resolve_in_every_release(release, version):
    t = release(version)
    targets = rt.hook_targets(t.version)
    assert len(targets) == 2
    for module, qualname in targets:
        assert _resolves(t.root, module, qualname), (version, module, qualname)
    # the same patch carries the target-verify / draft-decode counter's hooks
    phases = graph_phase_runtime.hook_targets()
    for module, qualname in phases:
        assert _resolves(t.root, module, qualname), (version, module, qualname)
    p = rt.runtime_patch(t)
    assert [(e.module, e.qualname) for e in p.entries] == targets + phases


def test_runtime_wrappers_count_by_mode():
    """The wrappers on plain functions: a pass whose graph check said yes is `graph`."""
    events = []
    telemetry.add_sink(events.append)
    rt.COUNTERS.reset()
    try:
        class FB:  # a forward batch with a batch size, as SGLang's has
            batch_size = 8

        can_run = rt._wrap_can_run(lambda self, fb: self["ok"])

        def body(self, batch, result):
            if self["runner"]:
                can_run(self, FB())

        step = rt._wrap_pass(body)
        step({"runner": True, "ok": True}, None, None)
        step({"runner": True, "ok": False}, None, None)
        step({"runner": False, "ok": True}, None, None)
        telemetry.flush()  # passes are folded in-process; the agent's poll thread flushes
    finally:
        telemetry.remove_sink(events.append)
    modes = [(e["mode"], e["batch"], e["reason"], e["passes"]) for e in events
             if e["kind"] == "draft_extend"]
    # the dict stand-in has no runner attribute: the no-yes passes read as no-runner
    assert modes == [("graph", 8, None, 1), ("eager", 8, "no-runner", 1),
                     ("eager", None, "no-runner", 1)]
    snap = rt.COUNTERS.snapshot()
    assert snap["graph"]["count"] == 1 and snap["eager"]["count"] == 2
    assert all(e["seconds"] >= 0 for e in events)


def test_fix_list_cli_bars(release):
    from diag.cli import main as cli

    out = {}
    for v in ("0.5.9", "0.5.17", "0.5.23"):
        release(v)
        r = CliRunner().invoke(cli, ["fix", "list", "--sglang", v, "--platform", "hip", "--json"])
        assert r.exit_code == 0, r.output
        doc = json.loads(r.stdout)
        out[v] = next(f for f in doc["fixes"] if f["id"] == "draft-extend-allowlist")
    assert out["0.5.17"]["status"] == APPLICABLE
    assert out["0.5.23"]["status"] == UPSTREAM
    assert out["0.5.9"]["status"] != APPLICABLE
    assert "repeat-interleave-output-size" in out["0.5.17"]["depends_on"]


def test_registry_points_at_this_fix_and_its_bench():
    f = fixes.get("draft-extend-allowlist")
    assert isinstance(f, DraftExtendAllowlistFix)
    assert f.bench == "diag.fixes.bench_draft_extend:run"


def test_output_size_fix_counts_as_applied_under_the_sync_counter(tmp_path, monkeypatch):
    """The agent applies fixes before counters: the metadata-syncs counter then wraps the
    rewritten builder. The allow-list fix must still see the output_size fix underneath."""
    import functools
    import importlib.util
    import sys

    from diag.patcher import MARK

    path = tmp_path / "standin_capture_backend.py"
    path.write_text(
        "import torch\n\n\nclass StandInBackend:\n"
        "    def init_forward_metadata_capture_cuda_graph(self, bs):\n"
        "        self._meta(torch.ones(bs, dtype=torch.long))\n\n"
        "    def _meta(self, lens):\n"
        "        return torch.repeat_interleave(torch.arange(len(lens)), lens)\n")
    spec = importlib.util.spec_from_file_location("standin_capture_backend", path)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "standin_capture_backend", mod)
    spec.loader.exec_module(mod)
    cls = mod.StandInBackend
    fix = DraftExtendAllowlistFix()
    assert [s.function for s in fix._unfixed_syncs(cls)] == ["_meta"]

    original = cls.__dict__["_meta"]

    def rewritten(self, lens):  # what the output_size fix installs (marked by its Patch)
        return original(self, lens)

    rewritten.__wrapped__ = original
    setattr(rewritten, MARK, "repeat-interleave-output-size")

    @functools.wraps(rewritten)
    def counter(self, lens):  # the sync counter stacked over it (marked by its own Patch)
        return rewritten(self, lens)

    setattr(counter, MARK, "sync-counter")
    monkeypatch.setattr(cls, "_meta", counter)
    assert fix._unfixed_syncs(cls) == []
    plain = functools.wraps(original)(lambda self, lens: original(self, lens))
    setattr(plain, MARK, "sync-counter")  # the counter alone: the sync is still there
    monkeypatch.setattr(cls, "_meta", plain)
    assert [s.function for s in fix._unfixed_syncs(cls)] == ["_meta"]


def test_forced_eager_makes_the_graph_check_answer_no_and_lapses(monkeypatch):
    """`mode:draft-extend-eager` (diag bench eager-cost): while held, the runner's graph check
    answers no without being asked, the pass is counted eager with the reason `forced-eager`;
    released, or past its hold, the runner answers again."""
    events = []
    telemetry.add_sink(events.append)
    asked = []

    class Runner:
        max_bs = 16

        def check(self, fb):
            asked.append(fb)
            return True

    class Worker:
        cuda_graph_runner_for_draft_extend = Runner()

    class FB:
        batch_size = 2

    can_run = rt._wrap_can_run(Runner.check)
    step = rt._wrap_pass(lambda self, batch, result: can_run(self.cuda_graph_runner_for_draft_extend,
                                                             FB()))
    now = [100.0]
    monkeypatch.setattr(rt, "monotonic", lambda: now[0])
    try:
        rt.FORCE.hold(True, 300.0)
        step(Worker(), None, None)  # forced: the runner is not asked
        assert asked == []
        now[0] += 301.0  # past the hold: it lapses, the runner answers
        step(Worker(), None, None)
        assert len(asked) == 1 and not rt.FORCE.eager
        rt.FORCE.hold(True, 300.0)
        rt.FORCE.hold(False)  # released
        step(Worker(), None, None)
        telemetry.flush()
    finally:
        rt.FORCE.hold(False)
        telemetry.remove_sink(events.append)
    modes = [(e["mode"], e["reason"], e["passes"]) for e in events if e["kind"] == "draft_extend"]
    assert modes == [("eager", rt.FORCED, 1), ("graph", None, 2)]
