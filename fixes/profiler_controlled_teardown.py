"""Fix `profiler-controlled-teardown`: free a stopped torch profiler at the stop, not at a random GC.

A stopped `torch.profiler.profile` is in a reference cycle (bound methods of itself in
`action_map`), so dropping the last reference does not free it: the cyclic GC does, later, at an
arbitrary point, where SGLang servers crashed (double free). SGLang 0.5.18 fixed the default stop
(`_stop_profile` drops the profiler and calls `gc.collect()`); the V2 stop
(`utils/profile_utils.py::ProfileManager._do_stop`, `SGLANG_PROFILE_V2`) still only drops it.

The patch wraps each stop that lacks it (found by AST in the target, `probes.profiler_teardown`):
after the original stop has dropped its profiler reference, the wrapper drops its own and runs
`gc.collect()` right there, timed, and emits `profiler_stop` telemetry. `runtime_patch` wraps the
same stops only to record them (the agent's counter when the fix is off). `teardown`,
`controlled_teardown` and `controlled_profile` do the same for users' own profiling.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from diag import telemetry
from diag.context import SpecConfig
from diag.fixes.base import APPLICABLE, NO_SGLANG, REFUSED, UPSTREAM, Applicability, Fix
from diag.patcher import Patch
from diag.probes.profiler_teardown import StopSite, locate_stops
from diag.target import Target, find_importable

FIX_ID = "profiler-controlled-teardown"
RECORD_ID = "profiler-stop-record"

# For `runtime_patch` given only a version (no tree to read): the stops per release (SGLANG.md,
# checked against the 0.5.9 - 0.5.23 wheels). (module, qualname, attribute, path)
_MIXIN = ("sglang.srt.managers.scheduler_profiler_mixin", "SchedulerProfilerMixin.stop_profile",
          "torch_profiler", "classic")
_MANAGER = ("sglang.srt.managers.scheduler_components.profiler_manager",
            "SchedulerProfilerManager._stop_profile", "torch_profiler", "classic")
_V2 = ("sglang.srt.utils.profile_utils", "ProfileManager._do_stop", "profiler", "v2")


# ------------------------------------------------------------------------------ helpers


class _GcCount:
    """Objects collected by every GC run (automatic or explicit, any thread) while inside."""

    def __init__(self) -> None:
        self.collected = 0

    def _cb(self, phase: str, info: dict) -> None:
        if phase == "stop":
            self.collected += int(info.get("collected", 0))

    def __enter__(self) -> _GcCount:
        gc.callbacks.append(self._cb)
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._cb)


def _torch_profiles(obj: Any, depth: int = 3) -> list[Any]:
    """The torch profiles held by `obj` (itself, or SGLang V2's `_ProfilerTorch` inside a list)."""
    if obj is None or depth < 0:
        return []
    if isinstance(getattr(obj, "action_map", None), dict):
        return [obj]
    out: list[Any] = []
    items = obj if isinstance(obj, (list, tuple)) else \
        getattr(obj, "__dict__", {}).values() if hasattr(obj, "__dict__") else []
    for v in items:
        if v is not None and not isinstance(v, (str, bytes, int, float, bool, dict)):
            out += _torch_profiles(v, depth - 1)
    return out


def _weak(objs: list[Any]) -> list[weakref.ref]:
    out = []
    for o in objs:
        with contextlib.suppress(TypeError):
            out.append(weakref.ref(o))
    return out


_state = threading.local()  # the outermost stop wrapper on this thread collects and emits


def wrap_stop(original: Callable, attr: str, path: str,
              controlled: Callable[[], bool]) -> Callable:
    """Wrap a profiler stop method: time it; when `controlled()` and the stop dropped
    `self.<attr>`, drop our reference too and `gc.collect()` here; emit `profiler_stop`.

    Stacked wrappers (the fix over the recorder, or the reverse) collect and emit once.
    """

    @functools.wraps(original)
    def stop(self, *args, **kwargs):
        outer = getattr(_state, "frame", None)
        if outer is not None:  # an enclosing wrapper does the work
            outer["controlled"] = outer["controlled"] or controlled()
            return original(self, *args, **kwargs)
        frame = {"controlled": controlled()}
        _state.frame = frame
        held = getattr(self, attr, None)
        had, refs = held is not None, _weak(_torch_profiles(held))
        held = None  # no strong reference of ours may outlive the stop (or block its own collect)
        t0 = time.perf_counter()
        collect_s = None
        try:
            with _GcCount() as count:
                try:
                    return original(self, *args, **kwargs)
                finally:
                    _state.frame = None
                    dropped = had and getattr(self, attr, None) is None
                    if frame["controlled"] and dropped:
                        c0 = time.perf_counter()
                        gc.collect()
                        collect_s = time.perf_counter() - c0
        finally:
            if refs:
                telemetry.emit("profiler_stop", seconds=time.perf_counter() - t0,
                               collected=count.collected, collect_seconds=collect_s,
                               controlled=frame["controlled"],
                               freed=all(r() is None for r in refs), path=path,
                               function=getattr(original, "__qualname__", str(original)))

    return stop


def _plan(target: Target | None, version: str | None) -> list[tuple[str, str, str, str, bool]]:
    """(module, qualname, attr, path, controlled upstream) of each stop in the target."""
    if target is not None:
        return [(s.module, s.qualname, s.attr, s.path, s.controlled) for s in locate_stops(target)]
    from packaging.version import InvalidVersion, Version

    try:
        v = Version(version or "")
    except InvalidVersion:
        return []
    classic = _MIXIN if v < Version("0.5.13") else _MANAGER
    return [(*classic, v >= Version("0.5.18")), (*_V2, False)]


def runtime_patch(target_version: str | None = None) -> Patch | None:
    """A Patch that only records every profiler stop (`profiler_stop` telemetry: time, objects
    collected during it, whether the profiler was freed by the stop), for the in-engine agent,
    with the fix on or off. Sites from the importable SGLang's source, else from the version."""
    target = find_importable()
    plan = _plan(target, None) if target is not None else _plan(None, target_version)
    if not plan:
        return None
    patch = Patch(RECORD_ID)
    for module, qualname, attr, path, _ in plan:
        patch.add(module, qualname, functools.partial(_make, attr=attr, path=path,
                                                      controlled=lambda: False))
    return patch


def _make(original: Callable, attr: str, path: str, controlled: Callable[[], bool]) -> Callable:
    return wrap_stop(original, attr, path, controlled)


# ------------------------------------------------------------------------------ user API


def teardown(profiler: Any) -> dict[str, Any]:
    """Free a *stopped* torch profiler now: break its self-reference cycle (`action_map` holds
    bound methods of itself), so it goes the moment its last reference goes, and `gc.collect()`
    here. Its results (`export_chrome_trace`, `key_averages`) stay usable; do not restart it."""
    t0 = time.perf_counter()
    broken = 0
    for p in _torch_profiles(profiler):
        am = p.action_map
        broken += len(am)
        am.clear()
    collected = gc.collect()
    secs = time.perf_counter() - t0
    telemetry.emit("profiler_stop", seconds=secs, collected=collected, controlled=True,
                   path="user", function="teardown")
    return {"seconds": secs, "collected": collected, "cycle_edges_broken": broken}


@contextlib.contextmanager
def controlled_teardown(profiler: Any) -> Iterator[Any]:
    """Put around your own profiling: `with controlled_teardown(prof): prof.start() ... prof.stop()`.
    On leaving (also on error) the stopped profiler is torn down at that point (`teardown`)."""
    try:
        yield profiler
    finally:
        teardown(profiler)


@contextlib.contextmanager
def controlled_profile(*args: Any, **kwargs: Any) -> Iterator[Any]:
    """`torch.profiler.profile(*args, **kwargs)` that is stopped and torn down on leaving."""
    import torch

    prof = torch.profiler.profile(*args, **kwargs)
    with controlled_teardown(prof), prof:
        yield prof


# ------------------------------------------------------------------------------ the fix


class ProfilerControlledTeardownFix(Fix):
    id = FIX_ID
    title = "Drop the stopped profiler and collect at the stop (controlled teardown)"
    addresses = ("profiler-teardown",)
    revertible = True
    bench = "diag.fixes.bench_profiler:run"

    def __init__(self) -> None:
        super().__init__()
        self.sites: list[StopSite] = []  # the stops the patch wraps

    def applies_to(self, target: Target | None, platform: str,
                   config: SpecConfig | None = None) -> Applicability:
        if target is None:
            return Applicability(REFUSED, NO_SGLANG)
        sites = locate_stops(target)
        if not any(s.path == "classic" for s in sites):
            return Applicability(REFUSED, f"unrecognised shape: no stop_profile/_stop_profile "
                                 f"calling self.torch_profiler.stop() in sglang {target.version}")
        missing = [s for s in sites if not s.controlled]
        if not missing:
            return Applicability(UPSTREAM, "every profiler stop already drops the profiler and "
                                 "calls gc.collect(): " + ", ".join(s.qualname for s in sites))
        have = [s for s in sites if s.controlled]
        reason = "adds drop-and-collect to " + ", ".join(
            f"{s.qualname} [{s.path}] ({s.file}:{s.line})" for s in missing)
        if have:
            reason += "; already upstream: " + ", ".join(f"{s.qualname} [{s.path}]" for s in have)
        return Applicability(APPLICABLE, reason, changes=tuple(s.qualname for s in missing))

    def _enabled(self) -> bool:
        return self._patch is not None and self._patch.wanted

    def build_patch(self, target: Target | None) -> Patch:
        self.sites = [s for s in locate_stops(target) if not s.controlled] if target else []
        patch = Patch(FIX_ID)
        for s in self.sites:
            patch.add(s.module, s.qualname, functools.partial(
                _make, attr=s.attr, path=s.path, controlled=self._enabled))
        return patch
