"""The server's Triton decides DSA's page size on ROCm, and with it whether topk > 1 starts;
expected verdicts READ BY HAND:

- 0.5.23 arg_groups/model_overrides/deepseek_v2.py:151-155 (0.5.19 :90-94): `if
  get_platform().is_hip and not aiter_can_use_preshuffle_paged_mqa(): overrides["page_size"] =
  1`, else the DSA page size 64 (x index_kpool);
- layers/attention/dsa/utils.py (0.5.23 :34-68, 0.5.19 :26-61): false without
  SGLANG_USE_AITER, true with AITER_ENABLE_AOT_GLUON_PA_MQA_LOGITS, else
  `Version(Version(triton.__version__).base_version) >= Version("3.5.0")` (0.5.23 :66, 0.5.19
  :59), false on any exception;
- arg_groups/speculative_hook.py (0.5.23 :1268-1282, 0.5.19 :804-818): topk > 1 with page_size
  > 1 is refused at start except on flashinfer, fa3 and triton.

So with SGLANG_USE_AITER=1 and topk 4 a Triton 3.5.x makes the page 64 and the start fail
(every phase `refused`), a ROCm Triton 3.4.0 (base version 3.4.0) keeps page 1 and the phases
run as the HIP gate says (dsa's draft extend is on the HIP allow-list: captured); without
--triton-version it `depends`.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from diag.context import SpecConfig
from diag.probes.draft_extend_graph import phases
from tests.conftest import release_target

ROOT = Path(__file__).resolve().parent.parent


def _modes(version: str, triton: str | None) -> dict[str, str]:
    cfg = SpecConfig(attention_backend="dsa", model="deepseek-v32", speculative_eagle_topk=4,
                     speculative_num_steps=3, speculative_num_draft_tokens=8,
                     environ={"SGLANG_USE_AITER": "1"}, triton_version=triton)
    return {v.phase: v.mode for v in phases.phase_verdicts(release_target(version), "hip", cfg,
                                                            "dsa")}


@pytest.mark.release
@pytest.mark.parametrize("version", ["0.5.19", "0.5.23"])
def test_the_servers_triton_decides_the_dsa_page_and_the_start(version):
    assert set(_modes(version, "3.5.1").values()) == {"refused"}
    assert set(_modes(version, "3.6.0+git1234").values()) == {"refused"}  # base version 3.6.0
    older = _modes(version, "3.4.0+rocm6.4.1")
    assert older["draft-extend"] == "graph" and "refused" not in older.values(), older
    assert set(_modes(version, None).values()) == {"depends"}


def test_this_pythons_triton_is_read_without_importing_it():
    """The real Triton in the SGLang-requirements environment (scripts/sglang-env.sh pins
    triton==3.7.1): the reader gives the version its package metadata gives."""
    py = ROOT / ".venv-sglang" / "bin" / "python"
    if not py.exists():
        pytest.skip("no .venv-sglang (scripts/sglang-env.sh builds it)")
    code = ("import sys, importlib.metadata as m; from diag.gpu_platform import "
            "local_triton_version as v; got = v(); assert 'triton' not in sys.modules; "
            "print(got, m.version('triton'))")
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr
    got, meta = out.stdout.split()
    assert got == meta == "3.7.1"


@pytest.mark.release
def test_a_run_dir_carries_the_engines_triton_into_the_verdict(tmp_path):
    """`diag run` in the SGLang-requirements Python (its real Triton 3.7.1): the agent's start
    record names it, and `diagnose --run-dir` decides the DSA page with it, as a typed
    --triton-version would (the hand reading above: 3.7.1 >= 3.5.0, page 64, topk 4 refused)."""
    import json
    import sys

    py = ROOT / ".venv-sglang" / "bin" / "python"
    if not py.exists():
        pytest.skip("no .venv-sglang (scripts/sglang-env.sh builds it)")
    d = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "diag", "run", "--run-dir", str(d), "--", str(py),
                        "-c", "pass"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    starts = [e for p in d.glob("events-*.jsonl") for e in map(json.loads, p.read_text()
                                                                    .splitlines())
              if e["kind"] == "start"]
    assert [e["triton"] for e in starts] == ["3.7.1"]
    r = subprocess.run([sys.executable, "-m", "diag", "diagnose", "--run-dir", str(d),
                        "--sglang", "0.5.23", "--platform", "hip", "--attention-backend", "dsa",
                        "--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
                        "--speculative-num-draft-tokens", "8", "--env", "SGLANG_USE_AITER=1",
                        "--json"], capture_output=True, text=True, timeout=300)
    doc = json.loads(r.stdout)
    assert doc["config"]["triton_version"] == "3.7.1"
    [f] = [f for f in doc["findings"] if f["probe"] == "draft-extend-graph"]
    rows = [e["data"] for e in f["evidence"] if e["kind"] == "row" and "phase" in e["data"]]
    assert rows and {row["mode"] for row in rows} == {"refused"}, rows
