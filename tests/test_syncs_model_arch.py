"""What the served model's architecture decides in fa3's metadata builders (issue 38: `depends`
only where no input decides). Expected values read by hand from the release sources, never from
running diag:

- Chunked local attention (Llama 4). `is_local_attention_model` names only
  `Llama4ForConditionalGeneration` (0.5.19 configs/model_config.py:2027-2028, 0.5.23
  :2549-2550).
  - 0.5.19 flashattention_backend.py: `self.has_local_attention =
    model_runner.model_config.is_local_attention_model` (:227). `_maybe_init_local_attn_metadata`
    (:3152) returns at `if not self.has_local_attention:` (:3159) before `cu_seqlens_q.cpu()`
    (:3175), `cache_seqlens_int32.cpu()` (:3176) and the two `torch.from_numpy(...).to(device)`
    copies (:3191, :3192).
  - 0.5.23: `_maybe_init_local_attn_builder` returns None unless the model config says so
    (flashattention_backend.py:383-386). `_maybe_init_local_attn_metadata` returns at `if
    self.local_attn_builder is None:` (:3400-3402) before `self.local_attn_builder.build(...)`
    (:3403), whose `.cpu()` reads are local_attention.py:118 and :119 and whose copies are :125
    and :126.
- Encoder lengths. `forward_batch.encoder_lens` is set only where `model_config.is_encoder_decoder`
  (0.5.23 managers/schedule_batch.py:3128-3129 -> :2748; forward_batch_info.py:1076).
  `is_encoder_decoder_model` lists Whisper, Mllama and MossVL (0.5.23 model_config.py:2540-2546).
  The site is `metadata.encoder_lens_int32.max().item()`, under `if forward_batch.encoder_lens is
  not None:` (0.5.19 flashattention_backend.py:1075 -> :1081, 0.5.23 :1239 -> :1245).
- Prefill-aware sliding window. The model runner sets `prefill_aware_swa` only where the model
  class has `is_prefill_aware_swa()` and it returns True (0.5.23
  model_executor/model_runner.py:1357-1360). fa3 keeps it as `self.is_prefill_aware_swa` (:257).
  `UnlimitedOCRForCausalLM.is_prefill_aware_swa` returns True (0.5.23 models/unlimited_ocr.py:100-102);
  `LlamaForCausalLM` has none (models/llama.py). The site is
  `int(forward_batch.seq_lens[:batch_size].max().item())`, in the `else` of `if seq_lens_cpu
  is not None:` under `if self.is_prefill_aware_swa:` (0.5.19 :1060 -> :1069, 0.5.23 :1224
  -> :1233).
- The speculative input's ragged verify layout (an algorithm fact, not a model's). fa3's
  target-verify branch reads `ragged_layout = getattr(forward_batch.spec_info,
  "ragged_verify_layout", None)` and, `if ragged_layout is not None:`, syncs on
  `int(metadata.cache_seqlens_int32.max().item())` (0.5.19 flashattention_backend.py:853-856 ->
  :869, 0.5.23 :1038-1041 -> :1054). The field is a class default None on every input (0.5.19
  speculative/spec_info.py:368, 0.5.23 :408). It is set only by DSPARK's verify
  (0.5.23 speculative/dspark_components/dspark_verify.py:270, :436) and by the decode graph
  runner's capture under `ragged_verify_mode` (model_executor/runner/decode_cuda_graph_runner.py:2131
  -> :796-798), which needs `supports_ragged_verify()`: `self.is_dspark()` (0.5.19
  spec_info.py:145-149, 0.5.23 :160-164). So it never runs under EAGLE, and may under DSPARK.
- MLA. Every backend's `self.use_mla` is `model_runner.model_config.attention_arch ==
  AttentionArch.MLA` (0.5.19 aiter_backend.py:254, 0.5.23 :385). model_config.py sets MLA in a
  branch naming DeepseekV3ForCausalLM (0.5.19 configs/model_config.py:925-948), and none names
  LlamaForCausalLM. aiter's `make_mla_prefill_ps_meta_data` (0.5.19 aiter_backend.py:689) reads
  `.to("cpu")` at :710, :711 and :712; it is called at :1635, under `if self.use_mla:` (:1594).
  The MHA updater `update_single_wrapper` slices `kv_indices[token_num:]` with `token_num =
  kv_indptr[-1]` (0.5.19 :3233-3234, 0.5.23 :4973-4974); it is called from the `else` of that
  test (0.5.19 :1669, 0.5.23 `if self.use_mla:` :2525).
AST only: no SGLang import.
"""

from __future__ import annotations

import json

import pytest

from diag.context import Context, SpecConfig
from diag.probes import get as get_probe
from diag.probes.base import run_probe

pytestmark = pytest.mark.release
A = "sglang/srt/layers/attention/"
FA, LA = A + "flashattention_backend.py", A + "local_attention.py"
LOCAL = {"0.5.19": [f"{FA}:{n}" for n in (3175, 3176, 3191, 3192)],
         "0.5.23": [f"{LA}:{n}" for n in (118, 119, 125, 126)]}
LOCAL_DEF = {"0.5.19": "configs/model_config.py:2027", "0.5.23": "configs/model_config.py:2549"}
ENCODER = {"0.5.19": f"{FA}:1081", "0.5.23": f"{FA}:1245"}
PREFILL_AWARE = {"0.5.19": f"{FA}:1069", "0.5.23": f"{FA}:1233"}
RAGGED = {"0.5.19": f"{FA}:869", "0.5.23": f"{FA}:1054"}
FA3 = dict(attention_backend="fa3", speculative_algorithm="EAGLE", speculative_num_steps=3,
           speculative_eagle_topk=1, page_size=1, tp_size=1)


def _target_extend(release, version: str, model: str | None, phase: str = "target-extend",
                   platform: str = "cuda", **more) -> dict:
    ctx = Context(target=release(version), platform=platform, execute=False,
                  config=SpecConfig(**(FA3 | more), model=model))
    [f] = run_probe(get_probe("metadata-syncs"), ctx)
    [te] = [e.data for e in f.evidence if e.kind == "metric" and e.data
            and e.data.get("phase") == phase]
    return te


def _states(te: dict) -> dict[str, str]:
    """site -> live | depends | unreachable on the phase (its reason or condition after)."""
    out = {at: "live" for at in te["at"]}
    out |= {u["at"]: "depends: " + u["condition"] for u in te["depends"]}
    out |= {u["at"]: "unreachable: " + u["reason"] for u in te["unreachable"]}
    return out


def _model_dir(tmp_path, arch: str) -> str:
    d = tmp_path / arch
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": [arch]}))
    return str(d)


@pytest.mark.parametrize("version", ["0.5.19", "0.5.23"])
def test_llama_rules_out_local_attention_encoder_and_prefill_aware_sites(release, version):
    """A family name (`--model llama`) decides what its architecture alone decides."""
    te = _states(_target_extend(release, version, "llama"))
    for at in LOCAL[version]:
        assert te[at].startswith("unreachable: model: LlamaForCausalLM is not a local-attention "
                                 "model"), (at, te.get(at))
        assert LOCAL_DEF[version] in te[at]
    assert te[ENCODER[version]].startswith(
        "unreachable: model: LlamaForCausalLM is not an encoder-decoder model"), te[ENCODER[version]]
    assert te[PREFILL_AWARE[version]].startswith(
        "unreachable: model: LlamaForCausalLM has no is_prefill_aware_swa")


@pytest.mark.parametrize("version", ["0.5.19", "0.5.23"])
def test_llama4_keeps_the_local_attention_sites(release, version, tmp_path):
    te = _states(_target_extend(release, version,
                                _model_dir(tmp_path, "Llama4ForConditionalGeneration")))
    for at in LOCAL[version]:
        assert not te[at].startswith("unreachable"), (at, te[at])
        assert "local_attn_builder" not in te[at] and "has_local_attention" not in te[at]
    assert te[ENCODER[version]].startswith("unreachable: model: Llama4ForConditionalGeneration")


@pytest.mark.parametrize("version", ["0.5.19", "0.5.23"])
def test_encoder_decoder_and_prefill_aware_models_keep_their_sites(release, version, tmp_path):
    te = _states(_target_extend(release, version,
                                _model_dir(tmp_path, "MllamaForConditionalGeneration")))
    assert te[ENCODER[version]] == "live", te[ENCODER[version]]
    assert te[LOCAL[version][0]].startswith("unreachable")
    te = _states(_target_extend(release, version, "UnlimitedOCRForCausalLM"))
    # still not decided: whether the batch has its host copy of the lengths (:1064 / :1228)
    assert te[PREFILL_AWARE[version]].startswith("depends: ") and \
        "is_prefill_aware_swa" not in te[PREFILL_AWARE[version]], te[PREFILL_AWARE[version]]


def test_without_a_model_each_stays_depends_with_its_condition(release):
    te = _states(_target_extend(release, "0.5.23", None))
    for at in (*LOCAL["0.5.23"], ENCODER["0.5.23"], PREFILL_AWARE["0.5.23"]):
        assert te[at].startswith("depends: "), (at, te[at])
    assert "pass --model" in te[ENCODER["0.5.23"]]


@pytest.mark.parametrize("version", ["0.5.19", "0.5.23"])
def test_the_ragged_verify_layout_is_decided_by_the_algorithm(release, version):
    tv = _states(_target_extend(release, version, "llama", "target-verify"))
    assert tv[RAGGED[version]].startswith("unreachable: release: only DSPARK verify inputs "
                                          "carry a ragged layout"), tv[RAGGED[version]]
    assert "supports_ragged_verify" in tv[RAGGED[version]]
    tv = _states(_target_extend(release, version, "llama", "target-verify",
                                speculative_algorithm="DSPARK"))
    assert tv[RAGGED[version]].startswith("depends: ") and \
        "DSPARK's verify input may carry a ragged layout" in tv[RAGGED[version]]
    # not given: EAGLE or NEXTN, as the per-phase verdicts read it; neither carries one
    tv = _states(_target_extend(release, version, "llama", "target-verify",
                                speculative_algorithm=None))
    assert tv[RAGGED[version]].startswith("unreachable: release: only DSPARK") and \
        "(speculative_algorithm not given: EAGLE or NEXTN)" in tv[RAGGED[version]]


AITER = A + "aiter_backend.py"
MHA_SLICE = {"0.5.19": f"{AITER}:3234", "0.5.23": f"{AITER}:4974"}


@pytest.mark.parametrize("version", ["0.5.19", "0.5.23"])
def test_use_mla_is_decided_by_the_model(release, version):
    llama = _states(_target_extend(release, version, "llama", platform="hip",
                                   attention_backend="aiter"))
    deepseek = _states(_target_extend(release, version, "deepseek-v3", platform="hip",
                                      attention_backend="aiter"))
    assert not llama[MHA_SLICE[version]].startswith("unreachable"), llama[MHA_SLICE[version]]
    assert deepseek[MHA_SLICE[version]].startswith(
        "unreachable: model: DeepseekV3ForCausalLM is an MLA model"), deepseek[MHA_SLICE[version]]
    if version == "0.5.19":
        for n in (710, 711, 712):
            assert llama[f"{AITER}:{n}"].startswith(
                "unreachable: model: LlamaForCausalLM is not an MLA model")
            assert not deepseek[f"{AITER}:{n}"].startswith("unreachable")


def test_a_name_that_is_no_model_class_decides_nothing(release):
    """`Qwen3-8B` is neither a family name nor a class in 0.5.23's srt/models: nothing is
    decided for it, where a release list merely not naming it would have said "not"."""
    te = _states(_target_extend(release, "0.5.23", "Qwen3-8B"))
    for at in (*LOCAL["0.5.23"], ENCODER["0.5.23"], PREFILL_AWARE["0.5.23"]):
        assert te[at].startswith("depends: ") and "Qwen3-8B: no architecture readable here" \
            in te[at], (at, te[at])


def test_the_draft_model_decides_the_draft_phases_also_by_name(release):
    """Draft-decode runs on the draft model's backend: without `--draft-model` the local
    attention sites depend on it; with its architecture name they are decided by it."""
    dd = _states(_target_extend(release, "0.5.23", "llama", "draft-decode"))
    assert dd[LOCAL["0.5.23"][0]].startswith("depends: ") and "pass --draft-model" in \
        dd[LOCAL["0.5.23"][0]]
    dd = _states(_target_extend(release, "0.5.23", "llama", "draft-decode",
                                draft_model="LlamaForCausalLMEagle"))
    assert dd[LOCAL["0.5.23"][0]].startswith(
        "unreachable: model: LlamaForCausalLMEagle is not a local-attention model")
