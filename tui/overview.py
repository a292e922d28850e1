"""Overview: each probe's finding (status, probe, summary); the selected one's evidence below."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import DataTable, Static

from diag.tui.data import FindingView
from diag.tui.model import Model
from diag.tui.tables import Col, FittedTable, fill

COLUMNS = (Col("status"), Col("probe"), Col("summary", shrink=True, min=20, prose=True))

STATUS_STYLE = {"ok": "bold green", "warn": "bold yellow", "fail": "bold red",
                "error": "bold magenta", "skip": "dim", "pending": "dim", "running": "cyan"}


PHASE_STYLE = {"graph": "green", "eager": "bold red", "refused": "bold red", "depends": "yellow",
               "none": "green"}


def status_text(state: str) -> Text:
    label = {"fail": "FAIL", "error": "ERROR", "running": "running…"}.get(state, state)
    return Text(label, style=STATUS_STYLE.get(state, ""))


def finding_detail(model: Model, v: FindingView) -> Text:
    """The finding's title, summary and evidence; its fixes as the Fixes tab resolves them."""
    text = Text()
    text.append(f"{v.probe}: {v.title}\n", style="bold")
    text.append_text(status_text(v.state))
    text.append(f"  {v.summary}\n")
    phase_rows = [e for e in (v.finding.evidence if v.finding else [])
                  if e.kind == "row" and e.data and "phase" in e.data and "config" in e.data]
    if phase_rows:  # per phase of the configuration under audit (the report's table)
        text.append(f"  {'phase':<14} {'mode':<8} read at\n", style="bold")
        for e in phase_rows:
            d = e.data
            where = f"{d['file']}:{d['line']}" if d.get("file") else "-"
            fb = len(d.get("runtime_fallbacks") or [])
            text.append(f"  {d['phase']:<14} ")
            text.append(f"{d['mode']:<8}", style=PHASE_STYLE.get(d["mode"], ""))
            text.append(f" {where}" + (f"  ({fb} run-time fallbacks)" if fb else "") + "\n")
    skip = {e.short() for e in phase_rows}
    for line in (ln for ln in v.detail if ln not in skip):
        if line.startswith("fix: ") and v.fixes:
            line = "fix: " + ", ".join(model.fix_advice(f) for f in v.fixes)
        text.append(f"  {line}\n")
    return text


class Overview(Vertical):
    DEFAULT_CSS = """
    Overview #findings { height: auto; max-height: 12; }
    Overview #finding-detail-box { border: round $panel; height: 1fr; }
    """

    def compose(self) -> ComposeResult:
        yield FittedTable(id="findings", cursor_type="row", zebra_stripes=True)
        with VerticalScroll(id="finding-detail-box"):
            yield Static("select a finding for its evidence", id="finding-detail")

    def show(self, model: Model) -> None:
        fill(self.query_one("#findings", DataTable), COLUMNS,
             [(status_text(v.state), v.probe, v.summary) for v in model.finding_rows()])
        self.show_detail(model)

    def selected(self, model: Model) -> FindingView | None:
        rows = model.finding_rows()
        table = self.query_one("#findings", DataTable)
        return rows[table.cursor_row] if rows and 0 <= table.cursor_row < len(rows) else None

    def show_detail(self, model: Model) -> None:
        v = self.selected(model)
        box = self.query_one("#finding-detail", Static)
        box.update(finding_detail(model, v) if v is not None else "no findings yet")
