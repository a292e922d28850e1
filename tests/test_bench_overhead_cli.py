"""`diag bench overhead` bad input: one line and the documented exit code, before any request.
(The measurement itself runs on the real CPU server: tests/test_engine_server.py.)"""

from __future__ import annotations

from click.testing import CliRunner

from diag.cli import main as cli
from diag.engine import rundir


def _run(*args: str):
    return CliRunner().invoke(cli, ["bench", "overhead", *args])


def test_usage_errors_exit_2():
    r = _run("--server", "http://127.0.0.1:30000")
    assert r.exit_code == 2 and "Missing option '--run-dir'" in r.output
    r = _run("--run-dir", "/tmp", "--server", "ftp://x")
    assert r.exit_code == 2
    r = _run("--run-dir", "/tmp", "--server", "http://127.0.0.1:1", "--windows", "1")
    assert r.exit_code == 2 and "--windows" in r.output


def test_a_run_directory_without_an_engine_is_an_operational_error(tmp_path):
    r = _run("--run-dir", str(tmp_path / "nope"), "--server", "http://127.0.0.1:1")
    assert r.exit_code == 3 and "does not exist" in r.output
    d = rundir.create_run_dir(tmp_path / "run")
    r = _run("--run-dir", str(d), "--server", "http://127.0.0.1:1")
    assert r.exit_code == 3 and "no live engine process" in r.output
    assert "Traceback" not in r.output


def test_bench_help_points_at_it():
    r = CliRunner().invoke(cli, ["bench", "--help"])
    assert r.exit_code == 0 and "diag bench overhead --help" in r.output


def test_a_window_sends_its_requests_in_waves_of_the_concurrency():
    """A window's requests go in waves: all of a wave together, the next only when every one of
    them is answered (the batch stays at `concurrency`). An HTTP server that answers each
    /generate after a pause records what was in flight when each request arrived."""
    import json
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from diag.engine import overhead

    lock = threading.Lock()
    state = {"in_flight": 0, "answered": 0}
    seen: list[tuple[int, int]] = []  # (in flight, answered) as each request arrived

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            self.rfile.read(int(self.headers["Content-Length"]))
            with lock:
                seen.append((state["in_flight"], state["answered"]))
                state["in_flight"] += 1
            time.sleep(0.05)
            body = json.dumps({"meta_info": {"completion_tokens": 3}}).encode()
            with lock:
                state["in_flight"] -= 1
                state["answered"] += 1
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with ThreadPoolExecutor(2) as pool:
            spt, made = overhead.window(f"http://127.0.0.1:{srv.server_port}", 5, 3, 2, 10.0,
                                        pool)
    finally:
        srv.shutdown()
    assert made == 15 and spt > 0
    # waves of 2, 2, 1: a wave's requests arrive after every earlier one was answered
    assert sorted(a for _, a in seen) == [0, 0, 2, 2, 4]
    assert max(f for f, _ in seen) <= 1
