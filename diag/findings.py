"""The finding model: what every probe returns and every renderer reads."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class Status(str, Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
    ERROR = "error"


# `error` ranks with `fail`: a CI gate must not pass when a check crashed.
SEVERITY = {Status.OK: 0, Status.SKIP: 0, Status.WARN: 1, Status.FAIL: 2, Status.ERROR: 2}


@dataclass
class Evidence:
    """One typed piece of evidence: a metric, a source location, a table row or a note; any kind
    may carry `data`, machine-readable fields (a row is nothing else)."""

    kind: str  # "metric" | "location" | "row" | "note"
    metric: str | None = None
    value: Any = None
    unit: str | None = None
    threshold: Any = None
    file: str | None = None
    line: int | None = None
    function: str | None = None
    detail: str | None = None
    data: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    def short(self) -> str:
        if self.kind == "metric":
            unit = f" {self.unit}" if self.unit else ""
            thr = f" (threshold {self.threshold})" if self.threshold is not None else ""
            text = f"{self.metric} = {self.value}{unit}{thr}"
        elif self.kind == "location":
            loc = f"{self.file}:{self.line}" if self.line else f"{self.file}"
            text = f"{loc} {self.function or ''}".rstrip()
        elif self.kind == "row" and self.data:
            text = "  ".join(f"{k}={v}" for k, v in self.data.items())
        else:
            text = ""
        if self.detail:
            text = f"{text}: {self.detail}" if text else self.detail
        return text


def metric(name: str, value: Any, unit: str | None = None, threshold: Any = None,
           detail: str | None = None, data: dict[str, Any] | None = None) -> Evidence:
    """`data`: machine-readable fields for renderers (the TUI reads these, never `detail`)."""
    return Evidence("metric", metric=name, value=value, unit=unit, threshold=threshold,
                    detail=detail, data=data)


def location(file: str, line: int | None, function: str | None = None,
             detail: str | None = None, data: dict[str, Any] | None = None) -> Evidence:
    return Evidence("location", file=file, line=line, function=function, detail=detail,
                    data=data)


def row(detail: str | None = None, **data: Any) -> Evidence:
    return Evidence("row", data=data, detail=detail)


def note(text: str) -> Evidence:
    return Evidence("note", detail=text)


@dataclass
class Finding:
    probe: str
    status: Status
    title: str
    summary: str
    evidence: list[Evidence] = field(default_factory=list)
    hint: str | None = None
    fixes: list[str] = field(default_factory=list)
    # The target itself is broken (a worker file missing, empty or not parsing): the run
    # exits 3 like any target error; in JSON only when true.
    target_error: bool = False
    # diag could not read what it looks for (the draft-extend gate's shape): it cannot tell.
    # The run exits 3 naming the file unless the user accepts warnings (--allow-unrecognised).
    unrecognised: bool = False

    def to_dict(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"target_error": True} if self.target_error else {}
        if self.unrecognised:
            extra["unrecognised"] = True
        return {
            "probe": self.probe,
            "status": self.status.value,
            "title": self.title,
            "summary": self.summary,
            "evidence": [e.to_dict() for e in self.evidence],
            "hint": self.hint,
            "fixes": list(self.fixes),
            **extra,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        return cls(
            probe=d["probe"], status=Status(d["status"]), title=d["title"],
            summary=d["summary"], evidence=[Evidence(**e) for e in d.get("evidence", [])],
            hint=d.get("hint"), fixes=list(d.get("fixes", [])),
            target_error=bool(d.get("target_error", False)),
            unrecognised=bool(d.get("unrecognised", False)),
        )

