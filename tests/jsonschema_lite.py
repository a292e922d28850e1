"""The JSON report schema (schema_version 1) as the README documents it, checked by hand
(no jsonschema dependency): every key, its type, and the allowed values."""

from __future__ import annotations

from typing import Any

STATUSES = {"ok", "warn", "fail", "skip", "error"}
EVIDENCE_KINDS = {"metric", "location", "row", "note"}
EVIDENCE_KEYS = {"kind", "metric", "value", "unit", "threshold", "file", "line", "function",
                 "detail", "data"}
FIX_STATUSES = {"applicable", "upstream", "not-needed", "refused"}


def check_finding(f: dict[str, Any]) -> None:
    assert set(f) == {"probe", "status", "title", "summary", "evidence", "hint", "fixes"}, set(f)
    assert isinstance(f["probe"], str) and f["status"] in STATUSES
    assert isinstance(f["title"], str) and isinstance(f["summary"], str) and f["summary"]
    assert f["hint"] is None or isinstance(f["hint"], str)
    assert isinstance(f["fixes"], list) and all(isinstance(x, str) for x in f["fixes"])
    assert isinstance(f["evidence"], list)
    for e in f["evidence"]:
        assert set(e) <= EVIDENCE_KEYS and e["kind"] in EVIDENCE_KINDS, e
        assert None not in e.values(), e  # absent keys are omitted, never null
        if e["kind"] == "metric":
            assert isinstance(e["metric"], str) and "value" in e
        elif e["kind"] == "location":
            assert isinstance(e["file"], str)
            assert "line" not in e or (isinstance(e["line"], int) and e["line"] > 0)
        elif e["kind"] == "row":
            assert isinstance(e["data"], dict)
        else:
            assert isinstance(e["detail"], str)


def check_report(doc: dict[str, Any]) -> None:
    assert doc["schema_version"] == 1
    assert doc["tool"]["name"] == "diag" and isinstance(doc["tool"]["version"], str)
    assert set(doc["target"]) == {"root", "version", "origin"}
    assert doc["platform"] in ("hip", "cuda")
    assert set(doc["config"]) >= {"attention_backend", "speculative_num_steps",
                                  "speculative_algorithm", "disable_cuda_graph", "source"}
    assert doc["server"] is None or isinstance(doc["server"], str)
    assert doc["fail_on"] in ("warn", "fail") and doc["exit_code"] in (0, 1)
    assert set(doc["summary"]) == STATUSES
    assert sum(doc["summary"].values()) == len(doc["findings"])
    for f in doc["findings"]:
        check_finding(f)


def check_fix_list(doc: dict[str, Any]) -> None:
    assert doc["schema_version"] == 1 and doc["platform"] in ("hip", "cuda")
    assert isinstance(doc["fixes"], list) and doc["fixes"]
    for fx in doc["fixes"]:
        assert {"id", "status", "reason"} <= set(fx)
        assert fx["status"] in FIX_STATUSES and isinstance(fx["reason"], str)
