"""The census's forward scope (census.scopes.FORWARD) against the third reader's forward rows
(tests/groundtruth/hand_census_amd.json, `forward_path`: aiter, DSA with its `dsa/` helpers and
the DeepSeek-V4 HIP radix backend of 0.5.19 and 0.5.23, read from the wheels by a reader who
never saw diag's code or output), with the bar `test_syncs_hand_census` applies: every live row
live with its syncs and paths, no look-alike live, every unreachable row ruled out. Rows where
the reader and the census read a data fact differently are set apart, each with why.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tests.test_syncs_hand_census as base
from diag.context import Context, SpecConfig
from diag.probes import get as get_probe
from diag.probes.backends import never_draft_extends
from diag.probes.base import run_probe
from diag.probes.metadata_syncs.census.count import census

pytestmark = pytest.mark.release
AMD = json.loads((Path(__file__).parent / "groundtruth" / "hand_census_amd.json").read_text())
A = "sglang/srt/layers/attention/"
DIFFER = {
    # the mismatch and out-of-pool warnings of the ASM context gather: the reader proves from the
    # data (lengths clamped to the kv_indptr spans, pool slots below the pool's size) that they
    # cannot fire, and marks it unsure; the census takes a data test both ways
    **{("0.5.19", A + "aiter_backend.py", n): "data" for n in (193, 195, 196, 206)},
    **{("0.5.23", A + "aiter_backend.py", n): "data" for n in (323, 325, 326, 336)},
    # the `dsa_impl == "intel_xpu"` arm (0.5.23 dsa_backend.py:2523): the implementation the
    # backend picked at start for the platform; the census takes a string test both ways
    ("0.5.23", A + "dsa_backend.py", 3590): "data",
}
KIND = {"bool()": "equal"}  # the reader's word for torch.equal's host bool, and the census's


def _rows(version: str) -> list[dict]:
    return [r | {"kind": KIND.get(r["kind"], r["kind"])} for r in AMD["releases"][version]
            if r.get("forward_path") and (version, r["file"], r["line"]) not in DIFFER]


@pytest.mark.parametrize("version", sorted(AMD["releases"]))
def test_forward_scope_meets_the_third_readers_forward_rows(release, version, monkeypatch):
    rows = _rows(version)
    assert sum(r["status"] == "live" for r in rows) >= 5
    monkeypatch.setattr(base, "TRUTH", {"releases": {version: rows}})
    c = census(release(version), scope="forward")
    wrong = base.disagreements(c, version, never_draft_extends(release(version)))
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("version", sorted(AMD["releases"]))
def test_the_set_apart_rows_are_still_read_as_named(release, version):
    """Each DIFFER row as the census reads it today: live (so a census that starts deciding
    them is noticed and the row moves back into the bar)."""
    c = census(release(version), scope="forward")
    for (v, file, line), why in DIFFER.items():
        if v != version:
            continue
        at = [s for s in c.sites if (s.file, s.line) == (file, line)]
        assert why == "data"
        assert at and all(s.verdict == "syncs" for s in at), (line, [s.verdict for s in at])


def test_the_eager_draft_extend_forward_of_aiter_mla_syncs_per_layer(release):
    """0.5.23 aiter on HIP: an eager draft-extend-v2 pass of an MLA model reads
    `int(qo_indptr[-1].item())` in `forward_extend` (aiter_backend.py:4092, under `elif
    forward_batch.forward_mode.is_draft_extend_v2()` :4051 and `run_graph is not True` :4062;
    qo_indptr is `self.forward_metadata.qo_indptr`, the `self.qo_indptr[: bs + 1]` that
    `_set_uniform_qo_indptr` stores, :2214): one sync per layer. The probe counts it for the
    draft-extend phase only, not for target-verify or draft decode, and the Syncs tab's line and
    `tui --once` say the same number (tui.data.forward_line)."""
    from diag.tui.data import finding_forward_rows, forward_line

    ctx = Context(target=release("0.5.23"), platform="hip", execute=False,
                  config=SpecConfig(attention_backend="aiter", speculative_num_steps=3))
    finding = run_probe(get_probe("metadata-syncs"), ctx)
    rows = {r["forward_phase"]: r for r in finding_forward_rows(finding)}
    assert list(rows) == ["target-extend", "draft-extend", "target-verify", "draft-decode"]
    de = rows["draft-extend"]
    assert de["at"] == [A + "aiter_backend.py:4092"] and de["syncs_per_layer"] == 1
    assert A + "aiter_backend.py:4092" not in rows["target-verify"]["at"] + \
        rows["draft-decode"]["at"]
    # the ASM context gather runs on the target's extend only (311, 314 (2 syncs), 317, 330)
    assert {A + f"aiter_backend.py:{n}" for n in (311, 314, 317, 330)} <= \
        set(rows["target-extend"]["at"])
    line = forward_line(list(rows.values()))
    assert f"draft-extend {'' if de['exact'] else '≤'}1 " in line
    metric = [e for f in finding for e in f.evidence
              if e.kind == "metric" and (e.data or {}).get("scope") == "forward"
              and e.data["forward_phase"] == "draft-extend"]
    assert len(metric) == 1 and metric[0].value == de["syncs_per_layer"]


def test_no_forward_census_without_a_configured_backend(release):
    """Nothing configured (the default diagnose): the forward is not read (its cost stays off
    the cold diagnose), and no forward row is reported."""
    from diag.tui.data import finding_forward_rows

    ctx = Context(target=release("0.5.23"), platform="hip", execute=False, config=SpecConfig())
    assert finding_forward_rows(run_probe(get_probe("metadata-syncs"), ctx)) == []


def test_a_backend_whose_forward_is_not_read_gets_no_count(release):
    """0.5.23 `DeepseekV4HipRadixBackend` defines no `forward_extend` / `forward_decode` in
    deepseek_v4_backend_hip_radix.py (its class at :874; `grep "def forward"` finds none): the
    forward scope reads nothing for it, so no phase gets a number (a zero there would be a check
    that did not run), only a note that says so; and the Syncs tab draws no forward line."""
    from diag.tui.data import finding_forward_rows

    ctx = Context(target=release("0.5.23"), platform="hip", execute=False,
                  config=SpecConfig(attention_backend="dsv4", speculative_num_steps=3))
    finding = run_probe(get_probe("metadata-syncs"), ctx)
    assert finding_forward_rows(finding) == []
    notes = [e.detail for f in finding for e in f.evidence if e.kind == "note"
             and "attention forward, eager" in e.detail]
    assert len(notes) == 4 and all("not read (DeepseekV4HipRadixBackend" in n for n in notes)


def test_run_takes_the_workers_static_work_only_for_its_own_configuration(release, monkeypatch):
    """`static_early` (the torch worker, before the census arrives) computes the configuration's
    relay, roles and forward census; `run` takes them for the same target, platform and
    configuration without computing them again, and computes its own for another."""
    import diag.probes.metadata_syncs.probe as p
    from diag.tui.data import finding_forward_rows

    probe = get_probe("metadata-syncs")
    cfg = SpecConfig(attention_backend="aiter", speculative_num_steps=3)
    early = probe.static_early(release("0.5.23"), "hip", cfg)
    want = finding_forward_rows(run_probe(probe, Context(
        target=release("0.5.23"), platform="hip", execute=False, config=cfg)))
    calls = []
    real = p.configured
    monkeypatch.setattr(p, "configured", lambda *a: calls.append(a) or real(*a))
    ctx = Context(target=release("0.5.23"), platform="hip", execute=False, config=cfg,
                  cache=dict(early))
    assert finding_forward_rows(run_probe(probe, ctx)) == want and calls == []
    other = SpecConfig(attention_backend="aiter", speculative_num_steps=1)
    ctx = Context(target=release("0.5.23"), platform="hip", execute=False, config=other,
                  cache=dict(early))
    run_probe(probe, ctx)
    assert len(calls) == 1 and calls[0][2] == other
