"""Whether decode-side batches carry `seq_lens_cpu` (probes/startup/host_lengths.py), against lines
READ BY HAND in the release wheels, never produced by running diag:

0.5.23 managers/overlap_utils.py: `def decide_needs_cpu_seq_lens(` :26, `if
get_exec().overlap.enable_two_batch_overlap:` :39 (returns True), `getattr(b,
"needs_cpu_seq_lens", True) for b in attn_backends if b is not None` :50, and in
`resolve_seq_lens_cpu` `if not self.needs_cpu_seq_lens:` :615 then `batch.seq_lens_cpu = None`
:619. speculative/eagle_worker_v2.py:1375-1385 `spec_v2_attn_backends`: the target's backend,
`draft_attn_backend`, `draft_extend_attn_backend`. layers/attention/dsa_backend.py
`needs_cpu_seq_lens: bool = False` :505 (DeepseekSparseAttnBackend) and :4173
(DeepseekSparseAttnMultiStepBackend); base_attn_backend.py `needs_cpu_seq_lens: bool = True`
:163. The DSA builder then reads `int(forward_batch.seq_lens.max().item())` (:1115) in the
`else` of `if forward_batch.seq_lens_cpu is not None:` (:1107).
0.5.19: overlap_utils.py :26, :39, :50, :539-542; dsa_backend.py :299, :3431 (same classes);
base_attn_backend.py :140; the builder's `.max().item()` at :797 under `if ... is not None` :789.
"""

from __future__ import annotations

import pytest

from diag.context import SpecConfig
from diag.probes.startup.host_lengths import decode_seq_lens_cpu
from tests.conftest import release_target
from tests.syncs_rows import phase_rows

pytestmark = pytest.mark.release
HAND = {"0.5.23": {"nulls": 615, "tbo": 39, "dsa": (505, 4173), "base": 163, "site": 1115},
        "0.5.19": {"nulls": 539, "tbo": 39, "dsa": (299, 3431), "base": 140, "site": 797}}
DSA = "sglang/srt/layers/attention/dsa_backend.py"
RELAY = "sglang/srt/managers/overlap_utils.py"


def _cfg(**kw) -> SpecConfig:
    base = dict(attention_backend="dsa", speculative_num_steps=3, speculative_eagle_topk=1,
                environ={})
    base.update(kw)
    return SpecConfig(**base)


@pytest.mark.parametrize("version", sorted(HAND))
@pytest.mark.parametrize("platform", ["hip", "cuda"])
def test_dsa_opts_out_so_the_relay_nulls_the_host_lengths(version, platform):
    h = HAND[version]
    m = decode_seq_lens_cpu(release_target(version), platform,
                            _cfg(disable_overlap_schedule=False), "dsa", mla=True)
    assert m.holds is False
    for line in h["dsa"]:
        assert f"{DSA}:{line}" in m.why
    assert f"{RELAY}:{h['nulls']}" in m.why


@pytest.mark.parametrize("version", sorted(HAND))
def test_without_the_overlap_fact_nothing_is_decided(version):
    t = release_target(version)
    m = decode_seq_lens_cpu(t, "hip", _cfg(), "dsa", mla=True)
    assert m.holds is None and "--overlap-schedule" in m.why and "None" in m.why
    off = decode_seq_lens_cpu(t, "hip", _cfg(disable_overlap_schedule=True), "dsa", mla=True)
    assert off.holds is None and "--disable-overlap-schedule" in off.why


@pytest.mark.parametrize("version", sorted(HAND))
def test_two_batch_overlap_or_a_backend_that_needs_them_keeps_them(version):
    h = HAND[version]
    t = release_target(version)
    tbo = decode_seq_lens_cpu(t, "hip", _cfg(disable_overlap_schedule=False,
                                            enable_two_batch_overlap=True), "dsa", mla=True)
    assert tbo.holds is True and f"{RELAY}:{h['tbo']}" in tbo.why
    # the target on flashinfer (FlashInferMLAAttnBackend sets nothing: the base's True)
    fi = decode_seq_lens_cpu(t, "cuda", _cfg(disable_overlap_schedule=False,
                                            attention_backend="flashinfer"), "flashinfer",
                             "dsa", mla=True)
    assert fi.holds is True
    assert f"sglang/srt/layers/attention/base_attn_backend.py:{h['base']}" in fi.why


def test_other_workers_are_not_read():
    m = decode_seq_lens_cpu(release_target("0.5.23"), "hip", _cfg(disable_overlap_schedule=False),
                            "dsa", mla=True, worker="multi-layer")
    assert m.holds is None


def test_a_release_without_the_relay_decides_nothing():
    m = decode_seq_lens_cpu(release_target("0.5.12.post1"), "hip",
                            _cfg(disable_overlap_schedule=False), "triton")
    assert m.holds is None


def _phases(version: str, *flags: str) -> dict:
    return phase_rows(version, "dsa", "SGLANG_USE_AITER=0", *flags)


@pytest.mark.parametrize("version", sorted(HAND))
def test_the_census_counts_the_device_read_on_decode_side_steps(version):
    """Overlap on: the DSA builder's device read is live on target-verify and draft decode (the
    count exact); two-batch overlap keeps the host lengths: unreachable there; not given: the
    same site `depends`, the count an upper bound."""
    site = f"{DSA}:{HAND[version]['site']}"
    on = _phases(version, "--overlap-schedule")
    for phase in ("target-verify", "draft-decode"):
        assert site in on[phase]["at"] and on[phase]["exact"] is True, on[phase]
    tbo = _phases(version, "--overlap-schedule", "--enable-two-batch-overlap")
    assert site not in tbo["target-verify"]["at"]
    assert site in [u["at"] for u in tbo["target-verify"]["unreachable"]]
    unknown = _phases(version)
    assert site in [d["at"] for d in unknown["target-verify"]["depends"]]
    assert unknown["target-verify"]["exact"] is False


def test_server_arguments_give_both_facts():
    cfg = SpecConfig.from_server_args({"disable_overlap_schedule": False,
                                       "enable_two_batch_overlap": True})
    assert cfg.disable_overlap_schedule is False and cfg.enable_two_batch_overlap is True
    odd = SpecConfig.from_server_args({"disable_overlap_schedule": "no",
                                       "enable_two_batch_overlap": 1})
    assert odd.disable_overlap_schedule is None and odd.enable_two_batch_overlap is None
