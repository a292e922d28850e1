"""Where SGLang switches profiler stages inside `Scheduler.run_batch`'s profiler span.

Why: with `profile_by_stage` (always with `SGLANG_PROFILE_V2`) the stop of one profile and the
start of the next happen in `run_batch` (0.5.23 scheduler.py:4639), which from 0.5.14 is
decorated with a profiler span (`@scheduler_nvtx_method` / `@scheduler_stage_method`:
`torch.profiler.record_function` while a profiler is active, utils/nvtx_utils.py:76). A span
crossing two profiler sessions crashes torch's profiler (`benchmarks/profiler_span_sessions.py`).
`profiler-teardown` reports the site; `profiler-controlled-teardown` moves the switch
(`fixes/profiler_stage_switch.py`). Found by AST on the release's source, never by line.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from pathlib import Path

from diag.probes.source import parse_text
from diag.target import Target

SCHEDULER = ("srt/managers/scheduler.py", "sglang.srt.managers.scheduler", "Scheduler", "run_batch")
MANAGER = ("srt/managers/scheduler_components/profiler_manager.py",
           "sglang.srt.managers.scheduler_components.profiler_manager")
PREDICATE = "_profile_batch_predicate"


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


_memo: dict[tuple, StageSwitchSite | None] = {}


def locate(target: Target) -> StageSwitchSite | None:
    """The stage switch inside a decorated `Scheduler.run_batch`, or None (no such shape).
    Memoised on the two files' path, size and mtime: `diagnose` asks three times (the probe,
    the advice, the patch)."""
    key = tuple(_stat(target.file(rel)) for rel in (SCHEDULER[0], MANAGER[0]))
    if key not in _memo:
        _memo[key] = _locate(target)
    return _memo[key]


def _stat(path: Path) -> tuple:
    try:
        st = path.stat()
    except OSError:
        return (str(path), None)
    return (str(path), st.st_size, st.st_mtime_ns)


def _locate(target: Target) -> StageSwitchSite | None:
    rel, _, cls_name, fn_name = SCHEDULER
    src = target.source(rel)
    msrc = target.source(MANAGER[0])
    if src is None or msrc is None or f".profiler_manager.{PREDICATE}(" not in src:
        return None  # up to 0.5.12.post1 the predicate is a Scheduler mixin method, no span
    manager = next((c.name for c in parse_text(msrc).body if isinstance(c, ast.ClassDef)
                    and any(isinstance(f, ast.FunctionDef) and f.name == PREDICATE
                            for f in c.body)), None)
    cut = _method_source(src, cls_name, fn_name)
    if manager is None or cut is None:
        return None
    text, first = cut
    try:
        fn = parse_text(textwrap.dedent(text)).body[0]
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
