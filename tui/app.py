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

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.containers import VerticalScroll
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane

from diag.tui import data
from diag.tui.backend import Backend
from diag.tui.fixes_view import FixesView
from diag.tui.header import header_text
from diag.tui.model import Model
from diag.tui.overview import Overview
from diag.tui.syncs_view import SyncsView
from diag.tui.timings import TimingsView

RENDER_HZ = 4
MIN_POLL_S = 0.25
TABLES = {"tab-overview": "#findings", "tab-fixes": "#fixes", "tab-timings": "#timings",
          "tab-syncs": "#syncs", "tab-trace": "#trace-phases"}

ABOUT = ("Selected fix: the Fixes row; on Overview the finding's fix; on Timings the row's; on "
         "Syncs the one the counts are about. Values: median (IQR p25–p75, n); change: "
         "after/before. Live values show their age, STALE when a source stops answering.")


def help_text(bindings: list[Binding]) -> Group:
    """The help, generated from the app's key bindings (key, what it does)."""
    head = Text()
    head.append("diag tui", style="bold")
    head.append(": findings, fixes and before/after timings of SGLang speculative decoding")
    keys = Table(show_header=False, box=None, padding=(0, 2, 0, 2))
    keys.add_column(no_wrap=True, style="bold")
    keys.add_column(ratio=1)
    for b in bindings:
        if b.description:
            keys.add_row(b.key_display or b.key, b.tooltip or b.description)
    return Group(head, keys, Text(f"{ABOUT}\nPress any key to close.", style="dim"))


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 100%; max-width: 100; height: auto; max-height: 100%;
                                  border: round $accent; padding: 0 1; background: $surface; }
    """

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(help_text(DiagApp.BINDINGS), id="help")

    def on_key(self, event) -> None:
        event.stop()
        self.dismiss()


class DiagCommands(Provider):
    """diag's actions in the command palette (Ctrl+P): the key bindings, then per fix."""

    def _commands(self) -> list[tuple[str, str, Any]]:
        app = self.app
        assert isinstance(app, DiagApp)
        out = [(b.tooltip or b.description, f"key {b.key_display or b.key}",
                (lambda a=b.action: app.run_action(a)))
               for b in DiagApp.BINDINGS if b.description and b.action != "help"]
        for fid, v in app.model.fixes.items():
            out.append((f"apply {fid}", f"{data.fmt_value(v.applicability)} {app.fix_where}",
                        lambda f=fid: app.act_on(f, "apply")))
            out.append((f"revert {fid}", app.fix_where, lambda f=fid: app.act_on(f, "revert")))
            if v.bench:
                out.append((f"bench {fid}", v.bench, lambda f=fid: app.start_bench([f])))
        return out

    async def discover(self) -> Hits:
        for name, help_, cb in self._commands():
            yield DiscoveryHit(name, cb, help=help_)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, help_, cb in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), cb, help=help_)


class DiagApp(App[None]):
    TITLE = "diag"
    CSS = """
    #header { height: 1; background: $boost; padding: 0 1; }
    #message { height: 1; padding: 0 1; color: $text-muted; }
    TabbedContent { height: 1fr; }
    """
    COMMANDS = App.COMMANDS | {DiagCommands}
    BINDINGS = [
        Binding("r", "rerun", "rerun", tooltip="rerun the probes and re-read the fixes"),
        Binding("a", "apply", "apply", tooltip="apply the selected fix (in this process, or in "
                "the engine with --run-dir); a fix that is not applicable is refused"),
        Binding("u", "revert", "revert", tooltip="revert the selected fix"),
        Binding("b", "bench", "bench", tooltip="run the selected fix's bench (every bench when "
                "none is selected); q ends it"),
        Binding("e", "export", "export", tooltip="export what is on screen as JSON"),
        Binding("q", "quit", "quit", tooltip="quit (ends a running bench and its processes)"),
        Binding("question_mark,f1", "help", "help", key_display="?/F1", tooltip="this help"),
        Binding("1", "tab('tab-overview')", "overview", show=False, tooltip="Overview tab"),
        Binding("2", "tab('tab-fixes')", "fixes", show=False, tooltip="Fixes tab"),
        Binding("3", "tab('tab-timings')", "timings", show=False, tooltip="Timings tab"),
        Binding("4", "tab('tab-syncs')", "syncs", show=False, tooltip="Syncs tab"),
        # no description: the help (and its snapshots) lists it only once --trace opens the tab
        Binding("5", "tab('tab-trace')", "", show=False),
    ]

    def __init__(self, backend: Backend, poll_interval: float = 1.0,
                 export_path: str = "diag-tui.json", autostart: bool = True,
                 trace_paths: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.backend = backend
        self.trace_paths = trace_paths
        self.poll_interval = max(MIN_POLL_S, poll_interval)
        self.model = Model(poll_interval=self.poll_interval)
        self.export_path = export_path
        self.autostart = autostart
        self._dirty = True
        self._polling = False
        self.bench_running = False
        self.quitting = False
        self.probes_done = False  # set when every probe of the last pass has finished
        self._probes_left: set[str] = set()
        self._probes_all = 0

    # -------------------------------------------------------------- layout

    def compose(self) -> ComposeResult:
        yield Static(id="header")
        with TabbedContent(id="tabs"):
            with TabPane("1 Overview", id="tab-overview"):
                yield Overview()
            with TabPane("2 Fixes", id="tab-fixes"):
                yield FixesView()
            with TabPane("3 Timings", id="tab-timings"):
                yield TimingsView()
            with TabPane("4 Syncs", id="tab-syncs"):
                yield SyncsView()
            if self.trace_paths:
                from diag.tui.trace_view import TraceView

                with TabPane("5 Trace", id="tab-trace"):
                    yield TraceView(self.trace_paths)
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
        self.query_one("#findings").focus()  # arrows move between rows at once
        self.render_model()
        self.call_after_refresh(self.changed)  # again once the tables know their width
        self.set_interval(1 / RENDER_HZ, self._render_if_dirty)
        if self.backend.run_dir or self.backend.server_url:
            self.set_interval(self.poll_interval, self._poll)
            self.set_interval(1.0, self.changed)  # ages of the live values move on
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
        try:
            self.w_header.update(header_text(m, max(20, self.size.width - 2)))
            self.w_overview.show(m)
            self.w_fixes.show(m, self.fix_where)
            self.w_timings.show(m, self.bench_running)
            self.w_syncs.show(m)
            self.w_message.update(Text(m.message, overflow="ellipsis", no_wrap=True))
        except NoMatches:
            pass  # shutting down: the widgets are already gone

    def on_resize(self) -> None:
        self.changed()  # the tables' columns are fitted to the new width

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        self.call_after_refresh(self.changed)  # a table laid out while hidden had no width to fit
        pane = event.pane.id if event.pane is not None else None
        if pane in TABLES:
            self.call_after_refresh(lambda: self.query_one(TABLES[pane]).focus())

    @property
    def fix_where(self) -> str:
        return f"in the engine (run dir {self.backend.run_dir})" if self.backend.engine \
            else "in this process"

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if self.quitting or not event.data_table.is_attached:
            return  # a highlight that arrives while the app is torn down
        tid = event.data_table.id
        if tid == "findings":
            self.w_overview.show_detail(self.model)
        elif tid == "fixes":
            self.w_fixes.show_detail(self.model, self.fix_where)
        elif tid == "timings":
            self.w_timings.show_detail(self.model)
        elif tid == "syncs":
            self.w_syncs.show_detail(self.model)

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
        self._refresh_fixes()
        self._run_probes()
        self._post(self._set_gpu, self.backend.gpu())
        found = self.backend.discover_engines()
        if found:
            more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
            self._post(self.model.set_source, "live engine", None,
                       f"watch it with --run-dir {found[0]}{more}")

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
        self._probes_all = len(ids)
        for pid in ids:
            self.model.set_running(pid)
        self.say(f"probes: 0/{len(ids)} done; running {', '.join(ids)}")

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
        done = self._probes_all - len(self._probes_left)
        if self._probes_left:
            self.say(f"probes: {done}/{self._probes_all} done ({pid} in {seconds:.1f} s); "
                     f"running {', '.join(sorted(self._probes_left))}")
        else:
            self.probes_done = True
            self.say(f"probes: {done}/{self._probes_all} done; r reruns them")

    @work(thread=True, group="fix", exclusive=False, exit_on_error=False)
    def fix_action(self, fix_id: str, action: str) -> None:
        b = self.backend
        try:
            if b.engine:
                rid = b.request(fix_id, action)
                self._post(self._requested, fix_id, action, rid)
                return
            ack = (b.apply if action == "apply" else b.revert)(fix_id)
            self._post(self._set_ack, fix_id, ack, f"{fix_id}: {ack}")
        except Exception as e:
            why = str(e) if isinstance(e, data.DiagErrorTypes) else data.short_error(e)
            self._post(self._set_ack, fix_id, f"{action} refused: {why}",
                       f"{action} {fix_id} refused: {why}")
        self._refresh_fixes()

    def _requested(self, fix_id: str, action: str, rid: str) -> None:
        self.model.requests[rid] = (fix_id, action)
        if fix_id in self.model.fixes:
            self.model.fixes[fix_id].ack = f"{action} requested ({rid}); waiting for the ack"
        self.say(f"{action} {fix_id}: sent to the engine's processes; waiting for their "
                 "acknowledgement")

    def _set_ack(self, fix_id: str, ack: str, message: str) -> None:
        if fix_id in self.model.fixes:
            self.model.fixes[fix_id].ack = ack
        self.say(message)

    @work(thread=True, group="bench", exclusive=True, exit_on_error=False)
    def run_benches(self, fix_ids: list[str]) -> None:
        self._post(self._bench_state, True)
        for fid in fix_ids:
            if self.quitting:
                break

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
        self.model.message = f"bench {text}"

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
                    text = f"{live}/{len(state.processes)} processes live, {len(events)} " \
                           f"events{data.lost_suffix(state)}"
                    view = data.engine_view(events)  # here, not on the UI thread
                    procs = data.engine_processes(state, events)
                    self._post(self._engine, name, state, view, procs, text, live)
                except Exception as e:
                    self._post(self.model.set_source, name, False, f"unreadable: {_why(e)}")
            if b.server_url:
                name = f"server {b.server_url}"
                try:
                    got = b.poll_server()
                    self._post(self._server, name, got)
                except Exception as e:
                    self._post(self.model.set_source, name, False, f"unreachable: {_why(e)}")
            self._post(setattr, self.model, "live", b.live())
        finally:
            self._polling = False

    def _engine(self, name: str, state, view, procs, text: str, live: int) -> None:
        for line in self.model.set_engine_view(state, view, procs):
            self.say(line)
        self.model.set_source(name, True if live else False, text if live else
                              f"no live process: {text}")

    def _server(self, name: str, got) -> None:
        values, fix_states, builders = got
        self.model.add_server(values, fix_states, builders)
        n = len(values)
        self.model.set_source(name, True, f"ok: {n} series" if n else
                              "ok: none of the charted series (--enable-metrics?)")

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
            return self.model.sync_fix()
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
        self.say("r: rerunning the probes and re-reading the fixes…")
        self.rerun()

    @work(thread=True, group="boot", exclusive=True, exit_on_error=False)
    def rerun(self) -> None:
        self._refresh_fixes()
        self._run_probes()

    def act_on(self, fid: str, action: str) -> None:
        if fid not in self.model.fixes and self.model.fixes:
            self.say(f"unknown fix {fid}")
            return
        self.say(f"{action} {fid} {self.fix_where}…")
        self.fix_action(fid, action)

    def _fix_act(self, action: str) -> None:
        fid = self.selected_fix()
        if not fid:
            self.say(f"select a fix to {action} (Fixes tab)")
            return
        self.act_on(fid, action)

    def action_apply(self) -> None:
        self._fix_act("apply")

    def action_revert(self) -> None:
        self._fix_act("revert")

    def action_bench(self) -> None:
        fid = self.selected_fix()
        self.start_bench([fid] if fid else [v.id for v in self.model.fixes.values() if v.bench])

    def start_bench(self, ids: list[str]) -> None:
        if self.bench_running:
            self.say("a bench is already running (q ends it)")
            return
        if not ids:
            self.say("no fix with a bench")
            return
        self.w_tabs.active = "tab-timings"
        self.model.bench_progress = f"starting {', '.join(ids)}…"
        self.bench_running = True
        self.say(f"bench {', '.join(ids)}: starting…")
        self.run_benches(ids)

    def action_export(self) -> None:
        try:
            path = data.write_export(self.model.export(), self.export_path)
            self.say(f"exported to {path}")
        except OSError as e:
            self.say(f"export failed: {e.strerror or e}")

    def action_tab(self, tab: str) -> None:
        if tab == "tab-trace" and not self.trace_paths:
            return  # the tab is there only with --trace
        self.w_tabs.active = tab
        self.w_tabs.query_one(TABLES[tab]).focus()

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    async def action_quit(self) -> None:
        """Quit now: end a running bench's process group first (its children too)."""
        self.quitting = True
        self.backend.stop_benches()
        self.exit()


def _why(e: BaseException) -> str:
    return str(e) if isinstance(e, data.DiagErrorTypes) else data.short_error(e)


def make_app(sglang: str | None = None, platform: str | None = None,
             run_dir: str | None = None, server_url: str | None = None, *,
             backend: Backend | None = None, execute: bool = True, poll_interval: float = 1.0,
             export_path: str = "diag-tui.json", autostart: bool = True,
             config: dict[str, Any] | None = None, trace_paths: tuple[str, ...] = ()) -> DiagApp:
    """The app for the CLI and for tests (tests pass their own `backend`)."""
    backend = backend or Backend(sglang=sglang, platform=platform, run_dir=run_dir,
                                 server_url=server_url, execute=execute, discover=True,
                                 config=config)
    return DiagApp(backend, poll_interval=poll_interval, export_path=export_path,
                   autostart=autostart, trace_paths=trace_paths)
