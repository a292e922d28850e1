"""Syncs: per metadata builder, syncs per call with file:line, before and after the fix."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from tui.data import fmt_value
from tui.model import Model
from tui.tables import fill

COLUMNS = ("builder", "file:line", "before", "after", "source")


def short_path(loc: str) -> str:
    """`sglang/srt/layers/attention/x.py:12` → `attention/x.py:12` (the export keeps it whole)."""
    return loc.removeprefix("sglang/srt/layers/")


class SyncsView(Vertical):
    DEFAULT_CSS = """
    SyncsView #syncs { height: 1fr; }
    SyncsView #syncs-note { height: auto; color: $text-muted; }
    """

    def compose(self) -> ComposeResult:
        yield DataTable(id="syncs", cursor_type="row", zebra_stripes=True)
        yield Static("before/after: syncs per call without / with repeat-interleave-output-size "
                     "(measured by the probe, a bench, or the engine's agent); census rows are "
                     "static sync sites", id="syncs-note")

    def show(self, model: Model) -> None:
        rows = [(r.builder, short_path(r.location) or "-", fmt_value(r.before),
                 fmt_value(r.after), r.source) for r in model.sync_rows()]
        if not rows:
            rows.append(("-", "no sync counts yet (metadata-syncs probe pending)", "", "", ""))
        fill(self.query_one("#syncs", DataTable), COLUMNS, rows)
