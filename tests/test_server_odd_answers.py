"""Issue 41, item 2: a live server's odd answers are one clear error, the same on every surface.

`/server_info` whose `attention_backend` is a list (or an object, a number, nested) crashed two
probes (`unhashable type: 'list'`) and `fix check --server` (exit 4, "applicability check
crashed"); now `diag.server.get_server_info` checks the types of the arguments diag reads, once,
where the answer comes in: exit 3 on the command line with the field named, a warning in the
TUI. A `--server` URL with a path reads its server; a Prometheus answer that is a JSON list says
so. Real `diag` processes against a stand-in HTTP server (tests/standin_sglang_server.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from standin_sglang_server import StandinSGLangServer, server_info
from test_fleet_cli import _url, standin_prometheus  # noqa: F401 (a fixture)

from diag.context import SpecConfig

DIAG = str(Path(sys.executable).with_name("diag"))
AUDIT = ["--sglang", "0.5.23", "--platform", "hip"]


def _diag(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([DIAG, *argv], capture_output=True, text=True, timeout=300)


def _errors(r: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in r.stderr.splitlines() if ln.startswith("diag: error:")]


@pytest.mark.release
@pytest.mark.parametrize("value, said", [
    (["dsa", "x"], "attention_backend is a list (['dsa', 'x']), not a string"),
    ({"name": "dsa"}, "attention_backend is an object ({'name': 'dsa'}), not a string"),
    (3, "attention_backend is a number (3), not a string"),
    ([["dsa"]], "attention_backend is a list ([['dsa']]), not a string"),
])
def test_an_attention_backend_of_another_type_is_exit_3_on_every_command(release, value, said):
    release("0.5.23")
    with StandinSGLangServer() as s:
        s.json("/server_info", server_info(attention_backend=value))
        line = f"diag: error: {s.url}/server_info: {said}: not what SGLang serves (audit " \
               "without --server, with the configuration as options)"
        for argv in (["diagnose", *AUDIT, "--no-execute"],
                     ["probe", "draft-extend-graph", *AUDIT, "--no-execute"],
                     ["fix", "list", *AUDIT], ["fix", "check", *AUDIT, "--no-dry"]):
            r = _diag(*argv, "--server", s.url)
            assert r.returncode == 3, (argv, r.returncode, r.stderr)
            assert _errors(r) == [line], (argv, r.stderr)
            assert "crash" not in r.stdout + r.stderr


@pytest.mark.release
def test_a_null_attention_backend_is_not_given_not_an_error(release):
    release("0.5.23")
    with StandinSGLangServer() as s:
        s.json("/server_info", server_info(attention_backend=None))
        r = _diag("fix", "check", *AUDIT, "--no-dry", "--server", s.url, "--require",
                  "profiler-controlled-teardown")
        assert r.returncode == 0, r.stderr
        assert "crash" not in r.stdout


@pytest.mark.release
def test_the_tui_says_the_same_as_a_warning(release):
    release("0.5.23")
    with StandinSGLangServer() as s:
        s.json("/server_info", server_info(attention_backend=["dsa", "x"]))
        r = _diag("tui", "--once", "--width", "400", *AUDIT, "--server", s.url)
        assert r.returncode == 0, r.stderr
        assert "probe crashed" not in r.stdout and "unhashable" not in r.stdout
        assert "server evidence unavailable: " f"{s.url}/server_info: attention_backend is a " \
               "list (['dsa', 'x']), not a string" in r.stdout


@pytest.mark.release
def test_a_server_url_with_a_path_reads_its_server(release):
    release("0.5.23")
    with StandinSGLangServer() as s:
        s.json("/server_info", server_info(attention_backend="dsa"))
        r = _diag("fix", "list", *AUDIT, "--server", f"{s.url}/v1/models")
        assert r.returncode == 0, r.stderr
        assert r.stderr.splitlines() == [
            f"diag: --server {s.url}/v1/models: reading its server {s.url} (diag reads "
            "/server_info and /metrics there)"]
        assert "--attention-backend dsa" in r.stdout and "not an SGLang server" not in r.stderr
        assert "/server_info" in s.hits and "/v1/models/server_info" not in s.hits


def test_from_server_args_takes_no_value_of_another_type():
    cfg = SpecConfig.from_server_args({"attention_backend": ["dsa"], "page_size": "64",
                                       "enable_dp_attention": "yes", "speculative_num_steps": 3,
                                       "disable_cuda_graph": "false"})
    assert (cfg.attention_backend, cfg.page_size, cfg.enable_dp_attention,
            cfg.speculative_num_steps, cfg.disable_cuda_graph) == (None, None, None, 3, False)


@pytest.mark.parametrize("body, said", [
    ('[1, 2]', "(/api/v1/query returned a JSON list, not an object with status and data)"),
    ('{"status": "success", "data": [1]}', "(/api/v1/query: data is a JSON list, not an object)"),
    ('{"status": "maybe"}', "(/api/v1/query: status is 'maybe', not 'success' or 'error')"),
])
def test_a_prometheus_answer_of_another_shape_says_what(standin_prometheus, body, said):  # noqa: F811
    standin_prometheus.answer = (200, "application/json", body, 0.0)
    url = _url(standin_prometheus)
    r = _diag("fleet", "--prometheus", url)
    assert r.returncode == 3
    assert _errors(r) == [f"diag: error: {url} did not answer like a Prometheus API {said}"]
