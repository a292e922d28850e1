"""`diag bench overhead` bad input: one line and the documented exit code, before any request.
(The measurement itself runs on the real CPU server: tests/test_engine_server.py.)"""

from __future__ import annotations

from click.testing import CliRunner

from diag.cli import main as cli
from diag.engine import rundir


def _run(*args: str):
    return CliRunner().invoke(cli, ["bench", "overhead", *args])


def test_usage_errors_exit_2():
    r = _run("--server", "http://127.0.0.1:30000")
    assert r.exit_code == 2 and "Missing option '--run-dir'" in r.output
    r = _run("--run-dir", "/tmp", "--server", "ftp://x")
    assert r.exit_code == 2
    r = _run("--run-dir", "/tmp", "--server", "http://127.0.0.1:1", "--windows", "1")
    assert r.exit_code == 2 and "--windows" in r.output


def test_a_run_directory_without_an_engine_is_an_operational_error(tmp_path):
    r = _run("--run-dir", str(tmp_path / "nope"), "--server", "http://127.0.0.1:1")
    assert r.exit_code == 3 and "does not exist" in r.output
    d = rundir.create_run_dir(tmp_path / "run")
    r = _run("--run-dir", str(d), "--server", "http://127.0.0.1:1")
    assert r.exit_code == 3 and "no live engine process" in r.output
    assert "Traceback" not in r.output


def test_bench_help_points_at_it():
    r = CliRunner().invoke(cli, ["bench", "--help"])
    assert r.exit_code == 0 and "diag bench overhead --help" in r.output
