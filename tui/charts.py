"""Live charts, one line per series: its name and unit, a sparkline scaled between the min and
max shown beside it, the last value and its age (stale values are marked).

Drawn as text (block characters), so a constant series is a flat mid-height line labelled
`constant`, and a series with no points says so, never an empty box."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from diag.tui import data
from diag.tui.model import Model

BLOCKS = "▁▂▃▄▅▆▇█"


def spark(xs: list[float], width: int, lo: float | None = None,
          hi: float | None = None) -> str:
    """The last `width` points as block characters between `lo` (▁) and `hi` (█), by default
    the min and max of the points drawn; all equal: a flat mid-height line."""
    xs = xs[-width:] if width > 0 else []
    if not xs:
        return ""
    lo = min(xs) if lo is None else lo
    hi = max(xs) if hi is None else hi
    if hi == lo:
        return BLOCKS[3] * len(xs)
    top = len(BLOCKS) - 1
    return "".join(BLOCKS[round((x - lo) / (hi - lo) * top)] for x in xs)


def chart_title(name: str) -> str:
    """The series' name with its unit when the values are not times (which carry their own)."""
    unit = data.series_unit(name)
    return f"{name}" + (f" ({unit})" if unit and unit != "s" else "")


def chart_line(model: Model, name: str, width: int, title_width: int = 0) -> Text:
    xs = list(model.series.get(name, []))
    unit = data.series_unit(name)
    title = chart_title(name)
    tw = title_width or len(title)
    t = Text(f"{data.shorten(title, tw):<{tw}} ", style="bold")
    if not xs:
        t.append("no points yet", style="dim")
        return t
    age, how = model.series_state(name)
    stale = how == "stale"
    label = {"stale": "STALE ", "idle": "idle, last point "}.get(how, "")
    when = f" · {label}{data.fmt_age(age)}" if age is not None else ""
    window = 60
    for _ in range(2):  # the points drawn and the scale beside them are the same ones
        shown = xs[-window:]
        lo, hi = min(shown), max(shown)
        scale = (f"constant {data.fmt_value(lo, unit)}" if lo == hi else
                 f"min {data.fmt_value(lo, unit)} max {data.fmt_value(hi, unit)}")
        tail = f" {scale} · now {data.fmt_value(shown[-1], unit)}"
        window = max(4, min(60, width - tw - 1 - len(tail) - len(when)))
    xs = shown
    t.append(spark(xs, len(xs), lo, hi), style="yellow" if stale else "cyan")
    t.append(tail)
    t.append(when, style="bold yellow" if stale else "dim")
    return t


class Charts(Static):
    """Every live series (run directory and server) the model holds."""

    DEFAULT_CSS = """
    Charts { height: auto; max-height: 8; border-top: solid $panel; }
    """

    def show(self, model: Model) -> None:
        names = list(model.series)
        width = self.size.width or (self.app.size.width - 2)
        if not names:
            self.update(Text("live charts: none (watch an engine with --run-dir or a server "
                             "with --server)", style="dim"))
            return
        out = Text()
        tw = min(max(len(chart_title(n)) for n in names), max(12, width // 3))
        for i, n in enumerate(names):
            if i:
                out.append("\n")
            out.append_text(chart_line(model, n, width, tw))
        self.update(out)
