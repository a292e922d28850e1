"""Which backend classes never serve a draft-extend batch (`backends.never_draft_extends`), and
the site paths that follow from it, against the release sources read by hand.

- wave: registered for the target (0.5.23 attention_registry.py:134, 0.5.19 :123) but absent
  from `create_draft_extend_backend`'s map (0.5.23 speculative/draft_utils.py:122-144, 0.5.19
  :114-135), whose `_create_backend` raises for a name it lacks (0.5.23 :63-64, 0.5.19 :58-59):
  EAGLE with wave stops at start, so wave's extend-branch syncs (0.5.23 wave_backend.py:301,
  :322; 0.5.19 :302, :323) reach target-extend and dLLM extend, never draft-extend.
- 0.5.9 flashmla has an entry (draft_utils.py:77) that builds None (:245-249): the draft runner's
  own FlashMLABackend then serves the batch eagerly, so it may serve draft-extend.
- aiter and triton have entries that build their own classes: never listed.
AST and text only.
"""

from __future__ import annotations

import pytest

from diag.probes.backends import never_draft_extends
from diag.probes.metadata_syncs.census.count import census
from diag.probes.metadata_syncs.census_config import release_paths

pytestmark = pytest.mark.release

WAVE = "sglang/srt/layers/attention/wave_backend.py"
SITES = {"0.5.23": (301, 322), "0.5.19": (302, 323)}


@pytest.mark.parametrize("version", sorted(SITES))
def test_wave_never_serves_draft_extend(release, version):
    never = never_draft_extends(release(version))
    assert "WaveAttnBackend" in never
    assert "draft_utils.py" in never["WaveAttnBackend"]
    for cls in ("AiterAttnBackend", "TritonAttnBackend", "FlashInferAttnBackend"):
        assert cls not in never


@pytest.mark.parametrize("version", sorted(SITES))
def test_wave_extend_syncs_leave_draft_extend_out(release, version):
    t = release(version)
    never = never_draft_extends(t)
    for line in SITES[version]:
        [s] = [s for s in census(t).sites if s.file == WAVE and s.line == line
               and s.kind == "item"]
        assert "draft-extend" in s.paths  # the call graph's: the else of the mode chain
        assert sorted(release_paths(s, version, never)) == ["other", "target-extend"]
        assert "draft-extend" in release_paths(s, version)  # no release fact given: kept


def test_an_entry_that_builds_none_still_may_serve(release):
    never = never_draft_extends(release("0.5.9"))
    assert "FlashMLABackend" not in never
    assert "WaveAttnBackend" in never
