"""Fix `profiler-controlled-teardown`: free a stopped torch profiler at the stop, not at a random GC.

A stopped `torch.profiler.profile` is in a reference cycle (bound methods of itself in
`action_map`), so dropping the last reference does not free it: the cyclic GC does, later, at an
arbitrary point, where SGLang servers crashed (double free). SGLang 0.5.18 fixed the default stop
(`_stop_profile` drops the profiler and calls `gc.collect()`); the V2 stop
(`utils/profile_utils.py::ProfileManager._do_stop`, `SGLANG_PROFILE_V2`) still only drops it.

Upstream's `gc.collect()` costs in proportion to the whole live heap (a scheduler holds
millions of objects), in the middle of serving. This fix does not collect: the patch wraps each
stop that lacks a teardown (found by AST in the target, `probes.profiler_teardown`); after the
original stop has dropped its profiler reference, the wrapper breaks the stopped profiler's own
reference cycles (found at run time by walking its referents, `break_cycles`), so reference
counting frees it right there; a weak reference proves it, and only when one is still alive does
it fall back to `gc.collect()`. It emits `profiler_stop` telemetry (`teardown`: "cycle-broken" or
"gc-collect", `teardown_s`, and the heap estimate of `probes.profiler_teardown.HeapWatch`). `runtime_patch` wraps the
same stops only to record them (the agent's counter when the fix is off). `teardown`,
`controlled_teardown` and `controlled_profile` do the same for users' own profiling.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import threading
import time
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from diag import telemetry
from diag.errors import FixError
from diag.fixes.base import APPLICABLE, REFUSED, UPSTREAM, Applicability, Fix
from diag.patcher import Patch
from diag.probes.profiler_teardown import StopSite, heap_watch, locate_stops
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


# Types never walked while looking for a cycle: shared, long-lived, and no container of ours.
_OPAQUE = (type, types.ModuleType, types.FunctionType, types.CodeType, types.BuiltinFunctionType)


def _cut(parent: Any, child: Any) -> bool:
    """Remove the reference `parent` -> `child` when `parent` is a mutable container."""
    if isinstance(parent, list):
        n = len(parent)
        parent[:] = [x for x in parent if x is not child]
        return len(parent) != n
    if isinstance(parent, dict):
        keys = [k for k, v in parent.items() if v is child or k is child]
        for k in keys:
            del parent[k]
        return bool(keys)
    if isinstance(parent, set):
        if child in parent:
            parent.discard(child)
            return True
    return False


def break_cycles(obj: Any, limit: int = 100_000, rounds: int = 3) -> list[str]:
    """Break the reference cycles through `obj`, found at run time, and say which links went.

    A breadth-first walk of `gc.get_referents` from `obj` (GC-tracked objects only; classes,
    modules and functions are not walked) finds every object that refers back to `obj`; on each
    such path the link cut is the one nearest the back edge that lives in a mutable container
    (list, dict, set): for torch's profile, the bound method of itself in an `action_map` list.
    Only those links go. Repeated (`rounds`) for paths the first walk reached another way.
    """
    cut: list[str] = []
    for _ in range(rounds):
        parents: dict[int, Any] = {}
        seen = {id(obj)}
        queue, hits = [obj], []
        while queue and len(seen) < limit:
            nxt = []
            for node in queue:
                for ref in gc.get_referents(node):
                    if ref is obj:
                        hits.append(node)
                    elif id(ref) not in seen and gc.is_tracked(ref) \
                            and not isinstance(ref, _OPAQUE):
                        seen.add(id(ref))
                        parents[id(ref)] = node
                        nxt.append(ref)
            queue = nxt
        done = len(cut)
        for hit in hits:
            child, parent = obj, hit
            while parent is not obj:
                if _cut(parent, child):
                    cut.append(f"{type(parent).__name__} -> {_link_label(child)}")
                    break
                child, parent = parent, parents.get(id(parent), obj)
        queue = hits = []  # drop our references before the caller checks the weak reference
        parents.clear()
        if len(cut) == done:
            break
    return cut


def _link_label(child: Any) -> str:
    if isinstance(child, types.MethodType):
        return f"bound method {child.__func__.__qualname__}"
    return type(child).__name__


def free_now(refs: list[weakref.ref]) -> dict[str, Any]:
    """Free the (dropped) objects behind `refs` at this point: break their cycles; if any is
    still alive after that, fall back to `gc.collect()`. Says which happened and how long."""
    t0 = time.perf_counter()
    links: list[str] = []
    for _ in range(3):  # a second walk only for paths the first one reached another way
        before = len(links)
        for r in refs:
            o = r()
            if o is not None:
                links += break_cycles(o, rounds=1)
            o = None
        alive = sum(r() is not None for r in refs)
        if not alive or len(links) == before:
            break
    how, collected, collect_s = "cycle-broken", 0, None
    if alive:
        how = "gc-collect"
        c0 = time.perf_counter()
        collected = gc.collect()
        collect_s = time.perf_counter() - c0
    return {"teardown": how, "teardown_s": time.perf_counter() - t0, "links_cut": len(links),
            "links": sorted(set(links)), "alive_after_cut": alive, "collected": collected,
            "collect_seconds": collect_s}


_state = threading.local()  # the outermost stop wrapper on this thread collects and emits


def wrap_stop(original: Callable, attr: str, path: str,
              controlled: Callable[[], bool]) -> Callable:
    """Wrap a profiler stop method: time it; when `controlled()` and the stop dropped
    `self.<attr>`, free the stopped profiler right here (`free_now`: its cycles broken, a
    `gc.collect()` only if that did not free it); emit `profiler_stop`.

    Stacked wrappers (the fix over the recorder, or the reverse) tear down and emit once.
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
        had = held is not None
        profs = _torch_profiles(held) if had else []
        refs = _weak(profs)
        # the holder too (SGLang V2's wrapper), when it is not the profile itself
        holder = _weak([held]) if refs and not any(p is held for p in profs) else []
        profs = []
        held = None  # no strong reference of ours may outlive the stop (or block its own collect)
        t0 = time.perf_counter()
        done: dict[str, Any] = {"teardown": None, "teardown_s": None, "collect_seconds": None}
        try:
            with _GcCount() as count:
                try:
                    return original(self, *args, **kwargs)
                finally:
                    _state.frame = None
                    dropped = had and getattr(self, attr, None) is None
                    if frame["controlled"] and dropped:
                        done = free_now(holder + refs)
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
    heap_watch()  # times the automatic full collections from now on (for the stop events)
    patch = Patch(RECORD_ID)
    for module, qualname, attr, path, _ in plan:
        patch.add(module, qualname, functools.partial(_make, attr=attr, path=path,
                                                      controlled=lambda: False))
    return patch


def _make(original: Callable, attr: str, path: str, controlled: Callable[[], bool]) -> Callable:
    return wrap_stop(original, attr, path, controlled)


# ------------------------------------------------------------------------------ user API


def teardown(profiler: Any) -> dict[str, Any]:
    """Free a *stopped* torch profiler as soon as its last reference goes: break its reference
    cycles (`action_map` holds bound methods of itself) now. Its results (`export_chrome_trace`,
    `key_averages`) stay usable; do not restart it. No `gc.collect()`: the caller still holds
    the profiler, so freeing it is up to that reference (`controlled_profile` drops it)."""
    t0 = time.perf_counter()
    links = []
    for p in _torch_profiles(profiler):
        links += break_cycles(p)
    secs = time.perf_counter() - t0
    telemetry.emit("profiler_stop", seconds=secs, collected=0, controlled=True,
                   path="user", function="teardown", teardown="cycle-broken", teardown_s=secs,
                   links_cut=len(links))
    return {"seconds": secs, "cycle_edges_broken": len(links), "links": sorted(set(links))}


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
    title = "Free the stopped profiler at the stop: break its cycles (controlled teardown)"
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
        reason = "adds a controlled teardown (cycles broken at the stop) to " + ", ".join(
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
