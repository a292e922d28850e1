"""Filling a DataTable from rows: plain text cells (no markup), columns fitted to the width.

Columns shrink by priority, as nvitop and k9s do: when the rows do not fit, the columns with the
highest `drop` go first, then the one `shrink` column (a name) is shortened with '…' (its whole
text is in the tab's detail pane and in the export). Identifier columns (`drop=0`, not `shrink`)
are never cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from diag.tui.data import shorten

SCROLLBAR = 2  # a vertical scrollbar's width, kept free so no horizontal one appears
PAD = 2  # a cell's padding (one each side)


@dataclass(frozen=True)
class Col:
    name: str
    drop: int = 0  # 0: always shown; otherwise dropped before the columns with lower numbers
    shrink: bool = False  # the column shortened to fit (one per table)
    min: int = 12  # the shrink column is cut down to this before columns with drop < FIRST go
    prose: bool = False  # a sentence: cut at its end even when its first word is a dotted name


FIRST = 10  # columns with drop >= FIRST go before the shrink column is cut at all


def cell(v: Any) -> Text:
    """A cell as literal text: '[classic]' or '[syncs]' must not be read as console markup."""
    return v if isinstance(v, Text) else Text(str(v))


def plan(cols: Sequence[Col], rows: Sequence[Sequence[Text]], width: int) -> tuple[list[int], int]:
    """(indexes of the columns shown, the shrink column's cell width, 0 for no cut)."""
    natural = [max([len(c.name)] + [r[i].cell_len for r in rows]) for i, c in enumerate(cols)]
    shown = list(range(len(cols)))
    room = width - SCROLLBAR
    s = next((i for i, c in enumerate(cols) if c.shrink), None)

    def fits(cut: int | None = None) -> bool:
        return sum((cut if i == s and cut is not None else natural[i]) + PAD
                   for i in shown) <= room

    def cut_to() -> int:  # the shrink column's width that fills the room
        return room - sum(natural[i] + PAD for i in shown if i != s) - PAD

    order = sorted((i for i, c in enumerate(cols) if c.drop), key=lambda i: (-cols[i].drop, -i))
    for i in order:  # source, note...: gone before any name is cut
        if fits() or cols[i].drop < FIRST:
            break
        shown.remove(i)
    if fits():
        return shown, 0
    for i in [i for i in order if i in shown]:
        if s is not None and s in shown and cut_to() >= min(cols[s].min, natural[s]):
            break
        shown.remove(i)
    if s is None or s not in shown or fits():
        return shown, 0
    return shown, max(min(cols[s].min, natural[s]), cut_to())


def fit_rows(cols: Sequence[Col], rows: Sequence[Sequence[Any]],
             width: int) -> tuple[list[Col], list[list[Text]]]:
    """The columns shown at `width` and the rows cut to them."""
    cells = [[cell(c) for c in r] for r in rows]
    if not width:
        return list(cols), cells
    shown, cut = plan(cols, cells, width)
    out = []
    for r in cells:
        row = []
        for i in shown:
            c = r[i]
            if cut and cols[i].shrink and c.cell_len > cut:
                c = Text(shorten(c.plain, cut, cols[i].prose), style=c.style)
            row.append(c)
        out.append(row)
    return [cols[i] for i in shown], out


class FittedTable(DataTable):
    """A DataTable that fits its columns again whenever its own width changes (a table laid out
    in a hidden tab, or before the first layout, would otherwise keep the widths of that moment)."""

    def on_resize(self) -> None:
        src = getattr(self, "_diag_src", None)
        if src is not None:
            fill(self, *src)


def fill(table: DataTable, cols: Sequence[Col], rows: Sequence[Sequence[Any]]) -> None:
    """Replace the table's rows (and columns, so widths shrink back), keeping the cursor row."""
    table._diag_src = (cols, rows)
    width = table.size.width or (table.app.size.width if table.is_attached else 0)
    shown, cells = fit_rows(cols, rows, width)
    # the table's own size too: one filled while hidden (size 0) is filled again once shown
    sig = (table.size.width, width, tuple(c.name for c in shown),
           tuple(tuple((c.plain, str(c.style)) for c in r) for r in cells))
    if getattr(table, "_diag_rows", None) == sig:
        return  # unchanged: no rebuild (no flicker; a table on a hidden screen keeps its layout)
    table._diag_rows = sig
    keep = table.cursor_row
    table.clear(columns=True)
    table.add_columns(*(c.name for c in shown))
    for i, r in enumerate(cells):
        table.add_row(*r, key=str(i))
    if rows:
        table.move_cursor(row=min(max(keep, 0), len(rows) - 1), animate=False)
