"""One answer to "what can be done": which fixes apply here, and what each finding may name.

`resolve(ctx)` judges every registered fix for the context's target, platform and configuration
(through the orchestrator, so a refused dependency refuses its dependants, as `apply` would).
`advise(findings, resolved)` sets each finding's `fixes` to those that are `applicable` here and
would change that finding (`Fix.would_change`), and when a fix the finding's probe declares is
dropped, rewrites the hint to say why nothing applies and what to do instead. `diag diagnose`,
`diag probe`, `diag fix list`, `diag fix check` and the TUI all read these two.
"""

from __future__ import annotations

import re

from diag import fixes
from diag.context import Context
from diag.findings import Finding, Status
from diag.fixes import orchestrator
from diag.fixes.base import APPLICABLE, Applicability


def resolve(ctx: Context) -> dict[str, Applicability]:
    """fix id -> its applicability to `ctx`'s target, platform and configuration."""
    memo: dict[str, Applicability] = {}
    return {fid: orchestrator.judge(fid, ctx.target, ctx.platform, ctx.config, memo)
            for fid in fixes.all_ids()}


def _candidates(f: Finding, resolved: dict[str, Applicability]) -> list[str]:
    out = list(f.fixes)
    for fid in resolved:
        if fid not in out and f.probe in fixes.spec(fid).addresses:
            out.append(fid)
    return [x for x in out if x in resolved]


def _mentions(text: str | None, fid: str) -> bool:
    return bool(text) and re.search(rf"(?<![\w-]){re.escape(fid)}(?![\w-])", text) is not None


def advise(findings: list[Finding], resolved: dict[str, Applicability]) -> list[Finding]:
    """The findings, each naming only fixes applicable here that would change it (in place)."""
    for f in findings:
        cands = _candidates(f, resolved)
        if not cands:
            continue
        kept: list[str] = []
        why: list[str] = []
        instead: list[str] = []
        for fid in cands:
            a = resolved[fid]
            if a.status == APPLICABLE:
                try:
                    change, because = fixes.get(fid).would_change(f, a)
                except Exception as e:  # a broken matcher never hides the finding
                    change, because = False, f"cannot tell ({type(e).__name__}: {e})"
                if change:
                    kept.append(fid)
                    continue
                if f.status in (Status.WARN, Status.FAIL):
                    why.append(f"{fid} would not change this: {because}")
            else:
                why.append(f"{fid} is {a.status} here: {a.reason}")
            if a.instead and a.instead not in instead:
                instead.append(a.instead)
        f.fixes = kept
        dropped = [x for x in cands if x not in kept]
        if f.status not in (Status.WARN, Status.FAIL):
            if any(_mentions(f.hint, x) for x in dropped):
                f.hint = None  # nothing to change: no advice toward a fix
            continue
        if f.hint and not any(_mentions(f.hint, x) for x in dropped):
            continue  # the probe's own hint names no fix that is dropped
        if kept:
            f.hint = "apply " + ", ".join(f"{k} ({resolved[k].reason})" for k in kept) + (
                "; " + "; ".join(why) if why else "")
        else:
            f.hint = "no diag fix applies: " + "; ".join(why) + (
                ". Instead: " + "; ".join(instead) if instead else "")
    return findings
