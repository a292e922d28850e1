"""`diag tui` on the command line: --once frames, usage errors, lazy textual, the data layer."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, HTTPServer
from threading import Thread

import pytest
from click.testing import CliRunner

from diag import fixes, probes
from diag.cli import main
from diag.tui import data
from diag.tui.model import Model


def test_diag_help_and_tui_help_do_not_import_textual():
    code = ("import sys\nfrom click.testing import CliRunner\nfrom diag.cli import main\n"
            "for args in (['--help'], ['tui', '--help']):\n"
            "    r = CliRunner().invoke(main, args)\n"
            "    assert r.exit_code == 0, r.output\n"
            "assert 'textual' not in sys.modules, 'textual imported'\n"
            "assert 'tui' not in sys.modules\n"
            "print(r.output)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--once" in out.stdout and "--run-dir" in out.stdout and "--server" in out.stdout


@pytest.mark.release
def test_once_renders_every_tab_with_the_real_probes(release):
    release("0.5.17")
    r = CliRunner().invoke(main, ["tui", "--sglang", "0.5.17", "--platform", "hip", "--once",
                                  "--no-execute"])
    assert r.exit_code == 0, r.output
    out = r.stdout
    for part in ("sglang 0.5.17 [release] │ hip", "Overview", "Fixes",
                 "Timings", "Syncs", *probes.all_ids(), *fixes.all_ids()):
        assert part in out, part
    assert "Traceback" not in out
    assert max(len(line) for line in out.splitlines()) <= 80  # CliRunner: no terminal, 80 wide, with file:line, reach the Syncs table
    syncs = out[out.index("Syncs"):]
    assert "deepseek_v4_backend_hip_radix.py:" in syncs


def test_once_with_a_missing_target_says_so(tmp_path):
    r = CliRunner().invoke(main, ["tui", "--sglang", str(tmp_path / "nope"), "--platform", "hip",
                                  "--once"])
    assert r.exit_code == 0
    assert "target error:" in r.stdout and "Traceback" not in r.stdout


def test_run_dir_and_server_together_is_one_view(tmp_path):
    """Both are allowed (issue 41: one engine seen through both); a run dir that is not there
    is still exit 3 (tests/test_live_figures.py shows both in one frame)."""
    r = CliRunner().invoke(main, ["tui", "--run-dir", str(tmp_path / "x"), "--server",
                                  "http://h", "--once"])
    assert r.exit_code == 3 and "not both" not in r.output


def test_without_a_terminal_it_says_to_use_once():
    r = CliRunner().invoke(main, ["tui", "--platform", "hip"])
    assert r.exit_code == 2 and "--once" in r.output


METRICS = """\
# HELP sglang:inter_token_latency_seconds ITL
# TYPE sglang:inter_token_latency_seconds histogram
sglang:inter_token_latency_seconds_bucket{le="0.01"} 3
sglang:inter_token_latency_seconds_bucket{le="+Inf"} 4
sglang:inter_token_latency_seconds_sum 0.04
sglang:inter_token_latency_seconds_count 4
# HELP sglang:spec_accept_length accept length
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{model_name="m"} 2.5
# HELP sglang:startup_cuda_graph_time_seconds capture time
# TYPE sglang:startup_cuda_graph_time_seconds gauge
sglang:startup_cuda_graph_time_seconds{phase="decode"} 3.0
sglang:startup_cuda_graph_time_seconds{phase="draft_extend"} 1.74
"""


class _Metrics(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        body = METRICS.encode()
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture
def metrics_server():
    srv = HTTPServer(("127.0.0.1", 0), _Metrics)
    Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_server_metrics_are_read_through_diag_server(metrics_server):
    """A real HTTP server on loopback serving Prometheus text, read with diag.server."""
    got = data.read_server(metrics_server, timeout=2)
    assert got == {"inter-token latency": pytest.approx(0.01), "accept length": 2.5,
                   "draft-extend capture time": 1.74}
    m = Model()
    m.add_server(got)
    m.add_server(got)
    rows = {r.metric: r for r in m.timing_rows()}
    assert rows["accept length"].note == "now 2.5 tokens, last 2 reads: 2.5 tokens (n=2)"
    assert m.charts()["draft-extend capture time"] == [1.74, 1.74]


def test_server_reader_charts_the_histogram_mean_of_each_interval(metrics_server):
    """The live chart's ITL point is increase(_sum) / increase(_count) since the last poll, not
    the mean since the server started (which hides a change made mid-run)."""
    def itl(total: float, count: int) -> str:
        return METRICS.replace("_sum 0.04", f"_sum {total}").replace("_count 4", f"_count {count}")

    r = data.ServerReader(metrics_server, timeout=2)
    assert r.read()["inter-token latency"] == pytest.approx(0.01)  # first read: since start
    got = r.values(itl(0.04 + 6 * 0.002, 4 + 6))  # 6 new tokens at 2 ms each
    assert got["inter-token latency"] == pytest.approx(0.002)
    assert data.metric_values(itl(0.052, 10))["inter-token latency"] == pytest.approx(0.0052)
    got = r.values(itl(0.052, 10))  # no new tokens: no point, the other series still read
    assert "inter-token latency" not in got and got["accept length"] == 2.5
    got = r.values(itl(0.03, 2))  # the server restarted: its own mean again
    assert got["inter-token latency"] == pytest.approx(0.015)


def test_na_and_formatting():
    assert not data.NA and str(data.NA) == "n/a" and data.fmt_value(data.NA) == "n/a"
    st = data.Stats.of([0.0109, 0.0105, 0.0112, 0.0110])
    # median 10.95 ms (3 significant digits, float rounding), quartiles 10.6 and 11.15
    assert data.fmt_stats(st, "s") == "10.9 ms (IQR 10.6–11.2, n=4)"  # plain, never 1.1e+02
    assert data.fmt_stats(data.Stats(167, 110, 280, 100, 10), "tokens") == \
        "167 tokens (IQR 110–280, n=10)"
    assert data.fmt_stats(data.Stats(2, 2, 2, 2, 9), "syncs") == "2 (n=9)"
    assert data.fmt_ratio(None) == "-"
    row = data.TimingRow("f", "m", "s", data.Stats(1.0, 1, 1, 1, 3), data.Stats(19.1, 19, 19, 19, 3),
                         "bench")
    assert data.ratio_text(row) == ("19× slower", "bold red")
    row.expected = "collects at the stop"
    assert data.ratio_text(row)[0] == "19× slower (expected: collects at the stop)"
    row.after = data.Stats(0.158, 0.15, 0.16, 0.15, 3)
    assert data.ratio_text(row) == ("6.3× faster", "bold green")


def test_width_80_once_lines_and_whole_fix_ids(release):
    """`diag tui --once --width 80`: no line wider than 80, every fix id whole on a line."""
    from diag import fixes

    release("0.5.17")
    r = CliRunner().invoke(main, ["tui", "--sglang", "0.5.17", "--platform", "hip", "--once",
                                  "--no-execute", "--width", "80",
                                  "--attention-backend", "dsv4"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    for fid in fixes.all_ids():
        assert any(line.startswith(fid + "  ") for line in lines), fid
    # the configuration reaches the probes (diag diagnose's options): 0.5.17's HIP gate
    # (sglang/srt/speculative/eagle_worker_v2.py:403) admits only AiterMultiStepDraftBackend,
    # and dsv4 drafts with DeepseekV4HipRadixBackend, so draft-extend runs eager: FAIL for dsv4
    assert "FAIL   draft-extend-graph" in lines and "no attention backend given" not in r.stdout


def test_constant_and_empty_series_look_different():
    from diag.tui.charts import chart_line, spark

    m = Model()
    m.series["a"] = deque([2.0, 2.0, 2.0])
    m.series["b"] = deque()
    assert spark([2.0, 2.0], 10) == "▄▄" and spark([], 10) == ""
    assert "constant 2" in chart_line(m, "a", 80).plain
    assert "no points yet" in chart_line(m, "b", 80).plain
    m.series["inter-token latency"] = deque([0.001, 0.003])
    line = chart_line(m, "inter-token latency", 80).plain
    assert "min 1 ms max 3 ms" in line and "▁█" in line


def test_engine_view_splits_before_after_by_fix_state_per_process():
    t = time.time()
    ev = [
        {"ts": t, "kind": "start", "pid": 1, "fixes": {}},
        {"ts": t, "kind": "start", "pid": 2,
         "fixes": {"repeat-interleave-output-size": {"state": "applied"}}},
        {"ts": t + 1, "kind": "syncs", "pid": 1, "builder": "b", "count": 2, "seconds": 0.01},
        {"ts": t + 1, "kind": "syncs", "pid": 2, "builder": "b", "count": 0, "seconds": 0.001},
        {"ts": t + 2, "kind": "control_ack", "pid": 1, "fix": "repeat-interleave-output-size",
         "state": "applied", "ok": True},
        {"ts": t + 3, "kind": "syncs", "pid": 1, "builder": "b", "count": 0, "seconds": 0.001},
        {"ts": t + 3, "kind": "profiler_stop", "pid": 1, "seconds": 0.5},
    ]
    rows, syncs, series = data.engine_view(ev)
    by = {r.metric: r for r in rows}
    assert by["syncs per call"].before.n == 1
    assert by["syncs per call"].after.n == 2
    assert by["syncs per call"].fix == "repeat-interleave-output-size"  # the probe's declaration
    assert by["syncs time"].ratio == pytest.approx(0.1)
    assert by["profiler-stop time"].before.median == 0.5
    assert by["profiler-stop time"].after is None
    assert [(s.builder, s.before, s.after) for s in syncs] == [("b", 2, 0)]
    assert series["syncs per call"] == [2, 0, 0]


def test_export_doc_is_json(tmp_path):
    m = Model()
    m.set_pending(["draft-extend-graph"])
    path = data.write_export(m.export(), str(tmp_path / "x.json"))
    doc = json.loads(open(path).read())
    assert doc["findings"] == [{"probe": "draft-extend-graph", "status": "pending",
                                "summary": data.concern("draft-extend-graph")}]
    assert doc["gpu"] is None  # NA becomes null


DIAG_METRICS = """\
# TYPE diag_metadata_builds counter
diag_metadata_builds_total{builder="B.build"} 10
# TYPE diag_metadata_syncs counter
diag_metadata_syncs_total{builder="B.build"} 20
# TYPE diag_draft_extend_passes counter
diag_draft_extend_passes_total{mode="eager"} 7
diag_draft_extend_passes_total{mode="graph"} 3
# TYPE diag_fix_state gauge
diag_fix_state{fix="f1",state="applied"} 3
diag_fix_state{fix="f1",state="refused"} 1
diag_fix_state{fix="f1",state="reverted"} 0
"""


def test_server_reader_reads_diags_own_series_per_interval():
    """diag_* beside SGLang's (docs/metrics.md), parsed with
    prometheus_client's text parser; counters as their increase over each poll."""
    r = data.ServerReader("http://unused")
    got = r.values(DIAG_METRICS)
    assert got[data.SYNCS_PER_BUILD] == 2.0 and r.builders == {"B.build": 2.0}
    assert got["draft-extend passes, eager"] == 7 and got["draft-extend passes, graph"] == 3
    assert r.fix_states == {"f1": {"applied": 3.0, "refused": 1.0}}
    assert data.server_fix_states(r.fix_states) == {"f1": "server: applied ×3, refused ×1"}
    later = DIAG_METRICS.replace('builds_total{builder="B.build"} 10',
                                 'builds_total{builder="B.build"} 20')
    later = later.replace('mode="graph"} 3', 'mode="graph"} 8')
    got = r.values(later)  # 10 more builds with no new sync; 5 more graph passes
    assert got[data.SYNCS_PER_BUILD] == 0.0
    assert got["draft-extend passes, graph"] == 5 and "draft-extend passes, eager" not in got


@pytest.mark.release
def test_once_takes_the_configuration_diagnose_takes_and_agrees_with_its_json(release, tmp_path):
    """`diag tui` takes every configuration option `diag diagnose` takes; for one whose verdict
    needs them (Qwen4-Exp's config.json with a compressed QSA profile, aiter, topk 4 on HIP),
    the frame's per-phase rows and the JSON's are the same, and both are what 0.5.23's source
    says: page_size 64 from arg_groups/model_overrides/qwen4_exp.py:92, then the page-tree
    ValueError at arg_groups/speculative_hook.py:1278 (read by hand)."""
    import re

    from diag.kit.checks import static_phases

    release("0.5.23")
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["Qwen4ExpForConditionalGeneration"],
        "text_config": {"indexer_n_heads": 8, "indexer_compress_ratio": 8}}))
    args = ["--sglang", "0.5.23", "--platform", "hip", "--attention-backend", "aiter",
            "--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
            "--model", str(tmp_path), "--no-execute"]
    r = CliRunner().invoke(main, ["diagnose", *args, "--json"])
    rows = static_phases(json.loads(r.stdout))
    r2 = CliRunner().invoke(main, ["tui", *args, "--once", "--width", "200"])
    assert r2.exit_code == 0, r2.output
    shown = dict(re.findall(r"phase=([a-z-]+)\s+backend=aiter\s+mode=(\w+)", r2.stdout))
    assert shown == {p: v["mode"] for p, v in rows.items()}
    assert set(shown.values()) == {"refused"} and len(shown) == 3
    assert {(v["file"], v["line"]) for v in rows.values()} == {
        ("sglang/srt/arg_groups/speculative_hook.py", 1278)}
    assert "qwen4_exp.py:92" in r2.stdout
    # `fix list` takes the same configuration, and the Fixes tab shows its applicability
    r3 = CliRunner().invoke(main, ["fix", "list", *args[:-1], "--json"])
    assert r3.exit_code == 0, r3.output
    for f in json.loads(r3.stdout)["fixes"]:
        assert re.search(rf"{re.escape(f['id'])}\s+{re.escape(f['status'])}\b", r2.stdout), f
    bad = CliRunner().invoke(main, ["tui", "--model", str(tmp_path / "absent"), "--once"])
    assert bad.exit_code == 2 and "no config.json" in bad.output
