"""Fixes: applicability to the target, state here or in the engine, apply/revert and the ack."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from diag.tui.data import FixView, fmt_value
from diag.tui.model import Model
from diag.tui.tables import fill

COLUMNS = ("fix", "applicability", "state", "acknowledgement")

APPLIC_STYLE = {"applicable": "bold yellow", "upstream": "green", "not-needed": "green",
                "refused": "bold red", "error": "bold magenta"}


class FixesView(Vertical):
    DEFAULT_CSS = """
    FixesView #fixes { height: auto; max-height: 10; }
    FixesView #fix-detail { border: round $panel; height: 1fr; padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        yield DataTable(id="fixes", cursor_type="row", zebra_stripes=True)
        yield Static("a: apply the selected fix   u: revert it   b: bench it", id="fix-detail")

    def show(self, model: Model, where: str) -> None:
        rows = []
        for v in model.fix_rows():
            app = fmt_value(v.applicability)
            rows.append((v.id, Text(app, style=APPLIC_STYLE.get(app, "dim")),
                         fmt_value(v.state), v.ack or "-"))
        fill(self.query_one("#fixes", DataTable), COLUMNS, rows)
        self.show_detail(model, where)

    def selected(self, model: Model) -> FixView | None:
        rows = model.fix_rows()
        table = self.query_one("#fixes", DataTable)
        return rows[table.cursor_row] if rows and 0 <= table.cursor_row < len(rows) else None

    def show_detail(self, model: Model, where: str) -> None:
        v = self.selected(model)
        box = self.query_one("#fix-detail", Static)
        if v is None:
            box.update("no fixes loaded yet")
            return
        text = Text()
        text.append(f"{v.id}: {v.title}\n", style="bold")
        text.append(f"applicability: {fmt_value(v.applicability)}  {v.reason}\n")
        text.append(f"state: {fmt_value(v.state)}\n")
        text.append(f"acknowledgement: {v.ack or '-'}\n")
        text.append(f"bench: {v.bench or 'none'}   revertible: {'yes' if v.revertible else 'no'}\n")
        text.append(f"a/u apply/revert {where}; b runs its bench", style="dim")
        box.update(text)
