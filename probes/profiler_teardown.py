"""Probe `profiler-teardown`: is a stopped `torch.profiler.profile` left to the cyclic GC?

A stopped profiler keeps bound methods of itself (`action_map`), so it is freed only by the cyclic
GC at an arbitrary later moment; SGLang servers crashed there (double free in the C++
destructors) and memory grows until a collection runs. SGLang 0.5.18 drops the reference and
calls `gc.collect()` at once in `_stop_profile`; the V2 path (`SGLANG_PROFILE_V2`,
`utils/profile_utils.py::ProfileManager._do_stop`) drops it without collecting, even in 0.5.23.

Three parts: (a) static, on the target's source (AST, found by name and shape, never by line);
(b) runtime, on the local torch: the reference cycle and its path; (c) the crash reproducer in
child processes (`probes.profiler_reproducer`), only with `ctx.full`.
"""

from __future__ import annotations

import ast
import contextlib
import gc
import importlib.util
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

from packaging.version import Version

from diag.context import Context
from diag.findings import Evidence, Finding, Status, location, metric, note, row
from diag.probes import profiler_stage_site as stage_site
from diag.probes.base import Counter, Probe
from diag.probes.source import parse_text
from diag.target import Target

# Where the profiler stop lives, per release (the files and lines: profiler_runtime.py's
# table); the method is found by shape.
CLASSIC_FILES = (
    ("srt/managers/scheduler_components/profiler_manager.py",
     "sglang.srt.managers.scheduler_components.profiler_manager"),  # from 0.5.13.post1
    ("srt/managers/scheduler_profiler_mixin.py",
     "sglang.srt.managers.scheduler_profiler_mixin"),  # up to 0.5.12.post1
)
V2_FILE = ("srt/utils/profile_utils.py", "sglang.srt.utils.profile_utils")
CLASSIC_NAMES = ("_stop_profile", "stop_profile")  # `stop_profile` up to 0.5.12.post1
V2_NAMES = ("_do_stop",)


@dataclass
class StopSite:
    """One profiler stop function in the target and what it does with the profiler afterwards."""

    path: str  # "classic" (the default /stop_profile path) | "v2" (SGLANG_PROFILE_V2)
    file: str  # as users see it: sglang/srt/...
    module: str  # dotted module name (for patching)
    cls: str
    function: str
    line: int  # the def
    attr: str  # the attribute holding the profiler: torch_profiler | profiler
    stop_line: int  # `self.<attr>.stop()`
    drop_line: int | None = None  # `self.<attr> = None`
    collect_line: int | None = None  # `gc.collect()` at or after the drop

    @property
    def qualname(self) -> str:
        return f"{self.cls}.{self.function}"

    @property
    def controlled(self) -> bool:
        """Drops the reference and collects at once (the 0.5.18 teardown)."""
        return self.drop_line is not None and self.collect_line is not None

    def describe(self) -> str:
        if self.controlled:
            return (f"drops self.{self.attr} (line {self.drop_line}) and calls gc.collect() "
                    f"(line {self.collect_line}): freed at a controlled point")
        if self.drop_line is not None:
            return (f"drops self.{self.attr} (line {self.drop_line}) without gc.collect(): the "
                    f"stopped profiler is freed later by the cyclic GC")
        return f"never drops self.{self.attr}: the stopped profiler lives on until replaced"


def _is_self_attr(node: ast.AST, attr: str) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == attr
            and isinstance(node.value, ast.Name) and node.value.id == "self")


def _gc_collect_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """Names bound to the gc module and to gc.collect by the module's imports."""
    mods, funcs = set(), set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            mods |= {a.asname or a.name for a in n.names if a.name == "gc"}
        elif isinstance(n, ast.ImportFrom) and n.module == "gc":
            funcs |= {a.asname or a.name for a in n.names if a.name == "collect"}
    return mods, funcs


def _is_gc_collect(node: ast.AST, mods: set[str], funcs: set[str]) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    if isinstance(f, ast.Attribute) and f.attr == "collect" and isinstance(f.value, ast.Name):
        return f.value.id in (mods or {"gc"})
    return isinstance(f, ast.Name) and f.id in funcs


def _site_in(fn: ast.FunctionDef, attr: str, mods: set[str], funcs: set[str]) -> dict | None:
    stop = drop = None
    collects: list[int] = []
    for n in ast.walk(fn):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) \
                and n.func.attr == "stop" and _is_self_attr(n.func.value, attr):
            stop = n.lineno if stop is None else min(stop, n.lineno)
        elif isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) \
                and n.value.value is None and any(_is_self_attr(t, attr) for t in n.targets):
            drop = n.lineno if drop is None else max(drop, n.lineno)
        elif _is_gc_collect(n, mods, funcs):
            collects.append(n.lineno)
    if stop is None:
        return None
    after = [c for c in collects if drop is not None and c >= drop]
    return {"stop_line": stop, "drop_line": drop, "collect_line": min(after) if after else None}


def _scan(target: Target, rel: str, module: str, path: str, names: tuple[str, ...],
          attr: str) -> list[StopSite]:
    """The stop sites of one file; cached on disk (diag.cache) by the file's path, size, mtime
    and content hash and this module's source, so a cached answer is the one a parse gives."""
    from dataclasses import asdict

    from diag import cache

    file = target.file(rel)
    if not file.is_file():
        return []
    try:
        digest = cache.files_key([file], str(target.root), rel, module, path, names, attr,
                                 cache.code_fingerprint(__name__))
    except OSError:
        digest = None
    if digest is not None:
        hit = cache.load("profiler_stops", digest)
        if hit is not None:
            try:
                return [StopSite(**d) for d in hit["value"]]
            except TypeError:
                pass
    out = _scan_source(target, rel, module, path, names, attr)
    if digest is not None:
        cache.store("profiler_stops", digest, [asdict(s) for s in out])
    return out


def _scan_source(target: Target, rel: str, module: str, path: str, names: tuple[str, ...],
                 attr: str) -> list[StopSite]:
    src = target.source(rel)
    if src is None:
        return []
    tree = parse_text(src, str(target.file(rel)))
    mods, funcs = _gc_collect_names(tree)
    out = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef) and fn.name in names:
                found = _site_in(fn, attr, mods, funcs)
                if found:
                    out.append(StopSite(path, target.relpath(target.file(rel)), module, cls.name,
                                        fn.name, fn.lineno, attr, **found))
    return out


FIX_MARK = ("__diag_patch__", "profiler-controlled-teardown")  # fixes.patcher's mark (no import)


def patched_here(site: StopSite) -> bool:
    """The stop is loaded in this process and wrapped by the controlled-teardown fix."""
    mod = sys.modules.get(site.module)
    owner = vars(mod).get(site.cls) if mod is not None else None
    raw = vars(owner).get(site.function) if isinstance(owner, type) else None
    fn = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
    return getattr(fn, FIX_MARK[0], None) == FIX_MARK[1]


def locate_stops(target: Target) -> list[StopSite]:
    """Every profiler stop of the target: the classic one(s) first, then the V2 one."""
    sites: list[StopSite] = []
    for rel, module in CLASSIC_FILES:
        sites += _scan(target, rel, module, "classic", CLASSIC_NAMES, "torch_profiler")
    sites += _scan(target, V2_FILE[0], V2_FILE[1], "v2", V2_NAMES, "profiler")
    return sites


V2_ENV = "SGLANG_PROFILE_V2"


def v2_in_use(ctx: Context) -> str | None:
    """Where the configuration under audit turns the V2 profiler on (None: it does not): the
    env var in the configuration's environment (`SpecConfig.environ`), else in diag's own, or a
    live server's arguments (`ctx.cache["server_info"]`)."""
    from diag.probes.gate import env_bool

    env = ctx.config.environ  # the configuration's own environment, when one was given
    if env is not None:
        if env_bool(env.get(V2_ENV)):
            return f"{V2_ENV}={env[V2_ENV]} in the configuration's environment"
    elif env_bool(os.environ.get(V2_ENV)):
        return f"{V2_ENV}={os.environ[V2_ENV]} in diag's environment"
    info = ctx.cache.get("server_info")
    if isinstance(info, dict):
        from diag.server import server_args

        try:
            args = server_args(info)
        except (TypeError, ValueError, AttributeError):
            args = {}
        for k, v in (args or {}).items():
            if str(k).upper() == V2_ENV and env_bool(str(v)):
                return f"{k}={v} in the server's arguments"
    return None


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
    collect_seconds: float
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
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        prof = once()
        path = find_cycle(prof)
        gc.collect()  # other garbage (the first profile's too), while this one is referenced
        ref = weakref.ref(prof)
        del prof
        alive = ref() is not None
        tracked, blocks = len(gc.get_objects()), sys.getallocatedblocks()
        t0 = time.perf_counter()
        collected = gc.collect()
        secs = time.perf_counter() - t0
        freed = ref() is None
    finally:
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
    return subprocess.Popen([sys.executable, "-m", "diag.probes.profiler_teardown", "--cycle-json"],
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


def _cached_cycle() -> tuple[CycleReport, str] | None:
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


def _runtime_cycle_quietly() -> CycleReport:
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


# ------------------------------------------------------------------------------ the probe


def _torch_importable() -> str | None:
    """None when torch imports, else why not."""
    try:
        import torch  # noqa: F401
    except Exception as e:  # ImportError or a broken build
        return f"torch does not import here ({type(e).__name__}: {e})"
    return None


class ProfilerTeardownProbe(Probe):
    id = "profiler-teardown"
    title = "Profiler teardown (reference cycle freed by the cyclic GC)"
    concern = "torch.profiler stop / cyclic-GC teardown"
    fixes = ("profiler-controlled-teardown",)
    counter = Counter("diag.probes.profiler_runtime:runtime_patch", ("profiler_stop",))
    needs_torch = True

    def measured_already(self) -> bool:
        return _cached_cycle() is not None

    def measure_early(self) -> dict[str, Any]:
        """The cycle check needs only torch: measured before the job (and stored)."""
        if _cached_cycle() is not None:
            return {}
        rep = _runtime_cycle_quietly()
        store_cycle(rep)
        return {CYCLE_REPORT: rep}

    def prepare(self, ctx: Context) -> None:
        if ctx.execute and CYCLE_REPORT not in ctx.cache \
                and importlib.util.find_spec("torch") is not None:
            ctx.cache["profiler-cycle-child"] = start_cycle_child()

    def run(self, ctx: Context) -> list[Finding]:
        static = self.static(ctx)
        out = [static]
        if not ctx.execute:
            out.append(self.finding(Status.SKIP, "runtime check not run (execution disabled)"))
        else:
            out.append(self.runtime(ctx, static))
        if ctx.full:
            out.append(self.reproducer(ctx))
        return out

    # (a) -------------------------------------------------------------------------------------
    def static(self, ctx: Context) -> Finding:
        t = ctx.target
        sites = locate_stops(t)
        classic = [s for s in sites if s.path == "classic"]
        v2 = [s for s in sites if s.path == "v2"]
        patched = {id(s) for s in sites if not s.controlled and patched_here(s)}
        ev: list[Evidence] = [location(
            s.file, s.line, s.qualname, f"[{s.path}] {s.describe()}" + (
                "; patched in this process by profiler-controlled-teardown (drop and collect "
                "at the stop)" if id(s) in patched else "")) for s in sites]
        switch = stage_site.locate(t)
        if switch is not None:  # the stage switch runs inside a span: torch's profiler crashes
            ev.append(location(
                switch.file, switch.call_line, "Scheduler.run_batch",
                f"stage profiling (profile_by_stage; always with {V2_ENV}) stops one profile and "
                f"starts the next inside run_batch's profiler span (@{', @'.join(switch.decorators)}"
                "): a span crossing two profiler sessions crashes torch's profiler, with any "
                "teardown; profiler-controlled-teardown moves the switch before the span"))
        where = ", ".join(f for f, _ in CLASSIC_FILES)
        if not classic:
            return self.finding(
                Status.SKIP, f"no profiler stop found in sglang {t.version} (looked for "
                f"{'/'.join(CLASSIC_NAMES)} calling self.torch_profiler.stop() in {where}): "
                "unrecognised shape", evidence=ev,
                hint="this release's profiler code has moved; the fix refuses it too")
        if not v2:
            ev.append(note(f"no V2 profiler stop (ProfileManager._do_stop in "
                           f"sglang/{V2_FILE[0]}) in this release"))
        bad_classic = [s for s in classic if not s.controlled and id(s) not in patched]
        bad_v2 = [s for s in v2 if not s.controlled and id(s) not in patched]
        used = v2_in_use(ctx) if v2 else None
        risks = self.requests(ctx, v2[0] if v2 else None, bool(bad_v2), used)
        ev += risks
        fatal = [e.data["request"].split(" (")[0] for e in risks
                 if e.data["risk"] == "kills the server"]
        refused = (f"; with {V2_ENV} on, SGLang itself refuses {', '.join(fatal)}: the "
                   "scheduler raises and the server goes down (send profile_by_stage=true, "
                   "never /stop_profile)") if used and fatal else ""
        if bad_classic:
            s = bad_classic[0]
            status = Status.FAIL if ctx.platform == "hip" else Status.WARN
            summary = (f"{s.qualname} ({s.file}:{s.line}) leaves the stopped profiler to the "
                       "cyclic GC" + (" (and so does the V2 path)" if bad_v2 else "") + refused)
        elif bad_v2:
            s = bad_v2[0]
            status = (Status.FAIL if ctx.platform == "hip" else Status.WARN) if used \
                else Status.WARN
            summary = (f"default stop collects at once, but the V2 path (SGLANG_PROFILE_V2) "
                       f"{s.qualname} ({s.file}:{s.line}) drops the profiler without gc.collect()"
                       + (f"; the configuration under audit uses it ({used})" if used else
                          "; only a configuration with SGLANG_PROFILE_V2 set uses it (not set "
                          "in diag's environment nor in the server's arguments)") + refused)
        else:
            how = " (patched in this process)" if patched else ""
            return self.finding(Status.WARN if refused else Status.OK, "every profiler stop "
                                f"drops the profiler and frees it at once{how}{refused}",
                                evidence=ev)
        fix = ("apply profiler-controlled-teardown (frees the stopped profiler at the stop by "
               "breaking its reference cycle, no full collection)")
        if not bad_classic:  # advice that fits the release: its default path is fine already
            hint = f"{fix}; this release's default stop already frees it, only the V2 path needs it"
        else:
            ver = ctx.target.parsed_version
            older = ver is None or ver < Version("0.5.18")
            hint = fix + (", or upgrade to >= 0.5.18 for the default path" if older else "")
        return self.finding(status, summary, evidence=ev, hint=hint)

    def requests(self, ctx: Context, v2_stop: StopSite | None, fix_applies: bool,
                 used: str | None) -> list[Evidence]:
        """One typed row per profiling request that matters on a V2 server (the release's source,
        `profiler_requests`): what the release does with it and whether it is at risk."""
        from diag.probes import profiler_requests

        out = []
        for r in profiler_requests.assess(ctx.target, v2_stop,
                                          self.fixes[0] if fix_applies else None):
            prevented = f"; {r.prevented_by} frees it at the stop" if r.prevented_by else ""
            out.append(row(f"{r.outcome}{prevented}", **r.data(), v2_in_use=bool(used)))
        return out

    # (b) -------------------------------------------------------------------------------------
    def runtime(self, ctx: Context, static: Finding) -> Finding:
        rep = ctx.cache.pop(CYCLE_REPORT, None)  # measured in this run by diag's torch worker
        child = ctx.cache.pop("profiler-cycle-child", None)
        if rep is None and child is not None:
            rep = collect_cycle_child(child)
        reused_at = None
        if rep is None:
            hit = _cached_cycle()  # torch itself is imported only to measure
            if hit is not None:
                rep, reused_at = hit
            else:
                why = _torch_importable()
                if why:
                    return self.finding(Status.SKIP, f"runtime cycle check skipped: {why}")
                rep, reused_at = cached_runtime_cycle()
        ev = [metric("alive_after_del", rep.alive_after_del),
              metric("collected_by_gc_collect", rep.collected, "objects"),
              metric("collect_time", round(rep.collect_seconds, 6), "s")]
        if rep.path:
            ev.append(row("reference cycle of a stopped profiler", path=" ".join(rep.path)))
        cost = rep.collect_cost or {}
        if cost.get("s_per_object"):
            per = cost["s_per_object"]
            ev.append(metric("full collection cost per live object", round(per * 1e9, 2), "ns",
                             detail=f"measured: gc.collect() took {cost['collect_s'] * 1e3:.1f} "
                                    f"ms with {cost['tracked_objects']} tracked objects"))
            ev.append(note("upstream's teardown (gc.collect() at the stop) in a scheduler holding "
                           f"1e6 / 1e7 live objects: ~{per * 1e6:.2f} s / ~{per * 1e7:.1f} s per "
                           "stop, every request stalled meanwhile (an estimate: the measured cost "
                           "per object times the heap size); profiler-controlled-teardown breaks "
                           "the cycle instead and collects nothing. Inside an engine, the agent's "
                           "profiler-teardown counter reports the heap (pymalloc blocks) and the "
                           "cost estimated from its own automatic full collections with each stop"))
        if reused_at:
            ev.append(note(f"runtime check reused from the diag cache (measured {reused_at} "
                           f"on this machine with the same torch and diag code); "
                           f"DIAG_NO_CACHE=1 measures again"))
        if not rep.alive_after_del:
            return self.finding(Status.OK, f"torch {rep.torch_version}: a stopped profiler is "
                                "freed at once when dropped (no reference cycle)", evidence=ev)
        summary = (f"torch {rep.torch_version}: a stopped profiler is still alive after `del` "
                   f"and only gc.collect() frees it ({rep.collected} objects)")
        if static.status in (Status.OK, Status.SKIP):
            return self.finding(Status.OK, summary + "; the target collects at a controlled "
                                "point" if static.status == Status.OK else summary, evidence=ev)
        return self.finding(Status.WARN, summary + ": the precondition for the late-collection "
                            "crash is present", evidence=ev,
                            hint="run `diag diagnose --full` for the crash reproducer")

    # (c) -------------------------------------------------------------------------------------
    def reproducer(self, ctx: Context) -> Finding:
        from diag.probes import profiler_reproducer as rp

        results = rp.run_scenarios(tries=rp.DEFAULT_TRIES, progress=ctx.log)
        ev = [row(r.description, scenario=r.name, tries=r.tries, crashes=r.crashes,
                  not_run=r.not_run, outcomes=", ".join(r.outcomes), device=r.device or "?",
                  freed_on=r.freed_where() or "-") for r in results]
        late = [r for r in results if r.name.startswith("late-collection") and r.crashes]
        other = [r for r in results if not r.name.startswith("late-collection") and r.crashes
                 or r.hangs]  # a try killed at the time limit did not finish: never a pass
        missed = [r for r in results if r.not_run]  # a try that tested nothing is no pass
        verdicts = "; ".join(r.verdict() for r in results)
        if late:
            return self.finding(Status.FAIL, f"reproduced: {verdicts}", evidence=ev)
        if missed:
            if all(r.not_run == r.tries for r in results):
                verdicts = f"crash reproducer not run: {missed[0].why_not_run()}"
            no_torch = all(r.no_torch for r in missed)
            return self.finding(
                Status.SKIP if no_torch else Status.ERROR, verdicts, evidence=ev,
                hint="install torch in this environment to run the reproducer" if no_torch else
                "run `python -m diag.probes.profiler_reproducer --tries 1` to see the child fail")
        status = Status.WARN if other else Status.OK
        return self.finding(status, verdicts, evidence=ev)


if __name__ == "__main__" and sys.argv[1:] == ["--cycle-json"]:
    from dataclasses import asdict

    print(json.dumps(asdict(runtime_cycle(lean=True))))
