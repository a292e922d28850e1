"""The fix contract, generated from the registry (`diag.fixes.specs()`): every fix x every
release of tests/conftest.py RELEASES, on the release's REAL modules (one `.venv-sglang` child
per release for all fixes: tests/fix_contract_child.py). Where the fix is `applicable`:
apply -> applied -> apply again changes nothing -> revert -> the original objects (identity);
elsewhere apply patches nothing. A fix added to the registry is covered without a new test.

Which fixes apply where comes from the releases' sources (docs/fixes/; per-fix tests cite
the lines): profiler-controlled-teardown on all six (the V2 stop `ProfileManager._do_stop`
never calls gc.collect()), draft-extend-allowlist on 0.5.17 and 0.5.18 (their HIP gates miss
DSV4 / DSA), repeat-interleave-output-size on 0.5.17 (`deepseek_v4_backend_hip_radix.py:1116`).
"""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import RELEASES

from diag import fixes
from diag.fixes import orchestrator

pytestmark = [pytest.mark.sglang_import, pytest.mark.release, pytest.mark.slow,
              pytest.mark.timeout(900)]  # six children, two at a time, on a loaded machine

REPO = Path(__file__).resolve().parent.parent
VENV_PY = REPO / ".venv-sglang" / "bin" / "python"
CHILD = REPO / "tests" / "fix_contract_child.py"
STANDINS = REPO / "tests" / "standins"
CASES = [(s.id, v) for s in fixes.specs() for v in RELEASES]
EXPECTED_APPLICABLE = {
    "profiler-controlled-teardown": set(RELEASES),
    "draft-extend-allowlist": {"0.5.17", "0.5.18"},
    "repeat-interleave-output-size": {"0.5.17"},
}


def _run(root: Path, version: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(STANDINS), str(root), str(REPO)]),
           "DIAG_RELEASE_ROOT": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    for k in ("SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH", "DIAG_ALLOWLIST_EXTRA", "DIAG_FIXES",
              "DIAG_RI_PATHS", "DIAG_RI_GUARDED", "DIAG_PLATFORM"):
        env.pop(k, None)
    p = subprocess.run([str(VENV_PY), str(CHILD), version], env=env, cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert p.returncode == 0 and lines, f"{version} child failed:\n{p.stderr[-4000:]}"
    return json.loads(lines[-1][len("RESULT "):])


@pytest.fixture(scope="module")
def results(release) -> dict[str, dict]:
    if not VENV_PY.exists():
        pytest.skip(".venv-sglang is missing: run `bash scripts/sglang-env.sh` (scripts/test.sh does)")
    roots = {v: release(v).root for v in RELEASES}  # downloads here, not concurrently
    with ThreadPoolExecutor(max_workers=2) as pool:
        futs = {v: pool.submit(_run, roots[v], v) for v in RELEASES}
        return {v: f.result() for v, f in futs.items()}


@pytest.mark.parametrize("fid,version", CASES, ids=[f"{f}@{v}" for f, v in CASES])
def test_contract(results, release, fid, version):
    r = results[version]["fixes"][fid]
    assert "crash" not in r, r
    # the same answer in the child (release importable) as here (release read, not imported)
    assert r["status"] == orchestrator.judge(fid, release(version), "hip").status
    if r["status"] != "applicable":
        assert r["apply_state"] == r["status"] and r["patched"] is False, r
    else:
        if "import_error" in r:  # not run is not passed: say which module and why
            pytest.skip(f"sglang {version}'s module cannot be imported in .venv-sglang: "
                        f"{r['import_error']}")
        assert r["entries"], r
        assert r["state_after_apply"] == "applied" and r["replaced"] and r["marked"], r
        assert r["state_after_apply_again"] == "applied" and r["apply_again_same_objects"], r
        assert r["state_after_revert"] == "reverted" and r["originals_identical"], r
        assert r["state"] == "reverted"
    assert r["revert_when_not_applied"].startswith(f"{fid} is not applied in this process"), r


def test_most_cases_really_ran(results):
    """The applicable cases whose modules import here: all but the oldest releases' profiler
    modules (0.5.9's `scheduler_profiler_mixin` needs sgl-kernel's JIT path at import)."""
    ran = [(f, v) for v in RELEASES for f, r in results[v]["fixes"].items()
           if r["status"] == "applicable" and "import_error" not in r]
    want = [(f, v) for v in RELEASES for f in EXPECTED_APPLICABLE
            if v in EXPECTED_APPLICABLE[f] and (f, v) != ("profiler-controlled-teardown", "0.5.9")]
    assert sorted(ran) == sorted(want)


@pytest.mark.parametrize("fid", [s.id for s in fixes.specs()])
def test_each_fix_is_applicable_where_its_source_says(results, fid):
    got = {v for v in RELEASES if results[v]["fixes"][fid]["status"] == "applicable"}
    assert got == EXPECTED_APPLICABLE[fid]


def test_dependencies_on_the_real_classes(results):
    d = results["0.5.17"]["dependencies"]["draft-extend-allowlist"]
    assert d["applied"] == {"repeat-interleave-output-size": "applied",
                            "draft-extend-allowlist": "applied"}
    assert d["reverted_order"] == ["draft-extend-allowlist", "repeat-interleave-output-size"]
    assert set(d["reverted"].values()) == {"reverted"} and d["originals_identical"]
    # 0.5.18: the dependency is upstream (#29202), the fix applies alone
    d = results["0.5.18"]["dependencies"]["draft-extend-allowlist"]
    assert d["applied"] == {"repeat-interleave-output-size": "upstream",
                            "draft-extend-allowlist": "applied"}
