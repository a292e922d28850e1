"""The TUI driven with the pilot: tabs, selection, apply/revert, bench progress, live sources."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time

import psutil
import pytest
from tui_standins import bench_gate, bench_started, gates, standin_backend

from diag.tui.app import HelpScreen, make_app
from diag.tui.backend import Backend

pytestmark = pytest.mark.release
SIZE = (140, 45)


async def until(pilot, cond, timeout: float = 20.0) -> None:
    """Let the app run until `cond()` holds (workers finish in threads)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await pilot.pause(0.05)
    pilot.app.render_model()
    await pilot.pause()


def _plain(renderable, width: int) -> str:
    """A rich renderable as plain text at `width` columns."""
    import io

    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None).print(renderable)
    return buf.getvalue()


def cell_texts(table) -> list[list[str]]:
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


async def show_tab(pilot, tab: str) -> None:
    await pilot.click(f"#--content-tab-{tab}")
    await pilot.pause()


def test_overview_lists_findings_and_detail_follows_selection(release):
    app = make_app(backend=standin_backend(release))

    async def go():
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.probes_done)
            table = app.query_one("#findings")
            rows = cell_texts(table)
            assert [r[1] for r in rows] == ["draft-extend-graph", "metadata-syncs",
                                            "profiler-teardown"]
            assert [r[0] for r in rows] == ["warn", "warn", "FAIL"]
            header = str(app.query_one("#header").render())
            assert "sglang 0.5.17 [release] │ hip" in header and "\n" not in header
            assert app.focused is table  # focus starts in the table: arrows move at once
            await pilot.press("down")
            await pilot.pause()
            detail = str(app.query_one("#finding-detail").render())
            assert "deepseek_v4_backend_hip_radix.py:1116" in detail
            await pilot.press("down")
            await pilot.pause()
            assert "not reproduced in 3 tries" in str(app.query_one("#finding-detail").render())
            await pilot.press("question_mark")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            from diag.tui.app import help_text

            help_ = _plain(help_text(app.BINDINGS), 200)  # what the help screen shows
            for b in app.BINDINGS:  # generated from the bindings
                assert (b.key_display or b.key) in help_ and (b.tooltip or "") in help_
            await pilot.press("x")
            await pilot.pause()
            assert not isinstance(app.screen, HelpScreen)
            await pilot.press("f1")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            await pilot.press("x")
            await pilot.pause()
            await pilot.press("4")  # keys switch tabs too
            await pilot.pause()
            assert app.query_one("#tabs").active == "tab-syncs"
            syncs = cell_texts(app.query_one("#syncs"))
            assert any("deepseek_v4_backend_hip_radix.py:1116" in r[3] for r in syncs)
            await pilot.press("2")
            await pilot.pause()
            assert app.query_one("#tabs").active == "tab-fixes" and app.focused.id == "fixes"
            await pilot.press("q")
        assert app.return_code == 0

    asyncio.run(go())


def test_apply_and_revert_in_this_process_show_state_and_ack(release):
    backend = standin_backend(release)
    import diag_tui_standin_module as mod

    original = mod.value
    app = make_app(backend=backend)

    async def go():
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.probes_done)
            await show_tab(pilot, "tab-fixes")
            app.query_one("#fixes").focus()
            assert app.focused.id == "fixes"
            assert cell_texts(app.query_one("#fixes"))[0][:3] == \
                ["standin-fix", "applicable", "not applied"]
            await pilot.press("a")
            await until(pilot, lambda: app.model.fixes["standin-fix"].state == "applied")
            row = cell_texts(app.query_one("#fixes"))[0]
            assert row[2] == "applied" and "applied in this process" in row[3]
            assert mod.value() == 42  # the real Patch replaced the function
            await pilot.press("u")
            await until(pilot, lambda: app.model.fixes["standin-fix"].state == "reverted")
            assert "reverted in this process" in cell_texts(app.query_one("#fixes"))[0][3]
            assert mod.value is original  # the identical object is back

    asyncio.run(go())


async def start_bench(pilot, app) -> None:
    """Once the probes are done, `b` on the Fixes tab, until the stand-in bench has started."""
    await until(pilot, lambda: app.probes_done)
    await show_tab(pilot, "tab-fixes")
    await pilot.press("b")
    await until(pilot, bench_started.is_set)


def test_bench_started_from_the_tui_shows_progress_then_rows(release, tmp_path):
    gates(tmp_path)
    app = make_app(backend=standin_backend(release))

    async def go():
        async with app.run_test(size=SIZE) as pilot:
            await start_bench(pilot, app)
            await until(pilot, lambda: "step 1/2" in app.model.bench_progress)
            assert app.query_one("#tabs").active == "tab-timings"
            assert app.query_one("#bench-bar").display  # progress shown while it runs
            assert "step 1/2" in str(app.query_one("#bench-line").render())
            assert "step 1/2" in app.model.message  # and in the status line
            bench_gate.set()
            await until(pilot, lambda: not app.bench_running)
            rows = cell_texts(app.query_one("#timings"))
            by_metric = {r[1]: r for r in rows}
            host = by_metric["metadata build host time"]
            assert host[2:5] == ["10.9 ms (10.5–11.2) n=9", "190 µs (180–200) n=9",
                                 "57× faster"]
            # the release it ran (the TUI's target) is kept with the row
            assert {r.release for r in app.model.timing_rows()} == {"0.5.17"}
            assert by_metric["syncs per call [syncs]"][2:5] == ["2 n=9", "0 n=9", "none after"]
            # a worse ratio the bench row declares expected says so (not hard-coded here)
            assert by_metric["stop (stand-in)"][4] == "26× slower (expected: collects at the stop)"
            assert not app.query_one("#bench-bar").display
            detail = str(app.query_one("#timing-detail").render())
            assert "stand-in note: CPU only" in detail  # the bench's notes are kept
            assert "source: synthetic bench, sglang 0.5.17" in detail
            # Syncs shows the bench's own before → after, as Timings does
            await pilot.press("4")
            await until(pilot, lambda: True)
            rows = cell_texts(app.query_one("#syncs"))
            bench = [r for r in rows if r[4].startswith("bench standin-fix")]
            assert [r[1:3] for r in bench] == [["2", "0"]]
            assert bench[0][4] == "bench standin-fix, sglang 0.5.17"
            assert app.selected_fix() == "standin-fix"

    asyncio.run(go())


def test_q_during_a_bench_ends_it_and_its_process_at_once(release, tmp_path):
    gates(tmp_path)  # the gate stays closed: the bench would wait 20 s
    app = make_app(backend=standin_backend(release))
    pids: list[int] = []

    async def go():
        async with app.run_test(size=SIZE) as pilot:
            await start_bench(pilot, app)
            pids.extend(app.backend.benches.running)
            assert len(pids) == 1 and psutil.pid_exists(pids[0])
            await pilot.press("q")
        assert app.return_code in (0, None)

    t0 = time.monotonic()
    asyncio.run(go())
    assert time.monotonic() - t0 < 15  # the bench alone would hold it 20 s
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_refuses_a_fix_that_is_not_applicable_with_the_reason(release):
    app = make_app(backend=standin_backend(release))

    async def go():
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: "standin-upstream" in app.model.fixes)
            await pilot.press("2")
            await pilot.press("down")
            await pilot.pause()
            assert app.selected_fix() == "standin-upstream"
            await pilot.press("a")
            await until(pilot, lambda: "refused" in app.model.message)
            assert "standin-upstream is upstream (stand-in: the release already has it)" in \
                app.model.message
            assert app.model.fixes["standin-upstream"].state == "not applied"
            assert not app.backend.fix("standin-upstream").is_applied()

    asyncio.run(go())


def test_command_palette_holds_diags_actions(release):
    from diag.tui.app import DiagCommands

    app = make_app(backend=standin_backend(release))

    async def go():
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.probes_done and app.model.fixes)
            names = [n for n, _h, _cb in DiagCommands(app.screen)._commands()]
            assert "bench standin-fix" in names and "apply standin-upstream" in names
            assert any(n.startswith("rerun the probes") for n in names)
            await pilot.press("ctrl+p")
            await pilot.pause()
            await pilot.press(*"bench standin")
            await pilot.pause(0.5)
            from textual.command import CommandPalette

            assert isinstance(app.screen, CommandPalette)
            await pilot.press("enter")
            await until(pilot, lambda: app.bench_running or "standin-fix" in app.model.bench)

    asyncio.run(go())


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_unreachable_server_is_shown_on_screen(release):
    url = f"http://127.0.0.1:{_closed_port()}"
    app = make_app(backend=standin_backend(release, server_url=url, server_timeout=0.5),
                   poll_interval=0.25)

    async def go():
        async with app.run_test(size=SIZE) as pilot:
            name = f"server {url}"
            await until(pilot, lambda: name in app.model.sources
                        and app.model.sources[name].ok is False)
            header = str(app.query_one("#header").render())
            assert f"server 127.0.0.1:{url.rsplit(':', 1)[1]}: unreachable" in header
            assert app.is_running

    asyncio.run(go())


def test_missing_target_is_a_line_on_screen_not_a_traceback(tmp_path):
    app = make_app(backend=Backend(sglang=str(tmp_path / "nowhere"), platform="hip",
                                   gpu=lambda: "stand-in GPU"))

    async def go():
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.model.header.error is not None)
            header = str(app.query_one("#header").render())
            assert "target error:" in header and "Traceback" not in header
            states = [r[0] for r in cell_texts(app.query_one("#findings"))]
            assert states == ["skip", "skip", "skip"]

    asyncio.run(go())


def test_run_dir_live_timings_syncs_and_engine_ack(release, tmp_path):
    """A real run directory written with the agent's EventWriter; control through rundir."""
    from diag.engine import rundir

    d = rundir.create_run_dir(tmp_path / "run")
    w = rundir.EventWriter(d)
    w.write({"kind": "start", "ppid": os.getppid(), "argv": ["stand-in"], "started": time.time(),
             "sglang": "0.5.17", "fixes": {"standin-fix": {"state": "reverted", "reason": ""}}})
    for _ in range(3):
        w.write({"kind": "syncs", "builder": "_attach_unified_kv_prefill_meta", "count": 2,
                 "seconds": 0.011})
        w.write({"kind": "draft_extend", "mode": "eager", "seconds": 0.0011, "batch": 8})
    w.write({"kind": "fix", "fix": "repeat-interleave-output-size", "state": "applied",
             "reason": ""})
    for _ in range(3):
        w.write({"kind": "syncs", "builder": "_attach_unified_kv_prefill_meta", "count": 0,
                 "seconds": 0.0002})
        w.write({"kind": "draft_extend", "mode": "graph", "seconds": 0.00018, "batch": 8})
    app = make_app(backend=standin_backend(release, run_dir=str(d)), poll_interval=0.25)

    async def go():
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.probes_done and app.model.engine_timings)
            by_metric = {r.metric: r for r in app.model.timing_rows()}
            syncs = by_metric["syncs per call"]
            assert (syncs.before.median, syncs.after.median) == (2, 0)
            de = by_metric["draft-extend time, eager → graph"]
            assert de.ratio == pytest.approx(0.18 / 1.1)
            await show_tab(pilot, "tab-syncs")
            rows = cell_texts(app.query_one("#syncs"))
            where = "deepseek_v4_backend_hip_radix.py:1116"
            assert rows[0] == ["_attach_unified_kv_prefill_meta (draft-extend)", "2", "n/a",
                               where, "measured (cpu)"]
            assert rows[1] == ["DeepseekV4HipRadixBackend._attach_unified_kv_prefill_meta", "2",
                               "n/a", where, "static, DE path"]
            # the engine's counts (run dir) for the builder, placed at the census's file:line
            assert rows[2] == ["_attach_unified_kv_prefill_meta", "2", "0", where, "run dir"]
            await show_tab(pilot, "tab-fixes")
            app.query_one("#fixes").focus()
            await pilot.press("a")
            await until(pilot, lambda: "requested" in app.model.fixes["standin-fix"].ack)
            reqs = rundir.read_requests(d)
            assert [(r["fix"], r["action"]) for r in reqs] == [("standin-fix", "apply")]
            # the agent's acknowledgement, as the agent writes it
            w.write({"kind": "control_ack", "request": reqs[0]["id"], "fix": "standin-fix",
                     "action": "apply", "ok": True, "state": "applied", "reason": ""})
            await until(pilot, lambda: "ack pid" in app.model.fixes["standin-fix"].ack)
            row = cell_texts(app.query_one("#fixes"))[0]
            assert "apply ok → applied" in row[3] and "engine: applied ×1" in row[2]
            # the acknowledgement reaches the status line
            assert app.model.message == f"apply standin-fix: pid {os.getpid()} ok → applied"
            engine = str(app.query_one("#engine").render())
            assert f"pid {os.getpid()} live" in engine and "standin-fix=applied" in engine
    try:
        asyncio.run(go())
    finally:
        w.close()


def test_export_writes_what_is_on_screen(release, tmp_path):
    out = tmp_path / "export.json"
    app = make_app(backend=standin_backend(release), export_path=str(out))

    async def go():
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.probes_done)
            await pilot.press("e")
            await pilot.pause()
            assert "exported to" in app.model.message

    asyncio.run(go())
    doc = json.loads(out.read_text())
    assert doc["schema_version"] == 1 and doc["kind"] == "diag-tui"
    assert [f["probe"] for f in doc["findings"]] == ["draft-extend-graph", "metadata-syncs",
                                                     "profiler-teardown"]
    assert doc["fixes"][0]["id"] == "standin-fix" and doc["platform"] == "hip"


def test_real_fix_applies_and_reverts_in_this_process(release):
    """The registry's draft-extend-allowlist on the real 0.5.17 tree: sglang is not imported
    here, so the patch waits for the import (pending) and reverts to nothing pending."""
    release("0.5.17")
    backend = Backend(sglang="0.5.17", platform="hip",
                      probe_runner=lambda ctx, pid: [], gpu=lambda: "stand-in GPU")
    app = make_app(backend=backend)
    fid = "draft-extend-allowlist"

    async def go():
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: fid in app.model.fixes)
            assert app.model.fixes[fid].applicability == "applicable"
            await pilot.press("2")
            await until(pilot, lambda: app.model.fix_rows()[0].id == fid)
            await pilot.press("a")
            await until(pilot, lambda: "applied" in app.model.fixes[fid].ack)
            assert app.model.fixes[fid].state == "applied (pending import)"
            assert backend.fix(fid).is_applied()
            await pilot.press("u")
            await until(pilot, lambda: "reverted" in app.model.fixes[fid].ack)
            assert app.model.fixes[fid].state == "reverted"
            assert not backend.fix(fid).is_applied()

    try:
        asyncio.run(go())
    finally:  # the dependency applied with it, or both when the test failed half-way
        from diag.fixes import orchestrator

        orchestrator.revert([f for f, st in orchestrator.states().items() if st.active])


def test_a_live_engine_is_named_in_the_header(release, tmp_path, monkeypatch):
    """Discovery (diag.engine.rundir.discover) of a run directory with a live process; not attached."""
    from diag.engine import rundir

    release("0.5.17")
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("DIAG_CACHE_DIR", str(tmp_path / "cache"))
    d = rundir.create_run_dir(tmp_path / "run")
    rundir.register(d)
    w = rundir.EventWriter(d)
    w.write({"kind": "start", "ppid": os.getppid(), "argv": ["stand-in"], "started": time.time(),
             "fixes": {}})
    backend = Backend(sglang="0.5.17", platform="hip", probe_runner=lambda ctx, pid: [],
                      gpu=lambda: "stand-in GPU", discover=True)
    app = make_app(backend=backend)

    async def go():
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: "live engine" in app.model.sources)
            header = str(app.query_one("#header").render())
            assert "live engine: " in header and "--run-dir" in header
            # other engines on this machine may be found too (the process scan comes first)
            assert str(d) in backend.discover_engines()
            assert backend.run_dir is None  # named, never attached by itself

    try:
        asyncio.run(go())
    finally:
        w.close()


def test_rerun_while_starting_up_does_not_start_a_second_pass(release):
    """`r` during start-up: a thread worker cannot be stopped, so a second boot would resolve
    the target and run every probe twice."""
    import threading

    gate = threading.Event()
    starts: list[float] = []
    backend = standin_backend(release)
    real_start = backend.start

    def slow_start():
        starts.append(time.monotonic())
        gate.wait(10)
        return real_start()

    backend.start = slow_start
    app = make_app(backend=backend)

    async def go():
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: starts)
            await pilot.press("r")
            await until(pilot, lambda: "still starting up" in app.model.message)
            gate.set()
            await until(pilot, lambda: app.probes_done)
            await pilot.press("q")
        assert len(starts) == 1

    asyncio.run(go())


def test_run_dir_without_a_live_process_refuses_apply_at_once(release, tmp_path):
    """As `diag fix apply --run-dir` does: nobody would acknowledge, so no request is written."""
    from diag.engine import rundir

    d = rundir.create_run_dir(tmp_path / "run")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a real process that has exited: its pid is not alive
    w = rundir.EventWriter(d, pid=gone.pid)
    w.write({"kind": "start", "ppid": os.getpid(), "argv": ["stand-in"],
             "started": time.time() - 5, "fixes": {}})
    w.close()
    app = make_app(backend=standin_backend(release, run_dir=str(d)), poll_interval=0.25)

    async def go():
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.probes_done and app.model.engine_procs)
            await pilot.press("2")
            await pilot.press("a")
            await until(pilot, lambda: "refused" in app.model.message)
            assert "no live engine process" in app.model.message
            assert rundir.read_requests(d) == []
            header = str(app.query_one("#header").render())
            assert "no live process" in header

    asyncio.run(go())


def test_server_values_go_stale_when_the_server_stops_answering(release):
    from http.server import HTTPServer
    from threading import Thread

    from test_tui_cli import _Metrics

    srv = HTTPServer(("127.0.0.1", 0), _Metrics)
    Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    app = make_app(backend=standin_backend(release, server_url=url, server_timeout=0.5),
                   poll_interval=0.25)
    clock = [0.0]
    app.model.now = lambda: clock[0]  # the model's clock, moved by the test

    async def go():
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: "accept length" in app.model.server_values)
            srv.shutdown()
            srv.server_close()
            name = f"server {url}"
            await until(pilot, lambda: app.model.sources[name].ok is False)
            clock[0] += 12.0
            app.render_model()
            await pilot.pause()
            header = str(app.query_one("#header").render())
            assert "unreachable (last ok 12 s ago)" in header
            charts = str(app.query_one("#charts").render())
            assert "STALE 12 s ago" in charts and "accept length" in charts

    asyncio.run(go())


def test_r_shows_progress_while_the_probes_rerun(release):
    import itertools
    import threading

    from tui_standins import standin_findings

    backend = standin_backend(release)
    calls = itertools.count()

    def runner(ctx, pid):
        if next(calls) >= 3:  # the rerun's probes wait until the test has looked
            gate_open.wait(10)
        return standin_findings(pid)

    gate_open = threading.Event()
    backend._probe_runner = runner
    app = make_app(backend=backend)

    async def go():
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.probes_done)
            await pilot.press("r")
            await until(pilot, lambda: "probes: 0/3 done; running" in app.model.message)
            assert [v.state for v in app.model.finding_rows()] == ["running"] * 3
            gate_open.set()
            await until(pilot, lambda: app.probes_done)
            assert app.model.message == "probes: 3/3 done; r reruns them"

    asyncio.run(go())
