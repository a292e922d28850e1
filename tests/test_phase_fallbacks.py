"""Run-time fallbacks of captured phases (probes/draft_extend_graph/fallbacks.py) against lines READ
BY HAND in the release wheels, never produced by running diag. Each line is where a runner's
replay test says no although a graph was captured:

0.5.23 model_executor/runner/decode_cuda_graph_runner.py `can_run_graph` (:845): `if
forward_batch.replace_embeds is not None: return False` :847 (never on a verify step: every
decode step's `prepare_for_decode` clears the field first, managers/schedule_batch.py:3743;
0.5.19's does not, so its :678 stays); the ragged-verify branch
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

The worker side (probes/draft_extend_graph/dispatch.py), the first line of each statement:
0.5.23, the v2 worker: target-verify asked in `ModelRunner._forward_raw` (model_executor/
model_runner.py:1991 `can_run_graph = bool(mode_check() and self.decode_cuda_graph_runner and
...)`) and in `eagle_prepare_for_verify` (speculative/eagle_utils.py:399); draft-decode in
`prepare_for_draft` (speculative/eagle_worker_common.py:371), then forced eager in
`EagleDraftWorker.draft` (eagle_worker_v2.py:673 `if (can_run_decode_cuda_graph and not ...
is_idle() and self.seed_dsa_topk_from_draft_extend and draft_input.dsa_topk_indices is None)`,
the switch set at :319); draft-extend in `prepare_for_draft_extend` (eagle_worker_common.py:223)
and `_draft_extend_for_decode` (eagle_worker_v2.py:1182). `EAGLEWorkerV2.apply_runtime_state`
(adaptive speculation) swaps the runners in: draft-decode :1884, draft-extend :1892,
target-verify :1897. With DP attention and SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION
(environ.py:1558 `EnvBool(False)`), `plan.apply(...)` per stage: "draft" :1644, "target" :1653,
"draft_extend" :1668. The multi-layer worker: multi_layer_eagle_worker_v2.py:887.
0.5.19: model_runner.py:1729, eagle_utils.py:579; eagle_worker_common.py:310 and
eagle_worker_v2.py:521 (draft-decode); eagle_worker_common.py:194 and eagle_worker_v2.py:954
(draft-extend); adaptive :1471, :1479, :1484; no coordination plan in 0.5.19.
0.5.9 with the v2 worker: model_runner.py:2456; eagle_info_v2.py:245 (`prepare_for_v2_verify`),
:177 (`prepare_for_v2_draft`), :206 (`prepare_for_extend_to_fill_draft_kvcache`, called from
eagle_worker_v2.py:529); eagle_worker_v2.py:546. With the v1 worker: eagle_worker.py:553
(`EAGLEWorker.draft`), :954 (`forward_draft_extend_after_decode`).
0.5.11 with the v1 worker (a second reader's table): model_runner.py:3208; eagle_worker.py:741
(draft), :1154 (draft-extend); `apply_runtime_state` swaps :324 (draft), :327 (the target's
`graph_runner`), :330 (draft-extend).
The prefill route (`forward_batch_generation`'s `if batch.forward_mode.is_extend() or
batch.is_extend_in_batch:`, whose draft extend runs the draft model's forward, not the
draft-extend runner; with --enable-mixed-chunk it takes the running requests too, so their
verify skips the TARGET_VERIFY graph that step: named for target-verify as well): 0.5.23 eagle_worker_v2.py:1423, multi_layer_eagle_worker_v2.py:1142;
0.5.19 eagle_worker_v2.py:1170; 0.5.9 eagle_worker_v2.py:651 (`model_worker_batch...`) and
eagle_worker.py:290; 0.5.11 eagle_worker.py:447.
Where a DP rank casts the vote a runner reads (`can_run_decode_cuda_graph`, before 0.5.19
`can_run_dp_cuda_graph`): `local_batch is None or ...is_decode_or_idle() or ...is_prebuilt()`,
0.5.23 managers/scheduler_components/dp_attn.py:377 (`return (`), 0.5.19 :268; 0.5.9
managers/scheduler_dp_attn_mixin.py:164 and 0.5.11 :166 (`can_cuda_graph = (`); the draft vote
(`can_run_dp_draft_cuda_graph`, 0.5.23 only) `return spec_info is None or
spec_info.cuda_graph_compatible` at 0.5.23 dp_attn.py:99.
The FROZEN_KV_MTP v2 worker (0.5.23 frozen_kv_mtp_worker_v2.py): its draft asks its runner at
:494 (`can_run_cuda_graph = (self.cuda_graph_runner and ...)`); `FrozenKVMTPWorkerV2(
EAGLEWorkerV2)` (:698) verifies through the inherited EAGLE v2 path (eagle_utils.py:399).
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
S = "sglang/srt/speculative/"
MR = "sglang/srt/model_executor/model_runner.py"
DP = "sglang/srt/managers/scheduler_components/dp_attn.py"
DP_OLD = "sglang/srt/managers/scheduler_dp_attn_mixin.py"
# where a DP rank casts the vote the runners read (this module's docstring)
VOTE = {"0.5.23": [(DP, 377)], "0.5.19": [(DP, 268)], "0.5.9": [(DP_OLD, 164)],
        "0.5.11": [(DP_OLD, 166)]}
DRAFT_VOTE = {"0.5.23": [(DP, 99)]}
# the worker side, read by hand (this module's docstring): phase -> [(file, line)]
WORKER_SIDE = {
    "0.5.23": {"target-verify": [(MR, 1991), (S + "eagle_utils.py", 399),
                                 (S + "eagle_worker_v2.py", 1423),
                                 (S + "eagle_worker_v2.py", 1897)],
               "draft-decode": [(S + "eagle_worker_common.py", 371),
                                (S + "eagle_worker_v2.py", 1884)],
               "draft-extend": [(S + "eagle_worker_common.py", 223),
                                (S + "eagle_worker_v2.py", 1182),
                                (S + "eagle_worker_v2.py", 1423),
                                (S + "eagle_worker_v2.py", 1892)]},
    "0.5.19": {"target-verify": [(MR, 1729), (S + "eagle_utils.py", 579),
                                 (S + "eagle_worker_v2.py", 1170),
                                 (S + "eagle_worker_v2.py", 1484)],
               "draft-decode": [(S + "eagle_worker_common.py", 310),
                                (S + "eagle_worker_v2.py", 1471)],
               "draft-extend": [(S + "eagle_worker_common.py", 194),
                                (S + "eagle_worker_v2.py", 954),
                                (S + "eagle_worker_v2.py", 1170),
                                (S + "eagle_worker_v2.py", 1479)]},
    "0.5.9": {"target-verify": [(MR, 2456), (S + "eagle_info_v2.py", 245),
                                (S + "eagle_worker_v2.py", 651)],
              "draft-decode": [(S + "eagle_info_v2.py", 177)],
              "draft-extend": [(S + "eagle_info_v2.py", 206), (S + "eagle_worker_v2.py", 546),
                               (S + "eagle_worker_v2.py", 651)]},
}
COORDINATION = {"draft-decode": 1644, "target-verify": 1653, "draft-extend": 1668}

VERIFY_LINES = {"0.5.23": [864, 888, 890, 895, 908],
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
    """The lines of the runner's own replay test (`file`); the rest are the worker's."""
    assert v.mode == phases.GRAPH, (v.phase, v.mode, v.reason)
    assert file in {f.file for f in v.runtime_fallbacks}
    return [f.line for f in v.runtime_fallbacks if f.file == file]


def _worker_side(v, runner: str) -> list[tuple[str, int]]:
    return sorted((f.file, f.line) for f in v.runtime_fallbacks if f.file != runner)


RUNNER_OF = {"target-verify": VERIFY, "draft-decode": DRAFT, "draft-extend": EXTEND}


@pytest.mark.parametrize("version", sorted(WORKER_SIDE))
def test_the_worker_side_of_each_phase_is_named(version):
    got = _verdicts(version, model="llama")
    for phase, want in WORKER_SIDE[version].items():
        runner = OLD_VERIFY if version == "0.5.9" and phase == "target-verify" \
            else RUNNER_OF[phase]
        votes = VOTE[version] + (DRAFT_VOTE.get(version, []) if phase == "draft-decode" else [])
        assert _worker_side(got[phase], runner) == sorted(want + votes), phase
    v = got["draft-decode"]
    # a Llama config has no `index_topk`: the DSA seed override cannot fire (below)
    assert not [f for f in v.runtime_fallbacks if "seed_dsa_topk" in f.condition]
    if version != "0.5.9":
        swaps = [f for f in v.runtime_fallbacks if "--speculative-adaptive" in f.condition]
        assert len(swaps) == 1 and swaps[0].reason == "no-runner"


def test_the_coordination_plan_needs_dp_attention_and_its_switch():
    on = {"SGLANG_ENABLE_SPEC_V2": "1", "SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION": "1"}
    for env, dp, named in ((on, True, True), (on, False, False),
                           ({"SGLANG_ENABLE_SPEC_V2": "1"}, True, False), (on, None, True)):
        got = _verdicts("0.5.23", model="llama", environ=env, enable_dp_attention=dp)
        for phase, line in COORDINATION.items():
            plan = [f for f in got[phase].runtime_fallbacks
                    if f.file == S + "eagle_worker_v2.py" and f.line == line]
            assert bool(plan) is named, (env, dp, phase)
            if plan:
                assert "SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION=1" in plan[0].condition


def test_the_v1_worker_is_asked_in_its_own_methods():
    got = _verdicts("0.5.9", model="llama", environ={})  # the v1 worker (no SPEC_V2 switch)
    assert _worker_side(got["draft-decode"], DRAFT) == sorted([(S + "eagle_worker.py", 553)]
                                                              + VOTE["0.5.9"])
    assert _worker_side(got["draft-extend"], EXTEND) == sorted([(S + "eagle_worker.py", 954),
                                                                (S + "eagle_worker.py", 290)]
                                                               + VOTE["0.5.9"])
    assert _worker_side(got["target-verify"], OLD_VERIFY) == sorted(
        [(MR, 2456), (S + "eagle_worker.py", 290)] + VOTE["0.5.9"])


def test_old_adaptive_swaps_name_the_targets_graph_runner():
    got = _verdicts("0.5.11", model="llama", environ={"SGLANG_ENABLE_SPEC_V2": "0"})
    vote = VOTE["0.5.11"]
    assert _worker_side(got["target-verify"], OLD_VERIFY) == sorted([
        (MR, 3208), (S + "eagle_worker.py", 327), (S + "eagle_worker.py", 447)] + vote)
    assert _worker_side(got["draft-decode"], DRAFT) == sorted([(S + "eagle_worker.py", 324),
                                                               (S + "eagle_worker.py", 741)] + vote)
    assert _worker_side(got["draft-extend"], EXTEND) == sorted([(S + "eagle_worker.py", 330),
                                                                (S + "eagle_worker.py", 447),
                                                                (S + "eagle_worker.py", 1154)]
                                                               + vote)


def test_the_multi_layer_worker_asks_its_own_draft_extend_runner():
    got = _verdicts("0.5.23", model="MiMoV2ForCausalLM", speculative_algorithm="EAGLE")
    side = _worker_side(got["draft-extend"], MULTI)
    assert (S + "multi_layer_eagle_worker_v2.py", 887) in side
    assert (S + "multi_layer_eagle_worker_v2.py", 1142) in side
    assert [f.reason for f in got["draft-extend"].runtime_fallbacks if f.line == 1142] == [
        "prefill"]
    assert not [x for x in side if x[0] == S + "eagle_worker_v2.py"]


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
    if version == "0.5.23":  # its own draft gate; the target verified as EAGLEWorkerV2 does
        assert _worker_side(got["draft-decode"], FROZEN) == sorted(
            [(S + "frozen_kv_mtp_worker_v2.py", 494)] + VOTE["0.5.23"])  # its runner's :242
        assert _worker_side(got["target-verify"], VERIFY) == sorted(
            [(MR, 1991), (S + "eagle_utils.py", 399), (S + "frozen_kv_mtp_worker_v2.py", 768)]
            + VOTE["0.5.23"])


def test_the_adaptive_swaps_follow_the_switch():
    """`--speculative-adaptive` (a server's `speculative_adaptive`): off, no swap is named; on,
    each is named without the "only with" words; not given, with them (0.5.23 :1884/:1892/:1897)."""
    from diag.context import SpecConfig

    def swaps(adaptive):
        got = _verdicts("0.5.23", model="llama", speculative_adaptive=adaptive)
        return {p: [f for f in v.runtime_fallbacks if f.reason == "no-runner"]
                for p, v in got.items()}

    assert not any(swaps(False).values())
    on, unknown = swaps(True), swaps(None)
    for phase, line in (("target-verify", 1897), ("draft-decode", 1884), ("draft-extend", 1892)):
        assert [f.line for f in on[phase]] == [f.line for f in unknown[phase]] == [line]
        assert "only with --speculative-adaptive" in unknown[phase][0].condition
        assert "only with" not in on[phase][0].condition
    assert SpecConfig.from_server_args({"speculative_adaptive": True}).speculative_adaptive
    assert SpecConfig.from_server_args({"speculative_adaptive": "yes"}).speculative_adaptive \
        is None


@pytest.mark.parametrize("version,line", [("0.5.19", 521), ("0.5.23", 673)])
def test_the_dsa_seed_override_needs_an_indexer(version, line):
    """`self.seed_dsa_topk_from_draft_extend` needs `hf_config.index_topk` (0.5.19
    eagle_worker_v2.py:266-269; 0.5.23 :313-321 through `dsa_seed_topk_width`, None unless
    `self.dsa_index_topk is not None`): named for a DSA model, not for Llama or DeepSeek-V3."""
    for model, named in (("deepseek-v32", True), ("llama", False), ("deepseek-v3", False),
                         (None, True)):
        v = _verdicts(version, model=model)["draft-decode"]
        seed = [f for f in v.runtime_fallbacks if f.line == line]
        assert bool(seed) is named, model
        if seed:
            assert "index_share_for_mtp_iteration" in seed[0].condition


def test_a_field_every_decode_step_clears_is_no_fallback():
    """0.5.23 `ScheduleBatch.prepare_for_decode` sets `self.replace_embeds = None`
    (managers/schedule_batch.py:3743) before its speculative branch (:3754), so the verify
    runner's `if forward_batch.replace_embeds is not None: return False` (:847) never fires;
    0.5.19's prepare_for_decode (:3286) does not clear it, so its :678 stays."""
    assert 847 not in [f.line for f in _verdicts("0.5.23", model="llama")["target-verify"]
                       .runtime_fallbacks]
    assert 678 in [f.line for f in _verdicts("0.5.19", model="llama")["target-verify"]
                   .runtime_fallbacks]


@pytest.mark.parametrize("version,line", [("0.5.19", 1170), ("0.5.23", 1423)])
def test_mixed_chunk_steps_skip_the_verify_graph(version, line):
    """With --enable-mixed-chunk (EAGLE keeps it: 0.5.23 speculative/spec_info.py:147-157) the
    running requests join a prefill batch, and `forward_batch_generation`'s prefill branch
    (`if batch.forward_mode.is_extend() or batch.is_extend_in_batch:`) runs the target's extend
    for them that step, not TARGET_VERIFY."""
    v = _verdicts(version, model="llama")["target-verify"]
    [f] = [f for f in v.runtime_fallbacks if f.line == line]
    assert f.reason == "prefill" and "--enable-mixed-chunk" in f.condition


@pytest.mark.parametrize("version", ["0.5.19", "0.5.23"])
def test_sglang_turns_adaptive_off_for_topk_above_one_and_dp_attention(version):
    """`_maybe_disable_adaptive`'s reasons (0.5.23 speculative/adaptive_spec_params.py:75-84,
    0.5.19 :64-68): a topk other than 1, attention DP. Then no runner is swapped."""
    def swaps(**kw):
        v = _verdicts(version, model="llama", **kw)
        return [f for p in phases.PHASES for f in v[p].runtime_fallbacks
                if "--speculative-adaptive" in f.condition]
    assert len(swaps()) == 3
    assert swaps(speculative_eagle_topk=4, speculative_num_draft_tokens=8) == []
    assert swaps(enable_dp_attention=True) == []
