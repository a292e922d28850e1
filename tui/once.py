"""`diag tui --once`: the same model the app shows, every tab in one plain-text frame.

Fills the model synchronously (target, fixes, every probe, one read of each live source) and
renders it with rich (no textual), so logs and CI get the view without a terminal.
"""

from __future__ import annotations

import io

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from diag import __version__
from diag.tui import data
from diag.tui.backend import Backend
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
            m.set_source(name, True, f"{len(state.processes)} processes, {len(events)} events")
        except Exception as e:
            m.set_source(name, False, f"unreadable: {_why(e)}")
    if backend.server_url:
        name = f"server {backend.server_url}"
        try:
            m.add_server(backend.poll_server())
            m.set_source(name, True, "ok")
        except Exception as e:
            m.set_source(name, False, f"unreachable: {_why(e)}")
    return m


def _why(e: BaseException) -> str:
    return str(e) if isinstance(e, data.DiagErrorTypes) else data.short_error(e)


def _table(title: str, *cols: str) -> Table:
    t = Table(title=title, title_justify="left", title_style="bold", expand=False,
              show_edge=False, pad_edge=False)
    for c in cols:
        t.add_column(c, overflow="fold")
    return t


def frame(m: Model) -> Group:
    h = m.header
    parts: list = [Text(f"diag {__version__}  target: {h.target}  platform: "
                        f"{data.fmt_value(h.platform)}  GPU: {data.fmt_value(h.gpu)}",
                        style="bold")]
    if h.error:
        parts.append(Text(f"target error: {h.error}", style="bold red"))
    for s in m.sources.values():
        parts.append(Text(f"{s.name}: {s.text}"))
    t = _table("Overview", "status", "probe", "summary")
    for v in m.finding_rows():
        t.add_row(v.state.upper() if v.state in ("fail", "error") else v.state, v.probe,
                  v.summary)
    parts += [Text(""), t]
    for v in m.finding_rows():
        if v.detail:
            parts.append(Text(f"  {v.probe}:", style="bold"))
            parts.extend(Text(f"    {line}") for line in v.detail[:12])
    t = _table("Fixes", "fix", "applicability", "state", "reason")
    for f in m.fix_rows():
        t.add_row(f.id, data.fmt_value(f.applicability), data.fmt_value(f.state), f.reason)
    parts += [Text(""), t]
    t = _table("Timings", "fix", "metric", "before", "after", "after/before", "source", "note")
    for r in m.timing_rows():
        t.add_row(r.fix, r.metric, data.fmt_stats(r.before, r.unit),
                  data.fmt_stats(r.after, r.unit), data.fmt_ratio(r.ratio), r.source, r.note)
    parts += [Text(""), t]
    if not m.timing_rows():
        parts.append(Text("  no timings: run `diag bench`, or watch --run-dir / --server"))
    t = _table("Syncs (per call; file:line under sglang/srt/layers/attention/)", "builder",
               "before", "after", "file:line", "source")
    for s in m.sync_rows():
        t.add_row(s.builder, data.fmt_value(s.before), data.fmt_value(s.after),
                  data.short_path(s.location) or "-", s.source)
    parts += [Text(""), t]
    return Group(*parts)


def render_model(m: Model, width: int = 140) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None, force_terminal=False,
            legacy_windows=False).print(frame(m))
    return buf.getvalue()


def render_once(sglang: str | None = None, platform: str | None = None,
                run_dir: str | None = None, server_url: str | None = None,
                execute: bool = True, width: int = 140) -> str:
    backend = Backend(sglang=sglang, platform=platform, run_dir=run_dir, server_url=server_url,
                      execute=execute)
    return render_model(fill(backend), width)
