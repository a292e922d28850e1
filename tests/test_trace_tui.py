"""The TUI's Trace tab (`diag tui --trace`) shows the same per-phase figures as `diag trace
--json` (one document, two surfaces), read from a real torch-profiler trace recorded here."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from diag.cli import main
from diag.tui.app import make_app
from diag.tui.backend import Backend

PROGRAM = Path(__file__).parent / "trace_programs.py"


def test_trace_tab_shows_the_json_figures(tmp_path):
    path = tmp_path / "spec.trace.json.gz"
    subprocess.run([sys.executable, str(PROGRAM), str(path), "--rounds", "3"], check=True,
                   capture_output=True, timeout=240)
    r = CliRunner().invoke(main, ["trace", str(path), "--json"])
    doc = json.loads(r.stdout)
    app = make_app(backend=Backend(execute=False), autostart=False, trace_paths=(str(path),))

    async def go():
        async with app.run_test(size=(160, 45)) as pilot:
            await pilot.pause()  # mounted (a key before the tabs mount is undone by their mount)
            await pilot.press("5")
            view = app.query_one("TraceView")
            deadline = time.monotonic() + 60
            while view.doc is None and view.error is None:
                assert time.monotonic() < deadline, "trace not read in time"
                await pilot.pause(0.1)
            await pilot.pause()
            assert app.query_one("#tabs").active == "tab-trace"
            table = app.query_one("#trace-phases")
            cells = {str(table.get_row_at(i)[0]): [str(c) for c in table.get_row_at(i)]
                     for i in range(table.row_count)}
            return cells, view.doc

    cells, tui_doc = asyncio.run(go())
    phases = doc["merged"]["phases"]
    assert set(cells) == set(phases)
    for name, ph in phases.items():
        row = cells[name]
        assert row[1:6] == [str(ph["passes"]), str(ph["graph_passes"]), str(ph["eager_passes"]),
                            str(ph["unknown_passes"]), str(ph["graph_replays"])]
        assert row[8] == "not recorded"  # CPU profile: no GPU figure, not a zero
    assert tui_doc["merged"]["phases"].keys() == phases.keys()


def test_tui_trace_path_missing_is_exit_3(tmp_path):
    r = CliRunner().invoke(main, ["tui", "--trace", str(tmp_path / "nope.json")])
    assert r.exit_code == 3 and "no such file" in r.output
    r = CliRunner().invoke(main, ["tui", "--trace", str(tmp_path)])  # a folder with no trace
    assert r.exit_code == 3 and "no .json or .json.gz trace" in r.output


@pytest.mark.release
def test_once_takes_a_directory_as_diag_trace_does(tmp_path):
    """`--trace DIR` stands for the traces in it, as for `diag trace DIR`."""
    folder = Path(__file__).parent / "fixtures" / "traces" / "tr-killswitch-bs16"
    want = CliRunner().invoke(main, ["trace", str(folder)]).stdout
    r = CliRunner().invoke(main, ["tui", "--once", "--no-execute", "--sglang", "0.5.23",
                                  "--width", "100", "--trace", str(folder)])
    assert r.exit_code == 0, r.output
    assert r.stdout.endswith(want) and "draft-extend" in want


@pytest.mark.release
def test_once_frame_adds_the_trace(tmp_path):
    """`diag tui --once --trace P` prints the frame, then what `diag trace P` prints."""
    fixture = next((Path(__file__).parent / "fixtures" / "traces" / "tr-captured-bs16")
                   .glob("*.gz"))
    want = CliRunner().invoke(main, ["trace", str(fixture)]).stdout
    r = CliRunner().invoke(main, ["tui", "--once", "--no-execute", "--sglang", "0.5.23",
                                  "--width", "100", "--trace", str(fixture)])
    assert r.exit_code == 0, r.output
    assert r.stdout.endswith(want)
