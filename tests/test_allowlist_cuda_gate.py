"""Fix `draft-extend-allowlist` on the CUDA gate of the REAL `EagleDraftWorker` (0.5.22, 0.5.23).

Ground truth, read from the releases (not from diag): SGLang 0.5.22's
`EagleDraftWorker._capture_cuda_graphs` builds the draft-extend runner on CUDA only when
`isinstance(self.draft_extend_attn_backend, tuple(graph_supported_backend_types))`
(srt/speculative/eagle_worker_v2.py:563-570), a tuple of TritonAttnBackend, TRTLLMMLABackend,
TRTLLMHAAttnBackend, TokenspeedMLABackend, FlashInferAttnBackend, QwenSparseAttnBackend (:535-542)
plus DeepseekSparseAttnBackend, DeepseekV4AttnBackend (:543-553) and FlashMLABackend (:554-559):
no FlashAttentionBackend (`--attention-backend fa3`), so fa3 draft-extend runs eager. 0.5.23
appends FlashAttentionBackend under `if _is_cuda:` (eagle_worker_v2.py:112-119, sglang #40762).
Each release runs in its own interpreter (.venv-sglang); tests/allowlist_cuda_child.py says what
is a stand-in there and why.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.sglang_import, pytest.mark.release, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
VENV_PY = REPO / ".venv-sglang" / "bin" / "python"
CHILD = REPO / "tests" / "allowlist_cuda_child.py"
PATHS = [REPO / "tests" / "standins", REPO / "tests" / "engine_standins_cuda"]


def _run(root: Path, version: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, PATHS), str(root), str(REPO)]),
           "DIAG_RELEASE_ROOT": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    for k in ("SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH", "DIAG_ALLOWLIST_EXTRA", "DIAG_PLATFORM"):
        env.pop(k, None)
    p = subprocess.run([str(VENV_PY), str(CHILD), version], env=env, cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert p.returncode == 0 and lines, f"{version}:\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}"
    return json.loads(lines[-1][len("RESULT "):])


@pytest.fixture(scope="module")
def results(release) -> dict[str, dict]:
    if not VENV_PY.exists():
        pytest.skip(".venv-sglang is missing: run `bash scripts/sglang-env.sh` (scripts/test.sh does)")
    return {v: _run(release(v).root, v) for v in ("0.5.22", "0.5.23")}


def test_0_5_22_leaves_fa3_eager_and_the_fix_captures_it(results):
    r = results["0.5.22"]
    assert r["without"]["fa3"]["runner"] is None  # the CUDA tuple lacks FlashAttentionBackend
    assert r["without"]["triton"]["runner"] == "StandinDraftExtendRunner"
    assert r["apply_state"] == "applied", r["apply_reason"]
    fa3 = r["with"]["fa3"]
    assert fa3["runner"] == "StandinDraftExtendRunner"
    assert fa3["time"] > 0 and fa3["mem"] == pytest.approx(0.25)
    captured = [x for x in r["records"] if x["state"] == "captured"]
    assert [x["backend"] for x in captured] == ["FlashAttentionBackend"]
    assert "CUDA gate" in captured[0]["reason"]
    assert any("Capture draft extend CUDA graph begin (diag draft-extend-allowlist, CUDA gate)"
               in ln for ln in r["log"]), r["log"]
    # triton was captured by the release itself: the fix adds no second runner
    assert r["with"]["triton"]["runner"] == "StandinDraftExtendRunner"
    assert len(captured) == 1


def test_kill_switch_and_revert_leave_fa3_eager(results):
    r = results["0.5.22"]
    assert r["kill_switch"]["runner"] is None
    assert any(x["state"] == "skipped" and "SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH" in x["reason"]
               for x in r["records"])
    assert r["after_revert"]["runner"] is None


def test_0_5_23_captures_fa3_itself_and_the_fix_is_upstream(results):
    r = results["0.5.23"]
    assert r["without"]["fa3"]["runner"] == "StandinDraftExtendRunner"
    assert r["apply_state"] == "upstream", r["apply_reason"]
    assert not [x for x in r["records"] if x["state"] == "captured"]
