"""The run directory the agent wrote inside the real SGLang 0.5.23 server on the H200 (CUDA graphs
on; tests/gpu_lane/README.md), read by `diag fix status` and `diag tui --once` here.

The expected figures are summed straight from the recorded JSON lines in this test (the folded
`draft_extend` / `graph_phase` events carry `passes`), not taken from diag's own fold."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "gpu_lane" / "run-diag-h200"
ENGINE_PID = 627  # the scheduler: the events file with the counters


@pytest.fixture
def run_dir(tmp_path):
    d = tmp_path / "run"
    shutil.copytree(DATA, d)
    os.chmod(d, 0o700)  # as `diag run` makes it (the readers refuse a run dir others can write)
    return d


def _recorded() -> tuple[Counter, Counter]:
    passes, reasons = Counter(), Counter()
    for line in (DATA / f"events-{ENGINE_PID}.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e["kind"] == "draft_extend":
            key = ("draft-extend", e["mode"])
        elif e["kind"] == "graph_phase":
            key = (e["phase"], e["mode"])
        else:
            continue
        passes[key] += e.get("passes", 1)
        if e.get("reason"):
            reasons[(key[0], e["reason"])] += e.get("passes", 1)
    return passes, reasons


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIAG_")}
    return subprocess.run([sys.executable, "-m", "diag", *args], capture_output=True, text=True,
                          timeout=120, env=env)


def test_fix_status_one_line_per_phase(run_dir):
    passes, reasons = _recorded()
    # the lane's batch-1 requests replayed graphs; its 16 concurrent requests ran eager
    assert passes[("target-verify", "graph")] > 0 and passes[("target-verify", "eager")] > 0
    r = _cli("fix", "status", "--run-dir", str(run_dir))
    assert r.returncode == 0, r.stderr
    for phase in ("target-verify", "draft-decode", "draft-extend"):
        g, e = passes[(phase, "graph")], passes[(phase, "eager")]
        assert re.search(rf"{phase} graph: {g} passes", r.stdout), (phase, r.stdout)
        why = reasons[(phase, "batch-above-captured")]
        assert re.search(rf"{phase} eager: {e} passes, .* \(eager because: "
                         rf"batch-above-captured {why}\)", r.stdout), (phase, r.stdout)


def test_tui_once_shows_the_eager_graph_share_per_pass(run_dir):
    passes, _ = _recorded()
    r = _cli("tui", "--once", "--run-dir", str(run_dir), "--width", "140", "--no-execute")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for row, phase in (("draft-extend time, eager → graph", "draft-extend"),
                       ("graph-phase target-verify time, eager → graph", "target-verify"),
                       ("graph-phase draft-decode time, eager → graph", "draft-decode")):
        i = out.index(row)
        block = out[i:i + 400]
        e, g = passes[(phase, "eager")], passes[(phase, "graph")]
        assert f"{e} eager, {g} graph" in block, block
        # per pass: medians are times of one pass (a folded event's sum over its passes)
        m = re.search(r"after ([0-9.]+) (µs|ms)", block)
        assert m and (m.group(2) == "µs" or float(m.group(1)) < 5), block
