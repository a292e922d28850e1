"""Adversarial sweep, odd servers: a server that sends its answer a byte at a time, breaks it
off, nests it past any parser, or a Prometheus whose series labels are not strings is exit 3
with one line, within the timeout: never exit 70, never a hang.

Real HTTP servers on 127.0.0.1, real `diag` processes."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

DIAG = str(Path(sys.executable).with_name("diag"))


class OddServer:
    """Answers every GET with `answer(handler)`."""

    def __init__(self, answer) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server API)
                try:
                    answer(self)
                except OSError:
                    pass  # the client gave up

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> OddServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _drip(h: BaseHTTPRequestHandler, status: int = 200) -> None:
    """A byte every 0.2 s of a 100 kB answer: each read gets something, the answer never ends."""
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", "100000")
    h.end_headers()
    for _ in range(300):
        h.wfile.write(b" ")
        h.wfile.flush()
        time.sleep(0.2)


def _body(body: bytes, length: int | None = None):
    def answer(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body) if length is None else length))
        h.end_headers()
        h.wfile.write(body)
        h.wfile.flush()
    return answer


def _run(*argv: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess, float]:
    t = time.monotonic()
    r = subprocess.run([DIAG, *argv], capture_output=True, text=True, timeout=timeout)
    return r, time.monotonic() - t


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip() and "no sglang importable" not in ln]
    assert len(lines) == 1, err
    return lines[0]


def test_a_server_info_sent_a_byte_at_a_time_times_out_as_a_whole():
    with OddServer(_drip) as srv:
        r, took = _run("fix", "list", "--server", srv.url, "--sglang", "0.5.23")
    assert r.returncode == 3, r.stderr
    assert took < 20, took  # the default 5 s for the whole answer, not per read
    assert "no whole answer within 5 s" in _one_line(r.stderr)


def test_a_server_info_nested_past_any_parser_is_not_sglang():
    deep = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with OddServer(_body(deep)) as srv:
        r, _ = _run("fix", "list", "--server", srv.url, "--sglang", "0.5.23")
    assert r.returncode == 3, r.stderr
    assert "is not an SGLang server: /server_info is not JSON" in _one_line(r.stderr)


@pytest.mark.parametrize("answer, said", [
    (_body(json.dumps({"status": "success", "data": {"result": [
        {"metric": {"instance": ["h:1"]}, "value": [1.0, "1"]}]}}).encode()),
     "data.result is not a list of series"),
    (_body(b"[" * 100_000 + b"]" * 100_000), "returned no JSON"),
    (_body(b'{"status": "succ', length=1000), "returned no JSON"),  # broken off
    (_drip, "no whole answer within 1 s"),
])
def test_fleet_on_an_odd_prometheus_is_exit_3_in_one_line(answer, said):
    with OddServer(answer) as srv:
        r, took = _run("fleet", "--prometheus", srv.url, "--timeout", "1")
    assert r.returncode == 3, r.stderr
    assert took < 20, took
    assert said in _one_line(r.stderr)


def _info(**kw) -> bytes:
    doc = {"model_path": "m", "attention_backend": "triton", "speculative_algorithm": "EAGLE",
           "speculative_num_steps": 2, "tp_size": 1, "device": "cuda", "version": "0.5.23",
           "internal_states": [{"avg_spec_accept_length": 2.5}]}
    return json.dumps({**doc, **kw}).encode()


def _routes(routes: dict[str, tuple[int, bytes]]):
    def answer(h: BaseHTTPRequestHandler) -> None:
        status, body = routes.get(h.path.split("?")[0], (404, b"not found"))
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
    return answer


@pytest.mark.parametrize("cmd", [("fix", "list"), ("fix", "check", "--no-dry")])
def test_a_failing_server_is_not_silently_left_out_where_no_finding_says_it(cmd):
    with OddServer(_routes({"/server_info": (500, b"boom")})) as srv:
        r, _ = _run(*cmd, "--server", srv.url, "--sglang", "0.5.23")
    assert r.returncode == 3, (r.returncode, r.stdout[-300:])
    line = _one_line(r.stderr)
    assert "HTTP 500" in line and "the server's configuration cannot be read" in line


def test_diag_series_that_are_nan_or_infinite_on_metrics_are_no_exit_70():
    metrics = (b"# TYPE diag_draft_extend_passes_total counter\n"
               b'diag_draft_extend_passes_total{mode="eager",reason=""} +Inf\n'
               b'diag_draft_extend_passes_total{mode="graph",reason=""} NaN\n'
               b"# TYPE diag_graph_phase_passes_total counter\n"
               b'diag_graph_phase_passes_total{phase="target-verify",mode="graph"} -1\n')
    with OddServer(_routes({"/server_info": (200, _info()), "/metrics": (200, metrics)})) as srv:
        r, _ = _run("fix", "list", "--server", srv.url, "--sglang", "0.5.23", "--json")
    assert r.returncode == 0, r.stderr
    json.loads(r.stdout, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))


def test_a_server_model_path_that_is_here_but_no_model_is_said_not_a_crash():
    with OddServer(_routes({"/server_info": (200, _info(model_path="/etc"))})) as srv:
        r, _ = _run("diagnose", "--no-execute", "--server", srv.url, "--sglang", "0.5.23",
                    "--json")
        typed, _ = _run("diagnose", "--no-execute", "--server", srv.url, "--sglang", "0.5.23",
                        "--model", "/etc")
    assert r.returncode in (0, 1), r.stderr
    assert "probe crashed" not in r.stdout
    assert all(f["status"] != "error" for f in json.loads(r.stdout)["findings"])
    assert "the engine's model /etc is not readable here" in r.stderr
    assert typed.returncode == 2, typed.stdout[-300:]  # typed: a usage error, as without --server
    assert "--model /etc: no config.json there" in _one_line(typed.stderr)


@pytest.mark.parametrize("argv", [
    ("fix", "status", "--run-dir", "{L}"),
    ("fleet", "--prometheus", "{L}"),
    ("trace", "{L}"),
    ("diagnose", "--sglang", "/tmp/{L}"),
])
def test_a_100k_character_input_is_echoed_cut_in_one_line(argv):
    long = "x" * 100_000
    r, _ = _run(*(a.replace("{L}", long) for a in argv))
    assert r.returncode in (2, 3), r.stderr[:300]
    line = _one_line(r.stderr)
    assert len(line) < 400 and "…" in line, line[:300]


@pytest.mark.parametrize("value", [-3, 10 ** 30])
def test_a_count_no_server_runs_with_is_not_taken_as_its_configuration(value):
    """`speculative_num_steps` of -3 or 10**30 is no value SGLang starts with: exit 3 naming it
    (as an argument of the wrong type is), never a verdict for that many steps."""
    doc = {"version": "0.5.23", "attention_backend": "triton", "speculative_algorithm": "EAGLE",
           "speculative_num_steps": value}
    with OddServer(_body(json.dumps(doc).encode())) as s:
        r, _ = _run("diagnose", "--sglang", "0.5.23", "--server", s.url, "--no-execute")
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert "speculative_num_steps is" in r.stderr and "not a count a server runs with" in r.stderr
    from diag.context import SpecConfig

    assert SpecConfig.from_server_args({"speculative_num_steps": value}).speculative_num_steps \
        is None


def _slow_headers(h: BaseHTTPRequestHandler) -> None:
    """The status line and headers a byte every 0.2 s: every read gets something in time."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + b"X-Pad: " + b"a" * 200
    for i in range(len(head)):
        h.wfile.write(head[i:i + 1])
        h.wfile.flush()
        time.sleep(0.2)


@pytest.mark.parametrize("cmd", [
    ("fix", "list", "--sglang", "0.5.23", "--server"),
    ("diagnose", "--sglang", "0.5.23", "--no-execute", "--server"),
    ("fleet", "--prometheus"),
])
def test_headers_sent_a_byte_at_a_time_time_out_as_a_whole(cmd):
    """The whole answer is bounded, its status line and headers too (the socket's timeout
    bounds each read only): exit 3 in one line, within the timeout, never a hang."""
    with OddServer(_slow_headers) as s:
        r, took = _run(*cmd, s.url, timeout=60)
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert "no whole answer within" in _one_line(r.stderr)
    assert took < 25
