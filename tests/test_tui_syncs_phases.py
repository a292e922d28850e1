"""The Syncs tab shows the per-phase totals the metadata-syncs probe puts in evidence `data`."""

from __future__ import annotations

import asyncio

import pytest
from test_tui_app import show_tab, until
from tui_standins import standin_backend, standin_findings

from diag.context import Context, SpecConfig
from diag.probes import get as get_probe
from diag.probes.base import run_probe
from diag.tui.app import make_app
from diag.tui.data import finding_phase_rows, phase_line

pytestmark = pytest.mark.release


def _real_syncs(release):
    ctx = Context(target=release("0.5.17"), platform="hip", execute=False,
                  config=SpecConfig(attention_backend="dsv4", speculative_num_steps=3))
    return run_probe(get_probe("metadata-syncs"), ctx)


def test_phase_rows_read_evidence_fields(release):
    rows = finding_phase_rows(_real_syncs(release))
    assert [r.phase for r in rows] == ["target-extend", "draft-extend", "target-verify",
                                       "draft-decode"]
    dd = rows[-1]
    assert dd.runs_per_step == 2 and dd.syncs_per_step == 2 * dd.syncs_per_run
    line = phase_line(rows)
    assert line.startswith("syncs per step (static): target-extend ")
    assert f"draft-decode {dd.syncs_per_run}×2" in line


def test_phase_line_marks_upper_bounds_and_exact_counts(release, tmp_path):
    """The triton lane configuration on 0.5.23 with its models (tests/test_syncs_census_config.py):
    every phase exact, 0, with the dcp size or without it (the server's default 1,
    tests/test_start_values.py); without the models, the phases the sliding-window sites
    (triton_backend.py:2877, 2897, 2899) lie on are upper bounds (≤); draft decode never
    reaches them (the multi-step backend sets the spec input's kv_indptr first, :2624)."""
    import json

    models = {}
    for key, arch in (("model", "LlamaForCausalLM"), ("draft_model", "LlamaForCausalLMEagle")):
        (tmp_path / arch).mkdir()
        (tmp_path / arch / "config.json").write_text(json.dumps({"architectures": [arch]}))
        models[key] = str(tmp_path / arch)
    base = dict(attention_backend="triton", speculative_num_steps=2, page_size=1,
                speculative_eagle_topk=1, speculative_num_draft_tokens=3, **models)

    def line(**more):
        ctx = Context(target=release("0.5.23"), platform="cuda", execute=False,
                      config=SpecConfig(**{**base, **more}))
        return phase_line(finding_phase_rows(run_probe(get_probe("metadata-syncs"), ctx)))

    exact = ("syncs per step (static): target-extend 0 · draft-extend 0 · target-verify 0 · "
             "draft-decode 0×1")
    assert line(dcp_size=1) == exact and line() == exact
    assert line(model=None, draft_model=None) == (
        "syncs per step (static): target-extend ≤3 · draft-extend ≤3 · target-verify ≤3 · "
        "draft-decode 0×1")


def test_syncs_tab_shows_the_phase_line(release):
    real = _real_syncs(release)
    backend = standin_backend(release)
    backend._probe_runner = lambda ctx, pid: real if pid == "metadata-syncs" \
        else standin_findings(pid)  # the real probe's finding, stand-ins for the rest
    app = make_app(backend=backend)

    async def go():
        async with app.run_test(size=(140, 45)) as pilot:
            await until(pilot, lambda: bool(app.model.phase_rows()))
            await show_tab(pilot, "tab-syncs")
            box = app.query_one("#sync-phases")
            assert box.display
            assert "draft-extend" in str(box.render())

    asyncio.run(go())
