"""The allow-list loop recorded on the H200 (tests/gpu_lane/allowlist-h200-run1/: SGLang 0.5.22,
`--attention-backend fa3`, the real CUDA gate; `lane.py --only allowlist`), read on CPU.

Expected values are read by eye from the recorded files: the before server's log has "Capture
target verify CUDA graph end ... elapsed=36.62 s" and "Capture draft decode CUDA graph end.
elapsed=4.06 s" and no draft-extend line; the after server's has the fix's own line "Capture
draft extend CUDA graph end (diag draft-extend-allowlist). elapsed=2.68 s". The before server's
counters in lane.json: draft-extend eager 979 passes, 4.006... s, all `no-runner`;
draft-decode graph 979 passes, 2.285... s. The two traces (tests/fixtures/traces/
tr-fa3-allowlist/) are the servers' own 3-step profiles of the same run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu_engine"))

import checks  # noqa: E402

from diag import fixes  # noqa: E402

RUN = ROOT / "tests" / "gpu_lane" / "allowlist-h200-run1"
TRACES = ROOT / "tests" / "fixtures" / "traces" / "tr-fa3-allowlist"


def test_before_captures_all_but_draft_extend_after_the_fix_captures_it():
    before = (RUN / "server-before-capture.log").read_text()
    after = (RUN / "server-after-capture.log").read_text()
    assert checks.captures(before) == {"target verify": 36.62, "draft decode": 4.06}
    assert checks.diag_captures(before) == {}
    assert checks.diag_captures(after) == {"draft extend": 2.68}
    assert checks.check_captures("after", after, dict.fromkeys(checks.PHASES, True)).ok is True


def test_the_prediction_from_the_before_servers_counters():
    lane = json.loads((RUN / "lane.json").read_text())
    fix = fixes.get("draft-extend-allowlist")
    before, after = lane["counters"]["before"], lane["counters"]["after"]
    de = before["draft_extend"]["eager"]
    dd = before["graph_phases"]["draft-decode"]["graph"]
    assert de["reasons"] == {"no-runner": 979} and dd["passes"] == 979
    p = fix.predict(before, passes_per_token=0.5)
    assert p is not None and p.passes == 979
    assert p.per_pass_ms == pytest.approx(1e3 * (de["seconds"] / 979 - dd["seconds"] / 979))
    assert p.per_pass_ms == pytest.approx(1.758, abs=1e-3)
    assert p.per_token_ms == pytest.approx(p.per_pass_ms * 0.5)
    # the lane's own record of `fix status --json` says the same
    assert lane["fix_status_predictions"][0]["per_pass_ms"] == pytest.approx(p.per_pass_ms,
                                                                              abs=1e-3)
    assert fix.predict(after) is None  # captured: nothing the fix would change
    # the kill switch is not the gate: the fix leaves those passes eager (lane-h200-run2)
    run2 = json.loads((ROOT / "tests" / "gpu_lane" / "lane-h200-run2" / "lane.json").read_text())
    assert fix.predict(run2["counters"]["eager"]) is None


def test_the_recorded_prediction_misses_the_10_percent_bar():
    """Kept as measured: the host-time model over-predicts on fa3 (see docs/gpu-lane.md)."""
    lane = json.loads((RUN / "lane.json").read_text())
    c = checks.check_prediction("p", lane["prediction"]["per_token_ms"],
                                lane["timings"]["measured_gain_ms_per_token"])
    assert c.ok is False and c.data["error"] == pytest.approx(0.833, abs=0.01)


def test_diag_trace_reads_draft_extend_going_from_eager_to_graph():
    r = subprocess.run([sys.executable, "-m", "diag", "trace", str(TRACES / "after.trace.json.gz"),
                        "--baseline", str(TRACES / "before.trace.json.gz"), "--json"],
                       capture_output=True, text=True, timeout=300)
    doc = json.loads(r.stdout)
    assert checks.trace_modes(doc) == ("eager", "graph")
    row = next(x for x in doc["compare"] if x["phase"] == "draft-extend")
    assert row["current"]["graph_passes"] == 2 and row["baseline"]["graph_passes"] == 0
    assert row["launches_delta"] < -100  # ~130 launches an eager pass, 13 around a replay


def test_run_2_forward_based_prediction_recomputed_from_its_window():
    """Run 2 (tests/gpu_lane/allowlist-h200-run2/): the before server's window counters hold the
    eager draft-extend forward (1334 passes, 4.2816 s) and the target-verify replays (1334,
    0.2007 s): 3.2096 - 0.1505 = 3.059 ms a pass, as the lane recorded."""
    lane = json.loads((RUN.parent / "allowlist-h200-run2" / "lane.json").read_text())
    win = lane["window_counters"]
    fwd = win["before"]["graph_phases"]["draft-extend-forward"]["eager"]
    tv = win["before"]["graph_phases"]["target-verify"]["graph"]
    assert fwd["passes"] == tv["passes"] == 1334
    ppt = lane["passes"]["before"]["eager"] / (lane["timings"]["rounds"] * lane["timings"]["tokens"])
    p = fixes.get("draft-extend-allowlist").predict(win["before"], ppt)
    assert p.per_pass_ms == pytest.approx(1e3 * (fwd["seconds"] - tv["seconds"]) / 1334)
    assert p.per_pass_ms == pytest.approx(lane["prediction"]["per_pass_ms"], abs=1e-3)
    assert p.per_token_ms == pytest.approx(lane["prediction"]["per_token_ms"], abs=1e-3)
    # the after server's own graph passes: what a replay really cost (the model's +5 %)
    after = win["after"]["draft_extend"]["graph"]
    eager = win["before"]["draft_extend"]["eager"]
    saved = 1e3 * (eager["seconds"] / eager["passes"] - after["seconds"] / after["passes"])
    assert saved == pytest.approx(lane["per_pass_truth_ms"]["saved"])
    assert p.per_pass_ms / saved - 1 == pytest.approx(0.051, abs=0.01)
    c = checks.check_prediction("p", p.per_token_ms, lane["timings"]["measured_gain_ms_per_token"])
    assert c.ok is False and c.data["error"] == pytest.approx(0.294, abs=0.01)
    r = lane["timings"]["paired"]["after_vs_before"]
    assert r["hi"] < 1 and r["ratio"] == pytest.approx(0.591, abs=1e-3)


@pytest.mark.parametrize("run, passes, fwd_s, tv_s", [
    ("allowlist-h200-run3", 887, 2.3861992829997973, 0.1089581049998003),
    ("allowlist-h200-run4", 1330, 3.321076783000052, 0.15109895800003414),
    ("allowlist-h200-run5", 887, 2.6203035859999773, 0.11899101399924916),
])
def test_runs_3_and_4_every_check_passed_and_the_prediction_recomputes_within_the_bar(
        run, passes, fwd_s, tv_s):
    """Runs 3 and 4 at HEAD (tests/gpu_lane/allowlist-h200-run{3,4}/; 40 and 60 rounds): every
    check passed. The prediction recomputed here from the before server's window (eager
    draft-extend forward and target-verify replays, seconds as recorded) is the recorded one and
    within 10 % of the measured gain per token (-1.3 %, +6.0 %). Run 2's miss (+29 %, same
    model) is kept above."""
    lane = json.loads((RUN.parent / run / "lane.json").read_text())
    assert lane["checks"] and all(c["ok"] for c in lane["checks"])
    win = lane["window_counters"]
    fwd = win["before"]["graph_phases"]["draft-extend-forward"]["eager"]
    tv = win["before"]["graph_phases"]["target-verify"]["graph"]
    assert fwd["passes"] == tv["passes"] == passes
    assert (fwd["seconds"], tv["seconds"]) == (fwd_s, tv_s)
    ppt = passes / (lane["timings"]["rounds"] * lane["timings"]["tokens"])
    p = fixes.get("draft-extend-allowlist").predict(win["before"], ppt)
    assert p.per_pass_ms == pytest.approx(1e3 * (fwd_s - tv_s) / passes)
    assert p.per_token_ms == pytest.approx(lane["prediction"]["per_token_ms"], abs=1e-3)
    c = checks.check_prediction("p", p.per_token_ms, lane["timings"]["measured_gain_ms_per_token"])
    assert c.ok and abs(c.data["error"]) < 0.10
    r = lane["timings"]["paired"]["after_vs_before"]
    assert r["hi"] < 0.65
    after = (RUN.parent / run / "server-after-capture.log").read_text()
    assert "Capture draft extend CUDA graph end (diag draft-extend-allowlist)" in after
    before = (RUN.parent / run / "server-before-capture.log").read_text()
    assert "draft extend" not in before.lower()
