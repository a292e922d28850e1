"""What the TUI shows, as plain data: the app's workers fill it, its screens and `--once` read it.

Headless (no textual import), so the same state renders in the app, as one text frame, and as
the exported JSON.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from diag.bench import BenchResult
from diag.findings import Finding
from diag.tui import data
from diag.tui.data import NA, FindingView, FixView, Header, SourceState, SyncRow, TimingRow

SERIES_LEN = 60  # points kept per chart


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
    server_values: dict[str, float] = field(default_factory=dict)
    series: dict[str, deque] = field(default_factory=dict)
    sources: dict[str, SourceState] = field(default_factory=dict)
    message: str = ""

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
        self.set_engine_view(state, data.engine_view(events))

    def set_engine_view(self, state: Any, view: tuple[list[TimingRow], list[SyncRow],
                                                      dict[str, list[float]]]) -> None:
        """As `set_engine`, with `data.engine_view(events)` already computed (off the UI thread:
        it walks every event kept, up to `RunDirReader.MAX_EVENTS`)."""
        self.engine_timings, self.engine_syncs, series = view
        self.engine_states = data.engine_fix_states(state)
        for fid, text in data.engine_acks(state).items():
            if fid in self.fixes:
                self.fixes[fid].ack = text
        for name, xs in series.items():
            self.series[name] = deque(xs[-SERIES_LEN:], maxlen=SERIES_LEN)

    def add_server(self, values: dict[str, float]) -> None:
        self.server_values = dict(values)
        for name, v in values.items():
            self.series.setdefault(name, deque(maxlen=SERIES_LEN)).append(v)

    def set_source(self, name: str, ok: bool | None, text: str) -> None:
        self.sources[name] = SourceState(name, ok, text)

    # -------------------------------------------------------------- views

    def finding_rows(self) -> list[FindingView]:
        return [v for vs in self.findings.values() for v in vs]

    def all_findings(self) -> list[Finding]:
        return [v.finding for v in self.finding_rows() if v.finding is not None]

    def fix_rows(self) -> list[FixView]:
        out = []
        for v in self.fixes.values():
            eng = self.engine_states.get(v.id)
            out.append(v if not eng else FixView(v.id, v.title, v.applicability, v.reason,
                                                  f"{v.state}; {eng}", v.revertible, v.bench,
                                                  v.ack))
        return out

    def timing_rows(self) -> list[TimingRow]:
        rows: list[TimingRow] = []
        for res in self.bench.values():
            rows.extend(data.bench_rows(res))
        rows.extend(self.engine_timings)
        for name, v in self.server_values.items():
            xs = list(self.series.get(name, []))
            unit = "tokens" if name == "accept length" else "s"
            now = data.fmt_time(v) if unit == "s" else f"{v:.3g}"
            live = data.fmt_stats(data.Stats.of(xs), unit) if xs else "-"
            rows.append(TimingRow("(server)", name, unit, None, None, "server",
                                  f"now {now}, median {live}, n={len(xs)}"))
        return rows

    def sync_rows(self) -> list[SyncRow]:
        census = data.finding_sync_rows(self.all_findings())
        where: dict[str, str] = {}
        for r in census:  # a builder is named "Class.method" by the census, maybe "method" live
            if r.location:
                where.setdefault(r.builder, r.location)
                where.setdefault(r.builder.split(" ")[0].rsplit(".", 1)[-1], r.location)
        bench_rows = []
        for res in self.bench.values():
            rows = data.bench_sync_rows([res])
            path = res.params.get("path")
            probe = [r for r in census if r.source.startswith("measured")
                     and path and r.builder.endswith(f"({path})")]
            if len(rows) == 1 and len(probe) == 1:  # the same real builder on the same path
                probe[0].after = rows[0].after
                probe[0].source += " + bench"
            else:
                bench_rows.extend(rows)
        measured = self.engine_syncs + bench_rows
        for r in measured:
            if not r.location and r.builder in where:
                r.location = where[r.builder]
        return census + measured

    def export(self) -> dict[str, Any]:
        return data.export_doc(self.header, self.finding_rows(), self.fix_rows(),
                               self.timing_rows(), self.sync_rows(), list(self.sources.values()))

    def charts(self) -> dict[str, list[float]]:
        return {k: list(v) for k, v in self.series.items() if v}


__all__ = ["NA", "Model"]
