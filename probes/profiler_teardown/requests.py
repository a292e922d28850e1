"""Which profiling requests put a server at risk, read from the release's source.

Why: with `SGLANG_PROFILE_V2` on, SGLang routes `/start_profile` to `ProfileManager.configure`
(utils/profile_utils.py), which asserts `profile_by_stage` (0.5.23 profile_utils.py:111): a plain
`/start_profile` raises in the scheduler's event loop, the scheduler logs "Scheduler hit an
exception" (0.5.23 managers/scheduler.py:6372) and the server goes down; `/stop_profile` reaches
`manual_stop`, which raises NotImplementedError (profile_utils.py:141). Stage profiles do run,
and each stage's stopped profiler is dropped without a collection (`_do_stop`), left to the
cyclic GC: on a real server with stacks (on by default: `with_stack ... else True`, 0.5.23
profile_utils.py:339) and CUDA activities that crashed schedulers with SIGSEGV (issue 29). All
found by name and shape (AST), never by line; a part not found is not claimed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from diag.probes.profiler_teardown.stops import CLASSIC_FILES, V2_FILE, StopSite
from diag.probes.source import parse_text
from diag.target import Target

SCHEDULER = "srt/managers/scheduler.py"
SCHEDULER_EXCEPTION = "Scheduler hit an exception"


@dataclass(frozen=True)
class RequestRisk:
    """One kind of profiling request on a V2 server and what the release does with it."""

    request: str  # as a user would send it
    outcome: str  # what happens, in words
    risk: str  # "kills the server" | "crash risk" | "none"
    file: str
    line: int
    function: str
    prevented_by: str | None = None  # a fix id that removes the risk here, when one does

    def data(self) -> dict:
        """The row's typed fields (the outcome is its text)."""
        d = {"request": self.request, "risk": self.risk,
             "location": f"{self.file}:{self.line}", "function": self.function}
        return {**d, "prevented_by": self.prevented_by} if self.prevented_by else d


def _method(tree: ast.Module, cls: str, name: str) -> ast.FunctionDef | None:
    for c in tree.body:
        if isinstance(c, ast.ClassDef) and c.name == cls:
            for f in c.body:
                if isinstance(f, ast.FunctionDef) and f.name == name:
                    return f
    return None


def _assert_on(fn: ast.FunctionDef, name: str) -> ast.Assert | None:
    return next((n for n in ast.walk(fn) if isinstance(n, ast.Assert)
                 and isinstance(n.test, ast.Name) and n.test.id == name), None)


def _raises(fn: ast.FunctionDef | None, exc: str) -> ast.Raise | None:
    for n in ast.walk(fn) if fn is not None else ():
        if isinstance(n, ast.Raise) and isinstance(n.exc, ast.Call) \
                and isinstance(n.exc.func, ast.Name) and n.exc.func.id == exc:
            return n
    return None


def _stack_default(tree: ast.Module) -> int | None:
    """The line of `with_stack=<x> if <x> is not None else True` (stacks on unless asked off)."""
    for n in ast.walk(tree):
        if isinstance(n, ast.keyword) and n.arg == "with_stack" and isinstance(n.value, ast.IfExp) \
                and isinstance(n.value.orelse, ast.Constant) and n.value.orelse.value is True:
            return n.value.lineno
    return None


def _route(target: Target) -> tuple[str, int] | None:
    """Where the default profiler manager hands /start_profile to the V2 manager's configure
    (a `.configure(...)` call passing `profile_by_stage=`)."""
    for rel, _ in CLASSIC_FILES:
        src = target.source(rel)
        if src is None:
            continue
        for n in ast.walk(parse_text(src, str(target.file(rel)))):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) \
                    and n.func.attr == "configure" \
                    and any(k.arg == "profile_by_stage" for k in n.keywords):
                return target.relpath(target.file(rel)), n.lineno
    return None


def _calls(target: Target, method: str) -> bool:
    """The default profiler manager calls `<x>.<method>()` (its V2 branch)."""
    for rel, _ in CLASSIC_FILES:
        src = target.source(rel)
        if src is not None and any(
                isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr == method for n in ast.walk(parse_text(src, str(target.file(rel))))):
            return True
    return False


def _exception_line(target: Target) -> int | None:
    src = target.source(SCHEDULER)
    if src is None:
        return None
    return next((i for i, ln in enumerate(src.splitlines(), 1)
                 if SCHEDULER_EXCEPTION in ln and "logger" in ln), None)


def assess(target: Target, v2_stop: StopSite | None, fix: str | None) -> list[RequestRisk]:
    """The profiling requests that matter on a server with SGLANG_PROFILE_V2 on, for this
    release ([] when it has no V2 profiler). `v2_stop`: the V2 stop site (profiler_teardown);
    `fix`: the fix that frees a stopped profiler at the stop, when it applies to this target."""
    src = target.source(V2_FILE[0])
    if src is None:
        return []
    tree = parse_text(src, str(target.file(V2_FILE[0])))
    file = target.relpath(target.file(V2_FILE[0]))
    out: list[RequestRisk] = []
    configure = _method(tree, "ProfileManager", "configure")
    route = _route(target)
    exc = _exception_line(target)
    dies = ("the scheduler raises it in its event loop" + (
        f", logs \"{SCHEDULER_EXCEPTION}\" (sglang/{SCHEDULER}:{exc})" if exc else "")
        + " and the server goes down")
    a = _assert_on(configure, "profile_by_stage") if configure is not None and route else None
    if a is not None:
        out.append(RequestRisk(
            "plain /start_profile (profile_by_stage false, the default)",
            f"routed to ProfileManager.configure ({route[0]}:{route[1]}), whose `assert "
            f"profile_by_stage` fails (AssertionError: only support profile_by_stage=true now); "
            + dies, "kills the server", file, a.lineno, "ProfileManager.configure"))
    s = _assert_on(configure, "start_step") if configure is not None and route else None
    if s is None and configure is not None and route:  # `assert start_step is None`
        s = next((n for n in ast.walk(configure) if isinstance(n, ast.Assert)
                  and isinstance(n.test, ast.Compare) and isinstance(n.test.left, ast.Name)
                  and n.test.left.id == "start_step"), None)
    if s is not None:
        out.append(RequestRisk(
            "/start_profile with start_step", "ProfileManager.configure asserts start_step is "
            "None (AssertionError); " + dies, "kills the server", file, s.lineno,
            "ProfileManager.configure"))
    r = _raises(_method(tree, "ProfileManager", "manual_stop"), "NotImplementedError")
    if r is not None and _calls(target, "manual_stop"):
        out.append(RequestRisk(
            "/stop_profile", "ProfileManager.manual_stop raises NotImplementedError (manually "
            "stop is only supported yet); " + dies, "kills the server", file, r.lineno,
            "ProfileManager.manual_stop"))
    if v2_stop is not None:
        stack = _stack_default(tree)
        freed = v2_stop.controlled
        stacks = (f"; stacks are on unless with_stack=false is sent ({file}:{stack})"
                  if stack else "")
        out.append(RequestRisk(
            "stage profile (profile_by_stage=true)",
            (v2_stop.describe() if freed else
             f"each stage's stop ({v2_stop.qualname}) drops the stopped profiler without "
             "gc.collect(): the cyclic GC frees it later, at an arbitrary point, where servers "
             "crashed with SIGSEGV (seen with stacks and CUDA activities)") + stacks,
            "none" if freed else "crash risk", v2_stop.file, v2_stop.stop_line,
            v2_stop.qualname, None if freed else fix))
    return out
