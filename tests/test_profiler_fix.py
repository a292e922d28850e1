"""profiler-controlled-teardown: applicability per real release, and apply/revert on the REAL
release modules (`profiler_manager.py` / `scheduler_profiler_mixin.py` / `profile_utils.py`),
imported from the release's files with the stand-in SGLang namespace of tests/profiler_standin.py
(the rest of SGLang cannot be imported in the dev venv)."""

from __future__ import annotations

import gc
import shutil
import weakref

import pytest
from click.testing import CliRunner
from profiler_standin import (
    classic_owner,
    ensure_process_group,
    import_real,
    real_profiler_modules,
    v2_manager,
)

from diag import fixes, telemetry
from diag.context import Context
from diag.findings import Status
from diag.fixes.base import APPLICABLE, REFUSED, UPSTREAM
from diag.fixes.profiler_controlled_teardown import (
    FIX_ID,
    ProfilerControlledTeardownFix,
    controlled_profile,
    teardown,
)
from diag.patcher import marked
from diag.probes.profiler_teardown.runtime import record_patch, runtime_patch
from diag.target import Target

torch = pytest.importorskip("torch")
MANAGER = "srt/managers/scheduler_components/profiler_manager.py"
V2 = "srt/utils/profile_utils.py"


@pytest.fixture(scope="module", autouse=True)
def one_rank_group():
    import torch.distributed as dist

    was = dist.is_initialized()
    ensure_process_group()
    yield
    if not was:
        dist.destroy_process_group()


@pytest.fixture
def events():
    got: list[dict] = []
    telemetry.add_sink(got.append)
    yield got
    telemetry.remove_sink(got.append)


@pytest.fixture
def fix(release):
    f = ProfilerControlledTeardownFix()
    yield f
    if f.is_applied():  # reverting a fix that is not applied raises NotApplied
        f.revert()


# ---------------------------------------------------------------------------- applicability


@pytest.mark.release
@pytest.mark.parametrize("version,status,names", [
    ("0.5.12.post1", APPLICABLE, ["SchedulerProfilerMixin.stop_profile", "ProfileManager._do_stop"]),
    ("0.5.17", APPLICABLE, ["SchedulerProfilerManager._stop_profile", "ProfileManager._do_stop"]),
    ("0.5.18", APPLICABLE, ["ProfileManager._do_stop"]),
    ("0.5.23", APPLICABLE, ["ProfileManager._do_stop"]),
])
def test_applies_to_real_releases(release, version, status, names):
    a = fixes.get(FIX_ID).applies_to(release(version), "hip")
    assert a.status == status
    adds = a.reason.split(";")[0]
    assert all(n in adds for n in names)
    if version in ("0.5.18", "0.5.23"):
        assert "_stop_profile" not in adds and "already upstream" in a.reason


@pytest.mark.release
def test_upstream_and_refused_on_edited_copies(release, tmp_path):
    src = release("0.5.23")
    for rel in (MANAGER, V2):
        (tmp_path / "sglang" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src.file(rel), tmp_path / "sglang" / rel)
    t = Target(tmp_path, "99.0", "path")
    p = t.file(V2)
    head, tail = p.read_text().split("def _do_stop(", 1)
    tail = tail.replace("        self.profiler = None\n",
                        "        self.profiler = None\n        gc.collect()\n", 1)
    p.write_text("import gc\n" + head + "def _do_stop(" + tail)
    assert fixes.get(FIX_ID).applies_to(t, "hip").status == UPSTREAM
    m = t.file(MANAGER)
    m.write_text(m.read_text().replace("def _stop_profile(", "def _finish_profile("))
    a = fixes.get(FIX_ID).applies_to(t, "hip")
    assert a.status == REFUSED and "unrecognised shape" in a.reason


@pytest.mark.release
def test_fix_list_cli(release):
    from diag.cli import main

    release("0.5.17")
    for v in ("0.5.12.post1", "0.5.17"):
        r = CliRunner().invoke(main, ["fix", "list", "--sglang", v])
        assert r.exit_code == 0, r.output
        line = next(ln for ln in r.output.splitlines() if ln.startswith(FIX_ID))
        assert line.split()[1] == "applicable"


# ---------------------------------------------------------------------------- apply / revert


def _classic_stop(module, tmp_path):
    """Run the release's real start and stop; (the profiler's weakref, stop result)."""
    owner, stop = classic_owner(module, str(tmp_path))
    (torch.ones(32, 32) @ torch.ones(32, 32)).sum()
    ref = weakref.ref(owner.torch_profiler)
    gc.disable()  # only an explicit collection may free it during the check
    try:
        res = getattr(owner, stop)()
        alive = ref() is not None
    finally:
        gc.enable()
    return alive, res


@pytest.mark.release
@pytest.mark.parametrize("version", ["0.5.12.post1", "0.5.17"])
@pytest.mark.parametrize("mode", ["collect", "cycle"])
def test_apply_revert_on_real_classic_stop(release, fix, events, tmp_path, version, mode,
                                           monkeypatch):
    """Both teardown modes: `cycle` (the default: the profiler's own cycles broken, no
    collection) and `collect` (DIAG_PROFILER_TEARDOWN=collect: upstream's gc.collect() at the
    stop)."""
    if mode == "collect":
        monkeypatch.setenv("DIAG_PROFILER_TEARDOWN", "collect")
    else:
        monkeypatch.delenv("DIAG_PROFILER_TEARDOWN", raising=False)
    t = release(version)
    with real_profiler_modules(t) as names:
        mod = import_real(names["classic"])
        cls = mod.SchedulerProfilerManager if hasattr(mod, "SchedulerProfilerManager") \
            else mod.SchedulerProfilerMixin
        name = "_stop_profile" if "_stop_profile" in vars(cls) else "stop_profile"
        original = vars(cls)[name]
        alive, res = _classic_stop(mod, tmp_path / "a")
        assert alive and res.success  # as released: left to the cyclic GC
        gc.collect()

        fix.apply(t)
        assert fix.is_applied() and marked(vars(cls)[name], FIX_ID)
        fix.apply(t)  # idempotent
        (static,) = fix.verify(Context(target=t, platform="hip", execute=False))[:1]
        assert static.status == Status.OK and "patched in this process" in static.summary
        alive, res = _classic_stop(mod, tmp_path / "b")
        assert not alive and res.success  # freed at the stop
        assert list((tmp_path / "b").glob("*.trace.json.gz"))  # the real stop still exported
        ev = [e for e in events if e["kind"] == "profiler_stop"]
        assert len(ev) == 1 and ev[0]["controlled"] and ev[0]["freed"]
        if mode == "cycle":  # freed by breaking its cycles (torch's action_map), no collection
            assert ev[0]["teardown"] == "cycle-broken" and ev[0]["links_cut"] > 0
            assert ev[0]["collect_seconds"] is None and ev[0]["alive_after_cut"] == 0
        else:  # opt-in: dropped and collected at the stop, no link cut
            assert ev[0]["teardown"] == "gc-collect" and ev[0]["links_cut"] == 0
            assert ev[0]["collect_seconds"] is not None and ev[0]["collected"] > 0
        assert ev[0]["seconds"] >= ev[0]["teardown_s"] > 0
        assert ev[0]["path"] == "classic" and ev[0]["heap_blocks"] > 0

        fix.revert()
        assert not fix.is_applied() and vars(cls)[name] is original
        assert fix.verify(Context(target=t, platform="hip", execute=False))[0].status \
            == Status.FAIL
        alive, _ = _classic_stop(mod, tmp_path / "c")
        assert alive
        gc.collect()


@pytest.mark.release
def test_patch_on_import_and_v2_stop(release, fix, events, tmp_path, monkeypatch):
    """0.5.23: applied before the modules are imported; the V2 `_do_stop` gets patched on import,
    the (upstream) classic stop is left alone (in the default `cycle` mode). The stage switch's
    two targets (scheduler.py:4614 `Scheduler.run_batch`, the manager's predicate) wait too; the
    scheduler module is never imported here, so it stays pending."""
    monkeypatch.delenv("DIAG_PROFILER_TEARDOWN", raising=False)
    t = release("0.5.23")
    scheduler = "sglang.srt.managers.scheduler"
    with real_profiler_modules(t, v2=True) as names:
        fix.apply(t)
        assert fix.is_applied()
        assert fix._patch.pending == sorted([names["v2"], names["classic"], scheduler])
        pu = import_real(names["v2"])
        classic = import_real(names["classic"])
        assert marked(vars(pu.ProfileManager)["_do_stop"], FIX_ID)
        assert not marked(vars(classic.SchedulerProfilerManager)["_stop_profile"])
        assert marked(vars(classic.SchedulerProfilerManager)["_profile_batch_predicate"], FIX_ID)
        assert fix._patch.errors == [] and fix._patch.pending == [scheduler]
        pm = v2_manager(pu, str(tmp_path))
        ref = weakref.ref(pm.profiler.inners[0].torch_profiler)
        gc.disable()
        try:
            pm._do_stop()
            assert ref() is None and pm.profiler is None
        finally:
            gc.enable()
        (ev,) = [e for e in events if e["kind"] == "profiler_stop"]
        assert ev["path"] == "v2" and ev["freed"] and ev["controlled"]
        assert ev["teardown"] == "cycle-broken"
        fix.revert()
        assert not marked(vars(pu.ProfileManager)["_do_stop"])


@pytest.mark.release
@pytest.mark.parametrize("version,freed", [("0.5.17", False), ("0.5.18", True)])
def test_runtime_patch_records_stops_with_the_fix_off(release, events, tmp_path, version, freed,
                                                      monkeypatch):
    t = release(version)
    patch = runtime_patch(t)
    with real_profiler_modules(t) as names:
        mod = import_real(names["classic"])
        patch.apply()
        try:
            alive, _ = _classic_stop(mod, tmp_path)
        finally:
            patch.revert()
        gc.collect()
    (ev,) = [e for e in events if e["kind"] == "profiler_stop"]
    assert ev["controlled"] is False and ev["freed"] is freed and alive is (not freed)
    if freed:  # 0.5.18's own gc.collect() ran inside the stop and was counted
        assert ev["collected"] > 0


@pytest.mark.release
def test_recorder_and_fix_stacked_emit_once(release, fix, events, tmp_path, monkeypatch):
    """The agent's recorder applied first, the fix over it: one event, collected at the stop;
    the fix reverted while the recorder still wraps it: recording only again."""
    t = release("0.5.17")
    with real_profiler_modules(t) as names:
        mod = import_real(names["classic"])
        rec = runtime_patch(t)
        rec.apply()
        try:
            fix.apply(t)
            alive, _ = _classic_stop(mod, tmp_path / "a")
            assert not alive
            fix.revert()
            alive, _ = _classic_stop(mod, tmp_path / "b")
            assert alive
        finally:
            rec.revert()
        gc.collect()
    ev = [e for e in events if e["kind"] == "profiler_stop"]
    assert [(e["controlled"], e["freed"]) for e in ev] == [(True, True), (False, False)]


def test_record_patch_from_version_only():
    old = {e.qualname for e in record_patch(version="0.5.12.post1").entries}
    new = {e.qualname for e in record_patch(version="0.5.23").entries}
    assert old == {"SchedulerProfilerMixin.stop_profile", "ProfileManager._do_stop"}
    assert new == {"SchedulerProfilerManager._stop_profile", "ProfileManager._do_stop"}
    assert record_patch() is None and runtime_patch(None) is None


# ---------------------------------------------------------------------------- user API


def test_controlled_profile_frees_at_del(events, tmp_path):
    with controlled_profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        (torch.ones(16, 16) @ torch.ones(16, 16)).sum()
    prof.export_chrome_trace(str(tmp_path / "t.json"))  # results still usable
    assert (tmp_path / "t.json").stat().st_size > 0
    gc.disable()
    try:
        ref = weakref.ref(prof)
        del prof
        assert ref() is None  # no cycle left: freed by reference counting
    finally:
        gc.enable()
    assert any(e["kind"] == "profiler_stop" and e["path"] == "user" for e in events)


def test_teardown_helper_reports():
    from diag.probes.profiler_teardown.cycle import find_cycle

    p = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    p.start()
    p.stop()
    assert find_cycle(p)  # torch 2.13: action_map -> list -> bound method -> the profile
    out = teardown(p)
    assert out["cycle_edges_broken"] > 0 and out["seconds"] > 0 and find_cycle(p) == []
    assert any("bound method" in link for link in out["links"])


class _Owner:
    """A made-up object graph with cycles through a list, a dict->tuple and a closure."""

    def m(self) -> None:
        pass


def test_break_cycles_cuts_exactly_the_links_back_and_frees():
    from diag.fixes.profiler_controlled_teardown import break_cycles

    o = _Owner()
    keep = ["unrelated"]
    o.cbs = [o.m, keep]
    o.table = {"k": (o.m, 1), "other": keep}
    gc.disable()
    try:
        links = break_cycles(o)
        assert sorted(links) == ["dict -> tuple", "list -> bound method _Owner.m"]
        assert o.cbs == [keep] and o.table == {"other": keep}  # only the links back went
        ref = weakref.ref(o)
        del o
        assert ref() is None  # freed by reference counting
    finally:
        gc.enable()


def test_wrap_stop_falls_back_to_gc_collect_when_a_cycle_cannot_be_cut(events):
    """A cycle through a closure (functions are not walked): cutting leaves it alive, so the
    wrapper collects, and says so."""
    from diag.fixes.profiler_controlled_teardown import wrap_stop

    class Stopper:
        def __init__(self) -> None:
            self.torch_profiler = torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU])

        def stop(self) -> None:
            self.torch_profiler.stop()
            self.torch_profiler = None

    s = Stopper()
    p = s.torch_profiler
    p.start()
    p.hold = (lambda q: lambda: q)(p)  # a cycle through a closure's cell
    ref = weakref.ref(p)
    del p
    gc.disable()
    try:
        wrap_stop(Stopper.stop, "torch_profiler", "test", controlled=lambda: True)(s)
        assert ref() is None
    finally:
        gc.enable()
    (ev,) = [e for e in events if e["kind"] == "profiler_stop"]
    assert ev["teardown"] == "gc-collect" and ev["alive_after_cut"] == 1
    assert ev["collect_seconds"] > 0 and ev["freed"]


def test_apply_without_sglang_is_a_clear_error(monkeypatch):
    from diag.errors import FixError

    monkeypatch.setattr("diag.target.find_importable", lambda: None)  # the base looks here
    with pytest.raises(FixError, match="sglang is not importable in this process"):
        ProfilerControlledTeardownFix().apply()
