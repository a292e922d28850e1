"""Syncs: per metadata builder, syncs per call with file:line, before and after the fix."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from diag.tui.data import fmt_value, short_path
from diag.tui.model import Model
from diag.tui.tables import fill

COLUMNS = ("builder", "before", "after", "file:line", "source")


class SyncsView(Vertical):
    DEFAULT_CSS = """
    SyncsView #syncs { height: 1fr; }
    SyncsView #syncs-note { height: auto; color: $text-muted; }
    """

    def compose(self) -> ComposeResult:
        yield DataTable(id="syncs", cursor_type="row", zebra_stripes=True)
        yield Static("syncs per call before / after repeat-interleave-output-size, measured (probe "
                     "on this torch, a bench, the engine's agent) or static (census of the "
                     "sites; DE path: a backend on the platform's draft-extend path); file:line "
                     "under sglang/srt/layers/attention/, (+N) more sites", id="syncs-note")

    def show(self, model: Model) -> None:
        rows = [(r.builder, fmt_value(r.before), fmt_value(r.after),
                 short_path(r.location) or "-", r.source) for r in model.sync_rows()]
        if not rows:
            rows.append(("no sync counts yet (metadata-syncs probe pending)", "", "", "-", ""))
        fill(self.query_one("#syncs", DataTable), COLUMNS, rows, squeeze=0)
