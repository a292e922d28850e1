"""SVG snapshots of each tab at 80×24, 140×45 and 200×60 (textual pinned in the test extra;
stand-in data only).

Update after an intended change of the layout: `pytest tests/test_tui_snapshots.py
--snapshot-update`, then look at the SVGs under tests/__snapshots__/ before committing them.
"""

from __future__ import annotations

import pytest
from test_tui_app import show_tab, until
from tui_standins import bench_gate, gates, standin_backend

from diag.tui.app import make_app
from diag.tui.tables import FittedTable

pytestmark = pytest.mark.release
SIZES = [(80, 24), (140, 45), (200, 60)]
IDS = [f"{w}x{h}" for w, h in SIZES]


def _fitted(app) -> bool:
    """Every shown table has been fitted to its current width (a resize refits it; a snapshot
    taken between the resize and the refit would catch a layout no one sees for long), and
    has measured its rows: textual's DataTable sizes its columns for rows added since the last
    idle (`_require_update_dimensions`, `_updated_cells`, textual 8.2.8 `_data_table.py:1884`);
    a snapshot before that shows the columns at the headers' widths (CI once caught the bench
    table of `test_snapshot_timings_after_bench[140x45]` so, "standin-fix" cut to "sta")."""
    return all(getattr(t, "_diag_rows", (t.size.width,))[0] == t.size.width
               and not getattr(t, "_require_update_dimensions", False)
               and not getattr(t, "_updated_cells", None)
               for t in app.query(FittedTable) if t.size.width)


async def settle(pilot) -> None:
    """Until every shown table is fitted, and stays so with the same widths over two looks
    50 ms apart: under load a layout pass can still be pending when the first look says fitted
    (CI caught `test_snapshot_timings_after_bench[80x24]`'s bench table at its cut widths)."""
    last = None
    for _ in range(100):
        await until(pilot, lambda: _fitted(pilot.app))
        await pilot.wait_for_scheduled_animations()
        await pilot.pause(0.05)
        now = tuple((t.size.width, getattr(t, "_diag_rows", (None,))[0])
                    for t in pilot.app.query(FittedTable))
        if _fitted(pilot.app) and now == last:
            return
        last = now


def _app(release):
    return make_app(backend=standin_backend(release))


async def _ready(pilot) -> None:
    await until(pilot, lambda: pilot.app.probes_done and pilot.app.model.header.gpu != "n/a")
    await pilot.wait_for_scheduled_animations()


@pytest.mark.parametrize("size", SIZES, ids=IDS)
def test_snapshot_overview(release, snap_compare, size):
    async def before(pilot):
        await _ready(pilot)
        await pilot.press("down")
        await settle(pilot)

    assert snap_compare(_app(release), terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", SIZES, ids=IDS)
def test_snapshot_fixes_after_apply(release, snap_compare, size):
    async def before(pilot):
        await _ready(pilot)
        await pilot.press("2")
        await pilot.press("a")
        await until(pilot, lambda: pilot.app.model.fixes["standin-fix"].state == "applied")
        await settle(pilot)

    app = _app(release)
    try:
        assert snap_compare(app, terminal_size=size, run_before=before)
    finally:
        app.backend.fix("standin-fix").revert()


@pytest.mark.parametrize("size", SIZES, ids=IDS)
def test_snapshot_timings_after_bench(release, snap_compare, size, tmp_path):
    gates(tmp_path)
    bench_gate.set()  # the stand-in bench finishes at once

    async def before(pilot):
        await _ready(pilot)
        await show_tab(pilot, "tab-fixes")
        await pilot.press("b")
        await until(pilot, lambda: "standin-fix" in pilot.app.model.bench
                    and not pilot.app.bench_running, timeout=30)
        await settle(pilot)

    assert snap_compare(_app(release), terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", SIZES, ids=IDS)
def test_snapshot_syncs(release, snap_compare, size):
    async def before(pilot):
        await _ready(pilot)
        await pilot.press("4")
        await settle(pilot)

    assert snap_compare(_app(release), terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", SIZES, ids=IDS)
def test_snapshot_help(release, snap_compare, size):
    async def before(pilot):
        await _ready(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(_app(release), terminal_size=size, run_before=before)
