"""`diag kit compare` on bad input: one line, exit 3, never a traceback (the installed `diag` in
a subprocess, as a user runs it). Two real kit runs compared: tests/test_kit_run.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

DIAG = [sys.executable, "-m", "diag"]
GOOD = {"schema_version": 1, "kind": "diag-kit", "checks": []}


def _compare(a: Path, b: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*DIAG, "kit", "compare", str(a), str(b)], capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("content, needle", [
    ("not json at all", "not JSON"),
    (json.dumps([1, 2]), "not a kit JSON"),
    (json.dumps({"schema_version": 1, "kind": "report"}), "not a kit JSON (its kind is 'report'"),
    (json.dumps({**GOOD, "schema_version": 2}), "kit schema version 2, this diag reads major "
                                                "version 1"),
    (json.dumps({**GOOD, "schema_version": "2.1"}), "kit schema version '2.1'"),
    (json.dumps({**GOOD, "checks": {"a": 1}}), "without a list of checks"),
    (b"\xff\xfe\x00binary", "cannot read"),
])
def test_bad_file_is_one_line_exit_3(tmp_path, content, needle):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(GOOD))
    bad = tmp_path / "bad.json"
    (bad.write_bytes if isinstance(content, bytes) else bad.write_text)(content)
    for a, b in ((bad, good), (good, bad)):
        r = _compare(a, b)
        assert r.returncode == 3, r.stderr
        assert r.stdout == ""
        (line,) = r.stderr.strip().splitlines()
        assert line.startswith("diag: error: ") and needle in line and str(bad) in line, line
        assert "Traceback" not in r.stderr


def test_missing_file_is_exit_3(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(GOOD))
    r = _compare(good, tmp_path / "nope.json")
    assert r.returncode == 3 and "cannot read: No such file or directory" in r.stderr, r.stderr


def test_two_minimal_kits_compare_and_mark_differences(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    chk = {"step": "s", "title": "t", "reason": None, "detail": "", "values": {}}
    a.write_text(json.dumps({**GOOD, "checks": [{**chk, "id": "x", "status": "pass"},
                                                {**chk, "id": "y", "status": "pass"}]}))
    b.write_text(json.dumps({**GOOD, "checks": [{**chk, "id": "x", "status": "pass"},
                                                {**chk, "id": "y", "status": "fail"},
                                                {**chk, "id": "z", "status": "pass"}]}))
    r = _compare(a, b)
    assert r.returncode == 0, r.stderr
    lines = {ln.split()[0]: ln for ln in r.stdout.splitlines() if ln[:2] in ("x ", "y ", "z ")}
    assert not lines["x"].endswith("*") and lines["y"].endswith("*")
    assert "absent" in lines["z"] and lines["z"].endswith("*")
