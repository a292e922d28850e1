"""Fix `draft-extend-allowlist` on the REAL `EagleDraftWorker` of four SGLang releases.

Each release runs in its own fresh interpreter (`.venv-sglang`, built by scripts/sglang-env.sh
with SGLang's CPU-installable requirements) with the release tree on PYTHONPATH; what cannot be
real here is listed in tests/allowlist_child.py (a stand-in runner class, the torchvision
stand-in package under tests/standins, engine-only functions replaced on the module).
The two orders (apply before import, import before apply) run in different processes.
"""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = [pytest.mark.sglang_import, pytest.mark.release, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
VENV_PY = REPO / ".venv-sglang" / "bin" / "python"
CHILD = REPO / "tests" / "allowlist_child.py"
STANDINS = REPO / "tests" / "standins"
CASES = {  # release -> order
    "0.5.13.post1": "apply-first",  # init_cuda_graphs
    "0.5.17": "apply-first",
    "0.5.18": "import-first",
    "0.5.23": "import-first",
}


def _run(root: Path, version: str, order: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(STANDINS), str(root), str(REPO)]),
           "DIAG_RELEASE_ROOT": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    for k in ("SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH", "DIAG_ALLOWLIST_EXTRA"):
        env.pop(k, None)
    p = subprocess.run([str(VENV_PY), str(CHILD), version, order], env=env, cwd=REPO,
                       capture_output=True, text=True, timeout=240)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert p.returncode == 0 and lines, f"{version} child failed:\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}"
    return json.loads(lines[-1][len("RESULT "):])


@pytest.fixture(scope="module")
def results(release) -> dict[str, dict]:
    if not VENV_PY.exists():
        pytest.skip(".venv-sglang is missing: run `bash scripts/sglang-env.sh` (scripts/test.sh does)")
    roots = {v: release(v).root for v in CASES}  # downloads here, not concurrently
    with ThreadPoolExecutor(max_workers=2) as pool:
        futs = {v: pool.submit(_run, roots[v], v, o) for v, o in CASES.items()}
        return {v: f.result() for v, f in futs.items()}


def test_gate_method_per_release(results):
    assert results["0.5.13.post1"]["method"] == "init_cuda_graphs"
    for v in ("0.5.17", "0.5.18", "0.5.23"):
        assert results[v]["method"] == "_capture_cuda_graphs"


def test_without_fix_no_runner_for_dsa_on_0_5_18(results):
    r = results["0.5.18"]
    assert r["without"]["dsa"]["runner"] is None
    assert r["without"]["dsv4"]["runner"] == "StandinDraftExtendRunner"  # admitted upstream
    assert r["without"]["triton"]["runner"] is None  # triton on HIP is never captured


def test_with_fix_dsa_gets_a_runner_with_time_and_memory(results):
    for v in ("0.5.17", "0.5.18"):
        dsa = results[v]["with"]["dsa"]
        assert dsa["runner"] == "StandinDraftExtendRunner", v
        assert dsa["time"] is not None and dsa["time"] > 0
        assert dsa["mem"] == pytest.approx(0.25)  # the module's memory reading, before - after
        captured = [x for x in results[v]["records"] if x["state"] == "captured"]
        assert captured[0]["backend"] == "DeepseekSparseAttnBackend"
    assert results["0.5.18"]["with"]["triton"]["runner"] is None  # not on the allow-list


def test_kill_switch_and_disabled_graphs_are_honoured(results):
    for v, r in results.items():
        assert r["kill_switch"]["runner"] is None, v
        assert r["graphs_disabled"]["runner"] is None, v


def test_extra_allowlist_by_env(results):
    for v, r in results.items():
        assert r["extra_triton"]["runner"] == "StandinDraftExtendRunner", v


def test_revert_restores_the_exact_original_and_twice_is_a_no_op(results):
    for v, r in results.items():
        assert r["wrapped"] and r["twice_same_object"], v
        assert r["revert_identical"], v
        assert r["applied_after_revert"] is False
    assert results["0.5.18"]["after_revert"]["dsa"]["runner"] is None
    assert results["0.5.17"]["after_revert"]["dsa"]["runner"] is None


def test_apply_before_import_patches_on_import(results):
    for v in ("0.5.13.post1", "0.5.17"):
        r = results[v]
        assert r["module_loaded_at_apply"] is False
        assert r["pending_at_apply"] == ["sglang.srt.speculative.eagle_worker_v2"]
        assert r["patch_errors"] == []
        assert r["with"]["dsv4" if v == "0.5.13.post1" else "dsa"]["runner"] is not None


def test_dsv4_on_0_5_17_waits_for_the_output_size_fix(results):
    d = results["0.5.17"]["dsv4_dependency"]
    assert d["before"]["runner"] is None
    assert d["record"]["state"] == "skipped" and "repeat-interleave-output-size" in d["record"]["reason"]
    assert d["sites"] == ["_attach_unified_kv_prefill_meta"]
    assert d["other_applied"] is True
    assert d["after_output_size"]["runner"] == "StandinDraftExtendRunner"
    assert d["after_output_size_reverted"]["runner"] is None


def test_dsa_on_0_5_13_waits_for_the_output_size_fix(results):
    r = results["0.5.13.post1"]
    assert r["with"]["dsa"]["runner"] is None
    rec = [x for x in r["records"] if x["backend"] == "DeepseekSparseAttnBackend"]
    assert rec and rec[0]["state"] == "skipped" and "_apply_cuda_graph_metadata" in rec[0]["reason"]


def test_upstream_release_is_left_alone(results):
    r = results["0.5.23"]
    assert r["apply_state"] == "upstream"  # the contract's apply() patches nothing there
    assert {v: results[v]["apply_state"] for v in ("0.5.13.post1", "0.5.17", "0.5.18")} == {
        "0.5.13.post1": "pending", "0.5.17": "pending", "0.5.18": "applied"}
    for b in ("dsa", "dsv4", "qsa"):
        assert r["without"][b]["runner"] == "StandinDraftExtendRunner"
    assert [x for x in r["records"] if x["backend"] != "TritonAttnBackend"] == []


def test_runtime_hooks_patch_the_real_classes(results):
    for v, r in results.items():
        h = r["runtime_hooks"]
        assert h["patched"] and h["reverted"], v
        want = "can_run" if v == "0.5.13.post1" else "can_run_graph"
        assert h["targets"][1][1].endswith("." + want)

