"""The findings view: each probe's finding, run from the TUI or pending.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from diag.findings import Finding, Status
from diag.tui.data.common import concern, short_error

# ---------------------------------------------------------------- findings


@dataclass
class FindingView:
    probe: str
    state: str  # "pending" | "running" | a Status value
    title: str
    summary: str
    detail: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    finding: Finding | None = None


def pending_findings(probe_ids: list[str]) -> list[FindingView]:
    return [FindingView(p, "pending", p, concern(p)) for p in probe_ids]


def probe_ids() -> list[str]:
    from diag.probes import all_ids

    return all_ids()


def run_probe(ctx, probe_id: str) -> list[Finding]:
    """The probe's findings; a probe that cannot load or crashes becomes an `error` finding."""
    from diag.probes.base import run_probe as _run

    try:
        from diag.probes import get

        probe = get(probe_id)
    except Exception as e:
        return [Finding(probe_id, Status.ERROR, probe_id, f"probe not available: {short_error(e)}")]
    found = _run(probe, ctx)
    try:  # the fixes a finding names: the same resolution as `diag diagnose` and `fix list`
        from diag.fixes.advice import advise, resolve

        return advise(found, resolve(ctx))
    except Exception as e:  # never name a fix that was not resolved here
        for f in found:
            f.fixes = []
            f.hint = f"{f.hint + '; ' if f.hint else ''}fix advice unavailable: {short_error(e)}"
        return found


def finding_view(f: Finding) -> FindingView:
    detail = [e.short() for e in f.evidence if e.short()]
    if f.hint:
        detail.append(f"hint: {f.hint}")
    if f.fixes:
        detail.append(f"fix: {', '.join(f.fixes)}")
    return FindingView(f.probe, f.status.value, f.title, f.summary, detail, list(f.fixes), f)
