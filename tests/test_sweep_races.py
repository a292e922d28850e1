"""Adversarial sweep, races and odd HTTP: an engine killed while `fix apply` waits, a run
directory removed under `tui --once`, and HTTP answers a server or proxy may give (redirects,
an error body sent a byte at a time, a bad status line, credentials in the URL) end in a
documented exit code and one line: never exit 70, never a hang past the deadline, never an
exit 4 that says nothing.

Real agents in real subprocesses (the STAND-IN programs of tests/agent_standins, no SGLang),
real HTTP servers on 127.0.0.1, real `diag` processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_agent_faults import _agent, _end, _wait
from test_sweep_server import OddServer, _drip, _info, _one_line, _routes

from diag.engine import rundir

HERE = Path(__file__).resolve().parent
DIAG_STANDINS = [sys.executable, str(HERE / "agent_standins" / "diag_with_standins.py")]
DIAG = str(Path(sys.executable).with_name("diag"))


def _run(*argv: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess, float]:
    t = time.monotonic()
    r = subprocess.run([DIAG, *argv], capture_output=True, text=True, timeout=timeout)
    return r, time.monotonic() - t


# ----------------------------------------------------------------------------- run directories


@pytest.mark.parametrize("as_json", [False, True])
def test_an_engine_killed_while_fix_apply_waits_is_exit_4_with_its_reason(tmp_path, as_json):
    """The engine answers nothing (stopped), then is killed mid-wait: the command said nothing
    at all with exit 4; now its row says the process exited before it acknowledged."""
    d = rundir.create_run_dir(tmp_path / "d")
    run_id = rundir.write_meta(d, cmd=["x"])
    p, pid, stop = _agent(tmp_path, d, run_id=run_id)
    try:
        os.kill(pid, signal.SIGSTOP)
        cmd = subprocess.Popen([*DIAG_STANDINS, "fix", "apply", "standin-toggle", "--run-dir",
                                str(d), "--timeout", "30", *(["--json"] if as_json else [])],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _wait("the request", lambda: any(n.endswith(".json") for n in os.listdir(d / "control")))
        os.kill(pid, signal.SIGKILL)
        out, err = cmd.communicate(timeout=60)
    finally:
        _end(p, stop)
    assert cmd.returncode == 4, (out, err)
    if as_json:
        (row,) = json.loads(out)["processes"]
        assert row["pid"] == pid and row["acknowledged"] is False and row["waited"] is True
        assert row["reason"] == "exited before it acknowledged"
    else:
        assert f"pid {pid}" in out and "(exited before it acknowledged)" in out, out
    assert "internal error" not in err
    assert not [n for n in os.listdir(d / "control") if n.endswith(".tmp")]
    # what `fix status` says then matches the state files: the process exited, no fix applied
    st = subprocess.run([*DIAG_STANDINS, "fix", "status", "--run-dir", str(d), "--json"],
                        capture_output=True, text=True, timeout=60)
    assert st.returncode == 0, st.stderr
    (proc,) = json.loads(st.stdout)["runs"][0]["processes"]
    assert proc["pid"] == pid and proc["status"] == "exited"
    assert rundir.read_process(d, pid).fixes.get("standin-toggle", {}).get("state") != "applied"


def test_a_run_dir_removed_while_tui_once_reads_it_is_exit_3_not_a_frame(tmp_path):
    """Checked at the start, then removed while the frame is read (a big events file makes the
    read long): exit 3 in one line, as when it is not there at the start."""
    d = rundir.create_run_dir(tmp_path / "d")
    rundir.write_meta(d, run_id="r1", cmd=["x"])
    w = rundir.EventWriter(d, pid=os.getpid(), run_id="r1", max_bytes=1 << 30)
    w({"kind": "start", "ppid": 1, "started": time.time(), "argv": ["x"], "fixes": {}})
    for i in range(60000):
        w({"kind": "syncs", "builder": f"B{i % 50}", "phase": "draft-extend", "count": 1,
           "calls": 1, "seconds": 0.001})
    w.close()
    cmd = subprocess.Popen([DIAG, "tui", "--once", "--no-execute", "--run-dir", str(d)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)  # past the start's check, before the read
    shutil.rmtree(d)
    out, err = cmd.communicate(timeout=60)
    assert cmd.returncode == 3, (cmd.returncode, out[-500:])
    assert "does not exist" in _one_line(err)
    assert "unreadable" not in out


# ----------------------------------------------------------------------------- odd HTTP


def _send(status: int, body: bytes = b"", **headers: str):
    def answer(h) -> None:
        h.send_response(status)
        for k, v in {"Content-Length": str(len(body)), **headers}.items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body)
    return answer


def _raw(data: bytes):
    def answer(h) -> None:
        h.wfile.write(data)
        h.wfile.flush()
        h.close_connection = True
    return answer


def _error_dripped(h) -> None:
    """HTTP 500 whose body comes a byte every 0.2 s: `fleet` read it unbounded (60 s), then
    exit 70 (IncompleteRead)."""
    _drip(h, 500)


REDIRECTS = [
    (_send(307, Location="/server_info"), "HTTP 307"),  # to itself: urllib's 3-line loop text
    (_send(302, Location="http://127.0.0.1:1/x"), "a redirect to http://127.0.0.1:1/x"),
    (_send(302, Location="file:///etc/passwd"), "a redirect to file:///etc/passwd"),
]


@pytest.mark.parametrize("answer, said", [
    *REDIRECTS,
    (_raw(b"HELLO\r\n\r\n"), "BadStatusLine: HELLO"),  # its CR LF split the line
])
def test_a_redirect_or_a_bad_status_line_is_exit_3_in_one_line(answer, said):
    with OddServer(answer) as srv:
        r, _ = _run("fix", "list", "--sglang", "0.5.23", "--server", srv.url)
    assert r.returncode == 3, r.stderr
    assert said in _one_line(r.stderr)


def test_a_redirect_is_not_followed_by_diagnose_either():
    """The elsewhere (a closed port) was read as this server's: `cannot connect` named the URL
    given. Now it is exit 3 saying where it redirected, in one line, as on `fix list`."""
    with OddServer(_send(302, Location="http://127.0.0.1:1/server_info")) as srv:
        r, _ = _run("diagnose", "--no-execute", "--sglang", "0.5.23", "--server", srv.url,
                    "--json")
    assert r.returncode == 3, r.stderr
    assert "a redirect to http://127.0.0.1:1/server_info" in _one_line(r.stderr)


@pytest.mark.parametrize("answer, said", [
    (_error_dripped, "answered HTTP 500"),
    (_raw(b"HELLO\r\n\r\n"), "broke off its answer (BadStatusLine: HELLO)"),
    (REDIRECTS[0][0], "answered HTTP 307 (a redirect to /server_info"),
    (lambda h: time.sleep(10), "no answer within 1 s"),  # not `unreachable: timed out`
])
def test_fleet_on_an_odd_answer_is_exit_3_in_one_line_within_the_deadline(answer, said):
    with OddServer(answer) as srv:
        r, took = _run("fleet", "--prometheus", srv.url, "--timeout", "1")
    assert r.returncode == 3, r.stderr
    assert said in _one_line(r.stderr)
    assert took < 8, took


@pytest.mark.parametrize("url, said", [
    ("http://[::1:9090", "Invalid IPv6 URL"),  # was exit 70 (ValueError)
    ("http://:9090", "no host"),
    ("http://127.0.0.1:9090:9090", "the port must be a number from 1 to 65535"),
    ("http://127.0.0.1:9090/?x=1", "a query (?…) or fragment (#…)"),  # glued before /api/v1
    ("http://127.0.0.1:9090#f", "a query (?…) or fragment (#…)"),
    ("http://user:secretpw@127.0.0.1:9090", "a user or password in the URL is not supported"),
])
def test_fleet_urls_no_request_can_use_are_usage_errors(url, said):
    r, _ = _run("fleet", "--prometheus", url)
    assert r.returncode == 2, r.stderr
    assert said in _one_line(r.stderr)
    assert "secretpw" not in r.stderr


@pytest.mark.parametrize("cmd", [("fix", "list"), ("diagnose", "--no-execute")])
def test_credentials_in_a_server_url_are_a_usage_error_never_echoed(cmd):
    """`user:pw@` was taken for part of the host name (`cannot connect`, the password printed)."""
    with OddServer(_routes({"/server_info": (200, _info())})) as srv:
        host = srv.url.split("://", 1)[1]
        r, _ = _run(*cmd, "--sglang", "0.5.23", "--server", f"http://user:secretpw@{host}")
    assert r.returncode == 2, r.stderr
    assert "a user or password in the URL is not supported" in r.stderr
    assert "secretpw" not in r.stderr + r.stdout


def test_an_ipv6_literal_and_a_query_on_server_are_read():
    """Not failures: an IPv6 literal is served, a query or fragment is dropped with a note."""
    import socket
    import threading
    from http.server import ThreadingHTTPServer

    class V6(ThreadingHTTPServer):
        address_family = socket.AF_INET6
        daemon_threads = True

    plain = OddServer(_routes({"/server_info": (200, _info())}))
    plain.httpd.server_close()  # only its handler is used
    try:
        httpd = V6(("::1", 0), plain.httpd.RequestHandlerClass)
    except OSError:
        pytest.skip("no IPv6 loopback here")
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    try:
        port = httpd.server_address[1]
        r, _ = _run("fix", "list", "--sglang", "0.5.23", "--json", "--server",
                    f"http://[::1]:{port}/x?y=1#z")
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["config"]["attention_backend"] == "triton"
    assert f"reading its server http://[::1]:{port}" in r.stderr
