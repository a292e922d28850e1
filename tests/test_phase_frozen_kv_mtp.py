"""A Gemma4 assistant draft runs as FROZEN_KV_MTP (probes/startup/frozen_kv_mtp.py), against lines
READ BY HAND in the release wheels, never produced by running diag:

- the alias: `is_gemma4_draft = any(arch in ("Gemma4AssistantForCausalLM",
  "Gemma4UnifiedAssistantForCausalLM") ...)` (0.5.19 arg_groups/speculative_hook.py:57-59, 0.5.23
  :97-98) and, for NEXTN or EAGLE, `return "FROZEN_KV_MTP"` (0.5.19 :75, 0.5.23 :115);
- the worker: "Frozen draft has no draft-extend forward (seed-select only)" (0.5.19
  speculative/frozen_kv_mtp_worker_v2.py:171, 0.5.23 :180), its draft graph captured unless
  `self.target_worker.device != "cuda"` (0.5.19 :369, 0.5.23 :384);
- 0.5.12 and 0.5.13 run the v1 worker: SGLang forces overlap scheduling off for FROZEN_KV_MTP
  ("spec v2 is not supported yet": 0.5.12 server_args.py:3723-3725, 0.5.13
  arg_groups/speculative_hook.py:259-261; their v2 is a 42-line placeholder that raises). 0.5.12
  reads the alias in server_args.py (`is_gemma4_draft` :333, `return "FROZEN_KV_MTP"` :350); its
  seed step (the draft extend) runs `self.draft_model_runner.forward(...)` (:404) on a runner
  built with `server_args.disable_cuda_graph = True` (:122, restored only after the runner is
  built, :170), so ModelRunner.init_device_graphs returns without a graph runner
  (model_executor/model_runner.py:2927-2928): eager, every batch. Its draft graph needs more
  than one step (`speculative_num_steps <= 1` :316, `device != "cuda"` :318). 0.5.13's seed step
  only stashes its inputs ("the forward runs inside the captured draft graph", :373-375): no
  draft-extend pass; its draft graph: :322, :324.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from diag.context import SpecConfig
from diag.probes.draft_extend_graph import phases
from tests.conftest import release_target

pytestmark = pytest.mark.release
HAND = {"0.5.19": (57, 75, 171, 369), "0.5.23": (97, 115, 180, 384)}
HOOK, WORKER = "sglang/srt/arg_groups/speculative_hook.py", \
    "sglang/srt/speculative/frozen_kv_mtp_worker_v2.py"


def _draft(tmp_path, arch: str) -> str:
    d = tmp_path / arch
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps({"architectures": [arch]}))
    return str(d)


def _verdicts(version: str, draft: str, algo: str | None, platform: str = "hip") -> dict:
    cfg = SpecConfig(attention_backend="triton", draft_model=draft, environ={},
                     speculative_algorithm=algo, speculative_eagle_topk=1,
                     speculative_num_steps=3, model="Gemma4ForCausalLM")
    return {v.phase: v for v in phases.phase_verdicts(release_target(version), platform, cfg,
                                                      "triton")}


@pytest.mark.parametrize("version", sorted(HAND))
@pytest.mark.parametrize("algo", ["EAGLE", "NEXTN"])
def test_an_assistant_draft_has_no_draft_extend_pass(tmp_path, version, algo):
    _, promote, no_extend, on_cuda = HAND[version]
    for arch in ("Gemma4AssistantForCausalLM", "Gemma4UnifiedAssistantForCausalLM"):
        got = _verdicts(version, _draft(tmp_path, arch), algo)
        de, dd = got["draft-extend"], got["draft-decode"]
        assert (de.mode, str(de.where)) == ("none", f"{WORKER}:{no_extend}"), de.reason
        assert f"{HOOK}:{promote}" in de.reason and arch in de.reason
        assert (dd.mode, str(dd.where)) == ("graph", f"{WORKER}:{on_cuda}"), dd.reason
        assert got["target-verify"].mode == "graph"


@pytest.mark.parametrize("version", sorted(HAND))
def test_without_an_algorithm_it_depends_and_another_draft_is_eagle(tmp_path, version):
    got = _verdicts(version, _draft(tmp_path, "Gemma4AssistantForCausalLM"), None)
    assert {got[p].mode for p in ("draft-extend", "draft-decode")} == {"depends"}
    assert "with --speculative-algorithm EAGLE or NEXTN: none" in got["draft-extend"].reason
    # a draft of another architecture: the EAGLE worker's HIP gate (triton not on it: eager)
    other = _verdicts(version, _draft(tmp_path, "LlamaForCausalLM"), "EAGLE")
    assert other["draft-extend"].mode == "eager"


def test_without_graphs_the_draft_extend_is_still_no_pass(tmp_path):
    cfg = SpecConfig(attention_backend="triton", environ={}, speculative_algorithm="EAGLE",
                     draft_model=_draft(tmp_path, "Gemma4AssistantForCausalLM"),
                     speculative_eagle_topk=1, speculative_num_steps=3, disable_cuda_graph=True)
    got = {v.phase: v.mode for v in phases.phase_verdicts(release_target("0.5.23"), "hip", cfg,
                                                          "triton")}
    assert got == {"target-verify": "eager", "draft-decode": "eager", "draft-extend": "none"}


V1 = "sglang/srt/speculative/frozen_kv_mtp_worker.py"
SA = "sglang/srt/server_args.py"


@pytest.mark.parametrize("algo", ["EAGLE", "NEXTN"])
def test_the_v1_worker_of_0_5_12_runs_its_seed_step_eager(tmp_path, algo):
    got = _verdicts("0.5.12", _draft(tmp_path, "Gemma4AssistantForCausalLM"), algo)
    de, dd = got["draft-extend"], got["draft-decode"]
    assert (de.mode, str(de.where)) == ("eager", f"{V1}:404"), de.reason
    assert all(x in de.reason for x in (f"{SA}:333", f"{SA}:350", f"{SA}:3725", f"{V1}:122"))
    assert (dd.mode, str(dd.where)) == ("graph", f"{V1}:318"), dd.reason
    assert f"{V1}:316" in dd.reason


def test_the_v1_worker_of_0_5_12_captures_no_draft_graph_with_one_step(tmp_path):
    cfg = SpecConfig(attention_backend="triton", environ={}, speculative_algorithm="EAGLE",
                     draft_model=_draft(tmp_path, "Gemma4AssistantForCausalLM"),
                     speculative_eagle_topk=1, speculative_num_steps=1)
    got = {v.phase: v for v in phases.phase_verdicts(release_target("0.5.12"), "hip", cfg,
                                                     "triton")}
    assert (got["draft-decode"].mode, str(got["draft-decode"].where)) == ("eager", f"{V1}:316")
    assert got["draft-extend"].mode == "eager"


def test_the_v1_worker_of_0_5_13_has_no_draft_extend_pass(tmp_path):
    got = _verdicts("0.5.13", _draft(tmp_path, "Gemma4AssistantForCausalLM"), "EAGLE")
    de, dd = got["draft-extend"], got["draft-decode"]
    assert (de.mode, str(de.where)) == ("none", f"{V1}:373"), de.reason
    assert f"{HOOK}:261" in de.reason
    assert (dd.mode, str(dd.where)) == ("graph", f"{V1}:324"), dd.reason


def test_0_5_12_says_eager_on_every_surface_and_no_fix_captures_it(tmp_path):
    args = ["--sglang", "0.5.12", "--platform", "hip", "--attention-backend", "triton",
            "--speculative-num-steps", "3", "--speculative-algorithm", "EAGLE", "--model",
            "Gemma4ForCausalLM", "--draft-model", _draft(tmp_path, "Gemma4AssistantForCausalLM")]

    def diag(*a: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "diag", *a], capture_output=True,
                              text=True, timeout=300)

    doc = json.loads(diag("diagnose", *args, "--json").stdout)
    f = next(f for f in doc["findings"] if f["probe"] == "draft-extend-graph")
    assert f["status"] == "fail" and "seed step" in f["summary"], f["summary"]
    assert "allow-list" not in f["summary"]  # not the gate's verdict: no gate decides this pass
    fixes = json.loads(diag("fix", "list", *args, "--json").stdout)
    allow = next(x for x in fixes["fixes"] if x["id"] == "draft-extend-allowlist")
    assert allow["status"] == "refused" and "seed step" in allow["reason"], allow
    r = diag("fix", "check", *args, "--require-phase", "draft-extend=eager", "--json")
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_surface_says_none_and_no_fix(tmp_path):
    """diagnose --json, fix list --json and fix check --require-phase agree (one truth)."""
    draft = _draft(tmp_path, "Gemma4AssistantForCausalLM")
    args = ["--sglang", "0.5.23", "--platform", "hip", "--attention-backend", "triton",
            "--speculative-num-steps", "3", "--speculative-algorithm", "EAGLE", "--model",
            "Gemma4ForCausalLM", "--draft-model", draft]

    def diag(*a: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "diag", *a], capture_output=True,
                              text=True, timeout=300)

    r = diag("diagnose", *args, "--json")
    doc = json.loads(r.stdout)
    f = next(f for f in doc["findings"] if f["probe"] == "draft-extend-graph")
    rows = {e["data"]["phase"]: e["data"]["mode"] for e in f["evidence"]
            if e["kind"] == "row" and "phase" in (e.get("data") or {})}
    assert rows == {"target-verify": "graph", "draft-decode": "graph", "draft-extend": "none"}
    assert f["status"] == "ok"
    fixes = json.loads(diag("fix", "list", *args, "--json").stdout)
    allow = next(x for x in fixes["fixes"] if x["id"] == "draft-extend-allowlist")
    assert allow["status"] == "not-needed" and "FROZEN_KV_MTP" in allow["reason"], allow
    ok = diag("fix", "check", *args, "--require-phase", "draft-extend=none", "--json")
    bad = diag("fix", "check", *args, "--require-phase", "draft-extend=graph", "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert bad.returncode == 1, bad.stdout + bad.stderr


@pytest.mark.parametrize("version", ["0.5.19", "0.5.23"])
def test_an_architecture_name_as_the_draft_model_reads_as_its_config_would(tmp_path, version):
    """`--draft-model Gemma4AssistantForCausalLM` (a name, no directory) gives the verdicts a
    directory whose config.json names it gives; a name the alias does not test gives EAGLE's."""
    by_dir = _verdicts(version, _draft(tmp_path, "Gemma4AssistantForCausalLM"), "EAGLE")
    by_name = _verdicts(version, "Gemma4AssistantForCausalLM", "EAGLE")
    assert {p: (v.mode, str(v.where)) for p, v in by_name.items()} == \
        {p: (v.mode, str(v.where)) for p, v in by_dir.items()}
    assert by_name["draft-extend"].mode == "none"
    other = _verdicts(version, "LlamaForCausalLMEagle3", "EAGLE")
    assert other["draft-extend"].mode != "none"
