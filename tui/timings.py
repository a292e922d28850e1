"""Timings: before/after per fix (bench, run directory, server) as median (IQR, n), the change
with its direction, the selected row whole below (notes, release), and the live charts."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import DataTable, ProgressBar, Static

from diag.tui import data
from diag.tui.charts import Charts
from diag.tui.data import TimingRow, fmt_stats, ratio_text
from diag.tui.model import Model
from diag.tui.tables import Col, FittedTable, fill

COLUMNS = (Col("fix", drop=5), Col("metric", shrink=True, min=12),
           Col("before (IQR) n"), Col("after (IQR) n"), Col("change"),
           Col("source", drop=11), Col("note", drop=12))
NARROW = tuple(Col(c.name.replace(" n", ""), c.drop, c.shrink, c.min) for c in COLUMNS)
WIDE = 120  # below this the cells leave out n (the detail pane has it) and the why of a change


def metric_cell(model: Model, r: TimingRow) -> Text:
    t = Text(r.metric + (f" [{r.unit}]" if r.unit not in ("s", "") else ""))
    if model.is_stale(r.age):
        t.append(f" STALE {data.fmt_age(r.age)}", style="bold yellow")
    return t


def timing_detail(model: Model, r: TimingRow) -> Text:
    """The row whole: fix, metric, before/after with IQR and n, the change, source, notes."""
    t = Text()
    t.append(f"{r.fix}: {r.metric}" + (f" [{r.unit}]" if r.unit not in ("s", "") else ""),
             style="bold")
    text, style = ratio_text(r)
    t.append(f"\nbefore {fmt_stats(r.before, r.unit)} → after {fmt_stats(r.after, r.unit)}: ")
    t.append(text, style=style)
    if r.ratio is not None:
        t.append(f" (after/before {data.fmt_ratio(r.ratio)})", style="dim")
    t.append(f"\nsource: {r.source}" + (f", read {data.fmt_age(r.age)}" if r.age is not None
                                         else ""))
    if r.note:
        t.append(f"\nnote: {r.note}")
    for n in r.notes:
        t.append(f"\n  {n}", style="dim")
    return t


def live_text(lines: list[str]) -> Text:
    """The engine's own before/after (`diag.engine.live`, the lines `diag fix status` prints):
    the label bold, each prediction in green; the synthetic bench's rows are in the table."""
    t = Text()
    for i, line in enumerate(lines):
        if i:
            t.append("\n")
        if i == 0:
            t.append(line, style="bold")
        elif line.startswith("predicted"):
            t.append(line, style="green")
        else:
            t.append(line)
    return t


class TimingsView(Vertical):
    DEFAULT_CSS = """
    TimingsView #bench-line { height: auto; max-height: 2; }
    TimingsView #bench-bar { height: 1; }
    TimingsView #live-figures { height: auto; max-height: 8; }
    TimingsView #timings { height: 1fr; min-height: 4; }
    TimingsView #timing-detail-box { height: auto; max-height: 7; border-top: solid $panel; }
    """

    def compose(self) -> ComposeResult:
        yield Static("bench: b runs the selected fix's bench (all with none selected); "
                     "values are median (IQR p25–p75) n=samples", id="bench-line")
        yield ProgressBar(total=None, show_eta=False, id="bench-bar")
        yield Static(id="live-figures")
        yield FittedTable(id="timings", cursor_type="row", zebra_stripes=True)
        with VerticalScroll(id="timing-detail-box"):
            yield Static(id="timing-detail")
        yield Charts(id="charts")

    def show(self, model: Model, bench_running: bool) -> None:
        out = []
        wide = (self.size.width or self.app.size.width) >= WIDE
        for r in self.table_rows(model):
            text, style = ratio_text(r, short=not wide)
            out.append((r.fix, metric_cell(model, r), fmt_stats(r.before, r.unit, True, wide),
                        fmt_stats(r.after, r.unit, True, wide), Text(text, style=style),
                        r.source, r.note))
        if not out:
            out.append(("-", "no timings yet", "", "", "", "", "b: bench; --run-dir/--server: live"))
        fill(self.query_one("#timings", DataTable), COLUMNS if wide else NARROW, out)
        line = self.query_one("#bench-line", Static)
        bar = self.query_one("#bench-bar", ProgressBar)
        bar.display = bench_running
        if model.bench_progress:
            line.update(Text(f"bench: {model.bench_progress}"))
        live = self.query_one("#live-figures", Static)
        lines = model.live_lines()
        live.display = bool(lines)
        if lines:
            live.update(live_text(lines))
        self.show_detail(model)
        self.query_one(Charts).show(model)

    @staticmethod
    def table_rows(model: Model) -> list[TimingRow]:
        """Rows with a before or an after; a live-only value (a server's series now) is in the
        charts below, with its scale and age."""
        return [r for r in model.timing_rows() if r.before is not None or r.after is not None
                or r.age is None]

    def selected(self, model: Model) -> TimingRow | None:
        rows = self.table_rows(model)
        row = self.query_one("#timings", DataTable).cursor_row
        return rows[row] if rows and 0 <= row < len(rows) else None

    def show_detail(self, model: Model) -> None:
        r = self.selected(model)
        self.query_one("#timing-detail", Static).update(
            timing_detail(model, r) if r else Text("no timings yet", style="dim"))

    def selected_fix(self, model: Model) -> str | None:
        r = self.selected(model)
        return r.fix if r and r.fix and not r.fix.startswith("(") else None
