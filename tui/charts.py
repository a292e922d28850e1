"""Small live charts: a label and a textual Sparkline per series, bounded in length."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Grid, Vertical
from textual.widgets import Label, Sparkline

from diag.tui import data


class Chart(Vertical):
    """One series: its name, last value and a sparkline of the recent points."""

    DEFAULT_CSS = """
    Chart { height: 4; width: 1fr; border: round $panel; padding: 0 1; overflow: hidden; }
    Chart Label { height: 1; }
    Chart Sparkline { height: 1; }
    """

    def __init__(self, name: str, **kw) -> None:
        super().__init__(**kw)
        self.series_name = name

    def compose(self) -> ComposeResult:
        yield Label(f"{self.series_name}: n/a", classes="chart-label")
        yield Sparkline([], summary_function=max)

    def show(self, xs: list[float]) -> None:
        unit_s = self.series_name.endswith("(s)") or "latency" in self.series_name or \
            "time" in self.series_name
        last = (data.fmt_time(xs[-1]) if unit_s else f"{xs[-1]:.3g}") if xs else "n/a"
        self.query_one(Label).update(Text(f"{self.series_name}: {last}  ({len(xs)} pts)"))
        self.query_one(Sparkline).data = list(xs)


CHARTS = ("syncs per call", "draft-extend step (s)", "inter-token latency",
          "time per output token", "accept length", "draft-extend capture time")


class Charts(Grid):
    DEFAULT_CSS = """
    Charts { grid-size: 3 2; grid-columns: 1fr 1fr 1fr; height: 8; width: 100%;
             grid-gutter: 0 1; }
    """

    def compose(self) -> ComposeResult:
        for i, name in enumerate(CHARTS):
            yield Chart(name, id=f"chart-{i}")

    def show(self, series: dict[str, list[float]]) -> None:
        for chart in self.query(Chart):
            chart.show(series.get(chart.series_name, []))
