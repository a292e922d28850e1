"""`diag fleet` against a real Prometheus server (Debian's `prometheus`) on loopback.

Two exporters (tests/metrics_programs.py `serve`: spawned children record diag_* with
diag.engine.metrics in multiprocess mode; the parent serves the merged registry) are scraped every
second. One of them switches a fix on mid-run; `diag fleet --json` must show per-instance rows,
the fix on one instance only, and the before/after split on that one.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from report_schema import check

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "tests" / "metrics_programs.py"
FIX = "repeat-interleave-output-size"
BUILDER = "DeepseekSparseAttnBackend.init_forward_metadata"
WAIT_S = 40
RULES = ROOT / "contrib" / "prometheus-rules.yml"
DASHBOARD = ROOT / "contrib" / "grafana-dashboard.json"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _first_line(proc: subprocess.Popen, timeout: float) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        raise AssertionError(f"exporter printed nothing in {timeout} s")
    return proc.stdout.readline()


def _stop(proc: subprocess.Popen, group: bool) -> None:
    """SIGTERM to the process (an exporter stops its children itself), SIGKILL to its whole
    session if it does not end in time."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
    if group:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # leftovers of its own session only
        except (ProcessLookupError, PermissionError):
            pass
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


def _get(url: str, path: str, **params: str) -> dict:
    full = f"{url}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(full, timeout=5) as resp:
        return json.loads(resp.read())


def _wait(what: str, check, timeout: float = WAIT_S):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except OSError as e:
            last = e
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


@pytest.fixture
def prometheus_stack(tmp_path):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("the prometheus binary is absent (Debian package `prometheus`; "
                    "scripts/test.sh installs it)")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DIAG_") and k != "PROMETHEUS_MULTIPROC_DIR"}
    env["PYTHONPATH"] = str(ROOT)
    procs: list[tuple[subprocess.Popen, bool]] = []
    try:
        exporters = []
        for _ in range(2):
            p = subprocess.Popen([sys.executable, str(PROGRAM), "serve", "--children", "2"],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                 env=env, cwd=ROOT, start_new_session=True)
            procs.append((p, True))
            exporters.append(p)
        ports = [json.loads(_first_line(p, 60))["port"] for p in exporters]
        targets = ", ".join(f"'127.0.0.1:{port}'" for port in ports)
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files: ['{RULES}']\n"
            "scrape_configs:\n  - job_name: sglang\n    static_configs:\n"
            f"      - targets: [{targets}]\n")
        port = _free_port()
        log = open(tmp_path / "prometheus.log", "w")  # noqa: SIM115 (closed in teardown)
        prom = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
        procs.append((prom, False))
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            if prom.poll() is not None:
                raise AssertionError("prometheus exited: "
                                     + (tmp_path / "prometheus.log").read_text()[-2000:])
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
                return r.status == 200

        _wait("prometheus to be ready", ready)
        yield {"url": url, "exporters": exporters,
               "instances": [f"127.0.0.1:{p}" for p in ports]}
    finally:
        for p, group in reversed(procs):
            _stop(p, group)


def _samples(url: str, expr: str) -> dict[str, float]:
    doc = _get(url, "/api/v1/query", query=expr)
    return {r["metric"].get("instance", ""): float(r["value"][1]) for r in doc["data"]["result"]}


@pytest.mark.slow
def test_fleet_json_per_instance_rows(prometheus_stack):
    url = prometheus_stack["url"]
    flipped, steady = prometheus_stack["instances"]

    # Several scrapes of both instances with the fix off, then switch it on in one of them.
    _wait("4 scrapes of both exporters", lambda: (
        (n := _samples(url, "count_over_time(diag_agent_processes[1m])"))
        and all(n.get(i, 0) >= 4 for i in (flipped, steady))))
    os.kill(prometheus_stack["exporters"][0].pid, signal.SIGUSR1)
    applied = 'sum by (instance) (diag_fix_state{state="applied"})'
    _wait("the fix applied in both processes of one instance",
          lambda: _samples(url, applied).get(flipped) == 2)
    seen = time.time()
    _wait("4 more scrapes", lambda: time.time() - seen > 4.5 and _samples(
        url, f"count_over_time(diag_agent_processes[{int(time.time() - seen)}s])"
    ).get(flipped, 0) >= 4)

    diag = shutil.which("diag", path=str(Path(sys.executable).parent))
    proc = subprocess.run([diag, "fleet", "--prometheus", url, "--window", "2m", "--json"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    check("fleet-v1.json", doc)
    assert doc["schema_version"] == 1 and doc["window_s"] == 120
    rows = {r["instance"]: r for r in doc["instances"]}
    assert set(rows) == {flipped, steady}
    on, off = rows[flipped], rows[steady]
    for r in (on, off):
        assert r["job"] == "sglang" and r["processes"] == 2
    assert on["fixes_on"] == [FIX]
    assert on["fixes"][FIX] == {"state": "on", "processes": {"applied": 2}}
    assert off["fixes_on"] == []
    assert off["fixes"][FIX]["state"] == "reverted"

    # The steady instance: every metadata build makes 2 syncs; every draft-extend is eager.
    # Syncs per step divides the window's increase of two counters a child records one after
    # the other (`syncs`, then `draft_extend`); Prometheus extrapolates each increase from its
    # own first and last samples in the window, so the ratio is 2 only to within a few steps of
    # the window's thousands (a CI run read 1.9944). Syncs per call below is one counter pair of
    # one event: exact.
    assert off["syncs_per_step"] == pytest.approx(2.0, abs=0.02)
    assert off["draft_extend_eager_share"] == pytest.approx(1.0)
    assert off["builders"][BUILDER]["syncs_per_call"] == pytest.approx(2.0, abs=1e-6)
    assert off["draft_extend_mean_s"]["eager"] == pytest.approx(0.0011, rel=1e-3)
    assert off["inter_token_latency_mean_s"] == pytest.approx(0.021, rel=1e-3)
    assert off["changes"] == []

    # The flipped one: a mixed window, and one change with a clean before/after split.
    assert 0.0 < on["syncs_per_step"] < 2.0
    assert 0.0 < on["draft_extend_eager_share"] < 1.0
    assert len(on["changes"]) == 1
    ch = on["changes"][0]
    assert ch["fix"] == FIX and ch["direction"] == "applied"
    assert ch["applied_processes"] == [0, 2]
    before, after = ch["before"], ch["after"]
    # A scrape can land between the fix event and the first counter after it: allow a sliver.
    assert before["syncs_per_step"] == pytest.approx(2.0, abs=0.1)
    assert after["syncs_per_step"] == pytest.approx(0.0, abs=0.1)
    assert before["draft_extend_eager_share"] == pytest.approx(1.0, abs=0.05)
    assert after["draft_extend_eager_share"] == pytest.approx(0.0, abs=0.05)
    assert before["inter_token_latency_mean_s"] == pytest.approx(0.021, rel=0.02)
    assert after["inter_token_latency_mean_s"] == pytest.approx(0.018, rel=0.02)

    # The human view names both instances and the change.
    text = subprocess.run([diag, "fleet", "--prometheus", url, "--window", "2m"],
                          capture_output=True, text=True, timeout=60)
    assert text.returncode == 0, text.stderr
    assert flipped in text.stdout and steady in text.stdout
    assert f"{FIX} applied at" in text.stdout

    # contrib/: the recording rules evaluate on this Prometheus, and every dashboard query is
    # valid PromQL once Grafana's variables are filled in; the diag_* panels have data.
    recorded = _samples(url, "instance:diag_metadata_syncs_per_step:ratio_rate5m")
    assert recorded[steady] == pytest.approx(2.0, abs=1e-6)
    assert _samples(url, f'instance_fix:diag_fix_applied:processes{{fix="{FIX}"}}') == {
        flipped: 2.0}  # the steady instance never had the fix applied: no such series
    assert _samples(url, f'instance_fix:diag_fix_not_applied:processes{{fix="{FIX}"}}') == {
        flipped: 0.0, steady: 2.0}
    assert _samples(url, "instance:sglang_inter_token_latency_seconds:mean_rate5m")[steady] == \
        pytest.approx(0.021, rel=1e-3)
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert exprs
    for expr in exprs:
        q = (expr.replace("$__rate_interval", "1m").replace("$job", ".*")
             .replace("$instance", ".*"))
        doc = _get(url, "/api/v1/query", query=q)
        assert doc["status"] == "success", (expr, doc)
        if "diag_" in expr and "profiler" not in expr:
            assert doc["data"]["result"], f"no data for dashboard query {expr}"


def test_contrib_rules_pass_promtool():
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is absent (Debian package `prometheus`; scripts/test.sh installs it)")
    out = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    # every rule of the file (its `- record:` and `- alert:` entries) is one promtool read
    n = len(re.findall(r"^\s*- (?:record|alert):", RULES.read_text(), re.M))
    assert n >= 14 and f"SUCCESS: {n} rules found" in out.stdout
