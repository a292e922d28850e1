"""Per-phase verdicts against a hand-read table (tests/groundtruth/phase_cases.json).

Why: the expected modes and `file:line`s were read from the real 0.5.19 and 0.5.23 wheels by
hand (the lines are quoted in the JSON's `_about`), never produced by running diag; every case
must agree, so a rule that drifts (a moved check, a class the model family picks) fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag.context import SpecConfig
from diag.probes.draft_extend_graph import phases
from tests.conftest import release_target

TRUTH = json.loads((Path(__file__).parent / "groundtruth" / "phase_cases.json").read_text())
CASES = TRUTH["cases"]


def _id(c: dict) -> str:
    return (f"{c['release']}-{c['platform']}-{c['backend']}-{c['model'] or 'nomodel'}"
            f"-topk{c['topk']}"
            f"-steps{c['steps']}" + (f"-page{c['page_size']}" if "page_size" in c else "")
            + ("-aiter" if (c.get("env") or {}).get("SGLANG_USE_AITER") else "")
            + ("-noenv" if "env" in c and c["env"] is None else "")
            + ("-aot" if (c.get("env") or {}).get("AITER_ENABLE_AOT_GLUON_PA_MQA_LOGITS") else "")
            + ("-v1" if (c.get("env") or {}).get("SGLANG_ENABLE_SPEC_V2") == "0" else ""))


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_phase_verdicts_match_hand_read_table(case, monkeypatch):
    """`env` null: the server's environment is not given (diag's own, with no SGLang switch)."""
    for var in ("SGLANG_USE_AITER", "SGLANG_ENABLE_SPEC_V2", "AITER_ENABLE_AOT_GLUON_PA_MQA_LOGITS",
                "SGLANG_DSA_HIP_DISABLE_PRESHUFFLE", "SGLANG_NSA_HIP_DISABLE_PRESHUFFLE"):
        monkeypatch.delenv(var, raising=False)
    t = release_target(case["release"])
    cfg = SpecConfig(attention_backend=case["backend"], model=case["model"],
                     speculative_eagle_topk=case["topk"], speculative_num_steps=case["steps"],
                     page_size=case.get("page_size"), environ=case.get("env", {}) if "env" in case else {})
    got = {v.phase: v for v in phases.phase_verdicts(t, case["platform"], cfg, case["backend"])}
    assert set(got) == set(phases.PHASES)
    for phase, (mode, where) in case["expect"].items():
        v = got[phase]
        assert v.mode == mode, f"{phase}: {v.mode} ({v.reason})"
        assert v.config == phases.UNDER_AUDIT and v.backend == case["backend"]
        if where is not None:
            assert v.where is not None and str(v.where) == f"sglang/srt/{where}", \
                f"{phase}: cites {v.where}, read at {where}"
        if mode == phases.DEPENDS:
            # the condition is said in words
            assert case.get("condition", "Triton >= 3.5.0") in v.reason, v.reason
        if case["model"] is None and mode == phases.REFUSED and case["backend"] in phases.IMPLIED_MODEL:
            assert "implied by --attention-backend" in v.reason


@pytest.mark.parametrize("release", ["0.5.19", "0.5.23"])
def test_captured_phases_name_the_batch_above_captured_fallback(release):
    """Each captured phase names `batch-above-captured` (the live counters' word) at the line of
    its runner's `cuda_graph_bs <= self.max_bs`, read by hand."""
    t = release_target(release)
    cfg = SpecConfig(attention_backend="triton", model="llama", speculative_eagle_topk=1,
                     speculative_num_steps=3, environ={})
    got = {v.phase: v for v in phases.phase_verdicts(t, "cuda", cfg, "triton")}
    for phase, where in TRUTH["fallbacks"][release].items():
        v = got[phase]
        assert v.mode == phases.GRAPH
        hits = [f for f in v.runtime_fallbacks if f.reason == "batch-above-captured"]
        assert [f"{f.file}:{f.line}" for f in hits] == [f"sglang/srt/{where}"]
        assert any(f.reason == "runner-declined" and "data-parallel vote" in f.condition
                   for f in v.runtime_fallbacks)


@pytest.mark.parametrize("release", ["0.5.9", "0.5.12.post1"])
def test_old_runner_layout_names_its_fallbacks(release):
    """Before model_executor/runner/ (up to 0.5.13.post1) the target's runner is
    model_executor/cuda_graph_runner.py and the replay test is `can_run`: each captured phase
    still names `batch-above-captured` at the hand-read line."""
    t = release_target(release)
    cfg = SpecConfig(attention_backend="triton", model="llama", speculative_eagle_topk=1,
                     speculative_num_steps=3, environ={"SGLANG_ENABLE_SPEC_V2": "1"})
    got = {v.phase: v for v in phases.phase_verdicts(t, "cuda", cfg, "triton")}
    for phase, where in TRUTH["fallbacks"][release].items():
        hits = [f"{f.file}:{f.line}" for f in got[phase].runtime_fallbacks
                if f.reason == "batch-above-captured"]
        assert hits == [f"sglang/srt/{where}"], (phase, hits)


def test_eager_and_refused_phases_carry_no_runtime_fallbacks():
    t = release_target("0.5.23")
    cfg = SpecConfig(attention_backend="aiter", model="llama", speculative_eagle_topk=1,
                     speculative_num_steps=1, environ={})
    got = {v.phase: v for v in phases.phase_verdicts(t, "hip", cfg, "aiter")}
    assert got["draft-decode"].mode == phases.EAGER and not got["draft-decode"].runtime_fallbacks
    assert "no-runner" in got["draft-decode"].reason


def test_model_path_reads_config_json(tmp_path):
    """A --model path: its config.json architectures decide MLA (a DeepSeek-V3 config gets
    FlashInferMLAAttnBackend under flashinfer, not on the CUDA list: eager)."""
    (tmp_path / "config.json").write_text(json.dumps(
        {"architectures": ["DeepseekV3ForCausalLM"], "kv_lora_rank": 512}))
    t = release_target("0.5.23")
    m = phases.read_model(t, str(tmp_path))
    assert m.arch == "DeepseekV3ForCausalLM" and m.mla is True and m.dsa is False
    cfg = SpecConfig(attention_backend="flashinfer", model=str(tmp_path),
                     speculative_eagle_topk=1, speculative_num_steps=3, environ={})
    de = [v for v in phases.phase_verdicts(t, "cuda", cfg, "flashinfer")
          if v.phase == "draft-extend"][0]
    assert de.mode == phases.EAGER and "FlashInferMLAAttnBackend" in de.reason


def test_model_path_without_architectures_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="names no architectures"):
        phases.read_model(release_target("0.5.23"), str(tmp_path))


@pytest.mark.parametrize("dpa, listed", [(False, False), (True, True), (None, True)])
def test_data_parallel_vote_only_with_dp_attention(dpa, listed):
    """`is_bs_supported and forward_batch.can_run_decode_cuda_graph` runs only under
    `self.require_mlp_sync` (0.5.23 eagle_draft_extend_cuda_graph_runner.py:343-346), which is
    `attn_dp_enabled or require_gathered_buffer()` (utils/common.py:4163)."""
    cfg = SpecConfig(attention_backend="triton", model="llama", speculative_eagle_topk=1,
                     speculative_num_steps=3, environ={}, enable_dp_attention=dpa)
    got = {v.phase: v for v in phases.phase_verdicts(release_target("0.5.23"), "cuda", cfg,
                                                     "triton")}
    votes = [f for f in got["draft-extend"].runtime_fallbacks
             if f.condition.startswith("data-parallel vote")]
    assert bool(votes) is listed
    if dpa is None:
        assert "utils/common.py:4163" in votes[0].condition


# QSA's compress ratio from a real config.json (read by hand): the backend takes
# `hf_text_config` and its QSA profile's ratio, else `getattr(config, "indexer_compress_ratio",
# 4)` (0.5.23 qwen_sparse_attn_backend.py:233-242, 0.5.20 :182-190), and refuses target verify
# when the draft tokens (steps + 1 with topk 1) exceed it (0.5.23 :292-299 raising at :295,
# 0.5.20 :236-243 raising at :239).
QSA_RAISE = {"0.5.20": "qwen_sparse_attn_backend.py:239", "0.5.23": "qwen_sparse_attn_backend.py:295"}


@pytest.mark.parametrize("version", ["0.5.20", "0.5.23"])
@pytest.mark.parametrize(("config", "steps", "refused"), [
    ({}, 3, False),  # no ratio in the config: 4, and 4 draft tokens fit
    ({}, 4, True),  # 5 draft tokens > 4
    ({"text_config": {"indexer_n_heads": 8, "indexer_compress_ratio": 8}}, 7, False),  # 8 <= 8
    ({"text_config": {"indexer_n_heads": 8, "indexer_compress_ratio": 8}}, 8, True),  # 9 > 8
    ({"indexer_compress_ratio": 2}, 2, True),  # 3 > 2
])
def test_qsa_ratio_read_from_the_model_config(tmp_path, version, config, steps, refused):
    (tmp_path / "config.json").write_text(json.dumps(
        {"architectures": ["Qwen3ForCausalLM"], **config}))
    t = release_target(version)
    cfg = SpecConfig(attention_backend="qsa", model=str(tmp_path), speculative_eagle_topk=1,
                     speculative_num_steps=steps, environ={})
    got = {v.phase: v for v in phases.phase_verdicts(t, "hip", cfg, "qsa")}
    tv = got["target-verify"]
    if refused:
        assert tv.mode == phases.REFUSED, tv.reason
        assert str(tv.where).endswith(QSA_RAISE[version]) and f"{steps + 1} draft tokens" in tv.reason
    else:
        assert tv.mode != phases.REFUSED and tv.mode != phases.DEPENDS, (tv.mode, tv.reason)


# Qwen4-Exp with a compressed QSA profile: the model override sets page_size 64 (0.5.20
# arg_groups/model_overrides/qwen4_exp.py:84, 0.5.23 :92: `overrides["page_size"] = 64` when
# `parse_qsa_profile(hf_config)` is not None, i.e. the text config has `indexer_n_heads`,
# 0.5.23 layers/attention/qsa/config.py:86), and speculative_hook raises for topk > 1 with
# page_size > 1 outside ("flashinfer", "fa3", "triton") (0.5.20 speculative_hook.py:985 the
# tuple, :992 the raise; 0.5.23 :1271, :1278). Read by hand in both wheels.
PAGE_TREE_RAISE = {"0.5.19": "arg_groups/speculative_hook.py:814",  # 0.5.19: :807 the tuple
                   "0.5.20": "arg_groups/speculative_hook.py:992",
                   "0.5.23": "arg_groups/speculative_hook.py:1278"}
QWEN4_OVERRIDE = {"0.5.20": "qwen4_exp.py:84", "0.5.23": "qwen4_exp.py:92"}


@pytest.mark.parametrize("version", ["0.5.20", "0.5.23"])
@pytest.mark.parametrize("platform", ["hip", "cuda"])
def test_qwen4_exp_qsa_profile_forces_page_64_and_refuses_topk_4_off_the_page_tree_list(
        tmp_path, version, platform):
    qsa = {"indexer_n_heads": 8, "indexer_compress_ratio": 8}
    t = release_target(version)
    for profile, backend, refused in ((True, "aiter", True), (False, "aiter", False),
                                      (True, "triton", False)):
        d = tmp_path / f"{profile}-{backend}"
        d.mkdir()
        (d / "config.json").write_text(json.dumps({
            "architectures": ["Qwen4ExpForConditionalGeneration"],
            "text_config": qsa if profile else {}}))
        cfg = SpecConfig(attention_backend=backend, model=str(d), speculative_eagle_topk=4,
                         speculative_num_steps=3, environ={})
        got = {v.phase: v for v in phases.phase_verdicts(t, platform, cfg, backend)}
        for v in got.values():
            if refused:
                assert v.mode == phases.REFUSED, (v.phase, v.reason)
                assert str(v.where) == f"sglang/srt/{PAGE_TREE_RAISE[version]}"
                assert QWEN4_OVERRIDE[version] in v.reason and "page_size 64" in v.reason
            else:  # page 1 without a profile; triton is on the list
                assert v.mode != phases.REFUSED, (v.phase, v.reason)


@pytest.mark.parametrize("version", ["0.5.20", "0.5.23"])
def test_qwen4_exp_by_name_depends_on_its_config(version):
    """An architecture name has no config.json: whether the QSA profile is there decides."""
    t = release_target(version)
    cfg = SpecConfig(attention_backend="aiter", model="Qwen4ExpForConditionalGeneration",
                     speculative_eagle_topk=4, speculative_num_steps=3, environ={})
    got = {v.phase: v for v in phases.phase_verdicts(t, "hip", cfg, "aiter")}
    for v in got.values():
        assert v.mode == phases.DEPENDS, (v.phase, v.mode, v.reason)
        assert "indexer_n_heads" in v.reason and QWEN4_OVERRIDE[version] in v.reason


# MiniMax-M3 on CUDA: `if page_resolved is None and backend_resolved in ("fa4", "trtllm_mha"):
# overrides["page_size"] = 128` under `elif get_platform().is_sm100:` (0.5.19
# arg_groups/model_overrides/minimax_m3.py:60, :79-80; 0.5.23 :147, :166-167); Hopper's branch
# sets 128 for fa3 only (0.5.19 :91-99), HIP's none (0.5.19 :37-39). With fa4 and topk 4 the
# page-tree raise then refuses the start on SM100 only (0.5.19 speculative_hook.py:814, 0.5.23
# :1278); an explicit --page-size is kept (`page_resolved = cfg.page_size`). Read by hand.
MINIMAX_RULE = {"0.5.19": "minimax_m3.py:79", "0.5.23": "minimax_m3.py:166"}


@pytest.mark.parametrize("version", ["0.5.19", "0.5.23"])
def test_minimax_m3_fa4_topk_4_depends_on_the_gpu_on_cuda(tmp_path, version):
    (tmp_path / "config.json").write_text(json.dumps(
        {"architectures": ["MiniMaxM3SparseForCausalLM"]}))
    t = release_target(version)

    def verdicts(platform: str, page: int | None, backend: str = "fa4") -> dict:
        cfg = SpecConfig(attention_backend=backend, model=str(tmp_path),
                         speculative_eagle_topk=4, speculative_num_steps=3, page_size=page,
                         environ={})
        return {v.phase: v for v in phases.phase_verdicts(t, platform, cfg, backend)}

    for v in verdicts("cuda", None).values():
        assert v.mode == phases.DEPENDS, (v.phase, v.mode, v.reason)
        assert "SM100" in v.reason and MINIMAX_RULE[version] in v.reason
        assert str(v.where) == f"sglang/srt/{PAGE_TREE_RAISE[version]}"
    for v in verdicts("cuda", 1).values():  # given: kept, page 1 passes the page-tree check
        assert v.mode != phases.REFUSED and v.mode != phases.DEPENDS, (v.phase, v.reason)
    for v in verdicts("cuda", 64).values():  # given > 1: refused whatever the GPU
        assert v.mode == phases.REFUSED, (v.phase, v.reason)
    for v in verdicts("hip", None).values():  # no override on HIP
        assert v.mode != phases.DEPENDS or "SM100" not in v.reason, (v.phase, v.reason)
    for v in verdicts("cuda", None, "fa3").values():  # fa3 is on the page-tree list
        assert v.mode != phases.REFUSED and v.mode != phases.DEPENDS, (v.phase, v.reason)


# Qwen3-VL on ROCm with aiter's unified attention: the model override sets page_size 16 when
# no --page-size is given. Read by hand:
# - 0.5.10 server_args.py:2065-2070: `model_arch in ["Qwen3VLForConditionalGeneration"] and
#   is_hip() and get_bool_env_var("SGLANG_USE_AITER_UNIFIED_ATTN") and self.page_size is None`
#   -> `self.page_size = 16`, in `_handle_model_specific_adjustments` (called at :787, before
#   `_handle_speculative_decoding` at :820); the EAGLE page-tree raise is :3088 (flashinfer, fa3
#   only). `get_bool_env_var` takes "true"/"1" only (utils/common.py), so "yes" is false there.
# - 0.5.15 arg_groups/overrides.py:825-831 (`envs.SGLANG_USE_AITER_UNIFIED_ATTN.get()`,
#   `return {"page_size": 16}`); speculative_hook.py:459 raises (flashinfer, fa3, triton).
# - 0.5.23 arg_groups/model_overrides/qwen3_vl.py:70-77 (the same, through `resolving_view`);
#   speculative_hook.py:1278 raises. `EnvBool` (environ.py:143-150) reads "yes" as true.
QWEN3VL = {"0.5.10": ("server_args.py:2072", "server_args.py:3088"),
           "0.5.15": ("arg_groups/overrides.py:829", "arg_groups/speculative_hook.py:459"),
           "0.5.23": ("arg_groups/model_overrides/qwen3_vl.py:75",
                      "arg_groups/speculative_hook.py:1278")}


@pytest.mark.parametrize("version", sorted(QWEN3VL))
def test_qwen3_vl_aiter_unified_attention_forces_page_16_on_hip(version):
    rule, raise_at = QWEN3VL[version]
    t = release_target(version)

    def verdicts(env: dict | None, backend: str = "aiter", platform: str = "hip",
                 page: int | None = None) -> dict:
        cfg = SpecConfig(attention_backend=backend, model="Qwen3VLForConditionalGeneration",
                         speculative_eagle_topk=4, speculative_num_steps=3, page_size=page,
                         environ=env)
        return {v.phase: v for v in phases.phase_verdicts(t, platform, cfg, backend)}

    on = {"SGLANG_USE_AITER_UNIFIED_ATTN": "1"}
    for v in verdicts(on).values():
        assert v.mode == phases.REFUSED, (v.phase, v.mode, v.reason)
        assert str(v.where) == f"sglang/srt/{raise_at}"
        assert f"sglang/srt/{rule}" in v.reason and "page_size 16" in v.reason
    for v in verdicts(None).values():  # the server's environment not given
        assert v.mode == phases.DEPENDS, (v.phase, v.mode, v.reason)
        assert "SGLANG_USE_AITER_UNIFIED_ATTN" in v.reason and f"sglang/srt/{rule}" in v.reason
    yes = {"SGLANG_USE_AITER_UNIFIED_ATTN": "yes"}
    for v in verdicts(yes).values():  # get_bool_env_var: false; EnvBool: true
        assert (v.mode == phases.REFUSED) is (version != "0.5.10"), (v.phase, v.mode, v.reason)
    off_cases = ({}, {"SGLANG_USE_AITER_UNIFIED_ATTN": "0"})
    for env in off_cases:
        for v in verdicts(env).values():
            assert v.mode not in (phases.REFUSED, phases.DEPENDS), (env, v.phase, v.reason)
    for v in verdicts(on, page=1).values():  # a given --page-size is kept
        assert v.mode not in (phases.REFUSED, phases.DEPENDS), (v.phase, v.reason)
    for v in verdicts(on, platform="cuda", backend="fa3").values():  # HIP only
        assert "page_size 16" not in v.reason, (v.phase, v.reason)
    if version != "0.5.10":  # triton joined the page-tree list with speculative_hook.py
        for v in verdicts(on, backend="triton").values():
            assert v.mode not in (phases.REFUSED, phases.DEPENDS), (v.phase, v.reason)


# Models that switch multi-layer EAGLE on with --speculative-algorithm EAGLE (not NEXTN, renamed
# to EAGLE only later in the speculative hook). Read by hand:
# - 0.5.14 server_args.py:3941 `elif model_arch in MIMO_V2_MODEL_ARCHS:` ... :3968-3969
#   `if self.speculative_algorithm == "EAGLE": self.enable_multi_layer_eagle = True`;
#   speculative/multi_layer_eagle_worker_v2.py:242-252 `_capture_cuda_graphs`:
#   `self.cuda_graph_runner = None` (:243), the draft-extend runner on any non-NPU device.
# - 0.5.19 arg_groups/model_overrides/mimo_v2.py:24-26 (`overrides["enable_multi_layer_eagle"]
#   = True`); multi_layer_eagle_worker_v2.py:384 `self.cuda_graph_runner = None`.
# - 0.5.23 mimo_v2.py:23-25; multi_layer_eagle_worker_v2.py:417-456 (:418 no decode runner;
#   the draft-extend runner off NPU unless the kill switch, no allow-list), and its
#   `draft_forward` (:506-533) runs no model: the draft tokens come from the draft-extend pass.
# The EAGLE worker's HIP gate does not admit triton (0.5.23 eagle_worker_v2.py:560), so the
# switch turns draft-extend from eager to graph on HIP with triton.
MULTI_LAYER = {"0.5.14": ("server_args.py:3969", "multi_layer_eagle_worker_v2.py:243"),
               "0.5.19": ("arg_groups/model_overrides/mimo_v2.py:26",
                          "multi_layer_eagle_worker_v2.py:384"),
               "0.5.23": ("arg_groups/model_overrides/mimo_v2.py:25",
                          "multi_layer_eagle_worker_v2.py:418")}


@pytest.mark.parametrize("version", sorted(MULTI_LAYER))
def test_mimo_v2_with_eagle_runs_the_multi_layer_worker(version):
    switch, no_runner = MULTI_LAYER[version]
    t = release_target(version)

    def verdicts(algo: str | None, model: str = "MiMoV2ForCausalLM") -> dict:
        cfg = SpecConfig(attention_backend="triton", model=model, speculative_eagle_topk=1,
                         speculative_num_steps=3, speculative_algorithm=algo, environ={})
        return {v.phase: v for v in phases.phase_verdicts(t, "hip", cfg, "triton")}

    got = verdicts("EAGLE")
    assert got["draft-extend"].mode == phases.GRAPH, got["draft-extend"].reason
    assert f"sglang/srt/{switch}" in got["draft-extend"].reason
    assert got["draft-decode"].mode == phases.EAGER, got["draft-decode"].reason
    assert str(got["draft-decode"].where) == f"sglang/srt/speculative/{no_runner}"
    assert got["target-verify"].mode == phases.GRAPH
    nextn = verdicts("NEXTN")  # the EAGLE worker and its HIP gate
    assert nextn["draft-extend"].mode == phases.EAGER, nextn["draft-extend"].reason
    assert nextn["draft-decode"].mode == phases.GRAPH
    assert verdicts("EAGLE", "LlamaForCausalLM")["draft-extend"].mode == phases.EAGER
    unsaid = verdicts(None)  # the algorithm decides the worker
    for phase in ("draft-decode", "draft-extend"):
        assert unsaid[phase].mode == phases.DEPENDS, unsaid[phase].reason
        assert "with NEXTN" in unsaid[phase].reason and f"sglang/srt/{switch}" in \
            unsaid[phase].reason
    assert unsaid["target-verify"].mode == phases.GRAPH
    # a server that says it runs the multi-layer worker decides, whatever the model
    cfg = SpecConfig(attention_backend="triton", model="LlamaForCausalLM", environ={},
                     speculative_num_steps=3, enable_multi_layer_eagle=True)
    de = {v.phase: v for v in phases.phase_verdicts(t, "hip", cfg, "triton")}["draft-extend"]
    assert de.mode == phases.GRAPH and "the server runs multi-layer EAGLE" in de.reason


# --speculative-eagle-topk not given. SGLang picks steps, topk and draft tokens itself when the
# server gives none of them (0.5.23 arg_groups/speculative_hook.py:1159-1171 calls
# `_auto_choose_speculative_params`: `return (5, 4, 8)` for LlamaForCausalLM at :1440, (3, 1, 4)
# for the rest at :1461; 0.5.19 :976 and :997), and trtllm_mha raises for topk > 1 (0.5.23
# :1177-1180, the message at :1179; 0.5.19 :742). Read by hand. A configuration that gives none
# of the three is read as SGLang's own choice (probes.startup.auto_steps) where that choice
# starts; Llama's topk 4 does not start on trtllm_mha, so a server that runs was given them:
# `depends`, the choice named.
AUTO = {"0.5.19": ("arg_groups/speculative_hook.py:976", "arg_groups/speculative_hook.py:742"),
        "0.5.23": ("arg_groups/speculative_hook.py:1440", "arg_groups/speculative_hook.py:1179")}


@pytest.mark.parametrize("version", sorted(AUTO))
def test_sglang_s_own_topk_choice_is_a_condition_for_topk_refusals(version):
    auto, raise_at = AUTO[version]
    t = release_target(version)

    def verdicts(model: str | None, steps: int | None = None) -> dict:
        cfg = SpecConfig(attention_backend="trtllm_mha", model=model, environ={},
                         speculative_num_steps=steps)
        return {v.phase: v for v in phases.phase_verdicts(t, "cuda", cfg, "trtllm_mha")}

    for v in verdicts("LlamaForCausalLM").values():  # SGLang's own choice: topk 4
        assert v.mode == phases.DEPENDS, (v.phase, v.mode, v.reason)
        assert f"sglang/srt/{auto}" in v.reason and "topk 4" in v.reason
        assert str(v.where) == f"sglang/srt/{raise_at}"
    for v in verdicts("Qwen3ForCausalLM").values():  # its own choice is topk 1: no refusal
        assert v.mode != phases.REFUSED and "topk > 1" not in v.reason, (v.phase, v.reason)
    # the server's topk not given with the steps: no topk rule is judged (that SGLang fails
    # without one is said beside the verdicts: tests/test_auto_steps.py)
    rule = "trtllm_mha refuses --speculative-eagle-topk > 1"
    for v in verdicts("Qwen3ForCausalLM", steps=3).values():
        assert rule not in v.reason and "missing topk" in v.reason, (v.phase, v.reason)
    for v in verdicts("LlamaForCausalLM", steps=3).values():
        assert rule not in v.reason and "missing topk" in v.reason, (v.phase, v.reason)
