"""Filling a DataTable from rows: plain text cells (no markup), widths fit the current rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.widgets import DataTable


def cell(v: Any) -> Text:
    """A cell as literal text: '[classic]' or '[syncs]' must not be read as console markup."""
    return v if isinstance(v, Text) else Text(str(v))


def fill(table: DataTable, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Replace the table's rows (and columns, so widths shrink back), keeping the cursor row."""
    keep = table.cursor_row
    table.clear(columns=True)
    table.add_columns(*columns)
    for i, r in enumerate(rows):
        table.add_row(*(cell(c) for c in r), key=str(i))
    if rows:
        table.move_cursor(row=min(max(keep, 0), len(rows) - 1), animate=False)
