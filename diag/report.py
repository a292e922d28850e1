"""Rendering findings: human lines (not a stable format) and the versioned JSON schema."""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
from collections import Counter
from typing import Any

import click

from diag import __version__
from diag.errors import EXIT_FINDINGS, EXIT_OK, EXIT_OPERATIONAL
from diag.findings import SEVERITY, Finding, Status
from diag.schemas import SCHEMA_VERSION, finite

FAIL_ON = {"warn": 1, "fail": 2}

_STYLE = {
    Status.OK: ("ok", "green"),
    Status.WARN: ("warn", "yellow"),
    Status.FAIL: ("FAIL", "red"),
    Status.SKIP: ("skip", "bright_black"),
    Status.ERROR: ("ERROR", "magenta"),
}


def exit_code(findings: list[Finding], fail_on: str, allow_unrecognised: bool = False) -> int:
    """1 for a finding at or above `fail_on`; 3 (a target error) when a finding says the target
    itself is broken, or that diag could not read what it looks for (unless
    `allow_unrecognised`: then it is the warning it is), whatever `fail_on`."""
    if any(f.target_error for f in findings) or unrecognised(findings, allow_unrecognised):
        return EXIT_OPERATIONAL
    threshold = FAIL_ON[fail_on]
    return EXIT_FINDINGS if any(SEVERITY[f.status] >= threshold for f in findings) else EXIT_OK


def unrecognised(findings: list[Finding], allowed: bool = False) -> list[Finding]:
    """The findings that say diag could not tell (none when the user accepts them)."""
    return [] if allowed else [f for f in findings if f.unrecognised]


def unrecognised_line(f: Finding) -> str:
    """The one line on stderr for a finding diag could not tell (it names the file)."""
    return (f"{f.probe}: {f.summary} (diag cannot tell: exit 3; --allow-unrecognised accepts it "
            "as a warning)")


def counts(findings: list[Finding]) -> dict[str, int]:
    c = Counter(f.status.value for f in findings)
    return {s.value: c.get(s.value, 0) for s in Status}


def to_json(findings: list[Finding], header: dict[str, Any], fail_on: str,
            allow_unrecognised: bool = False) -> str:
    doc = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "diag", "version": __version__},
        **header,
        "fail_on": fail_on,
        "allow_unrecognised": allow_unrecognised,
        "exit_code": exit_code(findings, fail_on, allow_unrecognised),
        "summary": counts(findings),
        "findings": [f.to_dict() for f in findings],
    }
    return json.dumps(finite(doc), indent=2, default=str)


DEFAULT_WIDTH = 100  # the report's width when stdout is not a terminal and COLUMNS is unset


def report_width() -> int:
    """`COLUMNS` when set, else the terminal's width, else 100 (a pipe, a file, CI)."""
    try:
        cols = int(os.environ.get("COLUMNS", ""))
        if cols > 0:
            return max(cols, 40)
    except ValueError:
        pass
    try:
        if sys.stdout is not None and sys.stdout.isatty():
            return max(shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns, 40)
    except (OSError, ValueError):
        pass
    return DEFAULT_WIDTH


def _wrap(text: str, width: int, indent: int, hang: int = 2) -> list[str]:
    """One logical line as lines of at most `width` characters, continuations indented."""
    pad = " " * indent
    return textwrap.wrap(text, width=width, initial_indent=pad,
                         subsequent_indent=pad + " " * hang, break_long_words=True,
                         break_on_hyphens=False) or [pad]


def verdict(findings: list[Finding], configured: bool, fail_on: str = "fail",
            allow_unrecognised: bool = False) -> str:
    """The last line: what the run proved, and the next command when nothing was configured."""
    c = counts(findings)
    nxt = ("; next: diag diagnose --attention-backend NAME --speculative-num-steps N "
           "(the server's settings), or --server URL")
    if any(f.target_error for f in findings):
        return ("verdict: the SGLang tree is broken (see ERROR): reinstall it or pass "
                "--sglang VERSION")
    if unrecognised(findings, allow_unrecognised):
        return ("verdict: diag cannot tell (see the `not recognised` warning and the file it "
                "names): report it, or pass --allow-unrecognised to accept warnings only")
    bad = c["fail"] + c["error"] + (c["warn"] if fail_on == "warn" else 0)
    if bad:
        what = "for the configuration under audit" if configured else "in the release"
        return (f"verdict: {bad} problem{'s' if bad != 1 else ''} {what} (see the FAIL/ERROR "
                "lines and the fixes they name)" + ("" if configured else nxt))
    if not configured:
        return ("verdict: no failure, but nothing is proven for a server: no configuration "
                "given, the warnings list what could fall back" + nxt)
    if c["warn"]:
        return (f"verdict: no failure for the configuration under audit; {c['warn']} "
                f"warning{'s' if c['warn'] != 1 else ''} to read")
    return "verdict: no problem found for the configuration under audit"


REACH_WORDS = {"reaches": "on-path"}


def _more(hidden: list) -> str:
    """What the hidden evidence is, counted so that the parts add up to the number shown."""
    c = Counter(((e.data or {}).get("reach"), e.kind) for e in hidden)

    def label(reach: str | None, kind: str, n: int) -> str:
        if reach:  # a census site: where it runs (`data.reach`, docs/probes/metadata-syncs.md)
            return f"{n} {REACH_WORDS.get(reach, reach)} site{'s' if n != 1 else ''}"
        return f"{n} {kind}{'s' if n != 1 else ''}"

    parts = [label(r, k, n) for (r, k), n in sorted(c.items(), key=lambda kv: -kv[1])]
    return f"… {len(hidden)} more: {', '.join(parts)} (-v or --json)"


def _phase_table(rows: list, width: int, verbose: bool) -> list[str]:
    """Per speculative phase of the configuration under audit: mode, where it was read, why,
    and (captured phases) how many run-time fallbacks; -v lists them."""
    out = _wrap(f"{'phase':<14} {'mode':<8} {'backend':<12} read at", width, 8)
    for e in rows:
        d = e.data
        where = f"{d['file']}:{d['line']}" if d.get("file") else "-"
        fb = d.get("runtime_fallbacks") or []
        out += _wrap(f"{d['phase']:<14} {d['mode']:<8} {d.get('backend', ''):<12} {where}"
                     + (f"  ({len(fb)} run-time fallback{'s' if len(fb) != 1 else ''})"
                        if fb else ""), width, 8)
        out += _wrap(f"why: {e.detail}", width, 10)
        if verbose:
            for x in fb:
                out += _wrap(f"eager if {x['condition']} [{x['reason']}] "
                             f"{x['file']}:{x['line']}", width, 12)
    return out


def render_human(findings: list[Finding], header_line: str | None = None,
                 verbose: bool = False, width: int | None = None,
                 notes: list[str] | None = None, last: str | None = None) -> str:
    """The human report, no line wider than `width` (default `report_width()`); `notes` go
    after the counts, `last` (the verdict) ends it."""
    width = width or report_width()
    out: list[str] = []
    if header_line:
        out += [click.style(ln, bold=True) for ln in _wrap(header_line, width, 0)]
    for f in findings:
        label, color = _STYLE[f.status]
        first = _wrap(f"[{label}] {f.probe}: {f.summary}", width, 0, hang=8)
        out.append(first[0].replace(f"[{label}]", f"[{click.style(label, fg=color, bold=True)}]",
                                    1))
        out += first[1:]
        phase_rows = [e for e in f.evidence if e.kind == "row" and e.data
                      and "phase" in e.data and "mode" in e.data and "config" in e.data]
        if phase_rows:
            out += _phase_table(phase_rows, width, verbose)
        rest = [e for e in f.evidence if e not in phase_rows]
        limit = None if verbose else 12
        shown = rest if limit is None else rest[:limit]
        for e in shown:
            text = e.short()
            if text:
                out += _wrap(text, width, 8)
        if limit is not None and len(rest) > limit:
            out += _wrap(_more(rest[limit:]), width, 8)
        if f.hint:
            out += _wrap(f"hint: {f.hint}", width, 8)
        if f.fixes and f.status in (Status.WARN, Status.FAIL):
            out += _wrap(f"fix: {', '.join(f.fixes)}", width, 8)
    c = counts(findings)
    parts = [f"{c[s]} {s}" for s in ("ok", "warn", "fail", "error", "skip") if c[s]]
    out += _wrap(f"{len(findings)} findings: " + (", ".join(parts) if parts else "none"),
                 width, 0)
    for n in notes or []:
        out += _wrap(n, width, 0)
    if last:
        out += _wrap(last, width, 0)
    return "\n".join(out)
