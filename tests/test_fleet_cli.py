"""`diag fleet` errors and edges: exit codes, one-line messages, light imports, change finding.

The HTTP servers here are loopback stand-ins for a Prometheus API (named so); the real
Prometheus is in test_fleet_prometheus.py.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner
from report_schema import check

from diag.cli import main
from diag.engine.fleet import Change, find_changes, parse_window

ROOT = Path(__file__).resolve().parent.parent


class StandinPrometheusHandler(BaseHTTPRequestHandler):
    """Answers every request with the server's canned (status, content type, body, delay)."""

    def do_GET(self):  # noqa: N802 (http.server's naming)
        status, ctype, body, delay = self.server.answer
        self.server.paths.append(self.path)
        time.sleep(delay)
        data = body.encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def standin_prometheus():
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandinPrometheusHandler)
    server.daemon_threads = True
    server.answer = (200, "application/json",
                     '{"status":"success","data":{"resultType":"vector","result":[]}}', 0.0)
    server.paths = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _url(server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def _fleet(*args: str):
    return CliRunner().invoke(main, ["fleet", *args])


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_prometheus_is_one_line_exit_3():
    url = f"http://127.0.0.1:{_closed_port()}"
    r = _fleet("--prometheus", url, "--json")
    assert r.exit_code == 3
    assert r.output.strip().splitlines() == [
        f"diag: error: Prometheus at {url} is unreachable: [Errno 111] Connection refused"]


def test_not_a_prometheus_api_exit_3(standin_prometheus):
    standin_prometheus.answer = (200, "text/html", "<html>hello</html>", 0.0)
    r = _fleet("--prometheus", _url(standin_prometheus))
    assert r.exit_code == 3
    assert "did not answer like a Prometheus API" in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_query_error_is_reported_exit_3(standin_prometheus):
    standin_prometheus.answer = (400, "application/json",
                                 '{"status":"error","errorType":"bad_data","error":"parse error"}',
                                 0.0)
    r = _fleet("--prometheus", _url(standin_prometheus))
    assert r.exit_code == 3
    assert r.output.strip() == (f"diag: error: Prometheus at {_url(standin_prometheus)} "
                                "answered HTTP 400: parse error")


def test_slow_prometheus_times_out_exit_3(standin_prometheus):
    standin_prometheus.answer = (200, "application/json", "{}", 3.0)
    t0 = time.monotonic()
    r = _fleet("--prometheus", _url(standin_prometheus), "--timeout", "0.5")
    assert r.exit_code == 3
    # it took the connection: not "unreachable", the same words as --server's timeout
    assert "no answer within 0.5 s" in r.output and "unreachable" not in r.output
    assert time.monotonic() - t0 < 3.0


def test_empty_prometheus_is_not_an_error(standin_prometheus):
    r = _fleet("--prometheus", _url(standin_prometheus), "--window", "5m", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    check("fleet-v1.json", doc)
    assert doc["instances"] == [] and doc["window_s"] == 300
    # The queries went to the API with the window as a range.
    assert any("/api/v1/query?" in p and "300s" in p for p in standin_prometheus.paths)
    assert any(p.startswith("/api/v1/query_range?") for p in standin_prometheus.paths)
    text = _fleet("--prometheus", _url(standin_prometheus))
    assert "no instance has diag_* or sglang:* series" in text.output


@pytest.mark.parametrize("args, message", [
    (["--prometheus", "localhost:9090"], "is not an http(s) URL"),
    (["--prometheus", "http://127.0.0.1:9", "--window", "15x"], "not a duration"),
    (["--prometheus", "http://127.0.0.1:9", "--window", "5s"], "too short"),
    ([], "Missing option '--prometheus'"),
])
def test_usage_errors_exit_2(args, message):
    r = _fleet(*args)
    assert r.exit_code == 2
    assert message in r.output


def test_parse_window():
    assert parse_window("15m") == 900
    assert parse_window("1h30m") == 5400
    assert parse_window("2d") == 172800
    with pytest.raises(ValueError):
        parse_window("15")


def test_help_imports_nothing_heavy():
    code = ("import sys\nfrom diag.cli import main\n"
            "try:\n    main(['fleet', '--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'textual', 'prometheus_client', 'diag.engine.fleet', "
            "'urllib.request') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--prometheus URL" in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "[]"


class StandinRangeClient:
    """Stand-in for diag.engine.fleet.Prometheus: answers query_range with a canned matrix."""

    def __init__(self, matrix):
        self.matrix = matrix

    def query_range(self, expr, start, end, step):
        assert 'diag_fix_state{state="applied"}' in expr
        return self.matrix


def _series(instance, fix, values):
    return {"metric": {"job": "j", "instance": instance, "fix": fix},
            "values": [[t, str(v)] for t, v in values]}


def test_find_changes_merges_a_rollout_across_adjacent_steps():
    pts = [(100, 0), (101, 0), (102, 1), (103, 2), (104, 2), (105, 0), (106, 0)]
    got = find_changes(StandinRangeClient([_series("a", "f", pts)]), 100, 106, 1)
    assert got == {("j", "a"): [Change("f", 103, 101, 0, 2), Change("f", 105, 104, 2, 0)]}
    assert [c.direction for c in got[("j", "a")]] == ["applied", "reverted"]


def test_find_changes_series_appearing_applied_and_steady_series():
    got = find_changes(StandinRangeClient([
        _series("a", "f", [(150, 2), (151, 2)]),  # appeared mid-window, already applied
        _series("b", "f", [(100, 2), (101, 2), (102, 2)]),  # steady: no change
    ]), 100, 160, 1)
    assert got == {("j", "a"): [Change("f", 150, 149, 0.0, 2)]}


class StandinFlappingPrometheus(StandinRangeClient):
    """Stand-in for diag.engine.fleet.Prometheus: every instant query answers 1 for instance a; the
    range query is a fix flapping at every step."""

    url = "http://standin-prometheus"

    def __init__(self, matrix):
        super().__init__(matrix)
        self.queries = 0

    def query(self, expr, at=None):
        self.queries += 1
        return [{"metric": {"job": "j", "instance": "a"}, "value": [at, "1"]}]


def test_before_after_is_bounded_to_the_most_recent_changes():
    from diag.engine.fleet import MAX_COMPARED_CHANGES, collect, render

    end = 1000.0
    flaps = [(t, i % 2 * 2) for i, t in enumerate(range(101, 1000, 2))]  # ~450 changes
    prom = StandinFlappingPrometheus([_series("a", "f", flaps)])
    report = collect(prom.url, window_s=900, end=end, prom=prom)
    changes = report.instances[0]["changes"]
    assert len(changes) > 4 * MAX_COMPARED_CHANGES
    compared = [c for c in changes if c["before"] is not None]
    assert len(compared) == MAX_COMPARED_CHANGES
    assert min(c["at"] for c in compared) > max(c["at"] for c in changes if c["before"] is None)
    assert prom.queries <= 20 + 2 * MAX_COMPARED_CHANGES * 11  # not ~22 per change
    assert "not compared (only the 16 most recent changes are)" in render(report)
