"""Fix `profiler-controlled-teardown`: free a stopped torch profiler at the stop, not at a random GC.

A stopped `torch.profiler.profile` is in a reference cycle (bound methods of itself in
`action_map`), so dropping the last reference does not free it: the cyclic GC does, later, at an
arbitrary point, where SGLang servers crashed (double free). SGLang 0.5.18 fixed the default stop
(`_stop_profile` drops the profiler and calls `gc.collect()`); the V2 stop
(`utils/profile_utils.py::ProfileManager._do_stop`, `SGLANG_PROFILE_V2`) still only drops it.

The patch wraps each stop that lacks it (found by AST in the target, `probes.profiler_teardown`):
after the original stop has dropped its profiler reference, the wrapper drops its own and runs
`gc.collect()` right there, timed; the probe's stop wrapper (`probes.profiler_runtime`, whose
counter records the same stops with the fix on or off) times the stop and emits `profiler_stop`
telemetry. `teardown`,
`controlled_teardown` and `controlled_profile` do the same for users' own profiling.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import time
from collections.abc import Callable, Iterator
from typing import Any

from diag import telemetry
from diag.errors import FixError
from diag.fixes.base import APPLICABLE, REFUSED, UPSTREAM, Applicability, Fix
from diag.patcher import Patch
from diag.probes import profiler_runtime
from diag.probes.profiler_runtime import torch_profiles as _torch_profiles
from diag.probes.profiler_teardown import StopSite, locate_stops
from diag.target import Target, find_importable

FIX_ID = "profiler-controlled-teardown"


def _collect() -> dict[str, Any]:
    """The teardown: the stop dropped its profiler; collect its cycle right here, timed."""
    c0 = time.perf_counter()
    gc.collect()
    return {"collect_seconds": time.perf_counter() - c0}


def wrap_stop(original: Callable, attr: str, path: str,
              controlled: Callable[[], bool]) -> Callable:
    """The fix's wrapper of a profiler stop: when `controlled()` and the stop dropped
    `self.<attr>`, drop our reference too and `gc.collect()` here (the probe's `wrap_stop`
    times it and emits `profiler_stop`, stacked with its counter or alone)."""
    return profiler_runtime.wrap_stop(original, attr, path, controlled, teardown=_collect)


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
        self.target: Target | None = None  # None: the importable SGLang
        self.patch: Patch | None = None
        self.sites: list[StopSite] = []

    def applies_to(self, target: Target, platform: str) -> Applicability:
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
        return Applicability(APPLICABLE, reason)

    def _enabled(self) -> bool:
        return self.patch is not None and self.patch.wanted

    def apply(self) -> None:
        if self._enabled():
            return
        target = self.target or find_importable()
        if target is None:
            raise FixError(f"{FIX_ID}: no SGLang importable in this process (and no target set)")
        a = self.applies_to(target, "")
        if a.status == REFUSED:
            raise FixError(f"{FIX_ID} refused: {a.reason}")
        self.sites = [s for s in locate_stops(target) if not s.controlled]
        if not self.sites:
            return  # upstream: nothing to patch
        patch = Patch(FIX_ID)
        for s in self.sites:
            patch.add(s.module, s.qualname, functools.partial(
                _make, attr=s.attr, path=s.path, controlled=self._enabled))
        self.patch = self.install(patch)

    def revert(self) -> None:
        if self.patch is not None:
            self.patch.revert()
        self.patch = None

    def is_applied(self) -> bool:
        return self._enabled()
