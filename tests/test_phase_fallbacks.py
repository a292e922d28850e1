"""Run-time fallbacks of captured phases (probes/draft_extend_graph/fallbacks.py) against lines READ
BY HAND in the release wheels, never produced by running diag. Each line is where a runner's
replay test says no although a graph was captured:

0.5.23 model_executor/runner/decode_cuda_graph_runner.py `can_run_graph` (:845): `if
forward_batch.replace_embeds is not None: return False` :847; the ragged-verify branch
:850-858 (`ragged_verify_mode` needs `spec_algorithm.supports_ragged_verify()`, which is
`self.is_dspark()`, speculative/spec_info.py:160-164: never for EAGLE); the width check `if (`
:864; `is_bs_supported = (self.backend.can_run(...) if self.disable_padding` :888, `else
cuda_graph_bs <= self.max_bs` :890; under `if self.require_mlp_sync:` `forward_batch.
can_run_decode_cuda_graph` :895; `torch.all(forward_batch.encoder_lens > 0)` :902 only `if
self.is_encoder_decoder` (configs/model_config.py:2540-2546: Whisper, Mllama, MossVL); `forward_
batch.can_run_tbo if self.enable_two_batch_overlap` :908; the NGRAM width :913-918 only `if
self.model_runner.spec_algorithm.is_ngram()`.
0.5.19: the same at :678, :695, :714, :716, :721, :728 (encoder), :734; ragged :686-689
(spec_info.py:145-149 `return self.is_dspark()`).
0.5.9 model_executor/cuda_graph_runner.py `can_run` (:385): `graph_key in self.graphs if
self.disable_padding` :401, `cuda_graph_bs <= self.max_bs` :403, `forward_batch.
can_run_dp_cuda_graph` :407, encoder :413, `capture_hidden_mode_matches = (` whose test starts
:428, `can_run_tbo` :432; its draft runners: eagle_draft_cuda_graph_runner.py :151, :153, :157
and eagle_draft_extend_cuda_graph_runner.py :202, :204, :208 (`can_run_dp_cuda_graph`).
The multi-layer worker's draft-extend runner (multi_layer_eagle_draft_extend_cuda_graph_runner.py
`MultiLayerEagleDraftExtendCudaGraphRunner.can_run_graph`; the multi-step wrapper asks
`self.runners[0]`, 0.5.23 :976-977): 0.5.23 :242, :256, :258, :263; 0.5.19 :237, :251, :253,
:258. The FROZEN_KV_MTP draft runner (frozen_kv_mtp_cuda_graph_runner.py): 0.5.23 :214, :236,
:238, :242; 0.5.19 :213, :235, :237, :241.
"""

from __future__ import annotations

import json

import pytest

from diag.context import SpecConfig
from diag.probes.draft_extend_graph import phases
from tests.conftest import release_target

pytestmark = pytest.mark.release
VERIFY = "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py"
OLD_VERIFY = "sglang/srt/model_executor/cuda_graph_runner.py"
DRAFT = "sglang/srt/speculative/eagle_draft_cuda_graph_runner.py"
EXTEND = "sglang/srt/speculative/eagle_draft_extend_cuda_graph_runner.py"
MULTI = "sglang/srt/speculative/multi_layer_eagle_draft_extend_cuda_graph_runner.py"
FROZEN = "sglang/srt/speculative/frozen_kv_mtp_cuda_graph_runner.py"

VERIFY_LINES = {"0.5.23": [847, 864, 888, 890, 895, 908],
                "0.5.19": [678, 695, 714, 716, 721, 734]}
ENCODER_LINE = {"0.5.23": 902, "0.5.19": 728}
RAGGED_AND_NGRAM = {"0.5.23": (856, 857, 913), "0.5.19": (687, 688, 739)}


def _verdicts(version: str, **kw) -> dict:
    base = dict(attention_backend="triton", speculative_eagle_topk=1, speculative_num_steps=3,
                environ={"SGLANG_ENABLE_SPEC_V2": "1"})
    base.update(kw)
    return {v.phase: v for v in phases.phase_verdicts(release_target(version), "cuda",
                                                      SpecConfig(**base), "triton")}


def _at(v, file: str) -> list[int]:
    assert v.mode == phases.GRAPH, (v.phase, v.mode, v.reason)
    assert {f.file for f in v.runtime_fallbacks} == {file}
    return [f.line for f in v.runtime_fallbacks]


@pytest.mark.parametrize("version", sorted(VERIFY_LINES))
def test_target_verify_names_each_way_its_replay_test_declines(version):
    got = _at(_verdicts(version, model="llama")["target-verify"], VERIFY)
    assert got == VERIFY_LINES[version]
    assert not set(RAGGED_AND_NGRAM[version]) & set(got)  # DSPARK / NGRAM only
    assert ENCODER_LINE[version] not in got  # a Llama model is no encoder-decoder


@pytest.mark.parametrize("version", sorted(VERIFY_LINES))
def test_the_encoder_check_is_named_only_where_the_model_may_be_encoder_decoder(version):
    v = _verdicts(version)["target-verify"]  # no model: it may be one
    enc = [f for f in v.runtime_fallbacks if f.line == ENCODER_LINE[version]]
    assert len(enc) == 1 and "only for an encoder-decoder model" in enc[0].condition
    mllama = _verdicts(version, model="MllamaForConditionalGeneration")["target-verify"]
    assert ENCODER_LINE[version] in [f.line for f in mllama.runtime_fallbacks]


def test_two_batch_overlap_says_it_needs_its_switch():
    v = _verdicts("0.5.23", model="llama")["target-verify"]
    tbo = [f for f in v.runtime_fallbacks if f.line == 908]
    assert tbo and "--enable-two-batch-overlap" in tbo[0].condition


def test_old_layout_names_its_vote_and_the_hidden_mode_check():
    got = _verdicts("0.5.9", model="llama")
    assert _at(got["target-verify"], OLD_VERIFY) == [401, 403, 407, 428, 432]
    assert _at(got["draft-decode"], DRAFT) == [151, 153, 157]
    assert _at(got["draft-extend"], EXTEND) == [202, 204, 208]
    votes = [f for f in got["draft-extend"].runtime_fallbacks if f.line == 208]
    assert "can_run_dp_cuda_graph" in votes[0].condition


@pytest.mark.parametrize("version, lines", [("0.5.23", [242, 256, 258, 263]),
                                            ("0.5.19", [237, 251, 253, 258])])
def test_multi_layer_draft_extend_reads_its_own_runner(version, lines):
    got = _verdicts(version, model="MiMoV2ForCausalLM", speculative_algorithm="EAGLE")
    assert _at(got["draft-extend"], MULTI) == lines


@pytest.mark.parametrize("version, lines", [("0.5.23", [214, 236, 238, 242]),
                                            ("0.5.19", [213, 235, 237, 241])])
def test_frozen_draft_decode_reads_the_frozen_runner(tmp_path, version, lines):
    d = tmp_path / "draft"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": ["Gemma4AssistantForCausalLM"]}))
    got = _verdicts(version, model="Gemma4ForCausalLM", draft_model=str(d),
                    speculative_algorithm="EAGLE", environ={})
    assert _at(got["draft-decode"], FROZEN) == lines
    assert got["draft-extend"].mode == phases.NO_PASS and not got["draft-extend"].runtime_fallbacks
