"""The attention backend SGLang runs, and its per-phase verdicts, against hand-read releases.

Why: a server started without `--attention-backend` runs SGLang's default, and DeepSeek-V4 runs
dsv4 whatever `--attention-backend` says. Every expected backend and `file:line` below was read
by hand from the release's source (quoted in the comments), never produced by running diag.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from diag.cli import main
from diag.context import SpecConfig
from diag.probes.draft_extend_graph import phases
from tests.conftest import release_target

BASE = "sglang/srt/arg_groups/model_override_base.py"


def _audit(release: str, platform: str, **kw):
    cfg = SpecConfig(speculative_num_steps=3, speculative_eagle_topk=1, environ={}, **kw)
    a = phases.audited_verdicts(release_target(release), platform, cfg)
    assert a is not None
    return a, {v.phase: v for v in a.verdicts}


# DeepSeek-V4 forces dsv4, unconditionally (no `if` around it):
#   0.5.23 arg_groups/model_overrides/deepseek_v4.py:24
#       overrides: Dict[str, Any] = {"attention_backend": "dsv4"}
#   0.5.19 arg_groups/model_overrides/deepseek_v4.py:30  (the same line)
#   0.5.14 arg_groups/deepseek_v4_hook.py:16   server_args.attention_backend = "dsv4"
# A declaration wins over the raw --attention-backend (0.5.23 model_override_base.py
# `_declaration_overlay`: "Merge declarations in order, with the last writer winning").
@pytest.mark.parametrize("release, where", [
    ("0.5.23", "sglang/srt/arg_groups/model_overrides/deepseek_v4.py:24"),
    ("0.5.19", "sglang/srt/arg_groups/model_overrides/deepseek_v4.py:30"),
    ("0.5.14", "sglang/srt/arg_groups/deepseek_v4_hook.py:16"),
])
def test_deepseek_v4_forces_dsv4_over_the_given_backend(release, where):
    a, got = _audit(release, "hip", attention_backend="triton", model="deepseek-v4")
    assert (a.backend, a.how) == ("dsv4", "forced")
    assert all(v.backend == "dsv4" and where in v.reason for v in got.values())
    if release in ("0.5.23", "0.5.19"):
        # the HIP gate admits DeepseekV4HipRadixBackend (0.5.23 eagle_worker_v2.py:560-564;
        # 0.5.19 :426-430); triton's TritonAttnBackend is not on it (was: graph/graph/eager)
        assert {p: v.mode for p, v in got.items()} == {
            "target-verify": "graph", "draft-decode": "graph", "draft-extend": "graph"}


# HIP, standard (MHA) attention -> aiter:
#   0.5.23 model_override_base.py:326-327   elif get_platform().is_hip: / return "aiter"
#   0.5.19 model_override_base.py:321-322   (the same)
#   0.5.14 server_args.py:4447-4448         elif is_hip(): / return "aiter"
#   0.5.9  server_args.py:1813-1814         elif is_hip(): / self.attention_backend = "aiter"
#          (inline in _handle_attention_backend_compatibility)
# SGLANG_USE_AITER does not enter the choice (no read of it in the function, any release).
@pytest.mark.parametrize("release, where", [
    ("0.5.23", f"{BASE}:327"), ("0.5.19", f"{BASE}:322"),
    ("0.5.14", "sglang/srt/server_args.py:4448"), ("0.5.9", "sglang/srt/server_args.py:1814"),
])
def test_hip_standard_attention_defaults_to_aiter(release, where):
    a, got = _audit(release, "hip", model="llama")
    assert (a.backend, a.how) == ("aiter", "default")
    assert where in a.why
    assert "SGLang's default" in got["draft-extend"].reason


# HIP, MLA: aiter only when the KV heads per rank are 128 or 16, else triton:
#   0.5.23 model_override_base.py:342  head_num = model_config.get_num_kv_heads(cfg.tp_size)
#          :344  if head_num == 128 or head_num == 16:  :345 return "aiter"  :347 return "triton"
#   0.5.19 model_override_base.py:337 / :339 / :340 / :342
#   0.5.14 server_args.py:4463 / :4465 / :4466 / :4468
# get_num_kv_heads = max(1, total // tp) (0.5.23 configs/model_config.py:1707-1711); DeepSeek-V3
# has num_key_value_heads 128: tp 8 -> 16 (aiter), tp 2 -> 64 (triton).
@pytest.mark.parametrize("release, aiter, triton", [
    ("0.5.23", f"{BASE}:345", f"{BASE}:347"),
    ("0.5.19", f"{BASE}:340", f"{BASE}:342"),
    ("0.5.14", "sglang/srt/server_args.py:4466", "sglang/srt/server_args.py:4468"),
])
def test_hip_mla_default_follows_kv_heads_per_rank(release, aiter, triton):
    a8, _ = _audit(release, "hip", model="deepseek-v3", tp_size=8)
    assert a8.backend == "aiter" and aiter in a8.why
    a2, got2 = _audit(release, "hip", model="deepseek-v3", tp_size=2)
    assert a2.backend == "triton" and triton in a2.why
    a1, _ = _audit(release, "hip", model="deepseek-v3", tp_size=1)  # 128 heads on one rank
    assert a1.backend == "aiter"
    if release == "0.5.23":
        # TritonAttnBackend is not on the HIP allow-list (eagle_worker_v2.py:560-564)
        assert got2["draft-extend"].mode == "eager"
        assert str(got2["draft-extend"].where) == "sglang/srt/speculative/eagle_worker_v2.py:560"


def test_hip_mla_without_tp_depends_on_tp():
    """No --tp: aiter (graph) or triton (eager) for draft-extend in 0.5.23, said in words."""
    a, got = _audit("0.5.23", "hip", model="deepseek-v3")
    assert a.backend == "aiter|triton"
    de = got["draft-extend"]
    assert de.mode == "depends"
    assert "--tp" in de.reason and "128 or 16" in de.reason
    assert f"{BASE}:345" in de.reason and f"{BASE}:347" in de.reason
    # the two other phases are graph either way
    assert got["target-verify"].mode == got["draft-decode"].mode == "graph"


# DSA models: the model's override before the generic default,
#   0.5.23 model_overrides/deepseek_v2.py:102-103
#       if is_attention_backend_not_set(cfg): / overrides["attention_backend"] = "dsa"
#   0.5.12 server_args.py:1817   self.attention_backend = "nsa"
def test_dsa_model_defaults_to_its_own_backend():
    a, _ = _audit("0.5.23", "hip", model="deepseek-v32")
    assert (a.backend, a.how) == ("dsa", "model default")
    assert "sglang/srt/arg_groups/model_overrides/deepseek_v2.py:103" in a.why
    a12, _ = _audit("0.5.12", "hip", model="deepseek-v32")
    assert a12.backend == "nsa" and "sglang/srt/server_args.py:1817" in a12.why


# CUDA: the GPU generation decides (diag has no such input):
#   0.5.19 model_overrides/deepseek_v2.py:111 trtllm_mla on SM100 for DeepSeek-V3 (non-DSA)
#   0.5.19 model_override_base.py:332-333 fa3 on Hopper; :346 triton otherwise
#   0.5.19 eagle_worker_v2.py:432-438: the CUDA list has TritonAttnBackend, TRTLLMMLABackend,
#   not FlashAttentionBackend -> fa3 eager, the others graph: depends.
def test_cuda_default_depends_on_the_gpu_generation():
    a, got = _audit("0.5.19", "cuda", model="deepseek-v3")
    assert set(a.backend.split("|")) == {"trtllm_mla", "fa3", "triton"}
    de = got["draft-extend"]
    assert de.mode == "depends"
    for needle in ("trtllm_mla (graph)", "fa3 (eager)", "triton (graph)", "SM100", "Hopper",
                   "sglang/srt/arg_groups/model_overrides/deepseek_v2.py:111"):
        assert needle in de.reason, de.reason


def test_cuda_candidates_with_one_verdict_are_decided():
    """0.5.23, Llama, topk 1: fa3 / fa4 / trtllm_mha / flashinfer / triton are all on the CUDA
    draft-extend list, so the verdict is graph whichever SGLang picks (said in the reason)."""
    _, got = _audit("0.5.23", "cuda", model="llama")
    de = got["draft-extend"]
    assert de.mode == "graph" and "the same verdict for each" in de.reason


LLAMA = {"architectures": ["LlamaForCausalLM"], "num_attention_heads": 32,
         "num_key_value_heads": 8}


def test_cli_rows_for_the_default_backend(tmp_path):
    """`diag probe draft-extend-graph` without --attention-backend: per-phase rows for aiter,
    SGLang's default for an MHA model on HIP (0.5.23 model_override_base.py:327); the JSON and
    the text table say the same."""
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    args = ["probe", "draft-extend-graph", "--sglang", "0.5.23", "--platform", "hip",
            "--model", str(tmp_path), "--speculative-num-steps", "3", "--no-execute"]
    r = CliRunner().invoke(main, [*args, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    rows = [e["data"] for f in doc["findings"] for e in f["evidence"]
            if e["kind"] == "row" and "phase" in e["data"] and e["data"].get("config")]
    assert [(d["phase"], d["backend"], d["mode"]) for d in rows] == [
        ("target-verify", "aiter", "graph"), ("draft-decode", "aiter", "graph"),
        ("draft-extend", "aiter", "graph")]
    # draft-extend: AiterMultiStepDraftBackend on the HIP allow-list (eagle_worker_v2.py:560)
    assert (rows[2]["file"], rows[2]["line"]) == ("sglang/srt/speculative/eagle_worker_v2.py", 560)
    text = CliRunner().invoke(main, args)
    assert text.exit_code == 0, text.output
    table = {ln.split()[0]: ln.split()[1:3] for ln in text.stdout.splitlines()
             if ln.split() and ln.split()[0] in phases.PHASES}
    assert table == {d["phase"]: [d["mode"], d["backend"]] for d in rows}
    assert f"{BASE}:327" in text.stdout.replace("\n", " ").replace("          ", "")


def test_cli_without_model_says_what_the_default_depends_on():
    r = CliRunner().invoke(main, ["probe", "draft-extend-graph", "--sglang", "0.5.23",
                                  "--platform", "hip", "--no-execute", "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)["findings"][0]["summary"]
    assert "depends on the model" in summary and "pass --model" in summary
