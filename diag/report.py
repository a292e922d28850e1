"""Rendering findings: human lines (not a stable format) and the versioned JSON schema."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import click

from diag import __version__
from diag.errors import EXIT_FINDINGS, EXIT_OK, EXIT_OPERATIONAL
from diag.findings import SEVERITY, Finding, Status
from diag.schemas import SCHEMA_VERSION

FAIL_ON = {"warn": 1, "fail": 2}

_STYLE = {
    Status.OK: ("ok", "green"),
    Status.WARN: ("warn", "yellow"),
    Status.FAIL: ("FAIL", "red"),
    Status.SKIP: ("skip", "bright_black"),
    Status.ERROR: ("ERROR", "magenta"),
}


def exit_code(findings: list[Finding], fail_on: str) -> int:
    """1 for a finding at or above `fail_on`; 3 (a target error) when a finding says the target
    itself is broken, whatever `fail_on`."""
    if any(f.target_error for f in findings):
        return EXIT_OPERATIONAL
    threshold = FAIL_ON[fail_on]
    return EXIT_FINDINGS if any(SEVERITY[f.status] >= threshold for f in findings) else EXIT_OK


def counts(findings: list[Finding]) -> dict[str, int]:
    c = Counter(f.status.value for f in findings)
    return {s.value: c.get(s.value, 0) for s in Status}


def to_json(findings: list[Finding], header: dict[str, Any], fail_on: str) -> str:
    doc = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "diag", "version": __version__},
        **header,
        "fail_on": fail_on,
        "exit_code": exit_code(findings, fail_on),
        "summary": counts(findings),
        "findings": [f.to_dict() for f in findings],
    }
    return json.dumps(doc, indent=2, default=str)


def render_human(findings: list[Finding], header_line: str | None = None,
                 verbose: bool = False) -> str:
    out: list[str] = []
    if header_line:
        out.append(click.style(header_line, bold=True))
    for f in findings:
        label, color = _STYLE[f.status]
        out.append(f"[{click.style(label, fg=color, bold=True):>5}] {f.probe}: {f.summary}")
        limit = None if verbose else 12
        shown = f.evidence if limit is None else f.evidence[:limit]
        for e in shown:
            text = e.short()
            if text:
                out.append(f"        {text}")
        if limit is not None and len(f.evidence) > limit:
            out.append(f"        … {len(f.evidence) - limit} more (-v or --json)")
        if f.hint:
            out.append(f"        hint: {f.hint}")
        if f.fixes and f.status in (Status.WARN, Status.FAIL):
            out.append(f"        fix: {', '.join(f.fixes)}")
    c = counts(findings)
    parts = [f"{c[s]} {s}" for s in ("ok", "warn", "fail", "error", "skip") if c[s]]
    out.append(f"{len(findings)} findings: " + (", ".join(parts) if parts else "none"))
    return "\n".join(out)
