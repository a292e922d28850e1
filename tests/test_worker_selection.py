"""Which EAGLE worker a configuration runs, where a release has both, and the start it refuses:
expected answers read by hand in the releases' source (never from diag's output).

Hand-read (sglang release wheels):
- 0.5.9 / 0.5.10 srt/server_args.py: `if self.speculative_algorithm in ["EAGLE", "EAGLE3",
  "STANDALONE"] and envs.SGLANG_ENABLE_SPEC_V2.get():` (:2368-2370 / :2999-3001) sets
  `self.disable_overlap_schedule = False` (:2372 / :3003) whatever the flag said, then `raise
  ValueError(` (:2380 / :3011) "Spec v2 currently only supports topk = 1" when topk > 1; the
  `else:` sets it True (the v1 worker). environ.py: `SGLANG_ENABLE_SPEC_V2 = EnvBool(False)`
  (:414 / :442).
- 0.5.11 / 0.5.12.post1 srt/server_args.py: topk > 1 with the scheduler on sets
  `disable_overlap_schedule = True`, `spec_v1_reason = "spec v2 currently only supports topk
  = 1"` (:3467 / :3755); `elif not envs.SGLANG_ENABLE_SPEC_V2.get()` (:3469 / :3757) the same;
  environ.py `EnvBool(True)` (:459 / :470).
- Every one: spec_info.py `enable_overlap = not server_args.disable_overlap_schedule` picks
  `EAGLEWorkerV2` when on, `EAGLEWorker` (eagle_worker.py) when off. The v1 worker builds its
  draft-decode runner under `if self.speculative_num_steps > 1:` (0.5.9 :245, 0.5.10 :246,
  0.5.11 :278, 0.5.12.post1 :282) and captures draft-extend under `if
  self.draft_extend_attn_backend and not _is_npu:` (:260, :261, :293, :299): every backend class
  on a GPU, flashinfer's MLA and MHA classes alike.
"""

from __future__ import annotations

import pytest

from diag.context import SpecConfig
from diag.probes.draft_extend_graph.phases import gate_for, phase_verdicts
from tests.conftest import release_target

pytestmark = pytest.mark.release
SA = "sglang/srt/server_args.py"
V1 = "sglang/srt/speculative/eagle_worker.py"
FORCED = {"0.5.9": {"raise": 2380, "env": 2370}, "0.5.10": {"raise": 3011, "env": 3001}}
FALLBACK = {"0.5.11": {"topk": 3467}, "0.5.12.post1": {"topk": 3755}}
V1_LINES = {"0.5.9": (245, 260), "0.5.10": (246, 261), "0.5.11": (278, 293),
            "0.5.12.post1": (282, 299)}


def _cfg(**kw) -> SpecConfig:
    base = dict(attention_backend="flashinfer", speculative_num_steps=3,
                speculative_eagle_topk=1, environ={})
    base.update(kw)
    return SpecConfig(**base)


def _phases(version: str, cfg: SpecConfig) -> dict:
    return {pv.phase: pv for pv in phase_verdicts(release_target(version), "cuda", cfg,
                                                  cfg.attention_backend)}


@pytest.mark.parametrize("version", sorted(FORCED))
def test_spec_v2_with_topk_above_one_refuses_to_start(version):
    cfg = _cfg(speculative_eagle_topk=4, environ={"SGLANG_ENABLE_SPEC_V2": "1"})
    got = _phases(version, cfg)
    assert {p: v.mode for p, v in got.items()} == dict.fromkeys(
        ("target-verify", "draft-decode", "draft-extend"), "refused")
    w = got["draft-extend"].where
    assert (w.file, w.line) == (SA, FORCED[version]["raise"])
    # the switch off (its default): the v1 worker, which takes topk 4 (triton: flashinfer's MLA
    # multi-step backend raises for topk > 1 whatever the worker)
    off = _phases(version, _cfg(speculative_eagle_topk=4, attention_backend="triton"))
    assert off["draft-extend"].mode == "graph"
    assert (off["draft-extend"].where.file, off["draft-extend"].where.line) == \
        (V1, V1_LINES[version][1])


@pytest.mark.parametrize("version", sorted(FORCED))
def test_the_flag_is_overwritten_where_the_switch_decides(version):
    gate = gate_for(release_target(version),
                    _cfg(disable_overlap_schedule=True, environ={"SGLANG_ENABLE_SPEC_V2": "1"}))
    assert gate.worker == "v2" and gate.start_refused is None
    assert f"{SA}:{FORCED[version]['env']}" in gate.selection
    assert gate_for(release_target(version), _cfg(disable_overlap_schedule=False)).worker == "v1"


@pytest.mark.parametrize("version", sorted(FALLBACK))
def test_topk_the_switch_or_the_flag_turn_the_v1_worker_on(version):
    t = release_target(version)
    assert gate_for(t, _cfg()).worker == "v2"
    topk = gate_for(t, _cfg(speculative_eagle_topk=4))
    assert topk.worker == "v1" and f"{SA}:{FALLBACK[version]['topk']}" in topk.selection
    assert topk.start_refused is None
    assert gate_for(t, _cfg(environ={"SGLANG_ENABLE_SPEC_V2": "0"})).worker == "v1"
    assert gate_for(t, _cfg(disable_overlap_schedule=True)).worker == "v1"


@pytest.mark.parametrize("version", sorted(FALLBACK))
def test_the_v1_worker_captures_flashinfer_whatever_its_class(version):
    """Not `depends` on MLA or MHA: the v1 worker captures draft-extend for every class."""
    got = _phases(version, _cfg(disable_overlap_schedule=True))
    assert got["draft-extend"].mode == "graph"
    assert (got["draft-extend"].where.file, got["draft-extend"].where.line) == \
        (V1, V1_LINES[version][1])
    assert (got["draft-decode"].where.file, got["draft-decode"].where.line) == \
        (V1, V1_LINES[version][0])
    # the v2 worker (the default) tests its CUDA allow-list, which lacks flashinfer
    assert _phases(version, _cfg())["draft-extend"].mode == "eager"
