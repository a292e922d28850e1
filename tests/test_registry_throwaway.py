"""Extending diag is one file plus one registry line per probe or fix: in a temporary copy of the
tree (`git ls-files`), add a throw-away probe with a runtime counter and a throw-away fix, each
one new file and one line in its registry, install nothing (PYTHONPATH=<copy>), and find them in
`diag probe --list`, `diag fix list`, `diag fix status` of a run where an agent ran with both,
and `diag tui --once`.

The engine here is a STAND-IN: a short program that imports a stand-in `sglang` package (a
folder with `srt/` and `version.py`, named sglang_standin_root) and calls a function of its own
module. The agent sets fixes and counters up on the first `import sglang`; importing the real
SGLang package needs the `.venv-sglang` environment and a torchvision stand-in (seconds per
process), and nothing of SGLang is under test here: the registries are.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from report_schema import check, check_events

REPO = Path(__file__).resolve().parent.parent
PROBE_ID, FIX_ID, KIND = "throwaway-probe", "throwaway-fix", "throwaway_tick"

PROBE = '''\
"""A throw-away probe with a runtime counter."""

from diag import telemetry
from diag.findings import Status
from diag.patcher import Patch
from diag.probes.base import Counter, Probe


class ThrowawayProbe(Probe):
    id = "throwaway-probe"
    title = "Throw-away probe"
    concern = "a concern only the throw-away test has"
    fixes = ("throwaway-fix",)
    counter = Counter("diag.probes.throwaway_probe:runtime_patch", ("throwaway_tick",))

    def run(self, ctx):
        return self.finding(Status.OK, "the throw-away probe ran")


def _counted(fn):
    def tick():
        value = fn()
        telemetry.emit("throwaway_tick", value=value)
        return value

    return tick


def runtime_patch(target):
    return Patch("throwaway-counter").add("throwaway_work", "tick", _counted)
'''

FIX = '''\
"""A throw-away fix: tick() returns 100 more."""

from diag.fixes.base import APPLICABLE, Applicability, Fix
from diag.patcher import Patch


class ThrowawayFix(Fix):
    id = "throwaway-fix"
    title = "Throw-away fix"
    addresses = ("throwaway-probe",)

    def applies_to(self, target, platform, config=None):
        return Applicability(APPLICABLE, "applies everywhere")

    def build_patch(self, target):
        return Patch("throwaway-fix").add("throwaway_work", "tick", lambda fn: lambda: fn() + 100)
'''

ENGINE = '''\
import json
import throwaway_work  # first: both patches go on at once, no import left to wait for
import sglang  # noqa: F401  (the agent sets fixes and counters up here)
print(json.dumps([throwaway_work.tick() for _ in range(3)]))
'''


def _add_line(path: Path, after: str, line: str) -> None:
    text = path.read_text()
    assert text.count(after) == 1, f"{path}: no single {after!r}"
    path.write_text(text.replace(after, after + "\n" + line, 1))


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    """The tree as git knows it, plus the two files and the two registry lines."""
    root = tmp_path_factory.mktemp("tree") / "diag-copy"
    names = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, names):
        src = REPO / name
        if src.is_file():  # a file deleted in the work tree but not yet in git is skipped
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, root / name)
    (root / "probes" / "throwaway_probe.py").write_text(PROBE)
    _add_line(root / "probes" / "__init__.py", "REGISTRY: dict[str, str] = {",
              f'    "{PROBE_ID}": "diag.probes.throwaway_probe:ThrowawayProbe",')
    (root / "fixes" / "throwaway_fix.py").write_text(FIX)
    _add_line(root / "fixes" / "__init__.py", "REGISTRY: dict[str, str] = {",
              f'    "{FIX_ID}": "diag.fixes.throwaway_fix:ThrowawayFix",')
    return root


def _env(copy: Path, *extra: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIAG_")}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (copy, *extra))
    env["DIAG_CACHE_DIR"] = os.environ.get("DIAG_CACHE_DIR", str(Path.home() / ".cache/diag"))
    return env


def _diag(copy: Path, *args: str, cwd: Path, env: dict[str, str] | None = None,
          ok: tuple[int, ...] = (0,)) -> str:
    p = subprocess.run([sys.executable, "-m", "diag", *args], cwd=cwd, env=env or _env(copy),
                       capture_output=True, text=True, timeout=240)
    assert p.returncode in ok, f"diag {' '.join(args)}: exit {p.returncode}\n{p.stderr}"
    return p.stdout


@pytest.mark.release
def test_a_new_probe_and_fix_need_one_file_and_one_line_each(copy, tmp_path, release):
    release("0.5.17")
    here = subprocess.run([sys.executable, "-c", "import diag.probes, diag.fixes; "
                           "print(diag.probes.__file__, diag.fixes.__file__)"],
                          cwd=tmp_path, env=_env(copy), capture_output=True, text=True)
    assert all(f.startswith(str(copy)) for f in here.stdout.split()), here  # the copy, not ours

    listed = json.loads(_diag(copy, "probe", "--list", "--json", cwd=tmp_path))
    check("probe-list-v1.json", listed)
    row = {p["id"]: p for p in listed["probes"]}[PROBE_ID]
    assert row["fixes"] == [FIX_ID] and row["counter"] == [KIND]

    fixes = json.loads(_diag(copy, "fix", "list", "--sglang", "0.5.17", "--platform", "hip",
                             "--json", cwd=tmp_path))
    check("fix-list-v1.json", fixes)
    frow = {f["id"]: f for f in fixes["fixes"]}[FIX_ID]
    assert frow["status"] == "applicable" and frow["addresses"] == [PROBE_ID]

    # An engine run with the new fix and the new probe's counter (stand-ins: see the docstring).
    work = tmp_path / "work"
    (work / "sglang_standin_root" / "sglang" / "srt").mkdir(parents=True)
    (work / "sglang_standin_root" / "sglang" / "__init__.py").write_text("")
    (work / "sglang_standin_root" / "sglang" / "version.py").write_text('__version__ = "0.5.17"\n')
    (work / "throwaway_work.py").write_text("def tick():\n    return 1\n")
    (work / "engine.py").write_text(ENGINE)
    run_dir = tmp_path / "D"
    out = _diag(copy, "run", "--run-dir", str(run_dir), "--fix", FIX_ID, "--probe", PROBE_ID,
                "--", sys.executable, str(work / "engine.py"), cwd=work,
                env=_env(copy, work, work / "sglang_standin_root"))
    assert json.loads(out) == [101, 101, 101]  # the fix under the counter, both in effect

    status = json.loads(_diag(copy, "fix", "status", "--run-dir", str(run_dir), "--json",
                              cwd=tmp_path))
    check("fix-status-v1.json", status)
    assert check_events(run_dir) > 0
    (proc,) = status["runs"][0]["processes"]
    assert proc["fixes"][FIX_ID]["state"] == "applied"
    assert proc["probes"][PROBE_ID]["state"] == "on"
    assert proc["counters"]["events"][KIND] == 3
    assert [e["value"] for e in proc["last_events"] if e["kind"] == KIND] == [101, 101, 101]
    text = _diag(copy, "fix", "status", "--run-dir", str(run_dir), cwd=tmp_path)
    assert f"fix {FIX_ID}" in text and f"counter {PROBE_ID}" in text and f"{KIND}: 3 events" in text

    frame = _diag(copy, "tui", "--once", "--sglang", "0.5.17", "--platform", "hip",
                  "--no-execute", "--run-dir", str(run_dir), "--width", "200", cwd=tmp_path)
    assert PROBE_ID in frame and FIX_ID in frame
    assert "the throw-away probe ran" in frame
