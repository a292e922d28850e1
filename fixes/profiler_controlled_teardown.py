"""Fix `profiler-controlled-teardown`: free a stopped torch profiler at the stop, not at a random GC.

A stopped `torch.profiler.profile` is in a reference cycle (bound methods of itself in
`action_map`), so dropping the last reference does not free it: the cyclic GC does, later, at an
arbitrary point, where SGLang servers crashed (double free). SGLang 0.5.18 fixed the default stop
(`_stop_profile` drops the profiler and calls `gc.collect()`); the V2 stop
(`utils/profile_utils.py::ProfileManager._do_stop`, `SGLANG_PROFILE_V2`) still only drops it.

Upstream's `gc.collect()` costs in proportion to the whole live heap (a scheduler holds
millions of objects), in the middle of serving. This fix does not collect: the patch wraps each
stop that lacks a teardown (found by AST in the target, `probes.profiler_teardown.stops`); after the
original stop has dropped its profiler reference, the wrapper breaks the stopped profiler's own
reference cycles (found at run time by walking its referents, `break_cycles`), so reference
counting frees it right there; a weak reference proves it, and only when one is still alive does
it fall back to `gc.collect()`. The probe's stop wrapper (`probes.profiler_teardown.runtime`, whose
counter records the same stops with the fix on or off) times the stop and emits `profiler_stop`
telemetry, with what the teardown did (`teardown`: "cycle-broken" or "gc-collect",
`teardown_s`) and the heap estimate of `probes.profiler_teardown.HeapWatch`. `teardown`,
`controlled_teardown` and `controlled_profile` do the same for users' own profiling.

Where the target switches profiler stages inside `Scheduler.run_batch`'s profiler span (0.5.14
on), the patch also moves that switch before the span opens (`fixes.profiler_stage_switch`): a
span that crosses two profiler sessions crashes torch's profiler, with any teardown.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import time
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from diag import telemetry
from diag.context import SpecConfig
from diag.fixes import profiler_stage_switch as stage_switch
from diag.fixes.base import APPLICABLE, NO_SGLANG, REFUSED, UPSTREAM, Applicability, Fix
from diag.patcher import Patch
from diag.probes.profiler_teardown import runtime as profiler_runtime
from diag.probes.profiler_teardown import stage_site
from diag.probes.profiler_teardown.runtime import torch_profiles as _torch_profiles
from diag.probes.profiler_teardown.stops import StopSite, locate_stops
from diag.target import Target

FIX_ID = "profiler-controlled-teardown"
# ------------------------------------------------------------------------------ helpers


# Types never walked while looking for a cycle: shared, long-lived, and no container of ours.
_OPAQUE = (type, types.ModuleType, types.FunctionType, types.CodeType, types.BuiltinFunctionType)
# What the walk descends through: the object's own data (its __dict__ and the containers in it)
# and bound methods. Never another instance: a link inside torch's autograd profiler, a module
# global or any object shared with the rest of the engine is never cut; a cycle through such an
# object is left to the gc.collect() fallback.
_OWN = (dict, list, tuple, set, frozenset, types.MethodType)


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

    A breadth-first walk of `gc.get_referents` from `obj` through its own data only (its
    `__dict__`, the containers in it and bound methods; never into another instance, a class, a
    module or a function) finds every object that refers back to `obj`; on each such path the
    link cut is the one nearest the back edge that lives in a mutable container (list, dict,
    set): for torch's profile, the bound method of itself in an `action_map` list. Only those
    links go. Repeated (`rounds`) for paths the first walk reached another way.
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
                            and isinstance(ref, _OWN) and not isinstance(ref, _OPAQUE):
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


ENV_TEARDOWN = "DIAG_PROFILER_TEARDOWN"  # "cycle" (default) | "collect"
TEARDOWNS = ("collect", "cycle")


def teardown_mode() -> str:
    """How the fix frees a stopped profiler: `cycle` (default: break its own reference cycles,
    `gc.collect()` only if that did not free it; no full collection on the serving path) or
    `collect` (`gc.collect()` at the stop, as upstream 0.5.18 does)."""
    mode = os.environ.get(ENV_TEARDOWN, "cycle").strip().lower()
    return mode if mode in TEARDOWNS else "cycle"


def free_now(refs: list[weakref.ref]) -> dict[str, Any]:
    """Free the (dropped) objects behind `refs` at this point: in `cycle` mode break their
    cycles first; if any is still alive, `gc.collect()`. Says which happened and how long."""
    t0 = time.perf_counter()
    links: list[str] = []
    for _ in range(3 if teardown_mode() == "cycle" else 0):  # a second walk only for paths the first one reached another way
        before = len(links)
        for r in refs:
            o = r()
            if o is not None:
                links += break_cycles(o, rounds=1)
            o = None
        alive = sum(r() is not None for r in refs)
        if not alive or len(links) == before:
            break
    alive = sum(r() is not None for r in refs)
    cycle = teardown_mode() == "cycle"
    how, collected, collect_s = "cycle-broken", 0, None
    if alive or not cycle:  # the fallback, or `collect` mode (as upstream 0.5.18 does)
        how = "gc-collect"
        c0 = time.perf_counter()
        collected = gc.collect()
        collect_s = time.perf_counter() - c0
    return {"teardown": how, "teardown_s": time.perf_counter() - t0, "links_cut": len(links),
            "links": sorted(set(links)), "alive_after_cut": alive, "collected": collected,
            "collect_seconds": collect_s}


def wrap_stop(original: Callable, attr: str, path: str,
              controlled: Callable[[], bool]) -> Callable:
    """The fix's wrapper of a profiler stop: when `controlled()` and the stop dropped
    `self.<attr>`, free the stopped profiler right here (`free_now`: its cycles broken, a
    `gc.collect()` only if that did not free it). The probe's `wrap_stop` times the stop and
    emits `profiler_stop`, stacked with its counter or alone."""
    return profiler_runtime.wrap_stop(original, attr, path, controlled, teardown=free_now)


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
        super().__init__()
        self.sites: list[StopSite] = []  # the stops the patch wraps

    def revert_risk(self, environ: dict[str, str]) -> str | None:
        """On a V2 server (SGLANG_PROFILE_V2 on, as SGLang's EnvBool reads it) the V2 stop only
        drops the stopped profiler: without this fix a late cyclic GC frees it and can crash the
        server (the crash this fix prevents, recorded on real 0.5.23 servers)."""
        from diag.probes.gate import env_bool

        value = environ.get("SGLANG_PROFILE_V2")
        if not env_bool(value):
            return None
        return (f"the engine runs with SGLANG_PROFILE_V2={value}: reverting {self.id} "
                "re-exposes the crash it prevents (a late cyclic GC frees a stopped V2 profiler "
                "and can crash the server, SIGSEGV)")

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
        reason = "adds a controlled teardown (cycles broken at the stop) to " + ", ".join(
            f"{s.qualname} [{s.path}] ({s.file}:{s.line})" for s in missing)
        if have:
            reason += "; already upstream: " + ", ".join(f"{s.qualname} [{s.path}]" for s in have)
        changes = tuple(s.qualname for s in missing)
        switch = stage_site.locate(target)
        if switch is not None:
            reason += ("; and switches profiler stages before run_batch's span opens (the "
                       f"switch is at {switch.where})")
            changes += ("Scheduler.run_batch", f"{switch.manager_class}.{stage_site.PREDICATE}")
        return Applicability(APPLICABLE, reason, changes=changes)

    def _enabled(self) -> bool:
        return self._patch is not None and self._patch.wanted

    def build_patch(self, target: Target | None) -> Patch:
        self.sites = [s for s in locate_stops(target) if not s.controlled] if target else []
        patch = Patch(FIX_ID)
        for s in self.sites:
            patch.add(s.module, s.qualname, functools.partial(
                _make, attr=s.attr, path=s.path, controlled=self._enabled))
        switch = stage_site.locate(target) if target and self.sites else None
        if switch is not None:
            patch.add(stage_site.SCHEDULER[1], "Scheduler.run_batch", functools.partial(
                stage_switch.wrap_run_batch, enabled=self._enabled))
            patch.add(switch.manager_module, f"{switch.manager_class}.{stage_site.PREDICATE}",
                      stage_switch.wrap_predicate)
        return patch
