"""`diag` commands in-process through click's CliRunner: exit codes, --fail-on, JSON, --server."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from report_schema import check_fix_list, check_report
from standin_sglang_server import StandinSGLangServer, metrics_text, server_info

from diag.cli import main

pytestmark = pytest.mark.release


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def probe(*args: str):
    return invoke("probe", "draft-extend-graph", "--platform", "hip", *args)


def test_probe_list_and_unknown_probe():
    r = invoke("probe", "--list")
    assert r.exit_code == 0 and "draft-extend-graph" in r.output
    r = invoke("probe", "no-such-probe", "--sglang", "0.5.23")
    assert r.exit_code == 2 and "unknown probe" in r.output


@pytest.mark.parametrize("version,args,fail_on,code", [
    ("0.5.23", [], "fail", 0),  # warn (triton falls back) is below --fail-on fail
    ("0.5.23", [], "warn", 1),
    ("0.5.18", ["--attention-backend", "dsv4"], "warn", 0),  # ok
    ("0.5.18", ["--attention-backend", "dsa"], "fail", 1),  # fail
    ("0.5.19", ["--attention-backend", "dsa"], "fail", 0),
    ("0.5.17", ["--attention-backend", "dsv4"], "fail", 1),
    ("0.5.23", ["--attention-backend", "aiter", "--speculative-num-steps", "1"], "fail", 1),
    ("0.5.23", ["--attention-backend", "aiter", "--speculative-num-steps", "3"], "warn", 0),
])
def test_exit_codes_follow_fail_on(release, version, args, fail_on, code):
    release(version)
    r = probe("--sglang", version, "--fail-on", fail_on, *args)
    assert r.exit_code == code, r.output


def test_probe_json_schema(release):
    release("0.5.23")
    r = probe("--sglang", "0.5.23", "--json")
    doc = json.loads(r.stdout)
    check_report(doc)
    f = doc["findings"][0]
    assert f["status"] == "warn" and "triton" in f["summary"]
    rows = {e["data"]["backend"]: e["data"] for e in f["evidence"] if e["kind"] == "row"}
    assert rows["dsv4"]["draft_extend"] == "DeepseekV4HipRadixBackend"
    assert rows["dsv4"]["mode"] == "graph" and rows["triton"]["mode"] == "eager"


def test_diagnose_json_schema(release):
    release("0.5.23")
    r = invoke("diagnose", "--sglang", "0.5.23", "--platform", "hip", "--no-execute", "--json")
    doc = json.loads(r.stdout)
    check_report(doc)
    assert "draft-extend-graph" in {f["probe"] for f in doc["findings"]}
    assert r.exit_code == doc["exit_code"]


def test_fix_list_json_schema(release):
    release("0.5.23")
    r = invoke("fix", "list", "--sglang", "0.5.23", "--platform", "hip", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    check_fix_list(doc)
    assert "draft-extend-allowlist" in {f["id"] for f in doc["fixes"]}


def test_gate_not_recognised_is_a_warning(release, tmp_path):
    """A stand-in tree: the real 0.5.23 worker whose draft-extend runner is set nowhere (a
    renamed gate variable is read by shape: tests/test_gate_refactors.py)."""
    real = release("0.5.23")
    src = real.file("srt/speculative/eagle_worker_v2.py").read_text()
    dest = tmp_path / "sglang" / "srt" / "speculative" / "eagle_worker_v2.py"
    dest.parent.mkdir(parents=True)
    # what every release has (the factory, the attention package): without it, exit 3
    (dest.parent / "draft_utils.py").write_text(real.file("srt/speculative/draft_utils.py")
                                                .read_text())
    (tmp_path / "sglang" / "srt" / "layers").mkdir()
    (tmp_path / "sglang" / "srt" / "layers" / "attention").symlink_to(
        real.file("srt/layers/attention"))
    dest.write_text(src.replace("cuda_graph_runner_for_draft_extend", "runner_x"))
    r = probe("--sglang", str(tmp_path), "--json")
    f = json.loads(r.stdout)["findings"][0]
    assert f["status"] == "warn" and f["summary"].startswith("gate not recognised")
    assert "cuda_graph_runner_for_draft_extend" in f["summary"]
    assert any(e.get("file") == "sglang/srt/speculative/eagle_worker_v2.py"
               for e in f["evidence"])
    assert any("expected:" in (e.get("detail") or "") for e in f["evidence"])
    assert r.exit_code == 3 and f["unrecognised"] is True  # diag cannot tell (issue 41)
    assert probe("--sglang", str(tmp_path), "--allow-unrecognised").exit_code == 0
    dest.unlink()  # a broken tree is a target error (tests/test_gate_probe.py)
    r = probe("--sglang", str(tmp_path), "--json")
    f = json.loads(r.stdout)["findings"][0]
    assert f["status"] == "error" and "is missing" in f["summary"] and r.exit_code == 3


# ------------------------------------------------------------------ --server (stand-in)

@pytest.fixture
def standin():
    with StandinSGLangServer() as s:
        yield s


def _live(doc):
    return [f for f in doc["findings"] if f["summary"].startswith("live server")][0]


def test_server_args_feed_the_verdict_and_live_capture_ok(release, standin):
    release("0.5.18")
    standin.json("/server_info", server_info(draft_extend_s=1.74, attention_backend="dsa",
                                             version="0.5.18"))
    standin.text("/metrics", metrics_text(1.74))
    r = probe("--sglang", "0.5.18", "--server", standin.url, "--json")
    doc = json.loads(r.stdout)
    check_report(doc)
    static = doc["findings"][0]
    assert static["status"] == "fail" and static["summary"].startswith("dsa on HIP")
    assert doc["config"]["source"] == "server" and doc["config"]["attention_backend"] == "dsa"
    live = _live(doc)
    assert live["status"] == "ok"
    names = {e.get("metric"): e.get("value") for e in live["evidence"] if e["kind"] == "metric"}
    assert names["rank 0 draft_extend capture time"] == 1.74
    assert names["rank 0 draft_extend graph memory"] == 0.42
    assert names['sglang:startup_cuda_graph_time_seconds{phase="draft_extend"}'] == 1.74
    assert r.exit_code == 1


def test_live_not_captured_fails(release, standin):
    release("0.5.17")
    standin.json("/server_info", server_info(draft_extend_s=0.0, graph_gb=0.0,
                                             attention_backend="dsv4", version="0.5.17"))
    doc = json.loads(probe("--sglang", "0.5.17", "--server", standin.url, "--json").stdout)
    live = _live(doc)
    assert live["status"] == "fail" and "not captured" in live["summary"]
    assert any("--enable-metrics" in (e.get("detail") or "") for e in live["evidence"])


def test_live_version_mismatch_is_noted(release, standin):
    release("0.5.23")
    standin.json("/server_info", server_info(version="0.5.19"))
    doc = json.loads(probe("--sglang", "0.5.23", "--server", standin.url, "--json").stdout)
    assert any("--sglang 0.5.19" in (e.get("detail") or "") for e in _live(doc)["evidence"])


def test_bad_server_answers_are_findings(release, standin):
    """An SGLang server that fails (HTTP 500): a finding; one that is not SGLang: exit 3."""
    release("0.5.23")
    standin.json("/server_info", {"x": 1}, status=500)
    r = probe("--sglang", "0.5.23", "--server", standin.url, "--json")
    live = _live(json.loads(r.stdout))
    assert live["status"] == "warn" and "HTTP 500" in live["summary"]


@pytest.mark.parametrize("setup,needle", [
    (lambda s: s.text("/server_info", "{oops", ctype="application/json"), "is not JSON"),
    (lambda s: None, "/server_info and /get_server_info answer HTTP 404"),
])
def test_server_that_is_not_sglang_is_exit_3(release, standin, setup, needle):
    release("0.5.23")
    setup(standin)
    r = probe("--sglang", "0.5.23", "--server", standin.url, "--json")
    assert r.exit_code == 3 and r.stdout == "", r.output
    assert f"{standin.url} is not an SGLang server" in r.stderr and needle in r.stderr


def test_server_without_speculative_decoding_is_skipped(release, standin):
    release("0.5.23")
    standin.json("/server_info", server_info(algorithm=None))
    doc = json.loads(probe("--sglang", "0.5.23", "--server", standin.url, "--json").stdout)
    assert _live(doc)["status"] == "skip"


# ------------------------------------------------------------------ diag env

def test_env_json_and_finds_a_standin_server_process():
    """A stand-in launcher: a sleeping Python whose argv looks like `sglang.launch_server`."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                          "-m", "sglang.launch_server", "--port", "31999"])
    try:
        time.sleep(0.3)
        r = invoke("env", "--json")
        assert r.exit_code == 0, r.output
        doc = json.loads(r.stdout)
        assert doc["schema_version"] == 1
        assert doc["torch"]["present"] and doc["torch"]["default_platform"] in ("hip", "cuda")
        assert "SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH" in doc["env"]
        mine = [s for s in doc["servers"] if s["pid"] == p.pid]
        assert mine and mine[0]["port"] == 31999 and mine[0]["url"] == "http://127.0.0.1:31999"
    finally:
        p.kill()
        p.wait()
    r = invoke("env")
    assert r.exit_code == 0 and "torch" in r.output and "variables:" in r.output


def test_env_rocm_smi_absent_is_reported():
    from diag.envinfo import amd_gpus

    got = amd_gpus()
    if shutil.which("rocm-smi") is None:
        assert got["gpus"] == [] and got["error"]
    else:
        assert got["source"] in ("amdsmi", "rocm-smi")


def test_env_vars_lists_relevant_and_prefixed():
    from diag.envinfo import env_vars

    got = env_vars({"SGLANG_FOO": "1", "HIP_VISIBLE_DEVICES": "0", "PATH": "/bin"})
    assert got["SGLANG_FOO"] == "1" and got["HIP_VISIBLE_DEVICES"] == "0"
    assert got["SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH"] is None and "PATH" not in got


def test_kill_switch_in_environment(release, monkeypatch):
    release("0.5.19")
    monkeypatch.setenv("SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH", "1")
    doc = json.loads(probe("--sglang", "0.5.19", "--attention-backend", "dsa", "--json").stdout)
    f = doc["findings"][0]
    assert f["status"] == "fail" and "kill switch" in f["summary"]
    assert "unset SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH" in f["hint"]


def test_unreachable_server_exit_3_in_process(release):
    from standin_sglang_server import free_port

    release("0.5.23")
    r = CliRunner().invoke(main, ["diagnose", "--sglang", "0.5.23", "--no-execute",
                                  "--server", f"127.0.0.1:{free_port()}"])
    assert r.exit_code == 3 and "cannot connect" in r.stderr
