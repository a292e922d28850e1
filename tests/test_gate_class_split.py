"""One backend name, more than one draft-extend class, the gate admitting only some: the verdict
is `depends`, with what picks the class (probes.gate._class_split). Read by hand:

- `hybrid_linear_attn`: `_create_hybrid_linear_attn_prefill_backend` builds TritonAttnBackend
  `if is_blackwell():`, else FlashAttentionBackend (`_create_fa3_prefill_backend`): 0.5.19
  speculative/draft_utils.py:241-246, 0.5.23 :281-286. `is_blackwell` is
  `_check_cuda_device_version` (majors 10-12, CUDA >= 12.8), which returns False `if not
  is_cuda()` (0.5.19 utils/common.py:260-264 and :281; 0.5.23 :274-277 and :297): on HIP only
  FlashAttentionBackend. The CUDA allow-list of `EagleDraftWorker._capture_cuda_graphs`: 0.5.19
  eagle_worker_v2.py:432-438 has TritonAttnBackend, not FlashAttentionBackend (appended only from
  0.5.23, `if _is_cuda:` :587-594), so 0.5.19 on CUDA depends on the GPU, 0.5.23 captures both.
- `flashinfer`: FlashInferMLAAttnBackend for an MLA model, FlashInferAttnBackend otherwise
  (0.5.19 draft_utils.py:403-404, `if not self.draft_model_runner.use_mla_backend:`);
  `class FlashInferMLAAttnBackend(AttentionBackend)` (0.5.19 flashinfer_mla_backend.py:213,
  0.5.23 :212) is not on either release's CUDA list (0.5.23 eagle_worker_v2.py:567-573 lists
  FlashInferAttnBackend only): without a model, depends.
"""

from __future__ import annotations

import pytest

from diag.context import SpecConfig
from diag.probes.draft_extend_graph import phases
from diag.probes.gate import backend_map, read_gate, verdict
from tests.conftest import release_target

pytestmark = pytest.mark.release


def _v(version, backend, platform, mla=None):
    t = release_target(version)
    return verdict(read_gate(t), backend_map(t, platform, mla=mla).get(backend), platform, 3,
                   release=version)


def test_hybrid_linear_attn_on_cuda_0_5_19_depends_on_the_gpu():
    v = _v("0.5.19", "hybrid_linear_attn", "cuda")
    assert (v[0], v.cause) == ("unknown", "class_depends")
    assert v[1].startswith("depends: TritonAttnBackend on the CUDA allow-list")
    assert "FlashAttentionBackend not" in v[1]
    assert "`is_blackwell()` (Blackwell)" in v[1] and "draft_utils.py:241" in v[1]


def test_hybrid_linear_attn_on_cuda_0_5_23_admits_both_classes():
    v = _v("0.5.23", "hybrid_linear_attn", "cuda")
    assert (v[0], v.cause) == ("graph", "allowlist")


@pytest.mark.parametrize("version", ["0.5.19", "0.5.23"])
def test_hybrid_linear_attn_on_hip_builds_flash_attention_only(version):
    info = backend_map(release_target(version), "hip")["hybrid_linear_attn"]
    assert info.draft_extend_classes == ["FlashAttentionBackend"]
    assert _v(version, "hybrid_linear_attn", "hip")[0] == "eager"


@pytest.mark.parametrize("version", ["0.5.19", "0.5.23"])
def test_flashinfer_on_cuda_without_a_model_depends_on_its_attention(version):
    v = _v(version, "flashinfer", "cuda")
    assert (v[0], v.cause) == ("unknown", "class_depends")
    assert "FlashInferMLAAttnBackend not (MLA or MHA: pass --model)" in v[1]
    assert _v(version, "flashinfer", "cuda", mla=True)[0] == "eager"
    assert _v(version, "flashinfer", "cuda", mla=False)[0] == "graph"


def test_the_phase_verdict_says_the_same():
    [de] = [v for v in phases.phase_verdicts(
        release_target("0.5.19"), "cuda",
        SpecConfig(attention_backend="hybrid_linear_attn", speculative_num_steps=3,
                   speculative_eagle_topk=1), "hybrid_linear_attn") if v.phase == "draft-extend"]
    assert de.mode == phases.DEPENDS and "`is_blackwell()`" in de.reason
