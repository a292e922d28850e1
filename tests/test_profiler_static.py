"""profiler-teardown, static part, against the real release sources (and edited copies of them)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from diag.context import Context
from diag.findings import Status
from diag.probes.profiler_teardown import ProfilerTeardownProbe, locate_stops
from diag.target import Target

pytestmark = pytest.mark.release

MANAGER = "srt/managers/scheduler_components/profiler_manager.py"
MIXIN = "srt/managers/scheduler_profiler_mixin.py"
V2 = "srt/utils/profile_utils.py"


def _static(target: Target, platform: str = "hip"):
    return ProfilerTeardownProbe().run(Context(target=target, platform=platform, execute=False))


def _line_of(target: Target, rel: str, text: str) -> int:
    lines = target.source(rel).splitlines()
    return next(i for i, ln in enumerate(lines, 1) if text in ln)


@pytest.mark.parametrize("version,rel,func", [
    ("0.5.12.post1", MIXIN, "SchedulerProfilerMixin.stop_profile"),
    ("0.5.17", MANAGER, "SchedulerProfilerManager._stop_profile"),
])
def test_before_0518_fails_with_the_stop_located(release, version, rel, func):
    t = release(version)
    static, skipped = _static(t)
    assert static.status == Status.FAIL
    assert skipped.status == Status.SKIP  # runtime part: execution disabled
    loc = next(e for e in static.evidence if e.kind == "location" and e.function == func)
    assert loc.file == f"sglang/{rel}"
    name = func.split(".")[1]
    assert loc.line == _line_of(t, rel, f"def {name}(")
    assert "without gc.collect()" in loc.detail
    assert static.fixes == ["profiler-controlled-teardown"]
    # on CUDA the crash was not reported: a warning, same evidence
    assert _static(t, "cuda")[0].status == Status.WARN


def test_0518_classic_teardown_present(release):
    t = release("0.5.18")
    sites = {s.path: s for s in locate_stops(t)}
    c = sites["classic"]
    assert c.controlled and c.qualname == "SchedulerProfilerManager._stop_profile"
    assert c.collect_line == _line_of(t, MANAGER, "gc.collect()")
    assert c.drop_line == c.collect_line - 1
    assert not sites["v2"].controlled


def test_newest_reports_the_v2_path(release, monkeypatch):
    monkeypatch.delenv("SGLANG_PROFILE_V2", raising=False)
    t = release("0.5.23")
    static = _static(t)[0]
    # 0.5.23's default stop collects (profiler_manager.py `_stop_profile`); only the V2 path
    # (profile_utils.py `_do_stop`, used when SGLANG_PROFILE_V2 is on: profiler_manager.py:62)
    # does not: not a failure unless the configuration under audit turns V2 on
    assert static.status == Status.WARN
    assert "SGLANG_PROFILE_V2" in static.summary and "ProfileManager._do_stop" in static.summary
    assert "only a configuration with SGLANG_PROFILE_V2 set uses it" in static.summary
    v2 = next(e for e in static.evidence if e.function == "ProfileManager._do_stop")
    assert v2.file == f"sglang/{V2}"
    assert v2.line == _line_of(t, V2, "def _do_stop(")
    classic = next(e for e in static.evidence if e.function == "SchedulerProfilerManager._stop_profile")
    assert "controlled point" in classic.detail


def test_v2_in_use_fails_on_hip(release, monkeypatch):
    t = release("0.5.23")
    monkeypatch.setenv("SGLANG_PROFILE_V2", "1")
    static = _static(t)[0]
    assert static.status == Status.FAIL and "diag's environment" in static.summary
    assert _static(t, "cuda")[0].status == Status.WARN
    monkeypatch.setenv("SGLANG_PROFILE_V2", "0")  # EnvBool: "0" is off
    assert _static(t)[0].status == Status.WARN
    monkeypatch.delenv("SGLANG_PROFILE_V2")
    ctx = Context(target=t, platform="hip", execute=False)
    ctx.cache["server_info"] = {"server_args": {"SGLANG_PROFILE_V2": True}}
    static = ProfilerTeardownProbe().run(ctx)[0]
    assert static.status == Status.FAIL and "server's arguments" in static.summary


def _copy_tree(t: Target, dest: Path, rels: list[str]) -> Target:
    for rel in rels:
        (dest / "sglang" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(t.file(rel), dest / "sglang" / rel)
    return Target(dest, "99.0", "path")


def test_all_paths_controlled_is_ok(release, tmp_path):
    """0.5.23 with gc.collect() added after the V2 drop (an edited copy of the real files)."""
    t = _copy_tree(release("0.5.23"), tmp_path, [MANAGER, V2])
    p = t.file(V2)
    head, tail = p.read_text().split("def _do_stop(", 1)
    tail = tail.replace("        self.profiler = None\n",
                        "        self.profiler = None\n        gc.collect()\n", 1)
    p.write_text("import gc\n" + head + "def _do_stop(" + tail)
    assert all(s.controlled for s in locate_stops(t))
    assert _static(t)[0].status == Status.OK


def test_unrecognised_shape_is_skipped(release, tmp_path):
    t = _copy_tree(release("0.5.17"), tmp_path, [MANAGER, V2])
    p = t.file(MANAGER)
    p.write_text(p.read_text().replace("self.torch_profiler.stop()", "self.torch_profiler.halt()"))
    static = _static(t)[0]
    assert static.status == Status.SKIP and "unrecognised shape" in static.summary
