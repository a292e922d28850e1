"""Probe `profiler-teardown`, runtime part on the local torch: the reference cycle and its cost.

`runtime_cycle()` builds and stops a `torch.profiler.profile`, checks that it outlives the stop
and is freed only by the cyclic GC, and renders the cycle's path; `HeapWatch` measures the heap
a collection walks. Run in a child process (`python -m diag.probes.profiler_teardown.cycle
--cycle-json`) and cached on disk.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import subprocess
import sys
import time
import types
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

# ------------------------------------------------------------------------------ heap and GC cost


class HeapWatch:
    """What a full collection costs in this process, learnt without running one.

    Why: the upstream teardown (`gc.collect()` at the stop) costs in proportion to the live heap,
    and inside an engine that collection would stall every request. A `gc.callbacks` hook times
    the automatic generation-2 collections the interpreter runs anyway (a `perf_counter` per
    collection, nothing else) and notes the heap size then; the cost of a collection now is
    estimated from that measured cost per heap block. The heap size is
    `sys.getallocatedblocks()` (pymalloc's block count, read from its arena/pool counters: no
    walk over the objects); it counts every small object, GC-tracked or not, which is why the
    estimate is per block as measured here, not per object.
    """

    def __init__(self) -> None:
        self._t0: float | None = None
        self.full_collections = 0
        self.last_full_s: float | None = None  # measured duration of the latest gen-2 collection
        self.last_full_blocks: int | None = None  # heap blocks when it ran

    def _cb(self, phase: str, info: dict) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._t0 = time.perf_counter()
        elif self._t0 is not None:
            self.last_full_s = time.perf_counter() - self._t0
            self.last_full_blocks = sys.getallocatedblocks()
            self.full_collections += 1
            self._t0 = None

    def install(self) -> HeapWatch:
        if self._cb not in gc.callbacks:
            gc.callbacks.append(self._cb)
        return self

    def uninstall(self) -> None:
        if self._cb in gc.callbacks:
            gc.callbacks.remove(self._cb)

    def snapshot(self) -> dict[str, Any]:
        """heap_blocks now, the last measured full collection, and the estimate for now."""
        blocks = sys.getallocatedblocks()
        est = None
        if self.last_full_s is not None and self.last_full_blocks:
            est = self.last_full_s * blocks / self.last_full_blocks
        return {"heap_blocks": blocks, "full_gc_observed": self.full_collections,
                "full_gc_last_s": self.last_full_s, "full_gc_est_s": est,
                "full_gc_est_basis": "estimate: heap blocks x the measured cost per block of "
                                     "the last automatic full collection" if est is not None
                else "no automatic full collection observed yet in this process"}


_watch: HeapWatch | None = None


def heap_watch() -> HeapWatch:
    """The process's one HeapWatch, installed on first use."""
    global _watch
    if _watch is None:
        _watch = HeapWatch().install()
    return _watch


def collect_cost(seconds: float, tracked: int, blocks: int) -> dict[str, Any]:
    """A full collection's measured cost, per live GC-tracked object and per heap block."""
    return {"collect_s": seconds, "tracked_objects": tracked, "heap_blocks": blocks,
            "s_per_object": seconds / max(tracked, 1), "s_per_block": seconds / max(blocks, 1)}


# ------------------------------------------------------------------------------ runtime cycle


@dataclass
class CycleReport:
    torch_version: str
    alive_after_del: bool  # a weak reference still resolves after the last strong one went
    freed_by_collect: bool
    collected: int  # what gc.collect() freed (a collection right before makes this the cycle's)
    collect_seconds: float  # a full collection of the process's heap (`_checked_cycle`)
    path: list[str] = field(default_factory=list)  # profile -> ... -> profile
    collect_cost: dict[str, Any] = field(default_factory=dict)  # collect_cost() of the check


def _edge(parent: Any, child: Any) -> str:
    if isinstance(parent, dict):
        for k, v in parent.items():
            if v is child:
                return f"[{_short(k)}]"
        return "[?]"
    if isinstance(parent, (list, tuple)):
        for i, v in enumerate(parent):
            if v is child:
                return f"[{i}]"
    if isinstance(parent, types.MethodType) and parent.__self__ is child:
        return ".__self__"
    attrs = getattr(parent, "__dict__", None)
    if attrs is child:
        return ".__dict__"
    if isinstance(attrs, dict):  # inline (managed) instance attributes are referents directly
        for k, v in attrs.items():
            if v is child:
                return f".{k}"
    return f" -> {type(child).__name__}"


def _short(v: Any) -> str:
    if isinstance(v, tuple):
        return "(" + ", ".join(_short(x) for x in v) + ")"
    name = getattr(v, "name", None)
    return name if isinstance(name, str) else repr(v)[:40]


def _label(obj: Any) -> str:
    if isinstance(obj, types.MethodType):
        return f"<bound method {obj.__func__.__qualname__}>"
    return f"<{type(obj).__name__}>"


def find_cycle(obj: Any, limit: int = 20000) -> list[str]:
    """The shortest referent path from `obj` back to itself, as readable steps ([] if none)."""
    start = id(obj)
    parents: dict[int, tuple[Any, Any]] = {}  # id -> (parent object, object)
    queue = [obj]
    seen = {start}
    while queue and len(seen) < limit:
        nxt = []
        for node in queue:
            for ref in gc.get_referents(node):
                if isinstance(ref, (type, types.ModuleType, types.FunctionType, types.CodeType)):
                    continue
                if ref is obj:
                    return _render_path(obj, parents, node)
                if id(ref) not in seen:
                    seen.add(id(ref))
                    parents[id(ref)] = (node, ref)
                    nxt.append(ref)
        queue = nxt
    return []


def _render_path(obj: Any, parents: dict[int, tuple[Any, Any]], last: Any) -> list[str]:
    chain = [last]
    while id(chain[-1]) in parents:
        chain.append(parents[id(chain[-1])][0])
    chain.reverse()  # obj ... last
    steps = [f"{type(obj).__module__}.{type(obj).__qualname__}"]
    prev, via_dict = chain[0], False
    for cur in chain[1:] + [obj]:
        e = _edge(prev, cur)
        if e == ".__dict__":  # shown as `.attr` on the next step
            prev, via_dict = cur, True
            continue
        if via_dict and e.startswith("['") and e.endswith("']"):
            e = "." + e[2:-2]
        via_dict = False
        label = "(the same object)" if cur is obj else _label(cur)
        steps.append(f"-> {label}" if e.startswith(" -> ") else f"{e} {label}")
        prev = cur
    return steps


@contextlib.contextmanager
def _compiler_stack_left_out(torch: Any) -> Iterator[None]:
    """While inside, `hasattr(torch, "_inductor")` is False unless it is already imported.

    Why: `_KinetoProfile.prepare_trace` asks it only to read inductor's `triton.cudagraphs`
    flag (False by default), and torch's lazy `__getattr__` then imports torch._inductor and
    torch._dynamo: seconds, more than the rest of the check, for a flag that plays no part in the
    reference cycle. Restored on leaving; the check's own process only.
    """
    if "torch._inductor" in sys.modules or "__getattr__" not in vars(torch):
        yield
        return
    orig = vars(torch)["__getattr__"]

    def getattr_(name: str) -> Any:
        if name == "_inductor":
            raise AttributeError(name)
        return orig(name)

    torch.__getattr__ = getattr_
    try:
        yield
    finally:
        torch.__getattr__ = orig


def runtime_cycle(lean: bool = False) -> CycleReport:
    """Start and stop a CPU-only profiler, drop it, and see whether only `gc.collect()` frees it.

    `lean`: keep torch's compiler stack out (`_compiler_stack_left_out`), for diag's own
    processes that import nothing else of torch.

    The automatic GC is disabled for the few lines between `del` and the check, and the
    collection runs right away (a controlled teardown), so this process never meets the late
    collection the reproducer provokes.
    """
    import torch

    def once() -> Any:
        p = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        p.start()
        a = torch.ones(64, 64)
        (a @ a).sum()
        p.stop()
        return p

    with _compiler_stack_left_out(torch) if lean else contextlib.nullcontext():
        once()  # a first profile creates one-time garbage (lazy imports): not in the count
        return _checked_cycle(torch, once)


def _checked_cycle(torch: Any, once: Any) -> CycleReport:
    """One full collection, timed over the heap as it is (the cost per object that upstream's
    `gc.collect()` at a stop pays; it also frees the first profile's garbage), then the cycle
    checked above a `gc.freeze()` of what survived it: the two collections that isolate the
    cycle's objects walk only what the second profile made, not torch's heap again (~80 ms
    each in diag's torch worker)."""
    was_enabled = gc.isenabled()
    gc.disable()
    frozen_before = gc.get_freeze_count()
    try:
        tracked, blocks = len(gc.get_objects()), sys.getallocatedblocks()
        t0 = time.perf_counter()
        gc.collect()
        secs = time.perf_counter() - t0
        gc.freeze()
        prof = once()
        path = find_cycle(prof)
        gc.collect()  # the profile's other garbage, while this one is referenced
        ref = weakref.ref(prof)
        del prof
        alive = ref() is not None
        collected = gc.collect()
        freed = ref() is None
    finally:
        if not frozen_before:  # a caller's own freeze stays as it was (with this heap in it)
            gc.unfreeze()
        if was_enabled:
            gc.enable()
    return CycleReport(torch.__version__, alive, freed, collected, secs, path,
                       collect_cost(secs, tracked, blocks))


def _cycle_cache_key() -> str | None:
    from diag import cache

    try:
        return cache.key("runtime_cycle", cache.torch_fingerprint(),
                         cache.code_fingerprint(__name__))
    except Exception:  # torch imports (checked by the caller) but cannot be fingerprinted
        return None


def start_cycle_child() -> subprocess.Popen | None:
    """Run `runtime_cycle()` in a child process (JSON on stdout), unless the cache has it.

    Why: starting torch's profiler imports torch._inductor and torch._dynamo (over a second);
    in a child it overlaps the other probes on a second core.
    """
    from diag import cache

    digest = _cycle_cache_key()
    if digest is not None and cache.load("profiler_cycle", digest) is not None:
        return None
    from diag.home import home

    root = str(home())  # never diag/ itself (its modules would shadow top-level names)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [root, *filter(None, [os.environ.get("PYTHONPATH")])]))
    return subprocess.Popen([sys.executable, "-m", "diag.probes.profiler_teardown.cycle",
                             "--cycle-json"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env)


def collect_cycle_child(child: subprocess.Popen, timeout: float = 120.0) -> CycleReport | None:
    """The child's report (stored in the cache), or None when it failed: then run inline."""
    from dataclasses import asdict

    from diag import cache

    try:
        out, _ = child.communicate(timeout=timeout)
        rep = (CycleReport(**json.loads(out.strip().splitlines()[-1]))
               if child.returncode == 0 and out.strip() else None)
    except (subprocess.TimeoutExpired, ValueError, TypeError):
        child.kill()
        child.wait()
        return None
    digest = _cycle_cache_key()
    if rep is not None and digest is not None:
        cache.store("profiler_cycle", digest, asdict(rep))
    return rep


CYCLE_REPORT = "profiler-cycle-report"  # ctx.cache: a CycleReport measured in this run


def cached_cycle() -> tuple[CycleReport, str] | None:
    """The stored report and when it was measured, without importing torch; None: a miss."""
    from diag import cache

    digest = _cycle_cache_key()
    hit = cache.load("profiler_cycle", digest) if digest is not None else None
    if hit is None:
        return None
    try:
        return CycleReport(**hit["value"]), str(hit.get("stored_at") or "earlier")
    except TypeError:
        return None


def store_cycle(rep: CycleReport) -> None:
    """Keep a report measured elsewhere in this run (diag's torch worker) in the cache."""
    from dataclasses import asdict

    from diag import cache

    digest = _cycle_cache_key()
    if digest is not None:
        cache.store("profiler_cycle", digest, asdict(rep))


def runtime_cycle_quietly() -> CycleReport:
    """`runtime_cycle(lean=True)` with fd 2 on /dev/null: torch's profiler (kineto) prints a
    line per start and stop there, as in the cycle child (whose stderr is /dev/null too). Lean:
    for a process that uses nothing of torch's compiler stack (diag's torch worker)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)
        return runtime_cycle(lean=True)
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def cached_runtime_cycle() -> tuple[CycleReport, str | None]:
    """`runtime_cycle()`, reused from the disk cache (diag.cache) when one was measured with
    the same torch (version and location), Python and this module's source; the answer depends
    on nothing else. Returns the report and when it was measured if reused (None: just now).
    Why: starting torch's profiler imports torch._inductor and torch._dynamo (over a second).
    """
    from dataclasses import asdict

    from diag import cache

    digest = _cycle_cache_key()
    if digest is not None:
        hit = cache.load("profiler_cycle", digest)
        if hit is not None:
            try:
                return CycleReport(**hit["value"]), str(hit.get("stored_at") or "earlier")
            except TypeError:
                pass
    rep = runtime_cycle()
    if digest is not None:
        cache.store("profiler_cycle", digest, asdict(rep))
    return rep, None


if __name__ == "__main__" and sys.argv[1:] == ["--cycle-json"]:
    from dataclasses import asdict

    print(json.dumps(asdict(runtime_cycle(lean=True))))
