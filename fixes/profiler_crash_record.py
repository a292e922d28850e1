"""The profiler crash on real servers, before and after `profiler-controlled-teardown`, as the
GPU lane recorded it (`benchmarks/gpu_engine/lane.py --only crash`, turned into
`recorded/profiler-crash.json` by `benchmarks/gpu_engine/record_crash.py`).

Why apart from the bench: the crash needs a GPU, a real server and minutes; `diag bench` measures
the teardown on the local device. This reads the one recorded result so that the bench's
profiler section (text, JSON, TUI) shows it beside the timings, labelled with where and when it
was measured and with its verdict as the lane judged it ("not reproduced" is never "prevented").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RECORD = Path(__file__).resolve().parent / "recorded" / "profiler-crash.json"
VERDICTS = ("prevented", "not reproduced", "not prevented", "other crash", "not run")


def load(path: Path = RECORD) -> dict[str, Any] | None:
    """The recorded result, or None when there is none or it is not one (never raises)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(doc, dict) and doc.get("verdict") in VERDICTS and all(
        isinstance(doc.get(s), dict) and isinstance(doc[s].get("crashed"), int)
        and isinstance(doc[s].get("profiles_sent"), int)
        and isinstance(doc[s].get("tested"), int) for s in ("plain", "fix"))
    return doc if ok else None


def _side(s: dict[str, Any]) -> str:
    return (f"{s['crashed']} crashed of {s['tested']} servers over {s['profiles_sent']} "
            f"profiles")


def note(doc: dict[str, Any]) -> str:
    """One line for the bench's notes."""
    m = doc.get("measured") or {}
    where = ", ".join(str(x) for x in (m.get("where"), m.get("when")) if x) or "unknown place"
    what = {"prevented": "the fix prevented it",
            "not reproduced": "not reproduced: no plain server crashed, nothing shown prevented",
            "not prevented": "a server under the fix crashed too",
            "other crash": "plain servers crashed without the profiler-teardown signature",
            "not run": "a side got no profile"}[doc["verdict"]]
    return (f"on real servers (recorded on {where}; SGLANG_PROFILE_V2=1, stage profiles while "
            f"serving): before (plain) {_side(doc['plain'])}; after (under the fix) "
            f"{_side(doc['fix'])}: {what}")
