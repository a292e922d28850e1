"""The `e` export: every view's rows as one JSON document (schema tui-export-v1).
"""

from __future__ import annotations

import json
import time
from typing import Any

from diag.bench import Stats
from diag.schemas import finite
from diag.tui.data.common import NA
from diag.tui.data.findings import FindingView
from diag.tui.data.fixes import FixView
from diag.tui.data.header import Header
from diag.tui.data.sources import ProcessView, SourceState
from diag.tui.data.timings import SyncRow, TimingRow, ratio_text

# ---------------------------------------------------------------- export


def export_doc(header: Header, findings: list[FindingView], fix_rows: list[FixView],
               timings: list[TimingRow], syncs: list[SyncRow],
               sources: list[SourceState],
               processes: list[ProcessView] | None = None, live: Any = None) -> dict[str, Any]:
    """Everything on screen, as a JSON document (`kind: diag-tui`; schema tui-export-v1.json)."""
    from diag.schemas import SCHEMA_VERSION

    def st(s: Stats | None):
        return None if s is None else {"median": s.median, "p25": s.p25, "p75": s.p75,
                                       "min": s.min, "n": s.n}

    def val(v: Any):
        return None if v is NA else v

    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "diag-tui",
        "exported_at": time.time(),
        "target": header.target, "version": val(header.version),
        "platform": val(header.platform), "gpu": val(header.gpu),
        "findings": [f.finding.to_dict() if f.finding else
                     {"probe": f.probe, "status": f.state, "summary": f.summary}
                     for f in findings],
        "fixes": [{"id": x.id, "applicability": val(x.applicability), "reason": x.reason,
                   "state": val(x.state), "ack": x.ack} for x in fix_rows],
        "timings": [{"fix": t.fix, "metric": t.metric, "unit": t.unit, "before": st(t.before),
                     "after": st(t.after), "ratio": t.ratio, "change": ratio_text(t)[0],
                     "expected": t.expected or None, "source": t.source, "note": t.note,
                     "notes": t.notes, "release": t.release or None, "age_s": t.age}
                    for t in timings],
        "syncs": [{"builder": s.builder, "location": s.location, "before": val(s.before),
                   "after": val(s.after), "source": s.source} for s in syncs],
        "sources": [{"name": s.name, "ok": s.ok, "text": s.text} for s in sources],
        "resolved_from": dict(header.sources),
        "live": live.to_dict() if live is not None else None,
        "engine_processes": [{"pid": p.pid, "alive": p.alive, "stopped": p.stopped,
                              "sglang": p.sglang,
                              "fixes": p.fixes, "last_event": p.last, "errors": p.errors,
                              "last_error": p.error or None,
                              "events_lost": p.lost or None, "died": p.died or None}
                             for p in processes or []],
    }


def write_export(doc: dict[str, Any], path: str) -> str:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(finite(doc), fh, indent=2, default=str)
    return path
