"""Issue 41, item 4: each case in its documented exit class. An unknown fix id with --run-dir
is a usage error (2, it was 4); a run directory owned by another user is operational (3, it was
2: click's readability check answered first); every bench --param has bounds (2 past them, it
ran 1e9 cycles); a user's input is echoed back cut to 80 characters."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from diag import fixes
from diag.bench import HUGE
from diag.cli import main

DIAG = str(Path(sys.executable).with_name("diag"))
ROOT = Path(__file__).resolve().parent.parent


def _diag(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([DIAG, *argv], capture_output=True, text=True, timeout=120)


@pytest.fixture
def others_dir(tmp_path) -> str:
    """A private directory owned by another user: made here as root, else `/` (root's)."""
    if os.getuid() != 0:
        return "/"
    d = tmp_path / "theirs"
    d.mkdir(mode=0o700)
    os.chown(d, 65534, 65534)
    return str(d)


def test_a_run_dir_owned_by_another_user_is_operational(others_dir, monkeypatch):
    """As that user sees it: not readable to them (os.access False), which click's own path
    check turned into a usage error (exit 2) before diag's refusal could say why."""
    monkeypatch.setattr(os, "access", lambda *a, **k: False)
    said = f"diag: error: refusing run directory {others_dir}: owned by uid "
    for argv in (["fix", "status", "--run-dir", others_dir],
                 ["fix", "apply", "profiler-controlled-teardown", "--run-dir", others_dir],
                 ["tui", "--once", "--run-dir", others_dir],
                 ["bench", "overhead", "--run-dir", others_dir, "--server", "http://h:1"],
                 ["run", "--run-dir", others_dir, "--", "true"]):
        r = CliRunner().invoke(main, argv, catch_exceptions=False)
        assert r.exit_code == 3, (argv, r.exit_code, r.output)
        assert r.stderr.splitlines()[-1].startswith(said), (argv, r.stderr)


def test_a_bench_param_past_its_bound_is_a_usage_error():
    r = _diag("bench", "--param", "cycles=1000000000")
    assert r.returncode == 2
    assert r.stderr.splitlines() == ["diag: error: --param cycles='1000000000': must be <= 10000 "
                                     "(the bench of profiler-controlled-teardown)"]


def test_every_bench_param_has_documented_bounds():
    import importlib

    doc = (ROOT / "docs" / "bench.md").read_text()
    for fid in fixes.all_ids():
        path = getattr(fixes.get(fid), "bench", None)
        if not path:
            continue
        for key, p in importlib.import_module(path.split(":")[0]).PARAMS.items():
            if p.kind is str:
                continue
            assert p.maximum is not None and p.maximum <= HUGE, (fid, key)
            lo, hi = f"{p.minimum:g}", f"{p.maximum:.0f}"
            assert re.search(rf"\| `{fid}` \| `{key}` \| {lo}–{hi}\b", doc), (fid, key, lo, hi)
            with pytest.raises(ValueError, match=re.escape(f"must be <= {p.maximum:g}")):
                p.parse(str(int(p.maximum) + 1))


@pytest.mark.release
def test_a_long_input_is_echoed_cut(release):
    release("0.5.23")
    name = "a" * 100_000
    r = _diag("diagnose", "--sglang", "0.5.23", "--no-execute", "--attention-backend", name)
    assert r.returncode == 2
    (line,) = r.stderr.splitlines()
    assert line.startswith("diag: error: --attention-backend '" + "a" * 78 + "…: sglang 0.5.23 "
                           "has no such attention backend (known: ")
    assert len(line) < 600
    r = _diag("probe", "p" * 5000)
    assert r.returncode == 2 and "'" + "p" * 78 + "… (known: " in r.stderr
    assert max(len(ln) for ln in r.stderr.splitlines()) < 300
