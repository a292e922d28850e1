"""What the TUI shows, as plain data: the app's workers fill it, its screens and `--once` read it.

Headless (no textual import), so the same state renders in the app, as one text frame, and as
the exported JSON. Every live value keeps the time it was read (`Model.now`, monotonic), so each
surface can say how old it is and mark it stale.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from diag.bench import BenchResult
from diag.findings import Finding
from diag.tui import data
from diag.tui.data import (
    NA,
    FindingView,
    FixView,
    Header,
    ProcessView,
    SourceState,
    SyncRow,
    TimingRow,
)

SERIES_LEN = 60  # points kept per chart
STALE_MIN_S = 3.0  # a live value older than this (and than 3 poll intervals) is marked stale


@dataclass
class Model:
    header: Header = field(default_factory=Header)
    findings: dict[str, list[FindingView]] = field(default_factory=dict)
    fixes: dict[str, FixView] = field(default_factory=dict)
    bench: dict[str, BenchResult] = field(default_factory=dict)
    bench_progress: str = ""
    engine_timings: list[TimingRow] = field(default_factory=list)
    engine_syncs: list[SyncRow] = field(default_factory=list)
    engine_states: dict[str, str] = field(default_factory=dict)
    engine_procs: list[ProcessView] = field(default_factory=list)
    server_values: dict[str, float] = field(default_factory=dict)
    server_states: dict[str, str] = field(default_factory=dict)
    server_builders: dict[str, float] = field(default_factory=dict)
    series: dict[str, deque] = field(default_factory=dict)
    series_at: dict[str, float] = field(default_factory=dict)  # name → when its last point came
    series_src: dict[str, str] = field(default_factory=dict)  # name → "run dir" | "server"
    sources: dict[str, SourceState] = field(default_factory=dict)
    source_ok_at: dict[str, float] = field(default_factory=dict)  # name → last good read
    requests: dict[str, tuple[str, str]] = field(default_factory=dict)  # id → (fix, action)
    _points: dict[str, int] = field(default_factory=dict)  # run-dir series → points so far
    live: Any = None  # diag.engine.live.Live: the engine's own figures (what fix status prints)
    message: str = ""
    poll_interval: float = 1.0
    now: Callable[[], float] = time.monotonic

    # -------------------------------------------------------------- updates

    def set_pending(self, probe_ids: list[str]) -> None:
        for v in data.pending_findings(probe_ids):
            self.findings.setdefault(v.probe, [v])

    def set_running(self, probe_id: str) -> None:
        for v in self.findings.get(probe_id, []):
            v.state = "running"

    def set_findings(self, probe_id: str, found: list[Finding]) -> None:
        self.findings[probe_id] = [data.finding_view(f) for f in found]

    def set_engine(self, state: Any, events: list[dict[str, Any]]) -> None:
        """A run directory's state (`rundir.read_state`) and all its events so far."""
        self.set_engine_view(state, data.engine_view(events),
                             data.engine_processes(state, events))

    def set_engine_view(self, state: Any, view: tuple[list[TimingRow], list[SyncRow],
                                                      dict[str, list[float]]],
                        procs: list[ProcessView] | None = None) -> list[str]:
        """As `set_engine`, with `data.engine_view(events)` already computed (off the UI thread:
        it walks every event kept, up to `RunDirReader.MAX_EVENTS`). Returns the lines of the
        control requests acknowledged since the last call ("apply FIX: pid 1 ok → applied")."""
        self.engine_timings, self.engine_syncs, series = view
        self.engine_states = data.engine_fix_states(state)
        self.engine_procs = procs if procs is not None else data.engine_processes(state)
        for fid, text in data.engine_acks(state).items():
            if fid in self.fixes:
                self.fixes[fid].ack = text
        t = self.now()
        for name, xs in series.items():
            self.series[name] = deque(xs[-SERIES_LEN:], maxlen=SERIES_LEN)
            self.series_src[name] = "run dir"
            if xs and len(xs) != self._points.get(name):  # new points came in
                self._points[name] = len(xs)
                self.series_at[name] = t
        said = []
        for rid, (fid, action) in list(self.requests.items()):
            line = data.request_acks(state, rid)
            if line is not None:
                said.append(f"{action} {fid}: {line}")
                if "waiting" not in line:
                    del self.requests[rid]
        return said

    def add_server(self, values: dict[str, float], fix_states: dict | None = None,
                   builders: dict[str, float] | None = None) -> None:
        t = self.now()
        self.server_values = dict(values)
        self.server_states = data.server_fix_states(fix_states or {})
        self.server_builders = dict(builders or {})
        for name, v in values.items():
            self.series.setdefault(name, deque(maxlen=SERIES_LEN)).append(v)
            self.series_at[name] = t
            self.series_src[name] = "server"

    def set_source(self, name: str, ok: bool | None, text: str) -> None:
        self.sources[name] = SourceState(name, ok, text)
        if ok:
            self.source_ok_at[name] = self.now()

    # -------------------------------------------------------------- ages

    @property
    def stale_after(self) -> float:
        return max(STALE_MIN_S, 3 * self.poll_interval)

    def age(self, series: str) -> float | None:
        at = self.series_at.get(series)
        return None if at is None else self.now() - at

    def source_age(self, name: str) -> float | None:
        at = self.source_ok_at.get(name)
        return None if at is None else self.now() - at

    def is_stale(self, age: float | None) -> bool:
        return age is not None and age > self.stale_after

    def series_state(self, name: str) -> tuple[float | None, str]:
        """(age of its last point, "" | "idle" | "stale"): a series whose source still answers
        but has nothing new (an idle engine) is idle, not stale; stale is a silent source."""
        age = self.age(name)
        src = self.series_src.get(name)
        src_age = self._live_age(src) if src else age
        if self.is_stale(src_age):
            return age, "stale"
        return age, "idle" if self.is_stale(age) else ""

    # -------------------------------------------------------------- views

    def finding_rows(self) -> list[FindingView]:
        return [v for vs in self.findings.values() for v in vs]

    def all_findings(self) -> list[Finding]:
        return [v.finding for v in self.finding_rows() if v.finding is not None]

    def fix_rows(self) -> list[FixView]:
        out = []
        srv_age = self._live_age("server")
        for v in self.fixes.values():
            srv = self.server_states.get(v.id)
            if srv and self.is_stale(srv_age):
                srv = srv.replace("server:", f"server (STALE {data.fmt_age(srv_age)}):", 1)
            live = "; ".join(x for x in (self.engine_states.get(v.id), srv) if x)
            out.append(v if not live else FixView(v.id, v.title, v.applicability, v.reason,
                                                  f"{v.state}; {live}", v.revertible, v.bench,
                                                  v.ack))
        return out

    def fix_advice(self, fix_id: str) -> str:
        """A finding's fix as the Fixes tab resolves it: `FIX (upstream: reason)`."""
        v = self.fixes.get(fix_id)
        if v is None or v.applicability is NA:
            return fix_id
        return f"{fix_id} ({data.fmt_value(v.applicability)}" + \
            (f": {v.reason})" if v.reason else ")")

    def timing_rows(self) -> list[TimingRow]:
        rows: list[TimingRow] = []
        for res in self.bench.values():
            rows.extend(data.bench_rows(res))
        for r in self.engine_timings:
            r.age = self._live_age("run dir")
        rows.extend(self.engine_timings)
        for name, v in self.server_values.items():
            xs = list(self.series.get(name, []))
            unit = data.series_unit(name)
            live = data.fmt_stats(data.Stats.of(xs), unit) if xs else "-"
            rows.append(TimingRow("(server)", name, unit, None, None, "server",
                                  f"now {data.fmt_value(v, unit)}, last {len(xs)} reads: {live}",
                                  age=self.age(name)))
        for b, n in sorted(self.server_builders.items()):
            rows.append(TimingRow("(server)", f"syncs per build: {b}", "syncs", None, None,
                                  "server", f"now {data.sig(n)}", age=self._live_age("server")))
        return rows

    def _live_age(self, kind: str) -> float | None:
        ages = [self.source_age(n) for n in self.sources if n.startswith(kind)]
        ages = [a for a in ages if a is not None]
        return min(ages) if ages else None

    def phase_rows(self) -> list[data.PhaseRow]:
        """Syncs per step per phase for the configuration under audit (metadata-syncs)."""
        return data.finding_phase_rows(self.all_findings())

    def forward_rows(self) -> list[dict]:
        """The attention forward's syncs per layer of an eager pass, per phase."""
        return data.finding_forward_rows(self.all_findings())

    def sync_rows(self) -> list[SyncRow]:
        """The census and probe rows, then the engine's and each bench's own before → after
        (a bench row is its own measurement: it is never folded into another row)."""
        census = data.finding_sync_rows(self.all_findings())
        where: dict[str, str] = {}
        for r in census:  # a builder is named "Class.method" by the census, maybe "method" live
            if r.location:
                where.setdefault(r.builder, r.location)
                where.setdefault(r.builder.split(" ")[0].rsplit(".", 1)[-1], r.location)
        bench_rows = []
        for res in self.bench.values():
            rel = data.bench_release(res)
            for r in data.bench_sync_rows([res]):
                if rel:
                    r.source += f", sglang {rel}"
                bench_rows.append(r)
        measured = self.engine_syncs + bench_rows
        for r in measured:
            if not r.location and r.builder in where:
                r.location = where[r.builder]
        return census + measured

    def sync_fix(self) -> str | None:
        for res in self.bench.values():
            if data.bench_sync_rows([res]):
                return res.id
        return data.sync_fix(self.all_findings())

    def export(self) -> dict[str, Any]:
        return data.export_doc(self.header, self.finding_rows(), self.fix_rows(),
                               self.timing_rows(), self.sync_rows(), list(self.sources.values()),
                               self.engine_procs, self.live)

    def live_lines(self) -> list[str]:
        """The engine's live before/after and predictions, as `diag fix status` prints them."""
        return self.live.lines() if self.live is not None else []

    def charts(self) -> dict[str, list[float]]:
        return {k: list(v) for k, v in self.series.items() if v}


__all__ = ["NA", "Model"]
