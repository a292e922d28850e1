"""The `diag tui` app and `make_app`, the factory the CLI and the tests share.

Workers (threads) do every blocking read through `tui.backend.Backend`; they hand results to
the UI thread with `call_from_thread`, the handlers update the `Model`, and a timer renders the
model at most `RENDER_HZ` times a second. Nothing a source does reaches the screen as a
traceback: it becomes a line in the model.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane

from diag import __version__
from diag.tui import data
from diag.tui.backend import Backend
from diag.tui.fixes_view import FixesView
from diag.tui.model import Model
from diag.tui.overview import Overview
from diag.tui.syncs_view import SyncsView
from diag.tui.timings import TimingsView

RENDER_HZ = 4
MIN_POLL_S = 0.25

HELP = """\
[b]diag tui[/b]: findings, fixes and before/after timings of SGLang speculative decoding

  [b]r[/b]  rerun the probes and re-read the fixes (refresh on demand)
  [b]a[/b]  apply the selected fix (in this process, or in the engine with --run-dir)
  [b]u[/b]  revert the selected fix
  [b]b[/b]  run the selected fix's bench (every bench when none is selected)
  [b]e[/b]  export what is on screen as JSON
  [b]q[/b]  quit
  [b]?[/b]  this help
  [b]1-4[/b]  Overview, Fixes, Timings, Syncs; arrows move between rows

The selected fix: on Fixes the row under the cursor, on Overview the selected
finding's fix, on Timings the row's fix, on Syncs repeat-interleave-output-size.
Press any key to close."""


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > Static { width: 96; height: auto; border: thick $accent; padding: 1 2;
                          background: $surface; }
    """

    def compose(self) -> ComposeResult:
        yield Static(HELP, id="help")

    def on_key(self, event) -> None:
        event.stop()
        self.dismiss()


class DiagApp(App[None]):
    TITLE = "diag"
    CSS = """
    #header { height: 2; background: $boost; padding: 0 1; }
    #message { height: 1; padding: 0 1; color: $text-muted; }
    TabbedContent { height: 1fr; }
    """
    BINDINGS = [
        Binding("r", "rerun", "rerun"),
        Binding("a", "apply", "apply"),
        Binding("u", "revert", "revert"),
        Binding("b", "bench", "bench"),
        Binding("e", "export", "export JSON"),
        Binding("q", "quit", "quit"),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("1", "tab('tab-overview')", "overview", show=False),
        Binding("2", "tab('tab-fixes')", "fixes", show=False),
        Binding("3", "tab('tab-timings')", "timings", show=False),
        Binding("4", "tab('tab-syncs')", "syncs", show=False),
    ]

    def __init__(self, backend: Backend, poll_interval: float = 1.0,
                 export_path: str = "diag-tui.json", autostart: bool = True) -> None:
        super().__init__()
        self.backend = backend
        self.model = Model()
        self.poll_interval = max(MIN_POLL_S, poll_interval)
        self.export_path = export_path
        self.autostart = autostart
        self._dirty = True
        self._polling = False
        self.bench_running = False
        self.probes_done = False  # set when every probe of the last pass has finished
        self._probes_left: set[str] = set()

    # -------------------------------------------------------------- layout

    def compose(self) -> ComposeResult:
        yield Static(id="header")
        with TabbedContent(id="tabs"):
            with TabPane("Overview", id="tab-overview"):
                yield Overview()
            with TabPane("Fixes", id="tab-fixes"):
                yield FixesView()
            with TabPane("Timings", id="tab-timings"):
                yield TimingsView()
            with TabPane("Syncs", id="tab-syncs"):
                yield SyncsView()
        yield Static(id="message")
        yield Footer()

    def on_mount(self) -> None:
        # Held, not queried: `query_one` searches the active screen, which may be the help.
        self.w_header = self.query_one("#header", Static)
        self.w_message = self.query_one("#message", Static)
        self.w_tabs = self.query_one(TabbedContent)
        self.w_overview = self.query_one(Overview)
        self.w_fixes = self.query_one(FixesView)
        self.w_timings = self.query_one(TimingsView)
        self.w_syncs = self.query_one(SyncsView)
        self.model.set_pending(self.backend.probe_ids())
        b = self.backend
        self.model.header.target = f"sglang {b.sglang or '(default)'} (resolving…)"
        if b.platform:
            self.model.header.platform = b.platform
        for name, what in (("run_dir", "run dir"), ("server_url", "server")):
            where = getattr(self.backend, name)
            if where:
                self.model.set_source(f"{what} {where}", None, "not read yet")
        self.render_model()
        self.call_after_refresh(self.changed)  # again once the tables know their width
        self.set_interval(1 / RENDER_HZ, self._render_if_dirty)
        if self.backend.run_dir or self.backend.server_url:
            self.set_interval(self.poll_interval, self._poll)
        if self.autostart:
            self.boot()

    # -------------------------------------------------------------- rendering

    def changed(self) -> None:
        self._dirty = True

    def _render_if_dirty(self) -> None:
        if self._dirty and self.is_running:
            self.render_model()

    def render_model(self) -> None:
        self._dirty = False
        m = self.model
        h = m.header
        head = Text()
        head.append(f"diag {__version__}  ", style="bold")
        head.append(f"target: {h.target}  platform: {data.fmt_value(h.platform)}  "
                    f"GPU: {data.fmt_value(h.gpu)}")
        if h.error:
            head.append(f"\ntarget error: {h.error}", style="bold red")
        else:
            head.append("\n")
            for s in m.sources.values():
                style = "green" if s.ok else "bold red" if s.ok is False else "dim"
                head.append(f"{s.name}: ", style="bold")
                head.append(f"{s.text}  ", style=style)
            if not m.sources:
                head.append("live sources: none", style="dim")
        try:
            self.w_header.update(head)
            self.w_overview.show(m)
            self.w_fixes.show(m, self.fix_where)
            self.w_timings.show(m, self.bench_running)
            self.w_syncs.show(m)
            self.w_message.update(Text(m.message))
        except NoMatches:
            pass  # shutting down: the widgets are already gone

    def on_resize(self) -> None:
        self.changed()  # the tables' long columns are cut to the new width

    def on_tabbed_content_tab_activated(self) -> None:
        self.call_after_refresh(self.changed)  # a table laid out while hidden had no width to fit

    @property
    def fix_where(self) -> str:
        return f"in the engine (run dir {self.backend.run_dir})" if self.backend.engine \
            else "in this process"

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "findings":
            self.w_overview.show_detail(self.model)
        elif event.data_table.id == "fixes":
            self.w_fixes.show_detail(self.model, self.fix_where)

    def _post(self, fn: Callable[..., Any], *args: Any) -> None:
        """From a worker: run `fn(*args)` on the UI thread, then mark the model changed."""
        def apply() -> None:
            fn(*args)
            self.changed()

        try:
            self.call_from_thread(apply)
        except RuntimeError:
            pass  # the app is shutting down

    def say(self, text: str) -> None:
        self.model.message = text
        self.changed()

    # -------------------------------------------------------------- workers

    @work(thread=True, group="boot", exclusive=True, exit_on_error=False)
    def boot(self) -> None:
        """Resolve the target, read the fixes, run every probe (each result shown as it lands)."""
        self._post(self.say, "resolving the target…")
        try:
            head = self.backend.start()
        except Exception as e:
            err = data.short_error(e) if not isinstance(e, data.DiagErrorTypes) else str(e)
            self._post(self._target_failed, err)
            return
        self._post(self._set_header, head)
        self._run_probes()
        self._refresh_fixes()
        self._post(self._set_gpu, self.backend.gpu())
        found = self.backend.discover_engines()
        if found:
            more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
            self._post(self.model.set_source, "live engine", None,
                       f"{found[0]}{more}: watch it with --run-dir")

    def _target_failed(self, err: str) -> None:
        self.model.header.error = err
        self.model.header.target = "not found"
        for v in self.model.finding_rows():
            v.state, v.summary = "skip", f"not run: {err}"
        self.say(f"target: {err}")

    def _set_header(self, head: data.Header) -> None:
        head.gpu = self.model.header.gpu
        self.model.header = head

    def _set_gpu(self, gpu: str) -> None:
        self.model.header.gpu = gpu

    def _refresh_fixes(self) -> None:
        try:
            views = self.backend.fix_views()
        except Exception as e:
            self._post(self.say, f"fixes: {data.short_error(e)}")
            return
        self._post(self._set_fixes, views)

    def _set_fixes(self, views: list[data.FixView]) -> None:
        for v in views:
            old = self.model.fixes.get(v.id)
            if old is not None and old.ack and not v.ack:
                v.ack = old.ack
            self.model.fixes[v.id] = v

    def _run_probes(self) -> None:
        """One worker thread per probe, so a slow probe does not hold back the others."""
        ids = self.backend.probe_ids()
        self._post(self._probes_started, ids)
        for pid in ids:
            self.call_from_thread(self.run_one_probe, pid)

    def _probes_started(self, ids: list[str]) -> None:
        self.probes_done = False
        self._probes_left = set(ids)

    @work(thread=True, group="probes", exit_on_error=False)
    def run_one_probe(self, pid: str) -> None:
        self._post(self.model.set_running, pid)
        t0 = time.monotonic()
        try:
            found = self.backend.run_probe(pid)
        except Exception as e:  # run_probe already catches; this is belt and braces
            from diag.findings import Finding, Status

            found = [Finding(pid, Status.ERROR, pid, f"probe crashed: {data.short_error(e)}")]
        self._post(self._probe_finished, pid, found, time.monotonic() - t0)

    def _probe_finished(self, pid: str, found: list, seconds: float) -> None:
        self.model.set_findings(pid, found)
        self._probes_left.discard(pid)
        if self._probes_left:
            self.say(f"{pid}: done in {seconds:.1f} s; running {', '.join(sorted(self._probes_left))}")
        else:
            self.probes_done = True
            self.say(f"{len(self.model.findings)} probes done; r reruns them")

    @work(thread=True, group="fix", exclusive=False, exit_on_error=False)
    def fix_action(self, fix_id: str, action: str) -> None:
        try:
            ack = (self.backend.apply if action == "apply" else self.backend.revert)(fix_id)
        except Exception as e:
            ack = f"{action} failed: {e if isinstance(e, data.DiagErrorTypes) else data.short_error(e)}"
        self._post(self._set_ack, fix_id, ack)
        self._refresh_fixes()

    def _set_ack(self, fix_id: str, ack: str) -> None:
        if fix_id in self.model.fixes:
            self.model.fixes[fix_id].ack = ack
        self.say(f"{fix_id}: {ack}")

    @work(thread=True, group="bench", exclusive=True, exit_on_error=False)
    def run_benches(self, fix_ids: list[str]) -> None:
        self._post(self._bench_state, True)
        for fid in fix_ids:
            def progress(msg: str, fid: str = fid) -> None:
                self._post(self._bench_progress, f"{fid}: {msg}")

            progress("starting…")
            try:
                res = self.backend.bench(fid, progress)
            except Exception as e:
                err = str(e) if isinstance(e, data.DiagErrorTypes) else data.short_error(e)
                self._post(self._bench_progress, f"{fid}: failed: {err}")
                continue
            self._post(self._bench_done, res)
        self._post(self._bench_state, False)

    def _bench_state(self, running: bool) -> None:
        self.bench_running = running
        if not running:
            self.say("bench finished")

    def _bench_progress(self, text: str) -> None:
        self.model.bench_progress = text

    def _bench_done(self, res) -> None:
        self.model.bench[res.id] = res
        self.model.bench_progress = f"{res.id}: done" + (f" (not run: {res.skipped})"
                                                          if res.skipped else "")

    def _poll(self) -> None:
        if not self._polling:
            self._polling = True
            self.poll_sources()

    @work(thread=True, group="poll", exit_on_error=False)
    def poll_sources(self) -> None:
        try:
            b = self.backend
            if b.run_dir:
                name = f"run dir {b.run_dir}"
                try:
                    state, events = b.poll_run_dir()
                    live = len(state.live)
                    text = (f"{len(state.processes)} processes ({live} live), "
                            f"{len(events)} events")
                    view = data.engine_view(events)  # here, not on the UI thread
                    self._post(self._engine, name, state, view, text)
                except Exception as e:
                    self._post(self.model.set_source, name, False, f"unreadable: {_why(e)}")
            if b.server_url:
                name = f"server {b.server_url}"
                try:
                    values = b.poll_server()
                    self._post(self._server, name, values)
                except Exception as e:
                    self._post(self.model.set_source, name, False, f"unreachable: {_why(e)}")
        finally:
            self._polling = False

    def _engine(self, name: str, state, view, text: str) -> None:
        self.model.set_engine_view(state, view)
        self.model.set_source(name, True, text)

    def _server(self, name: str, values: dict[str, float]) -> None:
        self.model.add_server(values)
        got = ", ".join(sorted(values)) or "none of the charted series (--enable-metrics?)"
        self.model.set_source(name, True, f"ok: {got}")

    # -------------------------------------------------------------- actions

    def _active(self) -> str:
        return self.w_tabs.active

    def selected_fix(self) -> str | None:
        tab = self._active()
        if tab == "tab-fixes":
            v = self.w_fixes.selected(self.model)
            return v.id if v else None
        if tab == "tab-overview":
            f = self.w_overview.selected(self.model)
            if f:
                return (f.fixes[0] if f.fixes else data.fix_of_probe(f.probe))
            return None
        if tab == "tab-timings":
            return self.w_timings.selected_fix(self.model)
        if tab == "tab-syncs":
            return "repeat-interleave-output-size"
        return None

    def action_rerun(self) -> None:
        if any(w.group == "boot" and w.is_running for w in self.workers):
            # A thread worker cannot be stopped: a second one would resolve and probe again.
            self.say("still starting up (target, probes, fixes, GPU); r works once that is done")
            return
        if self.backend.ctx is None:
            self.boot()
            return
        if self._probes_left:
            self.say(f"probes still running: {', '.join(sorted(self._probes_left))}")
            return
        self.say("rerunning the probes…")
        self.rerun()

    @work(thread=True, group="boot", exclusive=True, exit_on_error=False)
    def rerun(self) -> None:
        self._refresh_fixes()
        self._run_probes()

    def _fix_act(self, action: str) -> None:
        fid = self.selected_fix()
        if not fid:
            self.say(f"select a fix to {action} (Fixes tab)")
            return
        if fid not in self.model.fixes and self.model.fixes:
            self.say(f"unknown fix {fid}")
            return
        self.say(f"{action} {fid} {self.fix_where}…")
        self.fix_action(fid, action)

    def action_apply(self) -> None:
        self._fix_act("apply")

    def action_revert(self) -> None:
        self._fix_act("revert")

    def action_bench(self) -> None:
        if self.bench_running:
            self.say("a bench is already running")
            return
        fid = self.selected_fix()
        ids = [fid] if fid else [v.id for v in self.model.fixes.values() if v.bench]
        if not ids:
            self.say("no fix with a bench")
            return
        self.w_tabs.active = "tab-timings"
        self.model.bench_progress = f"starting {', '.join(ids)}…"
        self.bench_running = True
        self.changed()
        self.run_benches(ids)

    def action_export(self) -> None:
        try:
            path = data.write_export(self.model.export(), self.export_path)
            self.say(f"exported to {path}")
        except OSError as e:
            self.say(f"export failed: {e.strerror or e}")

    def action_tab(self, tab: str) -> None:
        self.w_tabs.active = tab
        table = {"tab-overview": "#findings", "tab-fixes": "#fixes", "tab-timings": "#timings",
                 "tab-syncs": "#syncs"}[tab]
        self.w_tabs.query_one(table).focus()

    def action_help(self) -> None:
        self.push_screen(HelpScreen())


def _why(e: BaseException) -> str:
    return str(e) if isinstance(e, data.DiagErrorTypes) else data.short_error(e)


def make_app(sglang: str | None = None, platform: str | None = None,
             run_dir: str | None = None, server_url: str | None = None, *,
             backend: Backend | None = None, execute: bool = True, poll_interval: float = 1.0,
             export_path: str = "diag-tui.json", autostart: bool = True) -> DiagApp:
    """The app for the CLI and for tests (tests pass their own `backend`)."""
    backend = backend or Backend(sglang=sglang, platform=platform, run_dir=run_dir,
                                 server_url=server_url, execute=execute, discover=True)
    return DiagApp(backend, poll_interval=poll_interval, export_path=export_path,
                   autostart=autostart)

