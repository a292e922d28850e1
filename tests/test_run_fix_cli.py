"""`diag fix apply/revert/status/check` through click's CliRunner (exact exit codes, JSON),
against real SGLang release sources; the dry application in the SGLang-requirements venv."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from diag.cli import main
from diag.engine import rundir

REPO = Path(__file__).resolve().parent.parent
VENV_PY = REPO / ".venv-sglang" / "bin" / "python"


def _run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.mark.release
def test_check_release_before_and_after_upstream(release):
    release("0.5.17")
    release("0.5.23")
    r = _run("fix", "check", "--sglang", "0.5.17", "--platform", "hip", "--no-dry", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["ok"] is True and doc["platform"] == "hip"
    assert {f["id"]: f["status"] for f in doc["fixes"]}["draft-extend-allowlist"] == "applicable"
    r = _run("fix", "check", "--sglang", "0.5.23", "--platform", "hip", "--no-dry", "--json",
             "--require", "draft-extend-allowlist")
    assert r.exit_code == 0, r.output
    st = {f["id"]: f for f in json.loads(r.stdout)["fixes"]}
    assert st["draft-extend-allowlist"]["status"] == "upstream"
    assert st["draft-extend-allowlist"]["required"] is True
    assert st["repeat-interleave-output-size"]["required"] is False


@pytest.mark.release
def test_check_not_needed_on_cuda_fails_the_requirement(release):
    # triton: TritonAttnBackend heads 0.5.17's CUDA tuple (srt/speculative/eagle_worker_v2.py:
    # 407-408): the fix adds nothing, so requiring it fails
    release("0.5.17")
    r = _run("fix", "check", "--sglang", "0.5.17", "--platform", "cuda", "--no-dry",
             "--attention-backend", "triton", "--require", "draft-extend-allowlist")
    assert r.exit_code == 4
    assert "FAIL draft-extend-allowlist" in r.stdout and "not-needed" in r.stdout


def test_check_fa3_on_cuda_passes_the_requirement(release):
    # fa3: FlashAttentionBackend is not in 0.5.17's CUDA tuple (eagle_worker_v2.py:407-432);
    # the fix admits it (0.5.23 does itself, :112-119)
    release("0.5.17")
    r = _run("fix", "check", "--sglang", "0.5.17", "--platform", "cuda", "--no-dry",
             "--attention-backend", "fa3", "--require", "draft-extend-allowlist")
    assert r.exit_code == 0, r.output
    assert "draft-extend-allowlist" in r.stdout and "applicable" in r.stdout


def test_check_unknown_required_fix_is_usage_error():
    r = _run("fix", "check", "--require", "nope", "--no-dry")
    assert r.exit_code == 2 and "unknown fix 'nope'" in r.output


def test_status_and_control_refuse_unsafe_or_empty_dirs(tmp_path):
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o770)
    r = _run("fix", "status", "--run-dir", str(open_dir))
    assert r.exit_code == 3
    assert r.stderr.strip().splitlines() == [
        f"diag: error: refusing run directory {open_dir}: mode 0770 lets group/others in "
        "(chmod 700 it)"]
    d = rundir.create_run_dir(tmp_path / "empty")
    r = _run("fix", "apply", "draft-extend-allowlist", "--run-dir", str(d))
    assert r.exit_code == 3 and "no live engine process" in r.stderr
    r = _run("fix", "status", "--run-dir", str(d), "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["runs"][0]["processes"] == []


@pytest.mark.release
def test_apply_in_this_process_without_sglang_is_refused(release):
    release("0.5.17")
    r = _run("fix", "apply", "draft-extend-allowlist", "--sglang", "0.5.17", "--platform", "hip",
             "--json")
    assert r.exit_code == 4  # diag's own process has no SGLang to patch
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and doc["state"] == "refused"
    assert "sglang is not importable in this process" in doc["reason"]


@pytest.mark.release
@pytest.mark.slow
@pytest.mark.sglang_import
def test_check_dry_application_fits_real_release(release, monkeypatch):
    if not VENV_PY.exists():
        pytest.skip(".venv-sglang is missing: run `bash scripts/sglang-env.sh` (scripts/test.sh does)")
    release("0.5.17")
    monkeypatch.setenv("PYTHONPATH", str(REPO / "tests" / "standins"))  # torchvision stand-in
    r = _run("fix", "check", "--sglang", "0.5.17", "--platform", "hip", "--python", str(VENV_PY),
             "--require", "draft-extend-allowlist", "--json")
    assert r.exit_code == 0, r.output
    st = {f["id"]: f for f in json.loads(r.stdout)["fixes"]}
    dry = st["draft-extend-allowlist"]["dry"]
    assert dry["status"] == "fits", dry
    assert "sglang.srt.speculative.eagle_worker_v2" in dry["reason"]
