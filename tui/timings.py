"""Timings: before/after per fix (bench, run directory, server), median ± IQR, ratio, charts."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, ProgressBar, Static

from diag.tui.charts import Charts
from diag.tui.data import fmt_ratio, fmt_stats
from diag.tui.model import Model
from diag.tui.tables import fill

COLUMNS = ("fix", "metric", "before", "after", "after/before", "source", "note")


def source_line(model: Model) -> Text:
    text = Text()
    if not model.sources:
        text.append("live sources: none (start with --run-dir DIR or --server URL)", style="dim")
    for i, s in enumerate(model.sources.values()):
        style = "green" if s.ok else "bold red" if s.ok is False else "dim"
        text.append(("\n" if i else "") + f"{s.name}: ", style="bold")
        text.append(s.text, style=style)
    return text


class TimingsView(Vertical):
    DEFAULT_CSS = """
    TimingsView #bench-line { height: 1; }
    TimingsView #bench-bar { height: 1; }
    TimingsView #timings { height: 1fr; }
    TimingsView #sources { height: auto; max-height: 3; }
    """

    def compose(self) -> ComposeResult:
        yield Static("bench: press b to run the selected fix's bench (all with none selected)",
                     id="bench-line")
        yield ProgressBar(total=None, show_eta=False, id="bench-bar")
        yield DataTable(id="timings", cursor_type="row", zebra_stripes=True)
        yield Static(id="sources")
        yield Charts(id="charts")

    def show(self, model: Model, bench_running: bool) -> None:
        out = []
        for r in model.timing_rows():
            ratio = r.ratio
            style = "green" if ratio is not None and ratio < 0.9 else \
                "red" if ratio is not None and ratio > 1.1 else ""
            metric = r.metric + (f" [{r.unit}]" if r.unit not in ("s", "") else "")
            out.append((r.fix, metric, fmt_stats(r.before, r.unit), fmt_stats(r.after, r.unit),
                        Text(fmt_ratio(ratio), style=style), r.source, r.note))
        if not out:
            out.append(("-", "no timings yet", "", "", "", "", "b: bench; --run-dir/--server: live"))
        fill(self.query_one("#timings", DataTable), COLUMNS, out, squeeze=1)
        line = self.query_one("#bench-line", Static)
        bar = self.query_one("#bench-bar", ProgressBar)
        bar.display = bench_running
        if model.bench_progress:
            line.update(Text(f"bench: {model.bench_progress}"))
        self.query_one("#sources", Static).update(source_line(model))
        self.query_one(Charts).show(model.charts())

    def selected_fix(self, model: Model) -> str | None:
        rows = model.timing_rows()
        row = self.query_one("#timings", DataTable).cursor_row
        fix = rows[row].fix if rows and 0 <= row < len(rows) else None
        return fix if fix and not fix.startswith("(") else None
