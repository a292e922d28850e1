"""Fixes: applicability to the target, state here or in the engine, apply/revert and the ack;
under --run-dir the engine's processes with their fixes, newest event and agent errors."""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import DataTable, Static

from diag.tui import data
from diag.tui.data import FixView, fmt_value
from diag.tui.model import Model
from diag.tui.tables import Col, FittedTable, fill

COLUMNS = (Col("fix"), Col("applicability"), Col("state", shrink=True, min=14, prose=True),
           Col("acknowledgement", drop=10))

APPLIC_STYLE = {"applicable": "bold yellow", "upstream": "green", "not-needed": "green",
                "refused": "bold red", "error": "bold magenta"}


def fix_detail(v: FixView, where: str) -> Text:
    text = Text()
    text.append(f"{v.id}: {v.title}\n", style="bold")
    text.append(f"applicability: {fmt_value(v.applicability)}  {v.reason}\n")
    text.append(f"state: {fmt_value(v.state)}\n")
    text.append(f"acknowledgement: {v.ack or '-'}\n")
    text.append(f"bench: {v.bench or 'none'}   revertible: {'yes' if v.revertible else 'no'}\n")
    text.append(f"a/u apply/revert {where}; b runs its bench", style="dim")
    return text


def engine_text(model: Model) -> Text:
    """One line per engine process: pid, alive, release, fixes, newest event (age), errors."""
    t = Text()
    if not model.engine_procs:
        t.append("engine: no process has written to the run directory yet", style="dim")
        return t
    t.append("engine processes\n", style="bold")
    for i, p in enumerate(model.engine_procs):
        if i:
            t.append("\n")
        t.append(f"pid {p.pid}{f' {p.rank}' if p.rank else ''} ", style="bold")
        t.append("stopped" if p.alive and p.stopped else "live" if p.alive
                 else f"died: {p.died}" if p.died else "exited",
                 style="bold yellow" if p.alive and p.stopped else "green" if p.alive
                 else "bold red" if p.died else "dim")
        t.append(f"  sglang {p.sglang}  fixes: {p.fixes}  last: {p.last}")
        if p.last_ts is not None:
            t.append(f" ({data.fmt_age(time.time() - p.last_ts)})", style="dim")
        if p.errors:
            t.append(f"  errors: {p.errors}" + (f" ({p.error})" if p.error else ""),
                     style="bold red")
        if p.lost:
            t.append(f"  {p.lost}", style="bold red")
    return t


class FixesView(Vertical):
    DEFAULT_CSS = """
    FixesView #fixes { height: auto; max-height: 10; }
    FixesView #fix-detail { border: round $panel; height: 1fr; padding: 0 1; }
    FixesView #engine-box { height: auto; max-height: 8; border: round $panel; padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        yield FittedTable(id="fixes", cursor_type="row", zebra_stripes=True)
        yield Static("a: apply the selected fix   u: revert it   b: bench it", id="fix-detail")
        with VerticalScroll(id="engine-box"):
            yield Static(id="engine")

    def on_mount(self) -> None:
        self.query_one("#engine-box").display = bool(getattr(self.app.backend, "run_dir", None))

    def show(self, model: Model, where: str) -> None:
        rows = []
        for v in model.fix_rows():
            app = fmt_value(v.applicability)
            rows.append((v.id, Text(app, style=APPLIC_STYLE.get(app, "dim")),
                         fmt_value(v.state), v.ack or "-"))
        fill(self.query_one("#fixes", DataTable), COLUMNS, rows)
        self.show_detail(model, where)
        if self.query_one("#engine-box").display:
            self.query_one("#engine", Static).update(engine_text(model))

    def selected(self, model: Model) -> FixView | None:
        rows = model.fix_rows()
        table = self.query_one("#fixes", DataTable)
        return rows[table.cursor_row] if rows and 0 <= table.cursor_row < len(rows) else None

    def show_detail(self, model: Model, where: str) -> None:
        v = self.selected(model)
        box = self.query_one("#fix-detail", Static)
        box.update(fix_detail(v, where) if v is not None else "no fixes loaded yet")
