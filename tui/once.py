"""`diag tui --once`: the same model the app shows, every tab in one plain-text frame.

Fills the model synchronously (target, fixes, every probe, one read of each live source) and
renders it with rich (no textual), so logs and CI get the view without a terminal.
"""

from __future__ import annotations

import io

from rich.console import Console, Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from diag import __version__
from diag.tui import data
from diag.tui.backend import Backend
from diag.tui.header import header_text
from diag.tui.model import Model


def fill(backend: Backend, model: Model | None = None) -> Model:
    """Everything one frame needs; a failing part becomes a line in the model."""
    m = model or Model()
    m.set_pending(backend.probe_ids())
    try:
        m.header = backend.start()
    except Exception as e:
        err = str(e) if isinstance(e, data.DiagErrorTypes) else data.short_error(e)
        m.header.error, m.header.target = err, "not found"
        for v in m.finding_rows():
            v.state, v.summary = "skip", f"not run: {err}"
        return m
    m.header.gpu = backend.gpu()
    for v in backend.fix_views():
        m.fixes[v.id] = v
    for pid in backend.probe_ids():
        m.set_findings(pid, backend.run_probe(pid))
    if backend.run_dir:
        name = f"run dir {backend.run_dir}"
        try:
            state, events = backend.poll_run_dir()
            m.set_engine(state, events)
            m.set_source(name, True, f"{len(state.processes)} processes, {len(events)} events"
                         + data.lost_suffix(state))
        except Exception as e:
            m.set_source(name, False, f"unreadable: {_why(e)}")
    if backend.server_url:
        name = f"server {backend.server_url}"
        try:
            values, states, builders = backend.poll_server()
            m.add_server(values, states, builders)
            m.set_source(name, True, f"ok: {len(values)} series")
        except Exception as e:
            m.set_source(name, False, f"unreachable: {_why(e)}")
    m.live = backend.live()
    return m


def _why(e: BaseException) -> str:
    return str(e) if isinstance(e, data.DiagErrorTypes) else data.short_error(e)


def _table(title: str, *cols: tuple[str, bool]) -> Table:
    """A table whose identifier columns (`True`) are never wrapped or cut."""
    t = Table(title=title, title_justify="left", title_style="bold", expand=False,
              show_edge=False, pad_edge=False)
    for name, ident in cols:
        t.add_column(name, no_wrap=ident)
    return t


def _ind(text: Text | str, n: int) -> Padding:
    """`text` indented by `n`, its wrapped lines too (words wrap; nothing is cut)."""
    return Padding(text if isinstance(text, Text) else Text(text), (0, 0, 0, n))


def _title(text: str) -> list:
    return [Text(""), Text(text, style="bold underline")]


def frame(m: Model, width: int = 140) -> Group:
    """Every tab, one block per row: identifiers lead their line, long text wraps below them
    (so no line is wider than `width` and no id is cut)."""
    h = m.header
    head = header_text(m, width)
    parts: list = [head]
    if h.error:
        parts.append(Text(f"target error: {h.error}", style="bold red"))
    for s in m.sources.values():
        parts.append(_ind(f"{s.name}: {s.text}", 0))
    for what, where in h.sources.items():
        parts.append(_ind(f"{what}: {where}", 2))
    if "GPU:" not in head.plain:
        parts.append(_ind(f"GPU: {data.fmt_value(h.gpu)}; diag {__version__}", 0))
    parts += _title("Overview")
    for v in m.finding_rows():
        state = v.state.upper() if v.state in ("fail", "error") else v.state
        parts.append(Text(f"{state:<6} {v.probe}", style="bold"))
        parts.append(_ind(v.summary, 7))
        for line in v.detail[:12]:
            if line.startswith("fix: ") and v.fixes:
                line = "fix: " + ", ".join(m.fix_advice(f) for f in v.fixes)
            parts.append(_ind(line, 9))
    parts += _title("Fixes")
    for f in m.fix_rows():
        parts.append(Text(f"{f.id}  {data.fmt_value(f.applicability)}  "
                          f"{data.fmt_value(f.state)}", style="bold"))
        if f.reason:
            parts.append(_ind(f.reason, 4))
    parts += _title("Timings: median (IQR p25–p75, n samples); change = after/before")
    for i, line in enumerate(m.live_lines()):
        parts.append(_ind(line, 2 if i else 0))
    timings = m.timing_rows()
    if not timings:
        parts.append(_ind("no timings: run `diag bench`, or watch --run-dir / --server", 2))
    for r in timings:
        change, style = data.ratio_text(r)
        head = Text(f"{r.fix}  ", style="bold")
        head.append(r.metric + (f" [{r.unit}]" if r.unit not in ("s", "") else ""))
        parts.append(head)
        line = Text(f"before {data.fmt_stats(r.before, r.unit)} → after "
                    f"{data.fmt_stats(r.after, r.unit)}: ")
        line.append(change, style=style)
        parts.append(_ind(line, 4))
        src = f"source: {r.source}" + (f"; {r.note}" if r.note else "")
        if r.age is not None:
            src += f"; read {data.fmt_age(r.age)}"
        parts.append(_ind(src, 4))
        parts.extend(_ind(n, 6) for n in r.notes)
    parts += _title("Syncs per call (file:line under sglang/srt/layers/attention/)")
    phases = m.phase_rows()  # the configuration under audit's totals, as the Syncs tab shows
    if phases:
        parts.append(Text(data.phase_line(phases), style="bold"))
        fwd = m.forward_rows()
        if fwd:
            parts.append(Text(data.forward_line(fwd), style="bold"))
    rows = [[s.builder, data.fmt_value(s.before), data.fmt_value(s.after),
             data.short_path(s.location) or "-", s.source] for s in m.sync_rows()]
    if width >= 140:
        t = _table("", ("builder", True), ("before", True), ("after", True),
                   ("file:line", True), ("source", False))
        for r in rows:
            t.add_row(*r)
        parts.append(t)
    else:
        for b, before, after, loc, src in rows:
            parts.append(Text(b, style="bold"))
            parts.append(_ind(f"{before} → {after}  at {loc}  ({src})", 4))
    return Group(*parts)


def render_model(m: Model, width: int = 140) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None, force_terminal=False,
            legacy_windows=False).print(frame(m, width))
    return "".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines())


def render_once(sglang: str | None = None, platform: str | None = None,
                run_dir: str | None = None, server_url: str | None = None,
                execute: bool = True, width: int = 140,
                config: dict | None = None) -> str:
    backend = Backend(sglang=sglang, platform=platform, run_dir=run_dir, server_url=server_url,
                      execute=execute, config=config)
    return render_model(fill(backend), width)
