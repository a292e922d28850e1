"""`diag kit run` end to end on the real CPU server recipe (SGLang 0.5.23, tests/engine_server.py's
environment and flags): one full kit run for the module (it makes its own tiny models, starts
`diag run --probe all -- python -m sglang.launch_server`, judges, stops), and one run stopped
by SIGINT while its server starts. Skipped, with the reason, where the SGLang environment is
absent (as the engine lane is).

What is expected comes from this machine and the kit's documented rules, not from the run: no
GPU here, so every GPU-only check is `not-run` with its reason; the exit code follows
docs/exit-codes.md from the checks' statuses; the summary is rendered from the JSON.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import engine_server  # noqa: E402
import report_schema  # noqa: E402

pytestmark = [pytest.mark.engine, pytest.mark.release, pytest.mark.slow,
              pytest.mark.timeout(1200)]

SERVER_ARGS = "--mem-fraction-static 0.12 --max-running-requests 8"  # engine_server._start's
GPU_ONLY = {"phases-static-vs-live": "needs a GPU", "syncs-vs-census": "needs a GPU",
            "allowlist-captured": "no GPU", "allowlist-tokens": "no GPU",
            "allowlist-speed": "no GPU", "profiler-crash": "not asked: --crash"}
ROW = re.compile(r"^\| (?P<id>[a-z0-9-]+) \| (?P<status>pass|fail|not-run) \| (?P<detail>.*) \|$")


def _env(root: Path) -> dict[str, str]:
    # the server recipe's environment (release tree, stand-ins, SGLANG_USE_CPU_ENGINE=1)
    return engine_server._env(root)


def _cmd(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "diag", "kit", "run", "--python", str(engine_server.VENV_PY),
            "--attention-backend", "intel_amx", "--server-args", SERVER_ARGS, "--tokens", "16",
            "--out", str(out), *extra]


def _group_alive(pgid: int) -> list[int]:
    out = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (psutil.Error, OSError):
            continue
    return out


@pytest.fixture(scope="module")
def root(release):
    why = engine_server.missing_env()
    if why:
        pytest.skip(why)
    return release("0.5.23").root


@pytest.fixture(scope="module")
def kit(root, tmp_path_factory):
    out = tmp_path_factory.mktemp("kit") / "out"
    r = subprocess.run(_cmd(out, "--json", "--step-timeout", "500"), capture_output=True,
                       text=True, env=_env(root), timeout=1100)
    return {"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr, "out": out,
            "doc": json.loads((out / "kit.json").read_text()),
            "summary": (out / "summary.md").read_text()}


@pytest.fixture(scope="module")
def interrupted(root, tmp_path_factory):
    """A kit run given SIGINT once its server's processes exist (mid-start)."""
    out = tmp_path_factory.mktemp("kit-int") / "out"
    # SIGINT as an interactive shell delivers it: a background `.ci/run &` would hand the kit
    # SIGINT ignored (the shell's rule for jobs without job control), and Ctrl-C is under test
    p = subprocess.Popen(_cmd(out), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=_env(root),
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    run_dir = str(out / "work" / "run-kit")
    group: list[int] = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and p.poll() is None:
        launcher = [q for q in psutil.process_iter(["pid", "cmdline"])
                    if run_dir in " ".join(q.info["cmdline"] or [])]
        if launcher:
            pgid = os.getpgid(launcher[0].pid)
            time.sleep(8)  # let the launcher start its scheduler children
            group = _group_alive(pgid)
            break
        time.sleep(0.2)
    assert group, "the kit's server never appeared"
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=120)
    return {"rc": p.returncode, "stdout": stdout, "stderr": stderr, "out": out, "group": group,
            "pgid": pgid, "doc": json.loads((out / "kit.json").read_text()),
            "summary": (out / "summary.md").read_text()}


def test_json_validates_and_is_what_was_written(kit):
    doc = kit["doc"]
    report_schema.check("kit-v1.json", doc)
    assert json.loads(kit["stdout"]) == doc  # --json prints the document kit.json holds
    assert kit["stderr"].count("diag kit [") == 0, kit["stderr"][-2000:]  # --json is quiet


def test_the_server_ran_and_its_counters_were_read(kit):
    doc = kit["doc"]
    checks = {c["id"]: c for c in doc["checks"]}
    assert checks["sglang-found"]["status"] == "pass", checks["sglang-found"]
    assert checks["sglang-found"]["values"]["sglang"] == "0.5.23"
    assert checks["server-start"]["status"] == "pass", doc["steps"]
    assert checks["server-start"]["values"]["ready_s"] > 0
    assert doc["server"]["args"]["attention_backend"] == "intel_amx"
    phases = checks["phases-log-vs-live"]["values"]["phases"]
    # on CPU no runner exists, so every counted pass is eager (tests/test_engine_server.py)
    assert phases["draft-extend"]["live"].get("eager", 0) > 0, phases
    assert not phases["draft-extend"]["live"].get("graph"), phases
    assert checks["phases-log-vs-live"]["status"] == "pass", checks["phases-log-vs-live"]


def test_every_gpu_only_check_is_not_run_with_its_reason(kit):
    checks = {c["id"]: c for c in kit["doc"]["checks"]}
    assert kit["doc"]["environment"]["server_python"]["gpu"] is False
    for cid, why in GPU_ONLY.items():
        assert checks[cid]["status"] == "not-run", checks[cid]
        assert why in checks[cid]["reason"], checks[cid]
    for c in checks.values():  # never a not-run shown as passing, never a reason on a verdict
        assert (c["status"] == "not-run") == bool(c["reason"]), c
    # the syncs step still reports the static census it could read, as a measured value
    assert "census" in checks["syncs-vs-census"]["values"]


def test_exit_code_follows_the_documented_rule(kit):
    doc = kit["doc"]
    assert doc["interrupted"] is None and doc["operational"] == [], doc["operational"]
    want = 1 if any(c["status"] == "fail" for c in doc["checks"]) else 0
    assert kit["rc"] == doc["exit_code"] == want, kit["stderr"][-2000:]
    assert doc["counts"] == {s: sum(c["status"] == s for c in doc["checks"])
                             for s in ("pass", "fail", "not-run")}


def test_summary_agrees_with_the_json(kit):
    doc, text = kit["doc"], kit["summary"]
    assert len(text.splitlines()) < 40, text
    rows = {m["id"]: m["status"] for m in map(ROW.match, text.splitlines()) if m}
    assert rows == {c["id"]: c["status"] for c in doc["checks"]}
    n = doc["counts"]
    assert f"{n['pass']} pass, {n['fail']} fail, {n['not-run']} not run (exit " \
           f"{doc['exit_code']})" in text.splitlines()[0]


def test_nothing_it_started_is_left(kit):
    doc = kit["doc"]
    assert doc["processes_left"] == []
    assert _group_alive(doc["server"]["pid"]) == []
    out = str(kit["out"])
    assert not [p.pid for p in psutil.process_iter(["cmdline"])
                if out in " ".join(p.info["cmdline"] or [])]


def test_sigint_mid_run_stops_its_processes_and_keeps_the_partial_json(interrupted):
    r, doc = interrupted, interrupted["doc"]
    assert r["rc"] == 130, r["stderr"][-2000:]
    report_schema.check("kit-v1.json", doc)
    assert doc["exit_code"] == 130
    assert doc["interrupted"] == {"step": "serve", "signal": "SIGINT"}
    steps = {s["id"]: s for s in doc["steps"]}
    assert steps["env"]["status"] == "done" and steps["serve"]["status"] == "interrupted"
    checks = {c["id"]: c for c in doc["checks"]}
    assert checks["sglang-found"]["status"] == "pass"  # what ran before is kept
    for cid in ("server-start", "phases-log-vs-live", "trace-complete"):
        assert checks[cid]["status"] == "not-run" and "interrupted" in checks[cid]["reason"]
    gone = [pid for pid in r["group"] if psutil.pid_exists(pid)
            and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert gone == [] and _group_alive(r["pgid"]) == [], gone
    assert doc["processes_left"] == []
    # progress a person can follow: one line per step with the elapsed time, on stderr
    assert re.search(r"diag kit \[\s+\d+\.\d s\] env: ", r["stderr"]), r["stderr"][-2000:]
    assert "interrupted by SIGINT" in r["stderr"]
    assert "**interrupted** by SIGINT during step `serve`" in r["summary"]


def test_compare_two_real_kit_runs(kit, interrupted):
    a, b = kit["out"] / "kit.json", interrupted["out"] / "kit.json"
    r = engine_server.diag_cli("kit", "compare", str(a), str(b))
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("SGLang 0.5.23") >= 2
    j = engine_server.diag_cli("kit", "compare", str(a), str(b), "--json")
    assert j.returncode == 0, j.stderr
    rows = {row["id"]: row for row in json.loads(j.stdout)["checks"]}
    for c in kit["doc"]["checks"]:
        other = next(x for x in interrupted["doc"]["checks"] if x["id"] == c["id"])
        assert rows[c["id"]]["a"].split()[0] == c["status"]
        assert rows[c["id"]]["b"].split()[0] == other["status"]
        assert rows[c["id"]]["same"] == (c["status"] == other["status"])
        line = next(ln for ln in r.stdout.splitlines() if ln.startswith(c["id"] + " "))
        assert line.endswith("*") != rows[c["id"]]["same"]


def test_a_server_that_does_not_start_is_exit_3(root, tmp_path):
    out = tmp_path / "out"
    cmd = _cmd(out, "--json")
    cmd[cmd.index("intel_amx")] = "no_such_backend"  # SGLang's own argument parser refuses it
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env(root), timeout=600)
    assert r.returncode == 3, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    report_schema.check("kit-v1.json", doc)
    checks = {c["id"]: c for c in doc["checks"]}
    assert checks["server-start"]["status"] == "fail"
    assert "no_such_backend" in checks["server-start"]["detail"], checks["server-start"]
    assert checks["server-start"]["values"]["returncode"] not in (None, 0)
    for cid in ("phases-log-vs-live", "syncs-vs-census", "trace-complete"):
        assert checks[cid]["status"] == "not-run"
        assert checks[cid]["reason"] == "the server did not start"
    assert doc["processes_left"] == [] and _group_alive(doc["server"]["pid"]) == []
