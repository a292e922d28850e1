"""The installed `diag` in fresh interpreters: imports, one-line errors, exit codes, JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from report_schema import check_report

DIAG = str(Path(sys.executable).with_name("diag"))


def run(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([DIAG, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def test_help_imports_neither_torch_nor_textual():
    code = ("import sys\nfrom diag.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'textual'))\n"
            "print('HEAVY', bad)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "diagnose" in p.stdout and "env" in p.stdout
    assert p.stdout.strip().endswith("HEAVY []"), p.stdout[-300:]


def test_closed_stdout_is_quiet_exit_141():
    """`diag ... | head` closing the pipe is not a diag bug: no 'internal error', exit 141."""
    r, w = os.pipe()
    os.close(r)  # the reader is gone before diag writes anything
    try:
        p = subprocess.run([DIAG, "probe", "--list", "--json"], stdout=w, stderr=subprocess.PIPE,
                           text=True, timeout=60)
    finally:
        os.close(w)
    assert p.returncode == 141 and p.stderr == "", p.stderr


def test_installed_diag_help_runs():
    p = run("--help")
    assert p.returncode == 0 and "Exit codes" in p.stdout


@pytest.mark.parametrize("args", [
    ["diagnose", "--sglang", "/nonexistent/sglang-tree"],
    ["probe", "draft-extend-graph", "--sglang", "/nonexistent/sglang-tree"],
    ["fix", "list", "--sglang", "/nonexistent/sglang-tree"],
])
def test_bad_sglang_path_exits_3_with_one_line(args):
    p = run(*args)
    assert p.returncode == 3
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("diag: error:"), p.stderr
    assert "no such file" in lines[0] and "Traceback" not in p.stderr


def test_directory_that_is_not_sglang_exits_3(tmp_path):
    p = run("diagnose", "--sglang", str(tmp_path))
    assert p.returncode == 3 and "not an SGLang tree" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_unknown_release_exits_3(tmp_path):
    p = run("diagnose", "--sglang", "99.99.99", env={"DIAG_CACHE_DIR": str(tmp_path)},
            timeout=400)
    assert p.returncode == 3, p.stderr
    err = [ln for ln in p.stderr.strip().splitlines() if ln.startswith("diag: error:")]
    assert len(err) == 1 and "99.99.99" in err[0] and "Traceback" not in p.stderr


@pytest.mark.release
def test_probe_json_validates_and_exit_code(release):
    release("0.5.17")
    p = run("probe", "draft-extend-graph", "--sglang", "0.5.17", "--platform", "hip",
            "--attention-backend", "dsv4", "--json")
    assert p.returncode == 1, p.stderr
    doc = json.loads(p.stdout)
    check_report(doc)
    assert doc["exit_code"] == 1 and doc["summary"]["fail"] == 1
    f = doc["findings"][0]
    assert (f["probe"], f["status"], f["fixes"]) == ("draft-extend-graph", "fail",
                                                     ["draft-extend-allowlist"])
    loc = next(e for e in f["evidence"] if e["kind"] == "location")
    assert loc["file"] == "sglang/srt/speculative/eagle_worker_v2.py" and loc["line"] > 0


@pytest.mark.release
def test_unreachable_server_exits_3(release):
    from standin_sglang_server import free_port

    release("0.5.23")
    p = run("probe", "draft-extend-graph", "--sglang", "0.5.23", "--platform", "hip",
            "--server", f"http://127.0.0.1:{free_port()}")
    assert p.returncode == 3
    assert p.stderr.strip().splitlines()[-1].startswith("diag: error: GET http://127.0.0.1:")
    assert "Traceback" not in p.stderr


def test_bench_without_torch_exits_3_with_one_line():
    """No torch in the environment (stood in by a None entry in sys.modules): one line, exit 3."""
    code = ("import sys; sys.modules['torch'] = None; sys.argv = ['diag', 'bench']; "
            "from diag.cli import main; main()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 3, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "torch is not installed" in lines[0]
    assert "Traceback" not in proc.stderr
