"""The census follows a builder's calls into helper packages outside the attention tree
(census.sites.HELPER_DIRS): decode-context parallelism's planner.

Read from 0.5.23 (not from the census): aiter's eager target-verify of an MLA model with DCP
(`elif forward_batch.forward_mode.is_target_verify():` aiter_backend.py:2298, `if
self.use_mla:` :2299, `if self.dcp_world_size > 1:` :2336) calls
`self._plan_dcp_decode_metadata(kv_indptr, kv_indices, kv_lens, None, bs)` (:2338): no host
copy, so (:2651-2657) `plan_dcp_decode_metadata(..., init_metadata_replay=False, ...)`, whose
`if not init_metadata_replay:` (layers/dcp/planner.py:157) reads `int(local_kv_lens.max().item())`
(:159) and `int(local_kv_lens.sum().item())` (:162) of `local_kv_lens = kv_lens.clone()` (:153),
a device tensor: two syncs per build. The other arm's `.item()` (:166, :171) reads
`kv_len_arr_cpu`, a host tensor every caller builds (`seq_lens_cpu[:bs]...clone()` :2640, or
the static host lengths :2627-2637): a host mirror. `self.dcp_world_size = get_parallel().attn_dcp_size`
(:387). The fourth reader names the same call in 0.5.21 (aiter_backend.py:1836-1842, planner
:157-163; tests/groundtruth/hand_census_amd_0_5_21.json `read_by`).
"""

from __future__ import annotations

import pytest

from diag.context import SpecConfig
from diag.probes.metadata_syncs.census.count import census
from diag.probes.metadata_syncs.census_config import decide

pytestmark = pytest.mark.release
PLANNER = "sglang/srt/layers/dcp/planner.py"


def _planner_sites(release, version: str) -> dict[int, list]:
    out: dict[int, list] = {}
    for s in census(release(version)).sites:
        if s.file == PLANNER and s.backend == "AiterAttnBackend":
            out.setdefault(s.line, []).append(s)
    return out


@pytest.mark.parametrize("version", ["0.5.21", "0.5.23"])
def test_aiter_dcp_planner_reads_back_on_eager_target_verify(release, version):
    at = _planner_sites(release, version)
    for line in (159, 162):
        [s] = at[line]
        assert (s.kind, s.verdict, s.syncs, s.path_class) == ("item", "syncs", 1, "per-step")
        assert "target-verify" in s.paths
        assert s.callers and "_plan_dcp_decode_metadata" in s.callers[0]
    # the host-copy arm: a host value (its mapping's entry is named `kv_len_arr_cpu`)
    assert [s.verdict for n in (166, 171) for s in at[n]] == ["host-mirror"] * 2


def test_the_dcp_size_decides_the_planner_sites(release):
    """`self.dcp_world_size > 1` is the configuration's DCP size: unreachable at 1, in the
    count at 2 (an MLA model given through the model facts is not needed for the DCP test)."""
    [s] = _planner_sites(release, "0.5.23")[159]
    assert any(g[0] == "dcp_size" and g[1] == ">" and g[2] == 1 for g in s.guards), s.guards
    one = decide(s, SpecConfig(dcp_size=1), "target-verify", "0.5.23", "hip")
    assert one.status == "unreachable" and "dcp_size=1" in one.reason
    two = decide(s, SpecConfig(dcp_size=2), "target-verify", "0.5.23", "hip")
    assert two.status != "unreachable"


def test_flashinfer_mla_dcp_enabled_is_the_dcp_size(release):
    """0.5.23 flashinfer_mla_backend.py:930 `if get_parallel().dcp_enabled:` is `dcp_size > 1`
    (runtime_context.py:169 `dcp_enabled=cfg.dcp_size > 1`)."""
    sites = [s for s in census(release("0.5.23")).sites
             if s.file == PLANNER and s.backend == "FlashInferMLAAttnBackend" and s.line == 159]
    assert sites
    for s in sites:
        assert ("dcp_size", ">", 1) in {g[:3] for g in s.guards}, s.guards
        assert decide(s, SpecConfig(dcp_size=1), "decode", "0.5.23", "cuda").status == \
            "unreachable"


def test_a_helper_two_backends_call_is_one_row_of_its_syncs(release):
    """The TUI's Syncs row of the planner (tui.data.finding_sync_rows): the evidence lists its
    two reads once per calling backend (aiter and flashinfer MLA), but a call does them once:
    2 syncs per call (planner.py:159, :162), on the path under audit (aiter's) with DCP on
    (`--dcp 2`: at the default 1 they cannot run, test_start_values)."""
    from diag.context import Context
    from diag.probes import get as get_probe
    from diag.probes.base import run_probe
    from diag.tui.data import finding_sync_rows

    ctx = Context(target=release("0.5.23"), platform="hip", execute=False,
                  config=SpecConfig(attention_backend="aiter", speculative_num_steps=3,
                                    dcp_size=2))
    [f] = run_probe(get_probe("metadata-syncs"), ctx)
    at = [e for e in f.evidence if e.kind == "location" and str(e.file) == PLANNER
          and (e.data or {}).get("status") == "live"]
    assert {(e.data["backend"], e.line) for e in at} >= {
        ("aiter", 159), ("aiter", 162), ("FlashInferMLAAttnBackend", 159),
        ("FlashInferMLAAttnBackend", 162)}
    [row] = [r for r in finding_sync_rows([f]) if r.builder == "planner.plan_dcp_decode_metadata"]
    assert (row.before, row.source) == (2, "static, DE path")


def test_on_decode_aiter_hands_the_planner_its_host_copy(release):
    """Decode's two calls pass the batch's copy: the eager build
    `self._plan_dcp_decode_metadata(..., forward_batch.seq_lens_cpu, bs)` (aiter_backend.py:2084,
    :2090) and the graph replay's `seq_lens_cpu` (:3008-3013), the parameter of
    `_apply_cuda_graph_metadata` its callers bind to the copy. aiter keeps the host lengths
    (no `needs_cpu_seq_lens` of its own: base_attn_backend.py:163's True), so the planner takes
    its host arm: no read back on decode, even with DCP."""
    [s] = _planner_sites(release, "0.5.23")[159]
    d = decide(s, SpecConfig(dcp_size=2), "decode", "0.5.23", "hip")
    assert d.status == "unreachable", d.reason
    assert "AiterAttnBackend keeps the host lengths" in d.reason
    # target-verify's eager build passes None (:2338): not decided by the copy
    assert decide(s, SpecConfig(dcp_size=2), "target-verify", "0.5.23", "hip").status != \
        "unreachable"
