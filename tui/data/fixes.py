"""The fixes view: each fix's applicability and state; applying and reverting it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from diag.errors import DiagError
from diag.tui.data.common import NA, short_error

# ---------------------------------------------------------------- fixes


@dataclass
class FixView:
    id: str
    title: str
    applicability: Any = NA  # applicable | upstream | not-needed | refused
    reason: str = ""
    state: Any = NA  # "applied" | "not applied" | "applied (pending import)" | engine states
    revertible: bool = True
    bench: str | None = None
    ack: str = ""


def fix_ids() -> list[str]:
    from diag.fixes import all_ids

    return all_ids()


def get_fix(fix_id: str):
    from diag import fixes

    return fixes.get(fix_id)


def applicability(fix, ctx) -> tuple[str, str]:
    """(status, reason) of a fix for the TUI's target, platform and configuration: the one lookup
    every tab and `a` use — the orchestrator's, as `diag fix list` and `diag diagnose` answer."""
    if ctx is None:
        return NA, ""
    try:
        from diag import fixes
        from diag.fixes import orchestrator

        if fix.id in fixes.REGISTRY and fixes.get(fix.id) is fix:
            a = orchestrator.judge(fix.id, ctx.target, ctx.platform, ctx.config)
        else:  # a fix handed to the TUI directly (not registered): its own answer
            a = fix.applies_to(ctx.target, ctx.platform, ctx.config)
        return a.status, a.reason
    except Exception as e:
        return "error", short_error(e)


def fix_view(fix, ctx=None) -> FixView:
    v = FixView(fix.id, getattr(fix, "title", fix.id), revertible=getattr(fix, "revertible", True),
                bench=getattr(fix, "bench", None))
    v.applicability, v.reason = applicability(fix, ctx)
    v.state = fix_state(fix)
    return v


def fix_state(fix) -> Any:
    """The fix's state in this process, from its one source (`Fix.state()`)."""
    try:
        st = fix.state()
    except Exception:
        return NA
    return {"applied": "applied", "pending": "applied (pending import)",
            "not-applied": "not applied"}.get(st.state, st.state)


def refusal(fix, ctx) -> str | None:
    """Why `a` must not apply this fix here (None: it may): only an `applicable` fix is applied."""
    status, reason = applicability(fix, ctx)
    if status == "applicable":
        return None
    return f"not applied: {fix.id} is {status}" + (f" ({reason})" if reason else "")


def apply_fix(fix, ctx=None) -> str:
    """Apply in this process; the acknowledgement text (raises DiagError/FixError on refusal).

    A fix that is not `applicable` to the target is refused with its reason. A fix that needs the
    target's source to choose what to patch (`fix.target`) gets the TUI's.
    """
    why = refusal(fix, ctx) if ctx is not None else None
    if why:
        raise DiagError(why)
    if ctx is not None and getattr(fix, "target", False) is None:
        fix.target = ctx.target
    fix.apply()
    return f"applied in this process: {fix_state(fix)}"


def revert_fix(fix) -> str:
    if not getattr(fix, "revertible", True):
        return f"{fix.id} is not revertible"
    fix.revert()
    return f"reverted in this process: {fix_state(fix)}"
