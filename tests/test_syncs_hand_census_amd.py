"""The census against a third reader's census of the AMD-relevant backends (aiter, DSA and its
`dsa/` helpers, the DeepSeek-V4 HIP radix backend; 0.5.19 and 0.5.23), read from the wheels by
a reader who never saw diag's code or output (tests/groundtruth/hand_census_amd.json, the brief
in hand_read_brief.md). The bar is the one `test_syncs_hand_census` applies, with two kinds of
rows set apart and named:

- `forward_path`: sites in the attention forward (`forward_extend`'s ASM context gather, the
  eager draft-extend MLA `qo_indptr[-1].item()`): the builders' census (entry points
  `init_forward_metadata*` and `init_mha_chunk_metadata`) reports none of them — asserted; the
  forward scope reads them, against these rows (tests/test_syncs_forward.py).
- `DIFFER`: rows where this reader and the census read a data fact differently, each with why.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tests.test_syncs_hand_census as base
from diag.probes.backends import never_draft_extends
from diag.probes.metadata_syncs.census.count import census

pytestmark = pytest.mark.release
AMD = json.loads((Path(__file__).parent / "groundtruth" / "hand_census_amd.json").read_text())
A = "sglang/srt/layers/attention/"
DIFFER = {
    # the reader follows DP attention's padding to rule out verify and draft-extend (unsure)
    ("0.5.19", A + "deepseek_v4_backend_hip_radix.py", 1643),
}


@pytest.mark.parametrize("version", sorted(AMD["releases"]))
def test_census_meets_the_third_readers_amd_census(release, version, monkeypatch):
    rows = AMD["releases"][version]
    forward = [r for r in rows if r.get("forward_path")]
    kept = [r for r in rows if not r.get("forward_path")
            and (version, r["file"], r["line"]) not in DIFFER]
    assert len(kept) > 40
    monkeypatch.setattr(base, "TRUTH", {"releases": {version: kept}})
    c = census(release(version))
    wrong = base.disagreements(c, version, never_draft_extends(release(version)))
    assert not wrong, "\n".join(wrong)
    live_at = {(s.file, s.line) for s in c.sites if s.verdict == "syncs"}
    assert not [r for r in forward if (r["file"], r["line"]) in live_at]
