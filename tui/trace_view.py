"""Trace: the user's profiler traces per speculative phase (the `diag trace` document, read in a
worker thread: a large trace takes seconds)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import DataTable, Static

from diag.tui.tables import Col, FittedTable, fill

COLUMNS = (Col("phase"), Col("passes"), Col("graph"), Col("eager"), Col("unknown", drop=6),
           Col("replays", drop=5), Col("kernels/replay", drop=3), Col("host/pass"),
           Col("GPU/pass", drop=2), Col("launches/pass", drop=4), Col("eager why", shrink=True,
                                                                        min=16))


class TraceView(Vertical):
    DEFAULT_CSS = """
    TraceView #trace-phases { height: auto; max-height: 12; }
    TraceView #trace-detail-box { height: 1fr; border-top: solid $panel; }
    """

    def __init__(self, paths: tuple[str, ...], baseline: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.paths = paths
        self.baseline = baseline
        self.doc: dict | None = None
        self.error: str | None = None

    def compose(self) -> ComposeResult:
        yield Static(Text(f"reading {len(self.paths)} trace file(s)…"), id="trace-head")
        yield FittedTable(id="trace-phases", cursor_type="row", zebra_stripes=True)
        with VerticalScroll(id="trace-detail-box"):
            yield Static(id="trace-detail")

    def on_mount(self) -> None:
        self.run_worker(self._load, thread=True, name="trace")

    def _load(self) -> None:
        from diag.errors import DiagError
        from diag.probes.trace.report import build

        try:
            doc, err = build(list(self.paths), list(self.baseline) or None), None
        except DiagError as e:
            doc, err = None, str(e)
        except Exception as e:  # shown in the tab; the app goes on
            doc, err = None, f"{type(e).__name__}: {e}"
        self.app.call_from_thread(self._done, doc, err)

    def _done(self, doc: dict | None, err: str | None) -> None:
        self.doc, self.error = doc, err
        self.show()

    def show(self) -> None:
        from diag.probes.trace.render import phase_rows, render

        head = self.query_one("#trace-head", Static)
        if self.error is not None:
            head.update(Text(f"cannot read the trace: {self.error}", style="bold red"))
            return
        if self.doc is None:
            return
        d = self.doc
        f0 = d["files"][0]
        plat = ", ".join(sorted({f["platform"] for f in d["files"]}))
        complete = all(f["completeness"]["complete"] for f in d["files"])
        head.update(Text(f"{len(d['files'])} file(s), {plat}; completeness "
                         f"{'complete' if complete else 'INCOMPLETE'}; {len(d['findings'])} "
                         f"finding(s); merged view" + ("" if len(d["files"]) > 1
                                                        else f" of {f0['path']}"),
                         style="bold"))
        rows = phase_rows(d["merged"]["phases"]) or [("no speculative phase annotations",)
                                                     + ("",) * (len(COLUMNS) - 1)]
        fill(self.query_one("#trace-phases", DataTable), COLUMNS, rows)
        self.query_one("#trace-detail", Static).update(Text(render(d)))
