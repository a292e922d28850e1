"""Issue 41, item 3: a worker cut short (its gate method gone, or its draft worker class gone
while another class keeps the file valid) is "gate not recognised": diag cannot tell, so a CI
gate must not go green. Exit 3 naming the file, in text and JSON; `--allow-unrecognised` makes
it the warning it is (exit 0). Real `diag` processes on a copy of the real 0.5.23 worker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.release

DIAG = str(Path(sys.executable).with_name("diag"))
WORKER = "sglang/srt/speculative/eagle_worker_v2.py"
SAID = ("diag: error: draft-extend-graph: gate not recognised in " + WORKER + ": no method in "
        + WORKER + " sets self.cuda_graph_runner_for_draft_extend under an `if` testing "
        "self.draft_extend_attn_backend (diag cannot tell: exit 3; --allow-unrecognised accepts "
        "it as a warning)")


def _tree(release, root: Path, cut) -> Path:
    """The real 0.5.23 tree, its worker file replaced by `cut(lines)` (the rest linked)."""
    real = release("0.5.23").root / "sglang"
    spec = root / "sglang" / "srt" / "speculative"
    spec.mkdir(parents=True)
    for child in real.iterdir():
        if child.name != "srt":
            (root / "sglang" / child.name).symlink_to(child)
    for child in (real / "srt").iterdir():
        if child.name != "speculative":
            (root / "sglang" / "srt" / child.name).symlink_to(child)
    for child in (real / "srt" / "speculative").iterdir():
        if child.name != "eagle_worker_v2.py":
            (spec / child.name).symlink_to(child)
    lines = (real / "srt" / "speculative" / "eagle_worker_v2.py").read_text().splitlines()
    (spec / "eagle_worker_v2.py").write_text("\n".join(cut(lines)) + "\n")
    return root


def _class_at(lines: list[str], name: str) -> int:
    return next(i for i, ln in enumerate(lines) if ln.startswith(f"class {name}("))


def _cut_before_capture(lines: list[str]) -> list[str]:
    """Cut short at a line boundary before the draft worker's capture method: it still parses."""
    return lines[: next(i for i, ln in enumerate(lines) if "def _capture_cuda_graphs" in ln)]


def _draft_worker_gone(lines: list[str]) -> list[str]:
    """The draft worker class lost (the V2 worker class still there)."""
    return lines[: _class_at(lines, "EagleDraftWorker")] + \
        lines[_class_at(lines, "EAGLEWorkerV2"):]


def _diag(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([DIAG, *argv], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("cut", [_cut_before_capture, _draft_worker_gone])
def test_a_worker_cut_short_exits_3_naming_the_file(release, tmp_path, cut):
    root = str(_tree(release, tmp_path / "t", cut))
    base = ["--sglang", root, "--platform", "hip", "--no-execute"]
    for cmd in (["diagnose"], ["probe", "draft-extend-graph"]):
        r = _diag(*cmd, *base)
        assert r.returncode == 3, (cmd, r.returncode, r.stderr)
        assert r.stderr.splitlines()[-1] == SAID
        assert " ".join(r.stdout.split()).endswith(  # the report wraps to the width
            "verdict: diag cannot tell (see the `not recognised` warning and the file it names):"
            " report it, or pass --allow-unrecognised to accept warnings only")
        r = _diag(*cmd, *base, "--json")
        doc = json.loads(r.stdout)
        assert r.returncode == doc["exit_code"] == 3 and r.stderr.splitlines()[-1] == SAID
        f = next(f for f in doc["findings"] if f.get("unrecognised"))
        assert f["status"] == "warn" and f["summary"].startswith(
            f"gate not recognised in {WORKER}: ")
        r = _diag(*cmd, *base, "--allow-unrecognised")
        assert r.returncode == 0, r.stderr
        assert "diag cannot tell" not in r.stdout + r.stderr
        assert "[warn] draft-extend-graph: gate not recognised in " + WORKER in \
            " ".join(r.stdout.split())


def test_allow_unrecognised_never_hides_a_failure(release, tmp_path):
    """The flag accepts "cannot tell" only: a broken tree is still exit 3."""
    root = str(_tree(release, tmp_path / "t", lambda lines: [*lines, "def broken(:"]))
    r = _diag("probe", "draft-extend-graph", "--sglang", root, "--platform", "hip",
              "--no-execute", "--allow-unrecognised")
    assert r.returncode == 3 and "target error" in r.stdout
