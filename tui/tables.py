"""Filling a DataTable from rows: plain text cells (no markup), the last column cut to fit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.widgets import DataTable


def cell(v: Any) -> Text:
    """A cell as literal text: '[classic]' or '[syncs]' must not be read as console markup."""
    return v if isinstance(v, Text) else Text(str(v))


def fill(table: DataTable, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Replace the table's rows (and columns, so widths shrink back), keeping the cursor row.

    The last column is cut with '…' to the table's width (its whole text is in the detail
    pane or the export), so a long summary does not push a horizontal scrollbar in.
    """
    keep = table.cursor_row
    cells = [[cell(c) for c in r] for r in rows]
    width = table.size.width
    if width and cells:
        used = sum(max([len(columns[i])] + [r[i].cell_len for r in cells]) + 2
                   for i in range(len(columns) - 1))
        last = width - used - 2 - 1  # the last cell's padding and a vertical scrollbar
        if last >= 12:
            for r in cells:
                if r[-1].cell_len > last:
                    r[-1] = r[-1][:last - 1] + Text("…")
    table.clear(columns=True)
    table.add_columns(*columns)
    for i, r in enumerate(cells):
        table.add_row(*r, key=str(i))
    if rows:
        table.move_cursor(row=min(max(keep, 0), len(rows) - 1), animate=False)
