"""Fix registry: one line per fix, `id -> "module:Class"`, imported only when used.

A fix declares on its class what the rest of diag needs (id, title, the probes it addresses, the
fixes it depends on, its bench); callers iterate over `specs()` and never name a fix id.
"""

from __future__ import annotations

import importlib
import threading

from diag.fixes.base import Fix

REGISTRY: dict[str, str] = {
    "draft-extend-allowlist": "diag.fixes.draft_extend_allowlist:DraftExtendAllowlistFix",
    "repeat-interleave-output-size": "diag.fixes.repeat_interleave_output_size:RepeatInterleaveOutputSizeFix",
    "profiler-controlled-teardown": "diag.fixes.profiler_controlled_teardown:ProfilerControlledTeardownFix",
}

_instances: dict[str, Fix] = {}
_lock = threading.Lock()


def get(fix_id: str) -> Fix:
    """The process-wide instance of a fix (its applied state lives on it); thread-safe, as the
    agent's control thread and the engine may ask at once."""
    with _lock:
        return _get(fix_id)


def _get(fix_id: str) -> Fix:
    if fix_id not in _instances:
        try:
            path = REGISTRY[fix_id]
        except KeyError:
            raise KeyError(f"unknown fix {fix_id!r} (known: {', '.join(REGISTRY)})") from None
        module, cls = path.split(":")
        _instances[fix_id] = getattr(importlib.import_module(module), cls)()
    return _instances[fix_id]


def spec(fix_id: str) -> type[Fix]:
    """The fix's class: its declarations (title, addresses, depends_on, bench), nothing applied."""
    return type(get(fix_id))


def specs() -> list[type[Fix]]:
    """Every registered fix's class, in registry order."""
    return [spec(f) for f in REGISTRY]


def all_ids() -> list[str]:
    return list(REGISTRY)


def instantiated() -> dict[str, Fix]:
    """The fixes created in this process so far (their state lives on them)."""
    with _lock:
        return dict(_instances)
