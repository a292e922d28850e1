"""What a multi-step draft backend sets on the spec input before each per-step call
(probes/metadata_syncs/census/draft_steps.py), against lines READ BY HAND in the release wheels.

sglang 0.5.23 layers/attention/triton_backend.py: `TritonMultiStepDraftBackend` (:2504) appends
`TritonAttnBackend(...)` to `self.attn_backends` (:2529-2532); its `common_template` loops
`for i in range(self.speculative_num_steps - 1):` (:2623) setting
`forward_batch.spec_info.kv_indptr = self.kv_indptr[i, : bs + 1]` (:2624) and
`forward_batch.spec_info.kv_indices = kv_indices_buffer[i][...]` (:2625) before
`call_fn(i, forward_batch)` (:2635). 0.5.19: the same at :2111, :2112. flashinfer 0.5.23: inside
`try:`, :2600-2601 before `call_fn` (:2605).

`TritonAttnBackend._apply_cuda_graph_metadata(..., spec_info)` (0.5.23 :1396-1404) is called
twice, both with `spec_info=spec_info` (:818, :836), where the caller
`_init_forward_metadata_out_graph` bound `spec_info = forward_batch.spec_info`; its decode branch
asserts `spec_info is None` (:1411).
"""

from __future__ import annotations

import pytest

from diag.probes.metadata_syncs.census.count import census
from diag.probes.metadata_syncs.census.draft_steps import spec_sets
from diag.probes.metadata_syncs.census.guards import spec_params
from diag.probes.source import find_def, parse_file
from tests.conftest import release_target

pytestmark = pytest.mark.release
ATT = "sglang/srt/layers/attention"
HAND = {("0.5.23", "triton_backend.py", "TritonAttnBackend"): (2624, 2625),
        ("0.5.19", "triton_backend.py", "TritonAttnBackend"): (2111, 2112),
        ("0.5.23", "flashinfer_backend.py", "FlashInferAttnBackend"): (2600, 2601)}


@pytest.mark.parametrize("version,file,cls", sorted(HAND))
def test_the_per_step_class_gets_what_its_owner_sets(version, file, cls):
    t = release_target(version)
    tree = parse_file(t.file(f"srt/layers/attention/{file}"))
    indptr, indices = HAND[(version, file, cls)]
    assert spec_sets(tree, f"{ATT}/{file}") == {cls: (
        ("kv_indices", f"{ATT}/{file}:{indices}"), ("kv_indptr", f"{ATT}/{file}:{indptr}"))}


def test_a_parameter_every_call_binds_to_the_spec_input():
    t = release_target("0.5.23")
    tree = parse_file(t.file("srt/layers/attention/triton_backend.py"))
    cls = find_def(tree, "TritonAttnBackend")
    fn = find_def(cls, "_apply_cuda_graph_metadata")
    assert spec_params(tree, cls, fn) == ("spec_info",)
    # a public entry point may be called from outside the module: none
    assert spec_params(tree, cls, find_def(cls, "init_forward_metadata_out_graph")) == ()


def test_the_asserted_graph_path_and_the_decode_branch_leave_decode():
    """0.5.23 `_dcp_kv_indices`' `.item()` (:500) is reached on a decode batch from the
    decode branch (:896, under :891) and from the graph path (:556, after the assert :1411):
    both are closed to a draft-decode batch; the idle batch (spec input unset) keeps it."""
    [s] = [s for s in census(release_target("0.5.23")).sites
           if s.file == f"{ATT}/triton_backend.py" and s.line == 500 and s.kind == "item"]
    assert "decode" not in s.paths and "idle" in s.paths, s.paths


def test_a_mode_test_and_a_configuration_test_give_a_guard_on_those_modes_only():
    """Read by hand, 0.5.19 flashattention_backend.py: on the capture path of
    `init_forward_metadata_out_graph` (:469, `if in_capture:` :510), `if
    forward_mode.is_target_verify() and self.topk > 1:` (:535) returns (:542) before the call
    at :565 of `_maybe_update_local_attn_metadata_for_capture` (:3199), whose
    `.max().item()` is at :3212: past :535, `topk <= 1` holds on target-verify batches only."""
    from diag.context import SpecConfig
    from diag.probes.metadata_syncs.census_config import decide_guard

    [s] = [s for s in census(release_target("0.5.19")).sites
           if s.file == f"{ATT}/flashattention_backend.py" and s.line == 3212
           and s.kind == "item"]
    [g] = [g for g in s.guards if g[0] == "on"]
    modes, inner = g[2]
    assert modes == ("target-verify",) and inner[:3] == ("speculative_eagle_topk", "<=", 1)
    assert g[3] == f"{ATT}/flashattention_backend.py:535"
    four = SpecConfig(speculative_eagle_topk=4)
    assert decide_guard(g, four, "target-verify", "0.5.19")[0] is False
    assert decide_guard(g, four, "decode", "0.5.19")[0] is True
    assert decide_guard(g, SpecConfig(), "target-verify", "0.5.19")[0] is None
