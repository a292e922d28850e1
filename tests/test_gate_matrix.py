"""The draft-extend gate verdicts on real SGLang releases (probes.gate, read with ast)."""

from __future__ import annotations

import pytest

from diag.probes.gate import backend_map, read_gate, verdict

pytestmark = pytest.mark.release


def _v(release, version, backend, platform="hip", steps=3, **kw):
    t = release(version)
    gate = read_gate(t)
    return verdict(gate, backend_map(t, platform).get(backend), platform, steps,
                   release=version, **kw)


# (release, backend, platform, steps, mode, cause)
MATRIX = [
    # 0.5.9: no HIP gate; the default (v1) worker captures on every non-NPU device
    ("0.5.9", "aiter", "hip", 3, "graph", "any_device"),
    ("0.5.9", "triton", "hip", 1, "graph", "any_device"),
    ("0.5.9", "dsv4", "hip", 3, "unsupported", "unsupported"),
    ("0.5.9", "wave", "hip", 3, "unsupported", "unsupported"),
    # 0.5.10 (v1 by default) and 0.5.15.post1: the factory's flashmla returns None
    # (draft_utils.py `_create_flashmla_prefill_backend`): nothing is captured
    ("0.5.10", "flashmla", "hip", 3, "eager", "no_draft_extend_backend"),
    ("0.5.10", "triton", "hip", 3, "graph", "any_device"),
    ("0.5.15.post1", "flashmla", "hip", 3, "eager", "no_draft_extend_backend"),
    ("0.5.15.post1", "flashmla", "cuda", 3, "eager", "no_draft_extend_backend"),
    # 0.5.12.post1 / 0.5.13.post1: supports_hip_aiter_draft_extend_graph in init_cuda_graphs
    ("0.5.12.post1", "aiter", "hip", 3, "graph", "allowlist"),
    ("0.5.12.post1", "aiter", "hip", 1, "eager", "num_steps"),
    ("0.5.12.post1", "triton", "hip", 3, "eager", "not_allowlisted"),
    ("0.5.12.post1", "dsv4", "hip", 3, "eager", "not_allowlisted"),
    ("0.5.12.post1", "triton", "cuda", 3, "graph", "allowlist"),
    ("0.5.13.post1", "dsa", "hip", 3, "eager", "not_allowlisted"),
    ("0.5.13.post1", "aiter", "hip", 2, "graph", "allowlist"),
    # 0.5.15.post1: the gate moved to _capture_cuda_graphs; DSA captured on CUDA, not on HIP
    ("0.5.15.post1", "dsa", "hip", 3, "eager", "not_allowlisted"),
    ("0.5.15.post1", "dsa", "cuda", 3, "graph", "allowlist"),
    ("0.5.15.post1", "aiter", "hip", 3, "graph", "allowlist"),
    # 0.5.17: before #29202
    ("0.5.17", "dsv4", "hip", 3, "eager", "not_allowlisted"),
    ("0.5.17", "dsa", "hip", 3, "eager", "not_allowlisted"),
    ("0.5.17", "aiter", "hip", 1, "eager", "num_steps"),
    ("0.5.17", "dsv4", "cuda", 3, "graph", "allowlist"),
    # 0.5.18: #29202 renames the gate and admits DeepseekV4HipRadixBackend
    ("0.5.18", "dsv4", "hip", 3, "graph", "allowlist"),
    ("0.5.18", "dsa", "hip", 3, "eager", "not_allowlisted"),
    ("0.5.18", "triton", "hip", 3, "eager", "not_allowlisted"),
    # 0.5.19: #35672 admits DeepseekSparseAttnBackend (dsa, and its alias nsa)
    ("0.5.19", "dsa", "hip", 3, "graph", "allowlist"),
    ("0.5.19", "nsa", "hip", 3, "graph", "allowlist"),
    ("0.5.19", "dsa", "hip", 1, "graph", "allowlist"),  # tested on the draft-extend backend
    ("0.5.19", "qsa", "hip", 3, "unsupported", "unsupported"),
    # 0.5.23: + QwenSparseAttnBackend
    ("0.5.23", "qsa", "hip", 3, "graph", "allowlist"),
    ("0.5.23", "aiter", "hip", 1, "eager", "num_steps"),
    ("0.5.23", "aiter", "hip", 4, "graph", "allowlist"),
    ("0.5.23", "triton", "hip", 3, "eager", "not_allowlisted"),
    ("0.5.23", "triton", "cuda", 3, "graph", "allowlist"),
    ("0.5.23", "aiter", "cuda", 3, "eager", "not_allowlisted"),
    ("0.5.23", "wave", "hip", 3, "unsupported", "unsupported"),
    ("0.5.23", "no-such-backend", "hip", 3, "unsupported", "unsupported"),
    # aliases the argument handling rewrites (arg_groups/serving_hook.py)
    ("0.5.23", "compressed", "hip", 3, "graph", "allowlist"),
    ("0.5.17", "compressed", "hip", 3, "eager", "not_allowlisted"),
]


@pytest.mark.parametrize("version,backend,platform,steps,mode,cause", MATRIX,
                         ids=[f"{m[0]}-{m[1]}-{m[2]}-s{m[3]}" for m in MATRIX])
def test_verdict_matrix(release, version, backend, platform, steps, mode, cause):
    v = _v(release, version, backend, platform, steps)
    assert (v.mode, v.cause) == (mode, cause), v.reason


@pytest.mark.parametrize("version,variable,method,classes,kill", [
    ("0.5.12.post1", "supports_hip_aiter_draft_extend_graph", "init_cuda_graphs",
     ["AiterMultiStepDraftBackend"], None),
    ("0.5.13.post1", "supports_hip_aiter_draft_extend_graph", "init_cuda_graphs",
     ["AiterMultiStepDraftBackend"], None),
    ("0.5.15.post1", "supports_hip_aiter_draft_extend_graph", "_capture_cuda_graphs",
     ["AiterMultiStepDraftBackend"], None),
    ("0.5.17", "supports_hip_aiter_draft_extend_graph", "_capture_cuda_graphs",
     ["AiterMultiStepDraftBackend"], "SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH"),
    ("0.5.18", "supports_hip_draft_extend_graph", "_capture_cuda_graphs",
     ["AiterMultiStepDraftBackend", "DeepseekV4HipRadixBackend"],
     "SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH"),
    ("0.5.19", "supports_hip_draft_extend_graph", "_capture_cuda_graphs",
     ["AiterMultiStepDraftBackend", "DeepseekV4HipRadixBackend", "DeepseekSparseAttnBackend"],
     "SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH"),
    ("0.5.23", "supports_hip_draft_extend_graph", "_capture_cuda_graphs",
     ["AiterMultiStepDraftBackend", "DeepseekV4HipRadixBackend", "DeepseekSparseAttnBackend",
      "QwenSparseAttnBackend"], "SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH"),
])
def test_gate_found_by_shape(release, version, variable, method, classes, kill):
    t = release(version)
    g = read_gate(t)
    assert g.recognised, g.problem
    assert (g.worker, g.worker_class, g.variable, g.method) == ("v2", "EagleDraftWorker",
                                                                variable, method)
    assert g.hip_policy == "allowlist" and g.hip_classes == classes
    assert g.tested_attr["AiterMultiStepDraftBackend"] == "draft_attn_backend"
    assert all(a == "draft_extend_attn_backend" for c, a in g.tested_attr.items()
               if c != "AiterMultiStepDraftBackend")
    assert g.kill_switch_env == kill
    # the line the gate reports is the real assignment in the real file
    assert g.file == "sglang/srt/speculative/eagle_worker_v2.py"
    src = t.file("srt/speculative/eagle_worker_v2.py").read_text().splitlines()
    assert variable in src[g.line - 1] or "isinstance" in src[g.line - 1]
    assert g.graphs_disabled_check


def test_059_default_worker_is_v1_and_v2_has_no_hip_branch(release):
    t = release("0.5.9")
    g = read_gate(t)
    assert (g.worker, g.spec_v2_default, g.hip_policy, g.variable) == ("v1", False, "any", None)
    v2 = read_gate(t, worker="v2")
    assert v2.recognised and v2.hip_policy == "never" and v2.cuda_policy == "allowlist"
    assert v2.cuda_classes == ["TritonMultiStepDraftBackend", "TRTLLMMLAMultiStepDraftBackend"]
    v = verdict(v2, backend_map(t, "hip")["aiter"], "hip", 3)
    assert (v.mode, v.cause) == ("eager", "no_branch")


def test_backend_map_classes(release):
    hip = backend_map(release("0.5.23"), "hip")
    assert hip["dsv4"].draft_extend_classes == ["DeepseekV4HipRadixBackend"]
    assert hip["aiter"].decode_classes == ["AiterMultiStepDraftBackend"]
    assert hip["aiter"].decode_min_steps == 2
    assert hip["nsa"].draft_extend_classes == hip["dsa"].draft_extend_classes
    assert not hip["wave"].has_draft_factory_entry and hip["wave"].in_registry
    cuda = backend_map(release("0.5.23"), "cuda")
    # followed into create_deepseek_v4_attn_backend, with the base classes for isinstance
    assert "DeepseekV4AttnBackend" in cuda["dsv4"].draft_extend_classes
    assert "AttentionBackend" in cuda["dsv4"].draft_extend_ancestors


@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
def test_kill_switch_and_disabled_graphs(release, version):
    v = _v(release, version, "aiter", kill_switch_set=True)
    assert (v.mode, v.cause) == ("eager", "kill_switch")
    v = _v(release, version, "aiter", graphs_disabled=True)
    assert (v.mode, v.cause) == ("eager", "graphs_disabled")


def test_kill_switch_absent_before_0516(release):
    # 0.5.15.post1 has no kill switch: setting the variable changes nothing
    v = _v(release, "0.5.15.post1", "aiter", kill_switch_set=True)
    assert (v.mode, v.cause) == ("graph", "allowlist")


def test_multi_layer_worker_has_no_allowlist(release):
    g = read_gate(release("0.5.23"))
    assert g.multi_layer is not None and not g.multi_layer.has_allowlist
    v = _v(release, "0.5.23", "triton", multi_layer=True)
    assert (v.mode, v.cause) == ("graph", "multi_layer")


def test_unknown_steps_assumes_multi_step_and_says_so(release):
    v = _v(release, "0.5.23", "aiter", steps=None)
    assert v.mode == "graph" and "needs --speculative-num-steps >= 2" in v.reason
    mode, reason = v  # unpacks as a pair
    assert mode == "graph" and reason == v.reason


def test_kill_switch_is_read_as_sglangs_envbool(release):
    """EnvBool takes true/1/yes/y (any case, unstripped); anything else is the default, False."""
    from diag.probes.draft_extend_graph.probe import kill_switch_set

    gate = read_gate(release("0.5.17"))
    name = gate.kill_switch_env
    assert name == "SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH"
    for value, expected in [("1", True), ("TRUE", True), ("Yes", True), ("y", True),
                            ("on", False), ("t", False), (" 1", False), ("0", False)]:
        assert kill_switch_set(gate, {name: value}) is expected, value
    assert kill_switch_set(gate, {}) is False
    assert not kill_switch_set(read_gate(release("0.5.15.post1")), {name: "1"})


@pytest.mark.parametrize("version,value,worker", [
    # environ.py: SGLANG_ENABLE_SPEC_V2 = EnvBool(False) in 0.5.10, EnvBool(True) in 0.5.11;
    # EnvBool.get falls back to the default on a value it cannot parse ("maybe")
    ("0.5.10", None, "v1"), ("0.5.10", "1", "v2"), ("0.5.10", "TRUE", "v2"),
    ("0.5.10", "maybe", "v1"), ("0.5.11", None, "v2"), ("0.5.11", "0", "v1"),
    ("0.5.11", "no", "v1"), ("0.5.11", "maybe", "v2"),
    ("0.5.13", "0", "v2"),  # eagle_worker.py is gone: one worker
])
def test_spec_v2_env_selects_the_worker(release, version, value, worker):
    env = {} if value is None else {"SGLANG_ENABLE_SPEC_V2": value}
    g = read_gate(release(version), environ=env)
    assert g.worker == worker and g.recognised, g.problem
    assert (g.selection is None) == (version == "0.5.13")
    if g.selection:
        assert "SGLANG_ENABLE_SPEC_V2" in g.selection and "sglang/srt/environ.py:" in g.selection
