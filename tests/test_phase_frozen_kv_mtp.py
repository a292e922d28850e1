"""A Gemma4 assistant draft runs as FROZEN_KV_MTP (probes/startup/frozen_kv_mtp.py), against lines
READ BY HAND in the release wheels, never produced by running diag:

- the alias: `is_gemma4_draft = any(arch in ("Gemma4AssistantForCausalLM",
  "Gemma4UnifiedAssistantForCausalLM") ...)` (0.5.19 arg_groups/speculative_hook.py:57-59, 0.5.23
  :97-98) and, for NEXTN or EAGLE, `return "FROZEN_KV_MTP"` (0.5.19 :75, 0.5.23 :115);
- the worker: "Frozen draft has no draft-extend forward (seed-select only)" (0.5.19
  speculative/frozen_kv_mtp_worker_v2.py:171, 0.5.23 :180), its draft graph captured unless
  `self.target_worker.device != "cuda"` (0.5.19 :369, 0.5.23 :384);
- 0.5.13 has a v1 frozen worker whose draft extend runs a seed step
  (frozen_kv_mtp_worker.py:498-513) and a v2 that does not say it has none: not judged.
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


def test_a_release_whose_frozen_worker_does_not_say_it_is_not_judged(tmp_path):
    got = _verdicts("0.5.13", _draft(tmp_path, "Gemma4AssistantForCausalLM"), "EAGLE")
    assert got["draft-extend"].mode == "depends"
    assert "frozen worker is not read here" in got["draft-extend"].reason


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
