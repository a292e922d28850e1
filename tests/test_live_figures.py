"""Issue 37 and 41: one engine's own counters as graph-vs-eager figures per phase and the fixes'
predictions, computed once (`diag.engine.live`) and the same on `diag fix status` (text and
JSON), `diag fix list` and `diag tui --once`; the engine's release, platform and configuration
taken from its run directory and/or its server (`diag.engine.facts`).

Inputs are real: the counters of a real SGLang 0.5.22 fa3 server on an H200 with draft-extend
eager (tests/gpu_lane/allowlist-h200-run1/lane.json `counters.before`; read by eye: 979 eager
passes in 4.006 s, all `no-runner`; draft-decode graph 979 passes in 2.285 s, so the prediction
is 4.092 - 2.334 = 1.758 ms a pass), written into a run directory by the project's own event
writer, beside the real 0.5.22 release tree (the `release` fixture); a loopback HTTP server
serves /server_info and /metrics as SGLang does (the metrics text written by diag's own
Prometheus recorder would need a multiprocess directory; the names are `diag.engine.metrics`'s).
"""

from __future__ import annotations

import json
import os
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from threading import Thread

import pytest
import report_schema
from click.testing import CliRunner

from diag.cli import main
from diag.engine import live, rundir
from diag.engine.eventlog import EventWriter

ROOT = Path(__file__).resolve().parents[1]
LANE = json.loads((ROOT / "tests" / "gpu_lane" / "allowlist-h200-run1" / "lane.json").read_text())
BEFORE, AFTER = LANE["counters"]["before"], LANE["counters"]["after"]
CMD = ["python", "-m", "sglang.launch_server", "--model-path", "m", "--attention-backend", "fa3",
       "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--device", "cuda"]


def write_run(d: Path, counters: dict, root: str, cmd=None, torch=None) -> Path:
    """A run directory as `diag run` and one engine process's agent write it."""
    d = rundir.create_run_dir(d)
    rid = rundir.write_meta(d, cmd=cmd or CMD)
    w = EventWriter(d, pid=os.getpid(), run_id=rid)
    w({"kind": "start", "ppid": 1, "argv": ["sglang::scheduler"], "python": "3.11.9",
       "executable": "/usr/bin/python3", "started": time.time(), "source": "bootstrap",
       "sglang": None, "fixes_requested": [], "probes": ["draft-extend-graph"], "fixes": {},
       "probes_state": {}, "control": "poll", "run": rid,
       "torch": torch or {"cuda": "13.0", "hip": None}, "platform": "cuda"})
    w({"kind": "sglang", "version": "0.5.22", "root": root})
    w({"kind": "control", "mode": "batch", "engine": True, "rank": ""})
    for mode, v in counters["draft_extend"].items():
        for reason, n in (v.get("reasons") or {None: v["passes"]}).items():
            w({"kind": "draft_extend", "mode": mode, "reason": reason, "passes": n, "batch": 1,
               "seconds": v["seconds"]})
    for phase, modes in counters["graph_phases"].items():
        for mode, v in modes.items():
            w({"kind": "graph_phase", "phase": phase, "mode": mode, "passes": v["passes"],
               "seconds": v["seconds"]})
    return d


def metrics_text(counters: dict, itl_sum: float, itl_count: int) -> str:
    lines = ["# TYPE sglang:inter_token_latency_seconds histogram",
             f'sglang:inter_token_latency_seconds_bucket{{le="+Inf"}} {itl_count}',
             f"sglang:inter_token_latency_seconds_sum {itl_sum}",
             f"sglang:inter_token_latency_seconds_count {itl_count}",
             "# TYPE diag_draft_extend_passes counter",
             "# TYPE diag_draft_extend_seconds histogram",
             "# TYPE diag_draft_extend_eager_passes counter",
             "# TYPE diag_graph_phase_passes counter",
             "# TYPE diag_graph_phase_seconds counter"]
    for mode, v in counters["draft_extend"].items():
        lines.append(f'diag_draft_extend_passes_total{{mode="{mode}"}} {v["passes"]}')
        lines.append(f'diag_draft_extend_seconds_sum{{mode="{mode}"}} {v["seconds"]}')
        lines.append(f'diag_draft_extend_seconds_count{{mode="{mode}"}} {v["passes"]}')
        for r, n in (v.get("reasons") or {}).items():
            lines.append(f'diag_draft_extend_eager_passes_total{{reason="{r}"}} {n}')
    for phase, modes in counters["graph_phases"].items():
        for mode, v in modes.items():
            lines.append(f'diag_graph_phase_passes_total{{phase="{phase}",mode="{mode}"}} '
                         f'{v["passes"]}')
            lines.append(f'diag_graph_phase_seconds_total{{phase="{phase}",mode="{mode}"}} '
                         f'{v["seconds"]}')
    return "\n".join(lines) + "\n"


@pytest.fixture
def sglang_server():
    """A loopback server answering /server_info and /metrics; `state` sets what it says."""
    state = {"info": {}, "metrics": ""}

    class H(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            if self.path == "/server_info":
                body, ctype = json.dumps(state["info"]).encode(), "application/json"
            elif self.path == "/metrics":
                body, ctype = state["metrics"].encode(), "text/plain"
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = HTTPServer(("127.0.0.1", 0), H)
    Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", state
    srv.shutdown()


def _invoke(*args: str):
    r = CliRunner().invoke(main, list(args))
    assert r.exit_code == 0, r.output
    return r.stdout


def test_figures_from_the_recorded_h200_counters():
    v = live.figures(BEFORE, "run dir D, pid 1")
    de = v.phases[0]
    assert [p.phase for p in v.phases] == ["draft-extend", "target-verify", "draft-decode"]
    assert de.modes["eager"].passes == 979 and de.modes["eager"].reasons == {"no-runner": 979}
    assert de.modes["eager"].ms_per_pass == pytest.approx(4.0919, abs=1e-3)
    assert v.phases[2].modes["graph"].ms_per_pass == pytest.approx(2.3339, abs=1e-3)
    assert [p.fix for p in v.predictions] == ["draft-extend-allowlist"]
    assert v.predictions[0].per_pass_ms == pytest.approx(1.758, abs=1e-3)
    assert v.lines()[0] == "live counters (run dir D, pid 1):"
    # under the fix: graph, nothing left to predict; both runs pooled: eager → graph 0.388
    assert live.figures(AFTER, "x").predictions == []
    both = live.figures(live.pool([BEFORE, AFTER]), "x", applied={"draft-extend-allowlist"})
    assert both.phases[0].ratio == pytest.approx(1.5525 / 4.0060, abs=1e-3)
    # a server's diag_* series give the same counters back
    from prometheus_client.parser import text_string_to_metric_families

    fams = list(text_string_to_metric_families(metrics_text(BEFORE, 0.255, 100)))
    again = live.figures(live.counters_from_metrics(fams), "s")
    assert again.predictions[0].per_pass_ms == pytest.approx(v.predictions[0].per_pass_ms)
    assert live.token_ms(fams) == pytest.approx(2.55)


@pytest.mark.release
def test_status_list_and_tui_say_the_same_from_a_run_dir(release, tmp_path):
    root = str(release("0.5.22").root)
    d = write_run(tmp_path / "run", BEFORE, root)
    text = _invoke("fix", "status", "--run-dir", str(d))
    doc = json.loads(_invoke("fix", "status", "--run-dir", str(d), "--json"))
    report_schema.check("fix-status-v1.json", doc)
    proc = doc["runs"][0]["processes"][0]
    want = live.figures(BEFORE, f"run dir {d}, pid {os.getpid()}")
    assert proc["live"] == json.loads(json.dumps(want.to_dict()))
    assert proc["predictions"][0]["per_pass_ms"] == pytest.approx(1.7581, abs=1e-4)
    for line in want.lines():
        assert line in text, line
    # the engine's release, platform and configuration, each with where it came from
    eng = doc["runs"][0]["engine"]
    assert (eng["sglang"], eng["platform"], eng["config"]["attention_backend"]) == \
        ("0.5.22", "cuda", "fa3")
    assert "torch built for CUDA 13.0" in eng["sources"]["platform"]
    assert "engine: sglang 0.5.22, platform cuda, --attention-backend fa3" in text
    # fix list --run-dir: the engine's own target, and the prediction on the fix's row
    lst = json.loads(_invoke("fix", "list", "--run-dir", str(d), "--json"))
    report_schema.check("fix-list-v1.json", lst)
    assert lst["target"]["version"] == "0.5.22" and lst["platform"] == "cuda"
    assert lst["config"]["attention_backend"] == "fa3" and lst["config"]["source"] == "run dir"
    row = next(r for r in lst["fixes"] if r["id"] == "draft-extend-allowlist")
    assert row["prediction"]["per_pass_ms"] == proc["predictions"][0]["per_pass_ms"]
    assert row["prediction"]["source"] == f"live counters (run dir {d}, pid {os.getpid()})"
    lst_text = _invoke("fix", "list", "--run-dir", str(d))
    assert want.prediction_text(want.predictions[0]) in lst_text.replace("\n", " ").replace(
        "  ", " ") or "should save 1.758 ms per draft-extend pass" in lst_text
    # the TUI (text export): the header is the engine's, the same live lines on Timings
    once = _invoke("tui", "--run-dir", str(d), "--once", "--no-execute", "--width", "400")
    assert once.splitlines()[0].startswith("sglang 0.5.22 [path] │ cuda")
    timings = once[once.index("Timings"):once.index("Syncs per call")]
    for line in want.lines():
        assert line in timings, line
    assert "release: the engine's, pid" in once and "configuration: the engine's command line" \
        in once


@pytest.mark.release
def test_with_the_server_predictions_per_token_and_per_cent(release, tmp_path, sglang_server):
    url, state = sglang_server
    state["info"] = {"version": "0.5.22",
                     "server_args": {"attention_backend": "fa3", "speculative_num_steps": 3,
                                     "speculative_algorithm": "EAGLE", "device": "cuda"},
                     "internal_states": [{"avg_spec_accept_length": 3.0}]}
    state["metrics"] = metrics_text(BEFORE, 0.255, 100)  # 2.55 ms a token
    d = write_run(tmp_path / "run", BEFORE, str(release("0.5.22").root))
    doc = json.loads(_invoke("fix", "status", "--run-dir", str(d), "--server", url, "--json"))
    p = doc["runs"][0]["processes"][0]["live"]["predictions"][0]
    assert p["per_token_ms"] == pytest.approx(1.7581 / 3, abs=1e-3)
    assert p["percent_of_token"] == pytest.approx(100 * 1.7581 / 3 / 2.55, abs=0.05)
    text = _invoke("fix", "status", "--run-dir", str(d), "--server", url)
    assert "0.586 ms per token (1/accept length 3 from /server_info internal_states " \
        "avg_spec_accept_length of " + url + ")" in text
    assert "23.0 % of 2.550 ms per token (sglang:inter_token_latency_seconds sum/count on " \
        + url + "/metrics)" in text
    # --run-dir and --server together are one view in the TUI, with the same numbers
    once = _invoke("tui", "--run-dir", str(d), "--server", url, "--once", "--no-execute",
                   "--width", "400")
    assert "23.0 % of 2.550 ms per token" in once
    assert f"live counters (run dir {d}, pid {os.getpid()}):" in once
    # the server alone: its own diag_* series, the same prediction on fix list
    lst = json.loads(_invoke("fix", "list", "--server", url, "--json"))
    row = next(r for r in lst["fixes"] if r["id"] == "draft-extend-allowlist")
    assert row["prediction"]["per_pass_ms"] == pytest.approx(1.7581, abs=1e-4)
    assert row["prediction"]["source"] == f"live counters (server {url})"
    assert row["prediction"]["percent_of_token"] == pytest.approx(p["percent_of_token"])
    assert lst["target"]["version"] == "0.5.22"


@pytest.mark.release
def test_a_cpu_server_is_not_audited_as_hip(release, sglang_server):
    release("0.5.22")
    url, state = sglang_server
    state["info"] = {"version": "0.5.22", "server_args": {"attention_backend": "torch_native",
                                                          "device": "cpu"}}
    state["metrics"] = ""
    lst = json.loads(_invoke("fix", "list", "--server", url, "--json"))
    assert lst["platform"] == "cuda" and "device cpu" in lst["sources"]["platform"]
    once = _invoke("tui", "--server", url, "--once", "--no-execute", "--width", "300")
    assert "│ hip │" not in once.splitlines()[0] and "│ cuda │" in once.splitlines()[0]
    assert "non-HIP code path" in once


@pytest.mark.release
def test_a_cpu_engine_run_dir_is_not_audited_as_hip(release, tmp_path):
    d = write_run(tmp_path / "run", BEFORE, str(release("0.5.22").root),
                  cmd=[*CMD[:-1], "cpu"], torch={"cuda": None, "hip": None})
    lst = json.loads(_invoke("fix", "list", "--run-dir", str(d), "--json"))
    assert lst["platform"] == "cuda"
    assert lst["sources"]["platform"].startswith("device cpu (the engine's command line)")

