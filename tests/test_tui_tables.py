"""How a table's one shrink column is cut to fit: a dotted name keeps its end (the method is what
tells two builders apart), a sentence keeps its start (a summary that begins with a dotted name
must not lose its first half)."""

from __future__ import annotations

from rich.text import Text

from diag.tui.tables import Col, fit_rows

SENTENCE = ("SchedulerProfilerManager._stop_profile (sglang/srt/managers/scheduler_components/"
            "profiler_manager.py:298) leaves the stopped profiler to the cyclic GC")
NAME = "DeepseekV4HipRadixBackend._attach_unified_kv_prefill_meta"


def _cut(col: Col, text: str, width: int) -> str:
    cols, rows = fit_rows((Col("status"), col), [("FAIL", text)], width)
    assert [c.name for c in cols] == ["status", col.name]
    cell = rows[0][1]
    assert isinstance(cell, Text) and cell.cell_len < len(text)
    return cell.plain


def test_a_prose_column_keeps_the_start_of_a_sentence():
    got = _cut(Col("summary", shrink=True, min=20, prose=True), SENTENCE, 60)
    assert got.startswith("SchedulerProfilerManager._stop_profile (") and got.endswith("…")


def test_a_name_column_keeps_the_end_of_a_dotted_name():
    got = _cut(Col("builder", shrink=True, min=28), NAME, 44)
    assert got.startswith("…") and got.endswith("_attach_unified_kv_prefill_meta")


def test_a_cell_that_fits_is_not_cut():
    cols, rows = fit_rows((Col("status"), Col("summary", shrink=True, prose=True)),
                          [("ok", "short")], 80)
    assert rows[0][1].plain == "short"
