"""What every view shares: `NA` (what cannot be read), the probe and fix names a view
shows, and a failure as one short line.
"""

from __future__ import annotations

from typing import Any

from diag.errors import DiagError


class _NotApplicable(str):
    """What cannot be read: renders as 'n/a' and is falsy (test it with `is NA`: as a str it
    also equals "n/a")."""

    def __new__(cls) -> _NotApplicable:
        return super().__new__(cls, "n/a")

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "NA"


NA: Any = _NotApplicable()

# Expected failures: their message is already one readable line.
DiagErrorTypes = (DiagError,)

def concern(probe_id: str) -> str:
    """The problem a probe watches (its declaration), shown before it has run."""
    from diag.probes import spec

    try:
        return spec(probe_id).concern
    except Exception:
        return ""


def fix_of_probe(probe_id: str) -> str | None:
    """The first fix a probe declares as addressing it (None: none)."""
    from diag.probes import spec

    try:
        fixes = spec(probe_id).fixes
    except Exception:
        return None
    return fixes[0] if fixes else None


def short_error(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
