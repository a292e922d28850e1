"""Probe `profiler-teardown`, static part: where a release stops its profiler, read from source.

The classic stop (`_stop_profile`/`stop_profile` in the scheduler's profiler manager or mixin)
and the V2 one (`SGLANG_PROFILE_V2`, `utils/profile_utils.py::ProfileManager._do_stop`), found
by name and shape (AST), never by line; and whether the configuration under audit turns V2 on.
"""

from __future__ import annotations

import ast
import os
import sys
from dataclasses import dataclass

from diag.context import Context
from diag.probes.source import parse_text
from diag.target import Target

# Where the profiler stop lives, per release (the files and lines: runtime.py's
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
