"""Filling a DataTable from rows: plain text cells (no markup), the last column cut to fit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.widgets import DataTable


def cell(v: Any) -> Text:
    """A cell as literal text: '[classic]' or '[syncs]' must not be read as console markup."""
    return v if isinstance(v, Text) else Text(str(v))


def fill(table: DataTable, columns: Sequence[str], rows: Sequence[Sequence[Any]],
         squeeze: int = -1) -> None:
    """Replace the table's rows (and columns, so widths shrink back), keeping the cursor row.

    The `squeeze` column (the last by default) is cut with '…' to the table's width (its whole
    text is in the detail pane or the export), so long text does not push a scrollbar in.
    """
    cells = [[cell(c) for c in r] for r in rows]
    width = table.size.width
    sig = (width, tuple(columns), squeeze, tuple(tuple((c.plain, str(c.style)) for c in r)
                                                 for r in cells))
    if getattr(table, "_diag_rows", None) == sig:
        return  # unchanged: no rebuild (no flicker; a table on a hidden screen keeps its layout)
    table._diag_rows = sig
    keep = table.cursor_row
    squeeze %= len(columns)
    if width and cells:
        used = sum(max([len(columns[i])] + [r[i].cell_len for r in cells]) + 2
                   for i in range(len(columns)) if i != squeeze)
        room = width - used - 2 - 1  # the squeezed cell's padding and a vertical scrollbar
        if room >= 12:
            for r in cells:
                if r[squeeze].cell_len > room:
                    r[squeeze] = r[squeeze][:room - 1] + Text("…")
    table.clear(columns=True)
    table.add_columns(*columns)
    for i, r in enumerate(cells):
        table.add_row(*r, key=str(i))
    if rows:
        table.move_cursor(row=min(max(keep, 0), len(rows) - 1), animate=False)
