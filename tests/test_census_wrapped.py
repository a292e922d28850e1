"""Backends only a wrapper runs (probes/metadata_syncs/census/wrapped.py), against the release
sources READ BY HAND:

`HybridLinearAttnBackend.__init__(self, full_attn_backend: AttentionBackend, linear_attn_backend:
MambaAttnBackendBase)` stores both; its `init_forward_metadata` starts with `if
forward_batch.forward_mode.is_draft_extend_v2(): self.full_attn_backend.init_forward_metadata(
forward_batch); return` ("DRAFT_EXTEND_V2 only runs full-attn layers in the draft model") at
0.5.14 hybrid_linear_attn_backend.py:737, 0.5.19 :1076, 0.5.23 :1341 (0.5.23 :1340-1345). 0.5.11
has no such return (:741-743 loops over both backends on every mode): there the linear backend
keeps draft-extend. The linear backends derive from MambaAttnBackendBase: 0.5.23
`Mamba2AttnBackend(MambaAttnBackendBase)` :1066 and, in other files, `GDNAttnBackend`
(linear/gdn_backend.py), `KimiLinearAttnBackend` (linear/kda_backend.py).
0.5.23 `_init_track_conv_indices`' `return indices.clamp(0, query_start_loc[-1] - 1)` (:443) is
reached from the mamba backend's `init_forward_metadata`: target-extend only per step (the hand
census, tests/groundtruth/hand_census.json), not draft-extend.
"""

from __future__ import annotations

import pytest

from diag.probes.metadata_syncs.census.count import census
from diag.probes.metadata_syncs.census.wrapped import wrapped
from diag.probes.source import Modules
from tests.conftest import release_target

pytestmark = pytest.mark.release
HYBRID = "sglang/srt/layers/attention/hybrid_linear_attn_backend.py"


@pytest.mark.parametrize("version, line", [("0.5.14", 737), ("0.5.19", 1076),
                                           ("0.5.23", 1341), ("0.5.11", None)])
def test_the_wrappers_early_return_is_read_per_release(version, line):
    got = wrapped(Modules(release_target(version)))
    if line is None:
        assert got is None
        return
    # decode too: speculative/draft_utils.py never builds the wrapper (0.5.19 :234-239: the
    # draft decodes `hybrid_linear_attn` with fa3's, triton's or AMX's multi-step backend;
    # neither class name appears in the file in 0.5.14, 0.5.19 or 0.5.23)
    assert (got.child_type, got.entry, set(got.modes), got.where, got.wrapper,
            set(got.wrapper_modes)) == (
        "MambaAttnBackendBase", "init_forward_metadata", {"draft-extend", "decode"},
        f"{HYBRID}:{line}", "HybridLinearAttnBackend", {"decode"})


def test_a_draft_factory_that_builds_the_wrapper_keeps_decode(tmp_path):
    """The same 0.5.23 sources with draft_utils.py naming the wrapper: a DECODE batch may then
    reach it, so only the early return's draft-extend is withheld."""
    import shutil

    from diag.probes.metadata_syncs.census.wrapped import DRAFT_UTILS_REL

    src = release_target("0.5.23").root
    for rel in (HYBRID.removeprefix("sglang/"), DRAFT_UTILS_REL):
        (tmp_path / "sglang" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src / "sglang" / rel, tmp_path / "sglang" / rel)
    utils = tmp_path / "sglang" / DRAFT_UTILS_REL
    utils.write_text(utils.read_text() + "\n# HybridLinearAttnBackend\n")
    from types import SimpleNamespace

    got = wrapped(Modules(SimpleNamespace(root=tmp_path)))  # type: ignore[arg-type]
    assert got is not None and set(got.modes) == {"draft-extend"} and not got.wrapper_modes


def test_a_wrapped_backends_sites_never_run_on_decode():
    """0.5.19 hybrid_linear_attn_backend.py:137 `bool(forward_batch.mamba_track_mask is not None
    and forward_batch.mamba_track_mask.any())`: target-extend and `other` per step (the hand
    census): not decode (above), not idle (census.batch_fields.none_on_idle)."""
    at = [s for s in census(release_target("0.5.19")).sites if s.file == HYBRID and s.line == 137]
    assert at and all(set(s.paths) == {"target-extend", "other"} for s in at), \
        [s.paths for s in at]


def test_a_wrapped_backends_sites_never_run_on_draft_extend():
    sites = census(release_target("0.5.23")).sites
    conv = [s for s in sites if s.file == HYBRID and s.line == 443]  # one per guard set
    assert conv and all(s.kind == "scalar-arg" and s.syncs == 1 for s in conv)
    assert all("draft-extend" not in s.paths and "target-extend" in s.paths for s in conv)
    linear = [s for s in sites if "/linear/" in s.file or s.file == HYBRID]
    # only the graph path keeps draft-extend: the wrapper's `init_forward_metadata_out_graph`
    # (:1257-1265) hands every mode to both backends, into the mamba `_replay_metadata` (:747)
    assert linear and {s.function.rsplit(".", 1)[-1] for s in linear
                       if "draft-extend" in s.paths} == {"_replay_metadata"}
    # a backend no wrapper holds keeps the draft-extend its entry points reach
    assert [s for s in sites if s.file.endswith("/triton_backend.py")
            and "draft-extend" in s.paths]


def test_without_the_early_return_the_linear_backend_keeps_draft_extend():
    sites = census(release_target("0.5.11")).sites
    assert [s for s in sites if s.file == HYBRID and "draft-extend" in s.paths]
