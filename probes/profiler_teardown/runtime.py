"""The profiler-teardown probe's runtime counter: every torch.profiler stop inside an engine, timed.

`runtime_patch(target)` wraps each stop the target's source has (`locate_stops`, by AST) and
emits `profiler_stop` telemetry per stop: its time, the objects collected by any GC run during
it, whether the stopped profiler was freed by the stop, which stop path it was. A fix that frees
the profiler at the stop composes with it through `wrap_stop(..., teardown=...)`: stacked
wrappers of one stop (in either order: the patcher keeps both) time, tear down and emit once, in
the outermost one, so the counter knows no fix and the fix needs no counter to be on.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from diag import telemetry
from diag.patcher import Patch
from diag.probes.profiler_teardown.cycle import heap_watch
from diag.probes.profiler_teardown.stops import locate_stops
from diag.target import Target

RECORD_ID = "profiler-stop-record"

# For `record_patch` given only a version (no tree to read): the stops per release, checked
# against the 0.5.9 - 0.5.23 wheels (module, qualname, attribute, path). `stop_profile` in
# srt/managers/scheduler_profiler_mixin.py up to 0.5.12.post1 (there :251, stop at :273);
# `_stop_profile` in srt/managers/scheduler_components/profiler_manager.py from 0.5.13 (0.5.23
# :318, stop at :341); V2 `ProfileManager._do_stop` in srt/utils/profile_utils.py (0.5.23 :162).
_MIXIN = ("sglang.srt.managers.scheduler_profiler_mixin", "SchedulerProfilerMixin.stop_profile",
          "torch_profiler", "classic")
_MANAGER = ("sglang.srt.managers.scheduler_components.profiler_manager",
            "SchedulerProfilerManager._stop_profile", "torch_profiler", "classic")
_V2 = ("sglang.srt.utils.profile_utils", "ProfileManager._do_stop", "profiler", "v2")

# frees the dropped objects (weak references given) now; returns extra event fields
Teardown = Callable[[list[weakref.ref]], dict[str, Any]]


class GcCount:
    """Objects collected by every GC run (automatic or explicit, any thread) while inside."""

    def __init__(self) -> None:
        self.collected = 0

    def _cb(self, phase: str, info: dict) -> None:
        if phase == "stop":
            self.collected += int(info.get("collected", 0))

    def __enter__(self) -> GcCount:
        gc.callbacks.append(self._cb)
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._cb)


def torch_profiles(obj: Any, depth: int = 3) -> list[Any]:
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
            out += torch_profiles(v, depth - 1)
    return out


def weak_refs(objs: list[Any]) -> list[weakref.ref]:
    out = []
    for o in objs:
        with contextlib.suppress(TypeError):
            out.append(weakref.ref(o))
    return out


_state = threading.local()  # the outermost stop wrapper on this thread tears down and emits


def wrap_stop(original: Callable, attr: str, path: str, controlled: Callable[[], bool],
              teardown: Teardown | None = None) -> Callable:
    """Wrap a profiler stop method: time it; when `controlled()` and the stop dropped
    `self.<attr>`, run `teardown(refs)` right there (a fix's: free the dropped profiler, given
    weak references to it and its holder); emit `profiler_stop` with what the teardown returned.

    Stacked wrappers (a fix's over the recorder, or the reverse) tear down and emit once.
    """

    @functools.wraps(original)
    def stop(self, *args, **kwargs):
        outer = getattr(_state, "frame", None)
        if outer is not None:  # an enclosing wrapper does the work
            if controlled():
                outer["controlled"] = True
                outer["teardown"] = outer["teardown"] or teardown
            return original(self, *args, **kwargs)
        on = controlled()
        frame = {"controlled": on, "teardown": teardown if on else None}
        _state.frame = frame
        held = getattr(self, attr, None)
        had = held is not None
        profs = torch_profiles(held) if had else []
        refs = weak_refs(profs)
        # the holder too (SGLang V2's wrapper), when it is not the profile itself
        holder = weak_refs([held]) if refs and not any(p is held for p in profs) else []
        profs = []
        held = None  # no strong reference of ours may outlive the stop (or block its own collect)
        t0 = time.perf_counter()
        done: dict[str, Any] = {"teardown": None, "teardown_s": None, "collect_seconds": None}
        try:
            with GcCount() as count:
                try:
                    return original(self, *args, **kwargs)
                finally:
                    _state.frame = None
                    dropped = had and getattr(self, attr, None) is None
                    if frame["controlled"] and dropped and frame["teardown"] is not None:
                        done = frame["teardown"](holder + refs)
        finally:
            if refs:
                extra = {k: v for k, v in done.items() if k not in ("collected", "links")}
                if telemetry.active():  # the heap read costs ~0.1 ms per million blocks
                    extra.update(heap_watch().snapshot())
                telemetry.emit("profiler_stop", seconds=time.perf_counter() - t0,
                               collected=count.collected, controlled=frame["controlled"],
                               freed=all(r() is None for r in refs), path=path,
                               function=getattr(original, "__qualname__", str(original)),
                               **extra)

    return stop


def make_wrapper(original: Callable, attr: str, path: str, controlled: Callable[[], bool],
                 teardown: Teardown | None = None) -> Callable:
    """`wrap_stop` with the original first (for `functools.partial` in `Patch.add`)."""
    return wrap_stop(original, attr, path, controlled, teardown)


def plan(target: Target | None, version: str | None) -> list[tuple[str, str, str, str, bool]]:
    """(module, qualname, attr, path, controlled upstream) of each stop in the target (from its
    source), else in the release `version` (from the table above)."""
    if target is not None:
        return [(s.module, s.qualname, s.attr, s.path, s.controlled) for s in locate_stops(target)]
    from packaging.version import InvalidVersion, Version

    try:
        v = Version(version or "")
    except InvalidVersion:
        return []
    classic = _MIXIN if v < Version("0.5.13") else _MANAGER
    return [(*classic, v >= Version("0.5.18")), (*_V2, False)]


def record_patch(target: Target | None = None, version: str | None = None) -> Patch | None:
    """A Patch that only records every profiler stop of the target (else of the release
    `version`); None when there is no stop to record."""
    sites = plan(target, None) if target is not None else plan(None, version)
    if not sites:
        return None
    heap_watch()  # times the automatic full collections from now on (for the stop events)
    patch = Patch(RECORD_ID)
    for module, qualname, attr, path, _ in sites:
        patch.add(module, qualname, functools.partial(make_wrapper, attr=attr, path=path,
                                                      controlled=lambda: False))
    return patch


def runtime_patch(target: Target | None) -> Patch | None:
    """The runtime counter (the agent's, with the fix on or off): the stops of the running
    release `target`; None without one."""
    return record_patch(target) if target is not None else None
