"""Bench results: before/after samples, median and spread, ratio, rendered like
`torch.utils.benchmark.Compare`. The benches themselves live beside their fixes
(`Fix.bench = "module:function"`, called as `function(params, progress) -> BenchResult`)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

HUGE = 1e9  # the largest number any --param takes unless its bench says less


@dataclass(frozen=True)
class Param:
    """One `--param KEY=VALUE` a bench takes, declared beside the bench (`PARAMS`), so that
    `diag bench` rejects a bad value before any work, naming the bench."""

    kind: type  # int, float or str
    minimum: float | None = None
    choices: tuple[str, ...] = ()
    doc: str = ""
    # a number past it is a typo, not a bench (1e11 objects: every child dies); every number a
    # bench takes declares its own (docs/bench.md lists them)
    maximum: float | None = None

    def __post_init__(self) -> None:
        if self.kind is not str and (self.maximum is None or self.maximum > HUGE):
            raise TypeError("a number --param declares its maximum (at most HUGE)")

    def parse(self, raw: str) -> Any:
        """The value, or ValueError saying what was expected."""
        if self.kind is str:
            if self.choices and raw not in self.choices:
                raise ValueError(f"expected one of {', '.join(self.choices)}")
            return raw
        try:
            value = self.kind(raw)
        except ValueError:
            raise ValueError(f"expected {'an integer' if self.kind is int else 'a number'}"
                             + (f" >= {self.minimum:g}" if self.minimum is not None else "")) \
                from None
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("expected a finite number")
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"must be >= {self.minimum:g}")
        if self.maximum is not None and value > self.maximum:
            raise ValueError(f"must be <= {self.maximum:g}")
        return value


_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


@dataclass
class Stats:
    median: float
    p25: float
    p75: float
    min: float
    n: int

    @property
    def iqr(self) -> float:
        return self.p75 - self.p25

    @classmethod
    def of(cls, samples: list[float]) -> Stats:
        if not samples:
            raise ValueError("no samples")
        s = sorted(samples)
        if len(s) >= 4:
            q = statistics.quantiles(s, n=4)
            p25, p75 = q[0], q[2]
        else:
            p25, p75 = s[0], s[-1]
        return cls(statistics.median(s), p25, p75, s[0], len(s))


@dataclass
class Row:
    """One measured quantity, before and after the fix (unit is the samples' unit)."""

    metric: str
    unit: str  # "s" for times (rendered in a readable unit), else a count unit like "syncs"
    before: Stats | None
    after: Stats | None
    note: str | None = None
    # Why a worse after/before is expected (e.g. "collects at the stop"): shown beside the ratio.
    expected: str | None = None

    @property
    def ratio(self) -> float | None:
        if self.before and self.after and self.before.median:
            return self.after.median / self.before.median
        return None


@dataclass
class BenchResult:
    id: str  # the fix id
    title: str
    device: str
    params: dict[str, Any] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: str | None = None  # why it could not run here

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for r, row in zip(d["rows"], self.rows):
            r["ratio"] = row.ratio
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BenchResult:
        rows = [Row(r["metric"], r["unit"],
                    Stats(**r["before"]) if r.get("before") else None,
                    Stats(**r["after"]) if r.get("after") else None, r.get("note"),
                    r.get("expected"))
                for r in d.get("rows", [])]
        return cls(d["id"], d["title"], d["device"], d.get("params", {}), rows,
                   d.get("notes", []), d.get("skipped"))


def time_calls(fn: Callable[[], Any], repeats: int, warmup: int = 2,
               sync: Callable[[], Any] | None = None) -> list[float]:
    """Host wall time of each call (seconds); `sync` runs after each call, outside the timing."""
    for _ in range(warmup):
        fn()
        if sync:
            sync()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
        if sync:
            sync()
    return out


def _time_unit(rows: list[Row]) -> str:
    vals = [s.median for r in rows if r.unit == "s" for s in (r.before, r.after) if s]
    if not vals:
        return "us"
    m = min(vals)
    return "s" if m >= 1 else "ms" if m >= 1e-3 else "us" if m >= 1e-6 else "ns"


def _cell(s: Stats | None, unit: str, tunit: str) -> str:
    if s is None:
        return "-"
    scale = _UNITS[tunit] if unit == "s" else 1.0
    med, iqr = s.median / scale, s.iqr / scale
    return f"{med:,.3g} ± {iqr:,.2g}" if iqr else f"{med:,.3g}"


def render(results: list[BenchResult]) -> str:
    """A `torch.utils.benchmark.Compare`-style table per bench: median ± IQR, ratio."""
    out: list[str] = []
    for res in results:
        title = f" {res.title} ({res.device}) "
        if res.skipped:
            out.append(f"[{title:-^78}]\n  not run: {res.skipped}\n")
            continue
        tunit = _time_unit(res.rows)
        head = ["", "before", "after", "after/before"]
        body = []
        for r in res.rows:
            name = r.metric + (f" [{r.unit}]" if r.unit != "s" else "")
            ratio = f"{r.ratio:.3f}" if r.ratio is not None else "-"
            body.append([name, _cell(r.before, r.unit, tunit), _cell(r.after, r.unit, tunit), ratio])
        widths = [max(len(x[i]) for x in [head, *body]) for i in range(4)]

        def line(cols: list[str], widths: list[int] = widths) -> str:
            return " | ".join(c.rjust(w) if i else c.ljust(w)
                              for i, (c, w) in enumerate(zip(cols, widths)))

        out.append(f"[{title:-^{max(78, len(line(head)))}}]")
        out.append(line(head))
        out.extend(line(b) for b in body)
        params = ", ".join(f"{k}={v}" for k, v in res.params.items())
        out.append(f"Times are in {'microseconds (us)' if tunit == 'us' else tunit}; "
                   f"median ± IQR over n samples." + (f" Params: {params}." if params else ""))
        out.extend(f"  {n}" for n in res.notes)
        out.append("")
    return "\n".join(out)
