"""The kit's runner with throw-away steps (no server): the time limit, a broken step, a step that
needs the server when none started, checks a step never judged. None of these may end as
`pass`; each `not-run` carries its reason; the exit code follows the documented rule."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from report_schema import check

from diag.kit import report, runner


def _opts(out: Path, timeout: float = 5.0) -> runner.Options:
    return runner.Options(python="python", model=None, draft_model=None, attention_backend=None,
                          device="cpu", speculative=(), server_args=(), out=out,
                          step_timeout=timeout)


def _step(sid: str, checks: dict[str, str], body, needs_server: bool = False) -> runner.Step:
    cls = type(f"S_{sid}", (runner.Step,), {"id": sid, "title": sid, "checks": checks,
                                            "needs_server": needs_server,
                                            "run": lambda self, kit: body(kit)})
    return cls()


def _run(tmp_path: Path, steps: list[runner.Step], timeout: float = 5.0) -> dict:
    lines: list[str] = []
    doc = runner.run(_opts(tmp_path / "out", timeout), steps, lines.append)
    check("kit-v1.json", doc)
    assert json.loads((tmp_path / "out" / "kit.json").read_text()) == doc
    assert (tmp_path / "out" / "summary.md").read_text().strip() == report.render(doc)
    doc["_lines"] = lines
    return doc


def test_passing_and_failing_checks_set_the_exit_code(tmp_path):
    def good(kit):
        kit.record("a", "pass", "fine", {"n": 1})

    def bad(kit):
        kit.judge("b", False, "measured 2 vs 1", {"n": 2})

    doc = _run(tmp_path, [_step("one", {"a": "A"}, good)])
    assert doc["exit_code"] == 0 and doc["counts"] == {"pass": 1, "fail": 0, "not-run": 0}
    doc = _run(tmp_path, [_step("one", {"a": "A"}, good), _step("two", {"b": "B"}, bad)])
    assert doc["exit_code"] == 1 and [c["status"] for c in doc["checks"]] == ["pass", "fail"]
    assert any("] one: a pass: fine" in ln for ln in doc["_lines"])


def test_a_step_past_its_limit_is_stopped_and_its_checks_not_run(tmp_path):
    def slow(kit):
        kit.record("early", "pass", "before the wait")
        time.sleep(30)

    t0 = time.monotonic()
    doc = _run(tmp_path, [_step("slow", {"early": "E", "late": "L"}, slow),
                          _step("after", {"c": "C"}, lambda kit: kit.record("c", "pass", "ran"))],
               timeout=1.0)
    assert time.monotonic() - t0 < 10
    checks = {c["id"]: c for c in doc["checks"]}
    assert checks["early"]["status"] == "pass"  # what was measured is kept
    assert checks["late"]["status"] == "not-run" and "limit of 1 s" in checks["late"]["reason"]
    assert checks["c"]["status"] == "pass"  # the next step still runs
    assert doc["steps"][0]["status"] == "timed-out" and doc["exit_code"] == 3


def test_a_broken_step_and_a_step_without_its_server(tmp_path):
    def boom(kit):
        raise ZeroDivisionError("x")

    doc = _run(tmp_path, [_step("boom", {"a": "A"}, boom),
                          _step("needs", {"b": "B"}, lambda kit: None, needs_server=True)])
    a, b = doc["checks"]
    assert a["status"] == "not-run" and "ZeroDivisionError" in a["reason"]
    assert b["status"] == "not-run" and b["reason"] == "the server did not start"
    assert doc["steps"][1]["status"] == "skipped" and doc["exit_code"] == 3


def test_an_unjudged_check_is_never_a_pass_and_not_run_needs_a_reason(tmp_path):
    def lazy(kit):
        kit.record("a", "pass", "ok")

    doc = _run(tmp_path, [_step("lazy", {"a": "A", "b": "B"}, lazy)])
    b = doc["checks"][1]
    assert b["status"] == "not-run" and "did not judge" in b["reason"]

    def no_reason(kit):
        kit.record("c", "not-run", "", reason="  ")

    doc = _run(tmp_path, [_step("nr", {"c": "C"}, no_reason)])
    assert doc["checks"][0]["status"] == "not-run" and "without a reason" in \
        doc["checks"][0]["reason"]


def test_a_step_may_not_judge_another_steps_check(tmp_path):
    def other(kit):
        kit.record("theirs", "pass", "sneaky")

    doc = _run(tmp_path, [_step("mine", {"mine": "M"}, other),
                          _step("theirs", {"theirs": "T"}, lambda kit: None)])
    assert [c["status"] for c in doc["checks"]] == ["not-run", "not-run"]


@pytest.mark.parametrize("status", ["pass", "fail", "not-run"])
def test_render_says_every_status_as_in_the_json(tmp_path, status):
    def one(kit):
        kit.record("a", status, "d", reason="why" if status == "not-run" else None)

    doc = _run(tmp_path, [_step("s", {"a": "A"}, one)])
    row = [ln for ln in report.render(doc).splitlines() if ln.startswith("| a |")]
    assert row == [f"| a | {status} | {'not run: why' if status == 'not-run' else 'd'} |"]


def test_the_gpu_lanes_judgement_of_a_kit_json(tmp_path):
    """checks.check_kit_* (lane.py --only kit) on documents the runner really wrote."""
    from diag.kit import checks

    def measured(kit):
        kit.record("a", "pass", "ok", {"ready_s": 1.5})
        kit.record("b", "not-run", "", reason="needs a GPU")

    def bare(kit):
        kit.record("a", "pass", "ok", {"note": "no number"})
        kit.record("b", "fail", "bad", {"flag": True})

    good = _run(tmp_path, [_step("s", {"a": "A", "b": "B"}, measured)])
    assert checks.check_kit_entries("", good).ok is True
    bad = _run(tmp_path, [_step("s", {"a": "A", "b": "B"}, bare)])
    c = checks.check_kit_entries("", bad)
    assert c.ok is False and c.data["bad"] == ["a", "b"]
    assert checks.check_kit_entries("", None).ok is None
    g = checks.check_kit_gpu_judged("", good, ("a", "b"))
    assert g.ok is False and g.data["not_judged"] == {"b": "needs a GPU"}
    assert checks.check_kit_left("", good, []).ok is True
    assert checks.check_kit_left("", good, [123]).ok is False
    assert checks.check_kit_left("", {**good, "processes_left": None}, []).ok is False


def test_cli_without_a_usable_python_is_exit_3_with_the_json(tmp_path):
    """`diag kit run` end to end through the installed command, where nothing can start: one
    JSON, every check not run with its reason, exit 3."""
    import subprocess
    import sys

    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "diag", "kit", "run", "--python",
                        str(tmp_path / "no-python"), "--out", str(out), "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stderr
    doc = json.loads(r.stdout)
    check("kit-v1.json", doc)
    assert doc == json.loads((out / "kit.json").read_text())
    assert doc["exit_code"] == 3 and "cannot run" in doc["operational"][0]
    assert {c["status"] for c in doc["checks"]} == {"not-run"}
    assert all(c["reason"] for c in doc["checks"])
    assert doc["processes_left"] == [] and "Traceback" not in r.stderr


@pytest.mark.parametrize("args, needle", [
    (["--draft-model", "."], "--draft-model goes with --model"),
    (["--model", "."], "EAGLE needs --draft-model"),
    (["--model", "/no/such/dir"], "does not exist"),
    (["--step-timeout", "0"], "--step-timeout"),
    (["--server-args", "'unclosed"], "quotation"),
])
def test_cli_usage_errors_are_exit_2(tmp_path, args, needle):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "diag", "kit", "run", "--out", str(tmp_path / "o"),
                        *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and needle in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()  # refused before any work


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM"])
def test_a_signal_stops_the_process_groups_it_started_and_keeps_the_json(tmp_path, how):
    """A real child process group started through the kit (a shell and its own child), then the
    signal mid-step: both are gone afterwards, the step is marked, later checks not run."""
    import os
    import signal as sig

    import psutil

    from diag.kit.server import launch

    seen: dict[str, int] = {}

    def start_and_wait(kit):
        s = kit.start(launch(["sh", "-c", "sleep 600 & sleep 600"], dict(os.environ),
                             kit.work / "child.log", "http://127.0.0.1:1"))
        seen["pgid"] = s.proc.pid
        time.sleep(0.5)
        kit.record("a", "pass", "measured before the signal", {"n": 1})
        os.kill(os.getpid(), getattr(sig, how))
        time.sleep(5)

    # a shell that starts pytest in the background (`cmd &` without job control) hands it SIGINT
    # ignored, so Python never installs its handler: the kit's answer to Ctrl-C is what is under
    # test here, so the test delivers SIGINT as an interactive shell would
    old = sig.signal(sig.SIGINT, sig.default_int_handler)
    try:
        doc = _run(tmp_path, [_step("one", {"a": "A", "b": "B"}, start_and_wait),
                              _step("two", {"c": "C"}, lambda kit: kit.record("c", "pass", "x"))])
    finally:
        sig.signal(sig.SIGINT, old)
    assert doc["exit_code"] == 130 and doc["interrupted"] == {"step": "one", "signal": how}
    a, b, c = doc["checks"]
    assert a["status"] == "pass" and b["status"] == c["status"] == "not-run"
    assert f"interrupted ({how})" in b["reason"] and "not reached" in c["reason"]
    left = [p.pid for p in psutil.process_iter(["status"])
            if _pgid(p.pid) == seen["pgid"] and p.info["status"] != psutil.STATUS_ZOMBIE]
    assert left == [] and doc["processes_left"] == []


def _pgid(pid: int) -> int | None:
    import os

    try:
        return os.getpgid(pid)
    except OSError:
        return None
