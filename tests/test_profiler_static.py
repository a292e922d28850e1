"""profiler-teardown, static part, against the real release sources (and edited copies of them)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from diag.context import Context
from diag.findings import Status
from diag.probes.profiler_teardown.probe import ProfilerTeardownProbe
from diag.probes.profiler_teardown.stops import locate_stops
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


def _collect_after_v2_drop(t: Target) -> None:
    """Edit the copied V2 file: gc.collect() right after `_do_stop` drops the profiler."""
    p = t.file(V2)
    head, tail = p.read_text().split("def _do_stop(", 1)
    edited = tail.replace("        self.profiler = None\n",
                          "        self.profiler = None\n        gc.collect()\n", 1)
    assert edited != tail, "the V2 drop line moved: the edit found nothing to change"
    tail = edited
    p.write_text("import gc\n" + head + "def _do_stop(" + tail)


def test_all_paths_controlled_is_ok(release, tmp_path):
    """0.5.23 with gc.collect() added after the V2 drop (an edited copy of the real files)."""
    t = _copy_tree(release("0.5.23"), tmp_path, [MANAGER, V2])
    _collect_after_v2_drop(t)
    assert all(s.controlled for s in locate_stops(t))
    assert _static(t)[0].status == Status.OK


def test_unrecognised_shape_is_skipped(release, tmp_path):
    t = _copy_tree(release("0.5.17"), tmp_path, [MANAGER, V2])
    p = t.file(MANAGER)
    p.write_text(p.read_text().replace("self.torch_profiler.stop()", "self.torch_profiler.halt()"))
    static = _static(t)[0]
    assert static.status == Status.SKIP and "unrecognised shape" in static.summary


def _rows(finding) -> dict[str, object]:
    return {e.data["request"]: e for e in finding.evidence if e.kind == "row"
            and "request" in (e.data or {})}


def test_v2_requests_that_kill_the_server_are_named_before_profiling(release, monkeypatch):
    """0.5.23, SGLANG_PROFILE_V2 in the configuration's environment (SpecConfig.environ):
    - a plain /start_profile (io_struct.py:2387 `profile_by_stage: bool = False`) goes through
      profiler_manager.py `_profile` -> `_init_profile` -> the V2 branch's
      `self._profile_manager.configure(... profile_by_stage=...)` (profiler_manager.py:106), whose
      `assert profile_by_stage, ("only support profile_by_stage=true now")` is
      profile_utils.py:111; `assert start_step is None` is line 110;
    - /stop_profile -> `_stop_profile`'s V2 branch -> `manual_stop` raising NotImplementedError
      (profile_utils.py:141);
    - the scheduler logs "Scheduler hit an exception" (scheduler.py:6372) and signals its parent;
    - stage profiles stop through `_do_stop`, whose `self.profiler.stop()` is line 164 and which
      drops without gc.collect(); `with_stack=... else True` is line 339."""
    from diag.context import SpecConfig

    monkeypatch.delenv("SGLANG_PROFILE_V2", raising=False)
    t = release("0.5.23")
    ctx = Context(target=t, platform="hip", execute=False,
                  config=SpecConfig(environ={"SGLANG_PROFILE_V2": "1"}))
    static = ProfilerTeardownProbe().run(ctx)[0]
    assert static.status == Status.FAIL
    assert "in the configuration's environment" in static.summary
    assert "SGLang itself refuses plain /start_profile, /start_profile with start_step, " \
           "/stop_profile" in static.summary
    rows = _rows(static)
    plain = rows["plain /start_profile (profile_by_stage false, the default)"]
    assert plain.data["location"] == f"sglang/{V2}:111" == \
        f"sglang/{V2}:{_line_of(t, V2, 'assert profile_by_stage')}"
    assert plain.data["risk"] == "kills the server" and plain.data["v2_in_use"] is True
    assert f"{MANAGER}:106" in plain.detail and "srt/managers/scheduler.py:6372" in plain.detail
    assert "only support profile_by_stage=true now" in plain.detail
    assert rows["/start_profile with start_step"].data["location"] == f"sglang/{V2}:110"
    stop = rows["/stop_profile"]
    assert stop.data["location"] == f"sglang/{V2}:141" == \
        f"sglang/{V2}:{_line_of(t, V2, 'manually stop is only supported yet')}"
    stage = rows["stage profile (profile_by_stage=true)"]
    assert stage.data["risk"] == "crash risk"
    assert stage.data["location"] == f"sglang/{V2}:164" == \
        f"sglang/{V2}:{_line_of(t, V2, 'self.profiler.stop()')}"
    assert stage.data["prevented_by"] == "profiler-controlled-teardown"
    assert f"{V2}:339" in stage.detail  # stacks on by default
    # the configuration's environment is the one under audit, not diag's own
    monkeypatch.setenv("SGLANG_PROFILE_V2", "1")
    ctx = Context(target=t, platform="hip", execute=False, config=SpecConfig(environ={}))
    static = ProfilerTeardownProbe().run(ctx)[0]
    assert static.status == Status.WARN and "refuses" not in static.summary
    assert _rows(static)["/stop_profile"].data["v2_in_use"] is False  # rows shown regardless


def test_v2_requests_on_an_older_release(release, monkeypatch):
    # 0.5.17 profile_utils.py: `assert start_step is None` (92), then the assert on
    # profile_by_stage written over lines 93-95 (`assert (` / `profile_by_stage` / `), "only
    # support ..."`): the statement's line is 93
    monkeypatch.setenv("SGLANG_PROFILE_V2", "1")
    t = release("0.5.17")
    rows = _rows(_static(t)[0])
    assert rows["plain /start_profile (profile_by_stage false, the default)"].data["location"] \
        == f"sglang/{V2}:{_line_of(t, V2, 'assert (')}"
    assert rows["/start_profile with start_step"].data["location"] == \
        f"sglang/{V2}:{_line_of(t, V2, 'assert start_step is None')}"
    assert rows["/stop_profile"].data["location"] == \
        f"sglang/{V2}:{_line_of(t, V2, 'manually stop is only supported yet')}"


def test_stage_profile_row_without_risk_when_the_v2_stop_collects(release, tmp_path):
    t = _copy_tree(release("0.5.23"), tmp_path, [MANAGER, V2])
    _collect_after_v2_drop(t)
    stage = _rows(_static(t)[0])["stage profile (profile_by_stage=true)"]
    assert stage.data["risk"] == "none" and "prevented_by" not in stage.data
