"""Start-time refusals from a model family's own argument code (model_rules.py), against lines
READ BY HAND in the real release wheels (quoted below), never produced by running diag.

Each refused case checks the three phases are `refused`, cite the hand-read `file:line`, and
name the rule; the negative cases: the rule not met, and a release without the rule.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag.context import SpecConfig
from diag.probes.draft_extend_graph import phases
from tests.conftest import release_target

SRT = "sglang/srt/"


def verdicts(version: str, backend: str, platform: str = "cuda", **facts) -> dict:
    facts.setdefault("speculative_num_steps", 3)
    facts.setdefault("environ", {})
    cfg = SpecConfig(attention_backend=backend, **facts)
    got = {v.phase: v for v in phases.phase_verdicts(release_target(version), platform, cfg,
                                                     backend)}
    assert set(got) == set(phases.PHASES)
    return got


def assert_all(got: dict, mode: str, where: str | None = None, *words: str) -> None:
    for v in got.values():
        assert v.mode == mode, (v.phase, v.mode, v.reason)
        if where is not None:
            assert str(v.where) == SRT + where, (v.phase, str(v.where), v.reason)
        for w in words:
            assert w in v.reason, (v.phase, w, v.reason)


def assert_none(got: dict) -> None:
    for v in got.values():
        assert v.mode not in (phases.REFUSED, phases.DEPENDS), (v.phase, v.mode, v.reason)


def assert_default_noted(got: dict, where: str, *words: str) -> None:
    """A rule that refuses only with a parallelism option not given (SGLang's default passes):
    a server that runs has the default, so the verdicts are the default's, each naming the
    rule and where it is."""
    assert_none(got)
    for v in got.values():
        for w in ("a server that starts runs the default", SRT + where, *words):
            assert w in v.reason, (v.phase, w, v.reason)


# --------------------------------------------------------------------------- 1. DeepSeek-V4

# DeepSeek-V4's hook, run by the model hook before handle_speculative_decoding upper-cases the
# algorithm and renames NEXTN to EAGLE (0.5.23 arg_groups/pipeline.py:225 before :306; 0.5.12
# server_args.py:929 `_handle_model_specific_adjustments()` before :976, the alias at :3564):
# - 0.5.12 arg_groups/deepseek_v4_hook.py:36-39
#     if server_args.speculative_algorithm is not None:
#         assert (                                                  <- :37
#             server_args.speculative_algorithm == "EAGLE"
#         ), f"Only EAGLE speculative algorithm is supported for {model_arch}"
# - 0.5.19 :147-151 / 0.5.23 :148-154
#     if cfg.speculative_algorithm is not None:
#         assert cfg.speculative_algorithm in (                     <- 0.5.19 :148, 0.5.23 :149
#             "EAGLE",
#             "DSPARK",
#         ), ... f"Only EAGLE and DSPARK speculative algorithms are supported for {model_arch}"
# - 0.5.11: no arg_groups/deepseek_v4_hook.py (no DeepSeek-V4 rule at all).
DSV4_ASSERT = {"0.5.12": "arg_groups/deepseek_v4_hook.py:37",
               "0.5.19": "arg_groups/deepseek_v4_hook.py:148",
               "0.5.23": "arg_groups/deepseek_v4_hook.py:149"}


@pytest.mark.parametrize("version", sorted(DSV4_ASSERT))
@pytest.mark.parametrize("algo", ["NEXTN", "EAGLE3", "eagle"])
def test_deepseek_v4_refuses_an_algorithm_its_hook_does_not_assert(version, algo):
    got = verdicts(version, "flashmla", model="deepseek-v4", speculative_eagle_topk=1,
                   speculative_algorithm=algo)
    assert_all(got, phases.REFUSED, DSV4_ASSERT[version], "--speculative-algorithm",
               f"{algo} is refused", "EAGLE")


@pytest.mark.parametrize("version", sorted(DSV4_ASSERT))
def test_deepseek_v4_allows_eagle_and_no_algorithm_and_dspark_from_0_5_16(version):
    assert_all(verdicts(version, "flashmla", model="deepseek-v4", speculative_eagle_topk=1,
                        speculative_algorithm="NEXTN"), phases.REFUSED, DSV4_ASSERT[version])
    # 0.5.11: no hook, no rule
    assert_none(verdicts("0.5.11", "flashmla", model="deepseek-v4", speculative_eagle_topk=1,
                         speculative_algorithm="NEXTN"))
    for algo in (None, "EAGLE"):  # None: the hook skips the assert; diag reads EAGLE
        assert_none(verdicts(version, "flashmla", model="deepseek-v4",
                             speculative_eagle_topk=1, speculative_algorithm=algo))
    dspark = verdicts(version, "flashmla", model="deepseek-v4", speculative_eagle_topk=1,
                      speculative_algorithm="DSPARK")
    if version == "0.5.12":  # `== "EAGLE"`
        assert_all(dspark, phases.REFUSED, DSV4_ASSERT[version], "DSPARK is refused")
    else:
        assert_none(dspark)


def test_deepseek_v4_algorithm_before_its_topk_assert():
    """0.5.23 :149 (the algorithm) comes before :156-157 (`topk == 1` for EAGLE)."""
    got = verdicts("0.5.23", "flashmla", model="deepseek-v4", speculative_eagle_topk=4,
                   speculative_algorithm="NEXTN")
    assert_all(got, phases.REFUSED, DSV4_ASSERT["0.5.23"], "NEXTN is refused")


# --------------------------------------------------------------------------- 2. DSA with DCP

# 0.5.22 and 0.5.23 arg_groups/model_overrides/deepseek_v2.py:18-26 (identical):
#     def _dsa_dcp_overrides(cfg: Any) -> dict:
#         if cfg.dcp_size <= 1:                                     <- :19
#             return {}
#         ...
#         if cfg.speculative_eagle_topk not in (None, 1):           <- :25
#             raise ValueError("DSA DCP requires --speculative-eagle-topk 1.")   <- :26
# called at :99-100 `if is_deepseek_dsa(hf_config): overrides.update(_dsa_dcp_overrides(cfg))`
# in `_deepseek_family_overrides`, registered for DeepseekV32ForCausalLM (:37-50), before any
# platform branch. 0.5.21's deepseek_v2.py has no `_dsa_dcp_overrides`. fa3 and triton are on
# the page-tree list (speculative_hook.py), so DSA's page 64 alone does not refuse topk 4.
DSA_DCP = "arg_groups/model_overrides/deepseek_v2.py:26"


@pytest.mark.parametrize("version", ["0.5.22", "0.5.23"])
@pytest.mark.parametrize("backend", ["fa3", "triton"])
def test_dsa_with_dcp_refuses_topk_above_1(version, backend):
    assert_all(verdicts(version, backend, model="deepseek-v32", speculative_eagle_topk=4,
                        dcp_size=2),
               phases.REFUSED, DSA_DCP, "DSA with DCP requires --speculative-eagle-topk 1",
               "--dcp-size 2")
    # --dcp not given: SGLang's default 1 passes, and a server that runs has it: the
    # default's verdicts, the rule named
    assert_default_noted(verdicts(version, backend, model="deepseek-v32",
                                  speculative_eagle_topk=4), DSA_DCP, "if --dcp-size > 1")
    for facts in ({"dcp_size": 1, "speculative_eagle_topk": 4},  # :19 returns early
                  {"dcp_size": 2, "speculative_eagle_topk": 1},  # topk 1 passes
                  {"dcp_size": 2, "speculative_eagle_topk": None}):  # None passes too
        assert_none(verdicts(version, backend, model="deepseek-v32", **facts))
    # not a DSA model (no index_topk): the rule is under `if is_deepseek_dsa(hf_config)`
    assert_none(verdicts(version, backend, model="llama", speculative_eagle_topk=4,
                         dcp_size=2))
    # 0.5.21: no `_dsa_dcp_overrides`
    assert_none(verdicts("0.5.21", backend, model="deepseek-v32", speculative_eagle_topk=4,
                         dcp_size=2))


def test_dsa_dcp_condition_is_named_next_to_a_page_size_condition():
    """0.5.23 DSA on HIP with aiter: the page size follows the server's Triton (the page-tree
    raise, speculative_hook.py:1278, is the condition cited, as in phase_cases.json); DCP's
    condition (default 1 passes) is named after it."""
    got = verdicts("0.5.23", "dsa", "hip", model="deepseek-v32", speculative_eagle_topk=4,
                   environ={"SGLANG_USE_AITER": "1"})
    assert_all(got, phases.DEPENDS, "arg_groups/speculative_hook.py:1278", "Triton >= 3.5.0",
               "also refused at start if --dcp-size > 1", SRT + DSA_DCP)


# --------------------------------------------------------------------------- 3. MiniMax NVFP4

# 0.5.23 arg_groups/model_overrides/minimax_m3.py:
#   :18-34 `_resolve_quant_method`: quant_method = get_quantization_config(hf_config)
#          (utils/common.py:3849-3854: `quantization_config.get("quant_method")`); not "mxfp8"
#          -> returned as is; "mxfp8" -> "minimax_m3_nvfp4" only when
#          `str(quant_config.get("moe_quant_algo", "")).upper() == "NVFP4"` and
#          `quant_config.get("moe_quant_format") == "nvfp4-pack-quantized"` (:26-27)
#   :37-40 registered for MiniMaxM3SparseForCausalLM, MiniMaxM3SparseForConditionalGeneration
#   :46-53 the checkpoint's method unless --quantization is given
#   :56 if quant_resolved == "minimax_m3_nvfp4":
#   :57     if cfg.speculative_algorithm not in (None, "DSPARK", "DFLASH"):
#   :58         raise ValueError("M3.1 NVFP4 only supports DSPARK or DFLASH speculation")
# 0.5.22 minimax_m3.py has no NVFP4 rule. /tmp/audit/m3nvfp4/config.json (quant_method mxfp8,
# moe_quant_algo NVFP4, moe_quant_format nvfp4-pack-quantized) matches :18-34; written here.
MINIMAX_RAISE = "arg_groups/model_overrides/minimax_m3.py:58"
NVFP4 = {"quant_method": "mxfp8", "moe_quant_algo": "NVFP4",
         "moe_quant_format": "nvfp4-pack-quantized"}


def _model(tmp_path: Path, name: str, quant: dict | None,
           arch: str = "MiniMaxM3SparseForConditionalGeneration") -> str:
    d = tmp_path / name
    d.mkdir()
    cfg = {"architectures": [arch], "model_type": "minimax_m3"}
    if quant is not None:
        cfg["quantization_config"] = quant
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def test_minimax_m3_nvfp4_refuses_eagle(tmp_path):
    nvfp4 = _model(tmp_path, "nvfp4", NVFP4)
    for algo in ("EAGLE", "NEXTN", "EAGLE3", "dspark"):  # compared as typed (:57)
        assert_all(verdicts("0.5.23", "fa3", model=nvfp4, speculative_eagle_topk=1,
                            speculative_algorithm=algo),
                   phases.REFUSED, MINIMAX_RAISE, "NVFP4", "only supports DSPARK or DFLASH",
                   f"--speculative-algorithm {algo}")
    causal = _model(tmp_path, "causal", NVFP4, "MiniMaxM3SparseForCausalLM")  # both registered
    assert_all(verdicts("0.5.23", "fa3", model=causal, speculative_eagle_topk=1,
                        speculative_algorithm="EAGLE"), phases.REFUSED, MINIMAX_RAISE)
    direct = _model(tmp_path, "direct", {"quant_method": "minimax_m3_nvfp4"})  # :19-20
    assert_all(verdicts("0.5.23", "fa3", model=direct, speculative_eagle_topk=1,
                        speculative_algorithm="EAGLE"), phases.REFUSED, MINIMAX_RAISE)


def test_minimax_m3_nvfp4_negative_cases(tmp_path):
    nvfp4 = _model(tmp_path, "nvfp4", NVFP4)
    for algo in ("DSPARK", "DFLASH"):
        assert_none(verdicts("0.5.23", "fa3", model=nvfp4, speculative_eagle_topk=1,
                             speculative_algorithm=algo))
    for name, quant in (("mxfp8", {"quant_method": "mxfp8"}),  # plain MXFP8
                        ("fmt", {**NVFP4, "moe_quant_format": "nvfp4"}),  # :27 exact format
                        ("none", None)):
        assert_none(verdicts("0.5.23", "fa3", model=_model(tmp_path, name, quant),
                             speculative_eagle_topk=1, speculative_algorithm="EAGLE"))
    lower = _model(tmp_path, "lower", {**NVFP4, "moe_quant_algo": "nvfp4"})  # :26 upper()
    assert_all(verdicts("0.5.23", "fa3", model=lower, speculative_eagle_topk=1,
                        speculative_algorithm="EAGLE"), phases.REFUSED, MINIMAX_RAISE)
    # 0.5.22: no NVFP4 rule
    assert_none(verdicts("0.5.22", "fa3", model=nvfp4, speculative_eagle_topk=1,
                         speculative_algorithm="EAGLE"))


def test_minimax_m3_nvfp4_depends_without_its_config_or_algorithm(tmp_path):
    by_name = verdicts("0.5.23", "fa3", model="MiniMaxM3SparseForConditionalGeneration",
                       speculative_eagle_topk=1, speculative_algorithm="EAGLE")
    assert_all(by_name, phases.DEPENDS, MINIMAX_RAISE, "M3.1 NVFP4 checkpoint",
               "moe_quant_format nvfp4-pack-quantized", "pass --model")
    no_algo = verdicts("0.5.23", "fa3", model=_model(tmp_path, "nvfp4", NVFP4),
                       speculative_eagle_topk=1)
    assert_all(no_algo, phases.DEPENDS, MINIMAX_RAISE, "unless --speculative-algorithm is "
               "DSPARK or DFLASH")


# --------------------------------------------------------------------------- 4. IQuest-Q1

# arg_groups/model_overrides/iquest_q1.py, `@_register_for("IQuestQ1ForCausalLM", "IQuestQ1MTP")`
# (0.5.22 / 0.5.23 :11; identical files); 0.5.21 has one line less (no `attn_dp_enabled_of`
# import) and `if cfg.enable_dp_attention:`; 0.5.20 has no iquest_q1.py. 0.5.23 lines:
#   :19 if any(backend not in (None, "fa3") for backend in requested):   (no platform test)
#   :20     raise ValueError("IQuestQ1 applies its attention sink ... requires FA3 attention
#           for both prefill and decode.")
#   :24 if cfg.speculative_algorithm is not None:
#   :25     if cfg.speculative_algorithm.upper() not in ("EAGLE", "NEXTN"):
#   :26         raise ValueError("IQuest Q1 MTP requires serial EAGLE or NEXTN drafting.")
#   :27     if cfg.speculative_draft_attention_backend not in (None, "fa3"):
#   :28         raise ValueError("IQuestQ1 requires FA3 attention for the MTP draft.")
#   :29 if cfg.attn_cp_size > 1 or cfg.dcp_size > 1 or cfg.enable_prefill_cp:
#   :30     raise ValueError("IQuestQ1 does not support context parallelism.")
#   :31 if cfg.speculative_eagle_topk is not None and cfg.speculative_eagle_topk > 1:
#   :32     raise ValueError(
#   :37 if attn_dp_enabled_of(cfg):            (0.5.21 :36 `if cfg.enable_dp_attention:`)
#   :38     raise ValueError("IQuest Q1 does not support DP attention.")
# `attn_dp_enabled_of` is `cfg.attn_dp_size > 1 or ep_scale_joiner_of(cfg)`
# (runtime_context.py:199); the deprecated --enable-dp-attention becomes attn_dp_size = dp_size
# (parallel_hook.py:52-58, run first: pipeline.py:45), so with --dp-size 1 it passes; a
# server's resolved `enable_dp_attention` is `attn_dp_size > 1` (server_args.py:332).
IQ = "arg_groups/model_overrides/iquest_q1.py"
IQUEST = {"0.5.21": {"fa3": 19, "algo": 25, "draft": 27, "cp": 29, "topk": 31, "dp": 37},
          "0.5.23": {"fa3": 20, "algo": 26, "draft": 28, "cp": 30, "topk": 32, "dp": 38}}
Q1 = {"model": "IQuestQ1ForCausalLM", "speculative_eagle_topk": 1, "dcp_size": 1,
      "enable_dp_attention": False}


@pytest.mark.parametrize("version", sorted(IQUEST))
def test_iquest_q1_refusals(version):
    at = {k: f"{IQ}:{n}" for k, n in IQUEST[version].items()}
    assert_none(verdicts(version, "fa3", **Q1))
    assert_none(verdicts(version, "fa3", **{**Q1, "speculative_algorithm": "nextn"}))  # upper()
    assert_all(verdicts(version, "triton", **Q1), phases.REFUSED, at["fa3"],
               "requires fa3 attention", "--attention-backend triton")
    assert_all(verdicts(version, "fa3", **{**Q1, "speculative_algorithm": "EAGLE3"}),
               phases.REFUSED, at["algo"], "requires EAGLE or NEXTN", "EAGLE3")
    assert_all(verdicts(version, "fa3", **{**Q1, "draft_attention_backend": "triton"}),
               phases.REFUSED, at["draft"], "fa3 for the MTP draft")
    assert_all(verdicts(version, "fa3", **{**Q1, "dcp_size": 2}), phases.REFUSED, at["cp"],
               "does not support context parallelism", "--dcp-size 2")
    assert_all(verdicts(version, "fa3", **{**Q1, "speculative_eagle_topk": 2}),
               phases.REFUSED, at["topk"], "requires --speculative-eagle-topk 1")
    assert_all(verdicts(version, "fa3", **{**Q1, "enable_dp_attention": True, "dp_size": 2}),
               phases.REFUSED, at["dp"], "does not support DP attention")
    # not given: the defaults pass, so the defaults' verdicts, both rules named
    got = verdicts(version, "fa3", model="IQuestQ1ForCausalLM", speculative_eagle_topk=1)
    assert_default_noted(got, at["cp"], "if --dcp-size > 1",
                         "refused at start with DP attention")
    # 0.5.20: no iquest_q1.py
    assert_none(verdicts("0.5.20", "triton", **{**Q1, "speculative_eagle_topk": 2,
                                                "dcp_size": 2}))


def test_iquest_q1_dp_attention_follows_the_dp_size_from_0_5_22():
    """0.5.21 refuses --enable-dp-attention alone; 0.5.22+ only with an attention-DP width > 1."""
    one = {**Q1, "enable_dp_attention": True, "dp_size": 1}
    assert_all(verdicts("0.5.21", "fa3", **one), phases.REFUSED, f"{IQ}:37")
    assert_none(verdicts("0.5.23", "fa3", **one))
    assert_default_noted(verdicts("0.5.23", "fa3", **{**one, "dp_size": None}), f"{IQ}:38",
                         "if --dp-size > 1", "parallel_hook.py:56")
    assert_all(verdicts("0.5.23", "fa3", **one, source="server"), phases.REFUSED, f"{IQ}:38")


# Kimi-K3 with DCP: under `if cfg.dcp_size > 1:` an `if decode_backend == "cutedsl_mla" or
# decode_backend is None:` branch calling `_require_kimi_k3_cutedsl_dcp_support()` (FlashInfer
# >= 0.6.17 with enable_dcp), then `elif decode_backend == "tokenspeed_mla":` (0.5.19, no
# check) or `elif decode_backend == "aiter":` calling `_require_kimi_k3_aiter_gluon_dcp_support()`
# (0.5.23), else `raise AssertionError("Decode attention backend for Kimi-K3 DCP must be ...")`.
# Read by hand: 0.5.19 arg_groups/model_overrides/kimi_k3.py:48, :79-80, :89, :105; 0.5.23
# :54, :85-86, :95-96, :110.
KIMI_RAISE = {"0.5.19": "arg_groups/model_overrides/kimi_k3.py:105",
              "0.5.23": "arg_groups/model_overrides/kimi_k3.py:110"}


@pytest.mark.parametrize("version", sorted(KIMI_RAISE))
def test_kimi_k3_dcp_takes_only_its_decode_backends(version):
    t = release_target(version)

    def modes(backend: str, dcp: int | None) -> set:
        cfg = SpecConfig(attention_backend=backend, model="KimiK3ForConditionalGeneration",
                         speculative_eagle_topk=1, speculative_num_steps=3, dcp_size=dcp,
                         environ={})
        got = phases.phase_verdicts(t, "hip", cfg, backend)
        return {(v.mode, str(v.where)) for v in got}, got

    m, got = modes("triton", 2)
    assert m == {(phases.REFUSED, f"sglang/srt/{KIMI_RAISE[version]}")}, got
    assert "triton is refused" in got[0].reason
    m, got = modes("triton", None)  # --dcp not given: SGLang's default 1 passes
    assert {x[0] for x in m} & {phases.DEPENDS, phases.REFUSED} == set()
    assert "a server that starts runs the default" in got[0].reason
    assert "--dcp-size > 1" in got[0].reason and KIMI_RAISE[version] in got[0].reason
    assert not any("Kimi-K3" in v.reason for v in modes("triton", 1)[1])
    m, got = modes("cutedsl_mla", 2)  # allowed, but needs the server's FlashInfer
    assert {x[0] for x in m} == {phases.DEPENDS}, got
    assert "_require_kimi_k3_cutedsl_dcp_support" in got[0].reason
    m, got = modes("aiter", 2)
    if version == "0.5.19":  # not in 0.5.19's chain
        assert {x[0] for x in m} == {phases.REFUSED}, got
    else:  # 0.5.23: allowed with the aiter gluon MLA kernel
        assert {x[0] for x in m} == {phases.DEPENDS}, got
        assert "_require_kimi_k3_aiter_gluon_dcp_support" in got[0].reason


# MiniCPM refuses DP attention: 0.5.19 arg_groups/model_overrides/minicpm.py:20-21 `if
# cfg.enable_dp_attention: raise ValueError("MiniCPM does not support DP attention")`; 0.5.23
# :17-18 `if attn_dp_enabled_of(cfg):` (attn_dp_size > 1, runtime_context.py; the deprecated
# flag becomes attn_dp_size = dp_size, parallel_hook.py). Registered for MiniCPMForCausalLM and
# MiniCPMSALAForCausalLM (0.5.23 :13). Not in 0.5.18. Read by hand.
MINICPM_RAISE = {"0.5.19": "arg_groups/model_overrides/minicpm.py:21",
                 "0.5.23": "arg_groups/model_overrides/minicpm.py:18"}


@pytest.mark.parametrize("version", ["0.5.18", *sorted(MINICPM_RAISE)])
def test_minicpm_refuses_dp_attention(version):
    from click.testing import CliRunner

    from diag.cli import main

    def modes(*opts: str) -> set:
        r = CliRunner().invoke(main, [
            "probe", "draft-extend-graph", "--sglang", version, "--platform", "hip",
            "--attention-backend", "aiter", "--model", "MiniCPMForCausalLM",
            "--speculative-eagle-topk", "1", "--speculative-num-steps", "3", "--no-execute",
            "--json", *opts])
        doc = json.loads(r.stdout)
        return {(e["data"]["mode"], f"{e['data'].get('file')}:{e['data'].get('line')}")
                for f in doc["findings"] for e in f["evidence"]
                if e["kind"] == "row" and "phase" in e["data"] and e["data"].get("config")}

    at = f"sglang/srt/{MINICPM_RAISE.get(version)}"
    if version == "0.5.18":  # no such rule
        assert {m for m, _ in modes("--enable-dp-attention", "--dp", "2")} == {"graph"}
        return
    assert modes("--enable-dp-attention", "--dp", "2") == {("refused", at)}
    assert {m for m, _ in modes("--no-dp-attention")} == {"graph"}
    # not given: SGLang's default (no DP attention) passes: the default's verdicts
    assert {m for m, _ in modes()} == {"graph"}
    one = modes("--enable-dp-attention", "--dp", "1")
    if version == "0.5.23":  # attention-DP width 1 passes attn_dp_enabled_of
        assert {m for m, _ in one} == {"graph"}
    else:  # 0.5.19 tests the flag itself
        assert one == {("refused", at)}


# A Gemma4 assistant draft model refuses EAGLE3: `_resolve_speculative_algorithm_alias` reads the
# draft's config.json; `if speculative_algorithm == "EAGLE3" and is_gemma4_draft: raise
# ValueError(...)` at 0.5.19 arg_groups/speculative_hook.py:62-63 and 0.5.23 :102-103, with
# `is_gemma4_draft = any(arch in ("Gemma4AssistantForCausalLM",
# "Gemma4UnifiedAssistantForCausalLM") ...)` (0.5.19 :57-60, 0.5.23 :97-100). Read by hand.
GEMMA4_RAISE = {"0.5.19": "arg_groups/speculative_hook.py:63",
                "0.5.23": "arg_groups/speculative_hook.py:103"}


@pytest.mark.parametrize("version", sorted(GEMMA4_RAISE))
def test_gemma4_assistant_draft_refuses_eagle3(tmp_path, version):
    t = release_target(version)

    def verdicts(arch: str, algo: str) -> list:
        d = tmp_path / f"{arch}-{algo}"
        d.mkdir()
        (d / "config.json").write_text(json.dumps({"architectures": [arch]}))
        cfg = SpecConfig(attention_backend="triton", draft_model=str(d), environ={},
                         speculative_algorithm=algo, speculative_eagle_topk=1,
                         speculative_num_steps=3)
        return phases.phase_verdicts(t, "hip", cfg, "triton")

    for v in verdicts("Gemma4AssistantForCausalLM", "EAGLE3"):
        assert v.mode == phases.REFUSED and str(v.where) == f"sglang/srt/{GEMMA4_RAISE[version]}"
    assert all(v.mode != phases.REFUSED for v in verdicts("LlamaForCausalLM", "EAGLE3"))
    assert all(v.mode == phases.REFUSED
               for v in verdicts("Gemma4UnifiedAssistantForCausalLM", "EAGLE3"))
    # EAGLE with the same draft runs as FROZEN_KV_MTP (not judged here): not refused
    assert all(v.mode != phases.REFUSED for v in verdicts("Gemma4AssistantForCausalLM", "EAGLE"))


def test_gemma4_assistant_draft_refuses_eagle3_where_0_5_12_keeps_the_alias(tmp_path):
    """0.5.12 keeps the alias in server_args.py: `is_gemma4_draft = "Gemma4AssistantForCausalLM"
    in (...)` (:333-335; no Unified assistant yet), `if speculative_algorithm == "EAGLE3" and
    is_gemma4_draft:` (:337) `raise ValueError(` (:338). Read by hand."""
    d = tmp_path / "draft"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": ["Gemma4AssistantForCausalLM"]}))
    cfg = SpecConfig(attention_backend="triton", draft_model=str(d), environ={},
                     speculative_algorithm="EAGLE3", speculative_eagle_topk=1,
                     speculative_num_steps=3)
    got = phases.phase_verdicts(release_target("0.5.12"), "hip", cfg, "triton")
    assert {(v.mode, str(v.where)) for v in got} == {
        (phases.REFUSED, "sglang/srt/server_args.py:338")}


# DeepSeek-V4.1 (config.json `model_type: deepseek_v41`, architecture DeepseekV4ForCausalLM)
# takes only DSPARK: `validate_deepseek_v41_features` lists ("speculative decoding other than
# DSpark", `speculative_algorithm is not None and ....upper() != "DSPARK"`) and raises in a loop
# (0.5.21 arg_groups/deepseek_v4_hook.py:215-218, raise :229; 0.5.23 :334-337, raise :350);
# called for DeepseekV4ForCausalLM from model_hook.py (0.5.23 :470-479). Not in 0.5.20. Read by hand.
V41_RAISE = {"0.5.21": "arg_groups/deepseek_v4_hook.py:229",
             "0.5.23": "arg_groups/deepseek_v4_hook.py:350"}


@pytest.mark.parametrize("version", ["0.5.20", *sorted(V41_RAISE)])
def test_deepseek_v4_1_takes_dspark_only(tmp_path, version):
    (tmp_path / "config.json").write_text(json.dumps(
        {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v41"}))
    t = release_target(version)

    def verdicts(algo: str | None) -> list:
        cfg = SpecConfig(attention_backend="dsv4", model=str(tmp_path), environ={},
                         speculative_algorithm=algo, speculative_eagle_topk=1,
                         speculative_num_steps=3)
        return phases.phase_verdicts(t, "hip", cfg, "dsv4")

    if version not in V41_RAISE:
        assert all(v.mode != phases.REFUSED for v in verdicts("EAGLE"))
        return
    at = f"sglang/srt/{V41_RAISE[version]}"
    assert {(v.mode, str(v.where)) for v in verdicts("EAGLE")} == {(phases.REFUSED, at)}
    assert {(v.mode, str(v.where)) for v in verdicts(None)} == {(phases.DEPENDS, at)}
    assert all(v.mode != phases.REFUSED and "DSPARK" not in v.reason
               for v in verdicts("DSPARK"))


# --------------------------------------------------------------------------- model hook asserts

# The model hook's `if model_arch ... elif ...` chain asserts the attention backend for some
# architectures (model_backends.py). Read by hand:
# - Llama4 (`"Llama4" in model_arch and self.device != "cpu"` / `model_arch in (...)`):
#   0.5.17 server_args.py:5439 `assert attention_backend in {"fa3", "aiter", "triton", "ascend",
#   "trtllm_mha", "intel_xpu"}`; 0.5.23 arg_groups/model_hook.py:622 the same set; 0.5.12
#   server_args.py:2197 `self.attention_backend in {...}` after `model_arch in
#   LLAMA4_MODEL_ARCHS` (a module constant, :87-88).
# - Gemma4: 0.5.19 model_hook.py:491 `prefill_backend in accepted_backends and decode_backend in
#   accepted_backends`, accepted_backends = (trtllm_mha, triton, ascend, intel_xpu, intel_amx)
#   (:484-490): aiter refused; 0.5.21 :614 adds aiter (:606-613); 0.5.23 :655 (+ fa4).
# - Exaone4: under `if hf_config.sliding_window_pattern is not None:` (0.5.19 :507, 0.5.23 :675)
#   `assert attention_backend in accepted_backends` = [fa3, triton, trtllm_mha] (0.5.19 :511,
#   0.5.23 :679): depends on the model's config.
# - Olmo2: `assert attention_backend != "flashinfer"` (0.5.17 server_args.py:5492, 0.5.23 :690).
# - Lfm2: `assert resolved_view(...).attention_backend != "triton"` (0.5.19 :550, 0.5.23 :719).
HOOK = "arg_groups/model_hook.py"
MODEL_HOOK_CASES = [
    ("0.5.12", "Llama4ForConditionalGeneration", "flashinfer", "refused", "server_args.py:2197"),
    ("0.5.12", "Llama4ForConditionalGeneration", "fa3", None, None),
    ("0.5.17", "Llama4ForConditionalGeneration", "flashinfer", "refused", "server_args.py:5439"),
    ("0.5.23", "Llama4ForCausalLM", "flashinfer", "refused", f"{HOOK}:622"),
    ("0.5.23", "Llama4ForCausalLM", "triton", None, None),
    ("0.5.19", "Gemma4ForCausalLM", "aiter", "refused", f"{HOOK}:491"),
    ("0.5.21", "Gemma4ForCausalLM", "aiter", None, None),
    ("0.5.21", "Gemma4ForCausalLM", "fa3", "refused", f"{HOOK}:614"),
    ("0.5.23", "Gemma4ForConditionalGeneration", "fa3", "refused", f"{HOOK}:655"),
    ("0.5.19", "Exaone4ForCausalLM", "flashinfer", "depends", f"{HOOK}:511"),
    ("0.5.23", "Exaone4ForCausalLM", "flashinfer", "depends", f"{HOOK}:679"),
    ("0.5.23", "Exaone4ForCausalLM", "fa3", None, None),
    ("0.5.17", "Olmo2ForCausalLM", "flashinfer", "refused", "server_args.py:5492"),
    ("0.5.23", "Olmo2ForCausalLM", "flashinfer", "refused", f"{HOOK}:690"),
    ("0.5.19", "Lfm2ForCausalLM", "triton", "refused", f"{HOOK}:550"),
    ("0.5.23", "Lfm2MoeForCausalLM", "triton", "refused", f"{HOOK}:719"),
    ("0.5.23", "Lfm2ForCausalLM", "fa3", None, None),
]


@pytest.mark.parametrize("version,arch,backend,mode,where", MODEL_HOOK_CASES)
def test_the_model_hook_asserts_the_backend(version, arch, backend, mode, where):
    got = verdicts(version, backend, model=arch, speculative_eagle_topk=1)
    if mode is None:
        assert_none(got)
        return
    assert_all(got, mode, where, "model hook asserts", f"{backend} fails it")
    if mode == "depends":
        assert all("sliding_window_pattern is not None" in v.reason for v in got.values())


@pytest.mark.parametrize("version,where", [("0.5.19", f"{HOOK}:511"), ("0.5.23", f"{HOOK}:679")])
def test_exaone4s_sliding_window_is_read_from_its_config(tmp_path, version, where):
    """`if hf_config.sliding_window_pattern is not None:` around Exaone4's assert (0.5.19 :507,
    0.5.23 :675): a config.json that gives the key decides it; one without it leaves the
    config class's default, not read here (depends)."""
    def got(**params):
        d = tmp_path / f"m{len(list(tmp_path.iterdir()))}"
        d.mkdir()
        (d / "config.json").write_text(json.dumps({"architectures": ["Exaone4ForCausalLM"],
                                                   **params}))
        return verdicts(version, "flashinfer", model=str(d), speculative_eagle_topk=1)

    assert_all(got(sliding_window_pattern="LLLG"), "refused", where, "model hook asserts")
    assert_none(got(sliding_window_pattern=None))
    assert_all(got(), "depends", where, "sliding_window_pattern is not None")


# DeepSeek-V4 with EAGLE and no --speculative-eagle-topk: the model's hook asserts
# `speculative_eagle_topk == 1` on the value as given, before SGLang picks its own topk, so
# None fails it. 0.5.12: `_handle_model_specific_adjustments` (server_args.py:929) calls
# `apply_deepseek_v4_defaults`, which asserts at arg_groups/deepseek_v4_hook.py:40-42, before
# `_handle_speculative_decoding` (:976). 0.5.17: the same assert at deepseek_v4_hook.py:153-155.
# Read by hand; 0.5.19 and 0.5.23 also by running their argument handling
# (tests/test_startup_against_sglang.py).
V4_TOPK_ASSERT = {"0.5.12": "arg_groups/deepseek_v4_hook.py:42",
                  "0.5.17": "arg_groups/deepseek_v4_hook.py:155"}


@pytest.mark.parametrize("version", sorted(V4_TOPK_ASSERT))
def test_deepseek_v4_without_a_topk_reads_the_only_topk_that_starts(version):
    """Only topk 1 starts, so a server that runs gave it: the verdicts are topk 1's, each
    reason naming the assert; topk 4 is refused by the same assert."""
    t = release_target(version)
    at = f"sglang/srt/{V4_TOPK_ASSERT[version]}"

    def verdicts(topk: int | None) -> list:
        cfg = SpecConfig(attention_backend="dsv4", model="deepseek-v4", environ={},
                         speculative_algorithm="EAGLE", speculative_eagle_topk=topk,
                         speculative_num_steps=3)
        return phases.phase_verdicts(t, "hip", cfg, "dsv4")

    unknown, one = verdicts(None), verdicts(1)
    assert [v.mode for v in unknown] == [v.mode for v in one]
    assert phases.REFUSED not in {v.mode for v in one}
    assert all(at in v.reason and "the only one that starts" in v.reason for v in unknown)
    assert all(at not in v.reason for v in one)
    assert {(v.mode, str(v.where)) for v in verdicts(4)} == {(phases.REFUSED, at)}
