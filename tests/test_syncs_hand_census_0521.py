"""The census against a fourth reader's census of the AMD-relevant backends in 0.5.21 (aiter, DSA
and the `dsa/` helpers its metadata and forward reach, the DeepSeek-V4 HIP radix backend),
read from the 0.5.21 wheel by a reader who never saw diag's code or output, to the brief and
conventions of the third reader's 0.5.19/0.5.23 census (tests/groundtruth/hand_read_brief.md,
hand_census_amd.json; this one: hand_census_amd_0_5_21.json, its method in `read_by`).

A release between the two the other readers covered: the census's release facts (the host
mirrors every caller sets, census_config.MIRRORS_SET) must hold here too. The bars are those of
tests/test_syncs_hand_census_amd.py (builders) and tests/test_syncs_forward.py (the forward
scope's `forward_path` rows), with the rows the two read differently set apart, each with why.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tests.test_syncs_hand_census as base
from diag.probes.backends import never_draft_extends
from diag.probes.metadata_syncs.census.count import census

pytestmark = pytest.mark.release
V = "0.5.21"
A = "sglang/srt/layers/attention/"
DOC = json.loads((Path(__file__).parent / "groundtruth" / "hand_census_amd_0_5_21.json")
                 .read_text())
DIFFER = {
    # the mismatch and out-of-pool warnings of the ASM context gather (aiter_backend.py:263-281):
    # the reader rules them out from the data (unsure), the census takes a data test both ways,
    # as for the third reader's rows of the same code (tests/test_syncs_forward.py)
    **{(A + "aiter_backend.py", n): "data" for n in (267, 269, 270, 280)},
    # `_forward_intel_xpu_dense_prefill` (dsa_backend.py:3178), called only under `dsa_impl ==
    # "intel_xpu"` (:2254-2255): the implementation picked at start; a string test the census
    # takes both ways (0.5.23 :3590 in tests/test_syncs_forward.py)
    (A + "dsa_backend.py", 3204): "data",
}


def _rows(forward: bool) -> list[dict]:
    """The reader's rows of one scope, as the reader wrote them but for one word: the reader
    writes `bool()` for the host bool of `torch.equal` too, which the census (and the third
    reader's forward rows) call `equal` — told apart by the reader's own `why`."""
    out = []
    for r in DOC["releases"][V]:
        if bool(r.get("forward_path")) != forward or (r["file"], r["line"]) in DIFFER:
            continue
        if r["kind"] == "bool()" and r["why"].startswith("torch.equal("):
            r = r | {"kind": "equal"}
        out.append(r)
    return out


def _wrong(release, forward: bool, monkeypatch) -> list[str]:
    monkeypatch.setattr(base, "TRUTH", {"releases": {V: _rows(forward)}})
    c = census(release(V), scope="forward" if forward else "builders")
    return base.disagreements(c, V, never_draft_extends(release(V)))


def test_census_meets_the_fourth_readers_builder_rows(release, monkeypatch):
    rows = _rows(False)
    assert sum(r["status"] == "live" for r in rows) >= 10 and len(rows) >= 50
    wrong = _wrong(release, False, monkeypatch)
    assert not wrong, "\n".join(wrong)


def test_census_meets_the_fourth_readers_forward_rows(release, monkeypatch):
    assert sum(r["status"] == "live" for r in _rows(True)) >= 5
    wrong = _wrong(release, True, monkeypatch)
    assert not wrong, "\n".join(wrong)


def test_the_set_apart_rows_are_still_read_as_named(release):
    """Each DIFFER row as the census reads it today (live), so a census that comes to decide
    one is noticed and the row moves back into the bar."""
    c = census(release(V), scope="forward")
    for (file, line), why in DIFFER.items():
        at = [s for s in c.sites if (s.file, s.line) == (file, line)]
        assert why == "data" and at and all(s.verdict == "syncs" for s in at), (line, at)


def test_dsa_host_lengths_fallback_is_not_a_target_extend_path(release):
    """0.5.21 dsa_backend.py:903 `int(forward_batch.seq_lens.max().item())` runs only without
    `seq_lens_cpu` (the `else` of :895). Every target-extend batch has it: prepare_for_extend
    sets it (managers/schedule_batch.py:2760, 2769), a mixed chunk under speculative decoding
    rebuilds it after merge_batch (:3184-3200), ForwardBatch.init_new hands it on
    (model_executor/forward_batch_info.py:950, 969). The reader: target-verify, draft-extend
    and decode only (the relay drops the copy there, managers/overlap_utils.py:537-541)."""
    from diag.probes.metadata_syncs.census_config import release_paths

    c = census(release(V))
    [s] = [s for s in c.sites if s.file == A + "dsa_backend.py" and s.line == 903]
    paths = release_paths(s, V, never_draft_extends(release(V)))
    assert "target-extend" in s.paths and "target-extend" not in paths
    assert {"target-verify", "draft-extend", "decode"} <= set(paths)
