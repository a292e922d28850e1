"""Part of `profiler-controlled-teardown`: switch profiler stages before `run_batch`'s span opens.

Why: with `profile_by_stage` (and always with `SGLANG_PROFILE_V2`) SGLang stops the prefill
profile and starts the decode one inside `Scheduler.run_batch`
(`profiler_manager._profile_batch_predicate(batch)`, 0.5.23 scheduler.py:4639), and from 0.5.16
`run_batch` is decorated with a profiler span (`scheduler_nvtx_method("scheduler.run_batch")`,
or `scheduler_stage_method`, which wraps it: 0.5.23 utils/nvtx_utils.py:118 `profile_method`,
:76 `torch.profiler.record_function` while a profiler is active). That span is opened in the
prefill session and closed in the decode one. torch's profiler does not survive a span that
crosses two sessions: on torch 2.13 CPU (`benchmarks/profiler_span_sessions.py`), 30 switches
with a `record_function` entered under one profile and exited after the next one started
killed 5 of 6 children (SIGSEGV) when the stopped profile was left to the GC, and none of 12
with the span closed in its own session; the real 0.5.23 server with V2 stage profiling crashed
at the decode stage's stop (`TorchOpStorage::materialize`) with either teardown of this fix
(3 of 3), and in a later automatic collection without the fix.

The patch calls the predicate from a wrapper around `run_batch` (outside its span, before it
opens) and makes the in-span call a no-op for that batch. Only for stage switching (V2 on, or
`profile_by_stage`): the classic `num_steps` path reads the forward count that `run_batch`
increments before its call, so it stays where it is. Found in the target by AST: `run_batch`
carries a decorator and calls `<x>._profile_batch_predicate(batch)`.
"""

from __future__ import annotations

import ast
import functools
import os
import sys
import textwrap
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from diag.target import Target

SCHEDULER = ("srt/managers/scheduler.py", "sglang.srt.managers.scheduler", "Scheduler", "run_batch")
MANAGER = ("srt/managers/scheduler_components/profiler_manager.py",
           "sglang.srt.managers.scheduler_components.profiler_manager")
PREDICATE = "_profile_batch_predicate"
V2_ENV = "SGLANG_PROFILE_V2"


@dataclass(frozen=True)
class StageSwitchSite:
    """Where the target switches profiler stages inside `run_batch`'s span."""

    file: str  # scheduler.py as users see it
    run_batch_line: int  # the def
    decorators: tuple[str, ...]  # what run_batch is decorated with (the span)
    call_line: int  # `self.profiler_manager._profile_batch_predicate(batch)`
    manager_module: str
    manager_class: str  # the class defining the predicate

    @property
    def where(self) -> str:
        return (f"{self.file}:{self.call_line} in Scheduler.run_batch "
                f"(@{', @'.join(self.decorators)})")


def _decorator_name(d: ast.expr) -> str:
    d = d.func if isinstance(d, ast.Call) else d
    return ast.unparse(d)


def _method_source(src: str, cls_name: str, fn_name: str) -> tuple[str, int] | None:
    """The source of `cls_name.fn_name` (decorators included) and its first line number, cut out
    by indentation: scheduler.py is ~6,000 lines, and parsing only the method keeps `diag
    diagnose` (which asks whether this fix applies) fast."""
    lines = src.splitlines(keepends=True)
    in_cls = False
    for i, line in enumerate(lines):
        if line[:1].isalpha() or line.startswith("@"):  # a statement at column 0
            in_cls = line.startswith((f"class {cls_name}(", f"class {cls_name}:"))
        elif in_cls and line.startswith(f"    def {fn_name}("):
            start = i
            while start > 0 and lines[start - 1].startswith("    @"):
                start -= 1
            end = i + 1
            while end < len(lines):  # up to the next line indented 4 or less (not a `)`)
                nxt = lines[end]
                if nxt.strip() and not nxt.startswith("     ") and not nxt.startswith("    )"):
                    break
                end += 1
            return "".join(lines[start:end]), start + 1
    return None


def locate(target: Target) -> StageSwitchSite | None:
    """The stage switch inside a decorated `Scheduler.run_batch`, or None (no such shape)."""
    rel, _, cls_name, fn_name = SCHEDULER
    src = target.source(rel)
    msrc = target.source(MANAGER[0])
    if src is None or msrc is None or f".profiler_manager.{PREDICATE}(" not in src:
        return None  # up to 0.5.12.post1 the predicate is a Scheduler mixin method, no span
    manager = next((c.name for c in ast.parse(msrc).body if isinstance(c, ast.ClassDef)
                    and any(isinstance(f, ast.FunctionDef) and f.name == PREDICATE
                            for f in c.body)), None)
    cut = _method_source(src, cls_name, fn_name)
    if manager is None or cut is None:
        return None
    text, first = cut
    try:
        fn = ast.parse(textwrap.dedent(text)).body[0]
    except (SyntaxError, IndexError):
        return None
    if not isinstance(fn, ast.FunctionDef) or not fn.decorator_list:
        return None
    for n in ast.walk(fn):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) \
                and n.func.attr == PREDICATE and isinstance(n.func.value, ast.Attribute) \
                and n.func.value.attr == "profiler_manager":
            return StageSwitchSite(
                target.relpath(target.file(rel)), first + fn.lineno - 1,
                tuple(_decorator_name(d) for d in fn.decorator_list), first + n.lineno - 1,
                MANAGER[1], manager)
    return None


_hoisted = threading.local()  # the batch whose predicate ran before the span, on this thread


def _switches_stages(pm: Any) -> bool:
    """V2 on (read as the predicate reads it: its module's `envs.SGLANG_PROFILE_V2.get()`), or
    classic `profile_by_stage`."""
    if getattr(pm, "profile_by_stage", False):
        return True
    flag = getattr(getattr(sys.modules.get(type(pm).__module__), "envs", None), V2_ENV, None)
    try:
        return bool(flag.get()) if flag is not None else _env_bool(os.environ.get(V2_ENV))
    except Exception:  # an envs object of another shape: as the environment says
        return _env_bool(os.environ.get(V2_ENV))


def _env_bool(value: str | None) -> bool:
    from diag.probes.gate import env_bool

    return env_bool(value)


def wrap_run_batch(original: Callable, enabled: Callable[[], bool]) -> Callable:
    """`run_batch` that runs the profiler predicate first, before the span of `original`."""

    @functools.wraps(original)
    def run_batch(self: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
        pm = getattr(self, "profiler_manager", None)
        if not enabled() or pm is None or not hasattr(pm, PREDICATE) or not _switches_stages(pm):
            return original(self, batch, *args, **kwargs)
        getattr(pm, PREDICATE)(batch)  # stop and start here: no span of ours is open
        _hoisted.batch = batch
        try:
            return original(self, batch, *args, **kwargs)
        finally:
            _hoisted.batch = None

    return run_batch


def wrap_predicate(original: Callable) -> Callable:
    """The predicate, a no-op for the batch whose predicate `run_batch`'s wrapper ran."""

    @functools.wraps(original)
    def predicate(self: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(_hoisted, "batch", None) is batch:
            _hoisted.batch = None  # once: a second call for the batch is the engine's own
            return None
        return original(self, batch, *args, **kwargs)

    return predicate
