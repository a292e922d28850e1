"""The GPU engine lane's judgements (benchmarks/gpu_engine/checks.py), on CPU: what it reads from
real server logs recorded on the H200 (tests/gpu_lane/README.md) and from diag's counters.

Expected values come from the recorded lines themselves (read by eye: three "CUDA graph end"
lines with their elapsed times in the diag server's log, two in the kill-switch server's) and
from SGLang 0.5.23's sources: `Capture {role} {verify|decode} CUDA graph end. ... elapsed=`
(model_executor/model_runner_components/cuda_graph_setup.py:696), "Capture draft decode CUDA
graph end" (speculative/eagle_worker_v2.py:533) and "Capture draft extend CUDA graph end"
(speculative/eagle_worker_v2.py:654)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu_engine"))

import checks  # noqa: E402

DATA = ROOT / "tests" / "gpu_lane"
ALL3 = dict.fromkeys(checks.PHASES, True)


def _log(name: str) -> str:
    return (DATA / f"h200-0.5.23-{name}.log").read_text()


def test_captures_of_the_real_diag_server():
    # the recorded lines: target verify 1.42 s (bs=[1..8] before elapsed=), draft decode
    # 1.11 s, draft extend 1.09 s
    assert checks.captures(_log("diag-capture")) == {
        "target verify": 1.42, "draft decode": 1.11, "draft extend": 1.09}
    c = checks.check_captures("diag", _log("diag-capture"), ALL3)
    assert c.ok is True, c.detail


def test_kill_switch_server_lacks_only_draft_extend():
    log = _log("eager-capture")
    assert set(checks.captures(log)) == {"target verify", "draft decode"}
    assert checks.check_captures("k", log, {**ALL3, "draft extend": False}).ok is True
    # expecting all three fails, and says which one
    c = checks.check_captures("k", log, ALL3)
    assert c.ok is False and "draft extend" in c.detail


def test_a_crash_in_the_log_fails_the_capture_check():
    log = _log("diag-capture") + _log("sampled-crash")
    c = checks.check_captures("diag", log, ALL3)
    assert c.ok is False
    assert c.data["errors"] == ["Scheduler hit an exception: Traceback (most recent call last):"]


def test_equal_tokens_names_the_differing_prompt():
    same = [[1, 2, 3], [4, 5]]
    assert checks.check_equal_tokens("t", {"plain": same, "diag": same}).ok is True
    c = checks.check_equal_tokens("t", {"plain": same, "diag": [[1, 2, 3], [4, 6]]})
    assert c.ok is False and c.data["diffs"] == {"diag": [1]}
    assert checks.check_equal_tokens("t", {"plain": same}).ok is None  # not judged


COUNTERS = {  # the shape `diag fix status --json` gives for an engine process
    "draft_extend": {"graph": {"passes": 92, "seconds": 0.1},
                     "eager": {"passes": 17, "seconds": 1.5,
                               "reasons": {"batch-above-captured": 17}}},
    "graph_phases": {"target-verify": {"graph": {"passes": 92, "seconds": 0.2},
                                       "eager": {"passes": 17, "seconds": 0.4,
                                                 "reasons": {"batch-above-captured": 17}}},
                     "draft-decode": {"graph": {"passes": 92, "seconds": 0.1}}},
    "syncs": {"a.B.init_forward_metadata": {"calls": 40, "syncs": 6, "seconds": 0.01,
                                            "phases": {"target-verify": {"calls": 20, "syncs": 4},
                                                       "draft-extend": {"calls": 20, "syncs": 2}}},
              "a.C.init_forward_metadata": {"calls": 20, "syncs": 0, "seconds": 0.01,
                                            "phases": {"draft-decode": {"calls": 20, "syncs": 0}}}},
}


def test_phase_lines_and_modes():
    assert checks.phase_modes(COUNTERS, "draft-decode") == {"graph": 92}
    assert checks.phase_reasons(COUNTERS, "target-verify") == {"batch-above-captured": 17}
    lines = checks.phase_lines(COUNTERS)
    assert lines[0].startswith("target-verify: graph 92, eager 17 (eager because")
    assert lines[1] == "draft-decode: graph 92, eager 0"
    assert checks.check_modes("m", {"graph": 3, "eager": 1}, "graph").ok is False
    assert checks.check_modes("m", {"graph": 3}, "graph").ok is True
    assert checks.check_modes("m", None, "graph").ok is None


def test_syncs_per_step_per_phase_and_agreement():
    # target-verify: 4 syncs over 92 + 17 passes; draft-extend: 2 over 109; draft-decode 0 / 92
    per = checks.syncs_per_step(COUNTERS)
    assert per == pytest.approx({"target-verify": 4 / 109, "draft-extend": 2 / 109,
                                 "draft-decode": 0.0})
    report = {"findings": [{"evidence": [
        {"kind": "metric", "data": {"phase": "draft-decode", "syncs_per_step": 0}},
        {"kind": "metric", "data": {"phase": "target-verify", "syncs_per_step": 1}}]}]}
    assert checks.census_per_phase(report) == {"draft-decode": 0, "target-verify": 1}
    c = checks.check_syncs_agree("s", per, checks.census_per_phase(report))
    assert c.ok is False and set(c.data["differ"]) == {"target-verify"}
    assert checks.check_syncs_agree("s", per, {}).ok is None
    # a phase whose census total is an upper bound is not judged for equality
    assert checks.census_exact(report) == {"draft-decode": False, "target-verify": False}
    exact = {"draft-decode": True, "target-verify": False}
    c = checks.check_syncs_agree("s", per, checks.census_per_phase(report), exact)
    assert c.ok is True and c.data["bounds"] == ["target-verify"] and "not judged" in c.detail
    assert checks.check_syncs_agree("s", per, checks.census_per_phase(report),
                                    {"target-verify": True}).ok is False
    assert checks.check_syncs_agree("s", per, {"target-verify": 1}, {}).ok is None
    # the census's totals are upper bounds: 1 >= 4/109 holds, 0 >= 0 holds
    assert checks.check_syncs_bounded("b", per, checks.census_per_phase(report)).ok is True
    assert checks.check_syncs_bounded("b", {"draft-decode": 2.0}, {"draft-decode": 1}).ok is False


def test_eager_estimate_and_ratios():
    # 0.5 ms eager - 0.1 ms graph, 0.25 passes per token -> 0.1 ms per token
    assert checks.eager_estimate(0.0001, 0.0005, 0.25) == pytest.approx(0.1)
    assert checks.eager_estimate(None, 0.0005, 0.25) is None
    assert checks.ratio(3.0, 2.0) == 1.5 and checks.ratio(1.0, 0.0) is None
    assert checks.iqr([1.0, 2.0, 3.0]) is None and checks.iqr([1, 2, 3, 4, 5]) == 3.0


def test_tui_share_rows():
    text = ("draft-extend-allowlist  draft-extend time, eager → graph\n"
            "    before 1.95 ms (IQR 1.95–2.85, n=17) → after 890 µs (IQR 845–966, n=1016): 2.2×\n"
            "    source: run dir; 17 eager, 1016 graph; read 0 s ago\n")
    assert checks.tui_shares(text) == {"draft-extend": (17, 1016)}
    assert checks.check_tui_share("t", 0, text).ok is True
    # the probe's name alone ("draft-extend-graph") is no share
    assert checks.check_tui_share("t", 0, "warn draft-extend-graph on CUDA ...").ok is False
