"""Syncs: per metadata builder, syncs per call before and after the fix, where, and how counted."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import DataTable, Static

from diag.tui.data import SyncRow, fmt_value, forward_line, phase_line, short_path
from diag.tui.model import Model
from diag.tui.tables import Col, FittedTable, fill

COLUMNS = (Col("builder", shrink=True, min=28), Col("before"), Col("after"),
           Col("file:line", drop=5), Col("source", drop=4))

LEGEND = ("syncs per call before / after the fix: measured (the probe on this torch, a bench, "
          "the engine's agent) or static (census of the sites; DE path: a backend on the "
          "platform's draft-extend path); (+N): more sites in that function")


def sync_detail(r: SyncRow) -> Text:
    t = Text()
    t.append(r.builder, style="bold")
    t.append(f"\nbefore {fmt_value(r.before)} → after {fmt_value(r.after)} syncs per call")
    t.append(f"\nat {r.location or '-'}\nsource: {r.source}")
    return t


class SyncsView(Vertical):
    DEFAULT_CSS = """
    SyncsView #syncs { height: 1fr; }
    SyncsView #sync-detail-box { height: auto; max-height: 6; border-top: solid $panel; }
    SyncsView #syncs-note { height: auto; color: $text-muted; }
    SyncsView #sync-phases { height: auto; }
    """

    def compose(self) -> ComposeResult:
        yield Static(id="sync-phases")  # shown only when a configuration is under audit
        yield FittedTable(id="syncs", cursor_type="row", zebra_stripes=True)
        with VerticalScroll(id="sync-detail-box"):
            yield Static(id="sync-detail")
        yield Static(LEGEND, id="syncs-note")

    def show(self, model: Model) -> None:
        rows = [(r.builder, fmt_value(r.before), fmt_value(r.after),
                 short_path(r.location) or "-", r.source) for r in model.sync_rows()]
        if not rows:
            rows.append(("no sync counts yet (probes pending)", "", "", "-", ""))
        fill(self.query_one("#syncs", DataTable), COLUMNS, rows)
        phases = model.phase_rows()
        box = self.query_one("#sync-phases", Static)
        box.display = bool(phases)
        if phases:
            fwd = model.forward_rows()
            box.update(Text(phase_line(phases) + (f"\n{forward_line(fwd)}" if fwd else ""),
                            style="bold"))
        self.query_one("#syncs-note").display = self.app.size.height >= 35  # room to spare
        self.show_detail(model)

    def show_detail(self, model: Model) -> None:
        rows = model.sync_rows()
        i = self.query_one("#syncs", DataTable).cursor_row
        box = self.query_one("#sync-detail", Static)
        box.update(sync_detail(rows[i]) if rows and 0 <= i < len(rows)
                   else Text("no sync counts yet", style="dim"))
