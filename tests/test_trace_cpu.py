"""`diag trace` on real torch-profiler traces recorded here on CPU (real torch, real Kineto
export; tests/trace_programs.py gives them SGLang 0.5.23's annotations in its order). Expected
numbers are counted in each test from the raw events, never taken from the reader.

A CPU profile has no runtime or kernel events: graph/eager must be reported as unknown, GPU time
as not recorded, host waits as not visible. Graph replays and waits: tests/test_trace_gpu.py."""

from __future__ import annotations

import gzip
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from report_schema import check

from diag.cli import main

PROGRAM = Path(__file__).parent / "trace_programs.py"


def _record(path: Path, *args: str) -> Path:
    subprocess.run([sys.executable, str(PROGRAM), str(path), *args], check=True,
                   capture_output=True, timeout=240)
    return path


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("traces")
    return {
        "spec": _record(d / "spec.trace.json.gz", "--rounds", "4", "--unknown", "my_region"),
        "tp0": _record(d / "p1-TP-0-DECODE.trace.json.gz", "--rounds", "3", "--bs", "2",
                       "--no-stack"),
        "tp1": _record(d / "p1-TP-1-DECODE.trace.json.gz", "--rounds", "2", "--bs", "2",
                       "--no-stack"),
    }


def _events(path: Path) -> list[dict]:
    raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
    return json.loads(raw)["traceEvents"]


def _ann(path: Path) -> list[dict]:
    return [e for e in _events(path) if e.get("cat") == "user_annotation"]


def _json(*args: str) -> dict:
    r = CliRunner().invoke(main, ["trace", *args, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    check("trace-v1.json", doc)
    return doc


def test_phases_counted_as_the_raw_annotations_say(traces):
    path = traces["spec"]
    ann = _ann(path)
    names = [e["name"] for e in ann]
    doc = _json(str(path))
    ph = doc["files"][0]["phases"]
    # one `draft`/`draft_extend` span per pass, one target step per verify/extend pass
    assert ph["draft-decode"]["passes"] == names.count("draft") == 4
    assert ph["draft-extend"]["passes"] == names.count("draft_extend") == 5
    assert ph["target-verify"]["passes"] == sum(n.startswith("step[VERIFY") for n in names) == 4
    assert ph["target-extend"]["passes"] == sum(n.startswith("step[EXTEND") for n in names) == 1
    assert "decode" not in ph  # no plain decode step in a speculative run
    verify = [e["dur"] for e in ann if e["name"].startswith("step[VERIFY")]
    got = ph["target-verify"]["by_mode"]["unknown"]["host_us"]
    assert got["median"] == pytest.approx(statistics.median(verify))
    assert (got["min"], got["max"], got["n"]) == (pytest.approx(min(verify)),
                                                  pytest.approx(max(verify)), 4)
    assert ph["target-verify"]["batch_sizes"] == {"1": 4}


def test_cpu_profile_says_graph_or_eager_unknown_and_gpu_not_recorded(traces):
    doc = _json(str(traces["spec"]))
    f = doc["files"][0]
    assert f["platform"] == "cpu" and not f["completeness"]["gpu_recorded"]
    for ph in f["phases"].values():
        assert ph["graph_passes"] == ph["eager_passes"] == ph["graph_replays"] == 0
        assert ph["unknown_passes"] == ph["passes"]
        gpu = ph["by_mode"]["unknown"]["gpu_us"]
        assert gpu["stats"] is None and not gpu["reliable"] and "no GPU activity" in gpu["why"]
    w = f["host_waits"]
    assert not w["visible"] and w["by_site"] == [] and w["notes"]


def test_unknown_annotations_are_reported_not_dropped(traces):
    path = traces["spec"]
    n = sum(e["name"] == "my_region" for e in _ann(path))
    doc = _json(str(path))
    row = next(a for a in doc["files"][0]["annotations"] if a["name"] == "my_region")
    assert row == {"name": "my_region", "count": n, "known": False} and n == 4
    assert any(x["title"] == "annotations diag does not know" and "my_region" in x["detail"]
               for x in doc["findings"])
    known = {a["name"] for a in doc["files"][0]["annotations"] if a["known"]}
    assert {"draft", "draft_extend", "scheduler.run_batch", "step[VERIFY bs=1]"} <= known


def test_stacks_and_versions_read_from_the_file(traces):
    for key in ("spec", "tp0"):
        evs = _events(traces[key])
        f = _json(str(traces[key]))["files"][0]
        assert f["with_stacks"] == any(e.get("cat") == "python_function" for e in evs)
        assert f["events"] == len(evs)
    assert _json(str(traces["spec"]))["files"][0]["with_stacks"]
    assert not _json(str(traces["tp0"]))["files"][0]["with_stacks"]


def test_files_per_rank_and_stage_are_merged(traces):
    doc = _json(str(traces["tp0"]), str(traces["tp1"]), str(traces["spec"]))
    assert [(f["rank"], f["stage"]) for f in doc["files"]] == [(0, "DECODE"), (1, "DECODE"),
                                                                (None, None)]
    counts = [sum(e["name"] == "draft" for e in _ann(traces[k])) for k in ("tp0", "tp1", "spec")]
    assert counts == [3, 2, 4]
    assert doc["merged"]["phases"]["draft-decode"]["passes"] == sum(counts)
    by_rank = {r["rank"]: r["phases"]["draft-decode"]["passes"] for r in doc["ranks"]}
    assert by_rank == {0: 3, 1: 2, None: 4}


def test_baseline_gives_the_per_phase_difference(traces):
    base, cur = traces["tp0"], traces["spec"]
    doc = _json(str(cur), "--baseline", str(base))
    row = next(r for r in doc["compare"] if r["phase"] == "target-verify")

    def med(p):
        return statistics.median(e["dur"] for e in _ann(p) if e["name"].startswith("step[VERIFY"))

    assert row["host_us_delta"] == pytest.approx(med(cur) - med(base))
    assert row["baseline"]["passes"] == 3 and row["current"]["passes"] == 4
    assert row["mode_change"] is None and not row["gpu_us_delta"]["reliable"]


def test_text_and_json_tell_the_same_counts(traces):
    doc = _json(str(traces["spec"]))
    r = CliRunner().invoke(main, ["trace", str(traces["spec"])])
    assert r.exit_code == 0
    for phase, ph in doc["files"][0]["phases"].items():
        assert f"{phase}: {ph['passes']} passes, {ph['graph_passes']} graph " in r.stdout
    assert f"{len(doc['findings'])} finding(s)" in r.stdout


def test_fail_on_warn_exits_1_with_findings(traces):
    r = CliRunner().invoke(main, ["trace", str(traces["spec"]), "--fail-on", "warn"])
    assert r.exit_code == 1


@pytest.mark.parametrize("case", ["missing", "empty-directory", "not-json", "no-events-key",
                                  "bare-list", "truncated-gz", "empty"])
def test_bad_paths_exit_3_with_one_line(tmp_path, traces, case):
    p = tmp_path / "t.json"
    if case == "empty-directory":
        p = tmp_path / "d"
        p.mkdir()
        (p / "notes.txt").write_text("not a trace")
    elif case == "not-json":
        p.write_text("hello")
    elif case == "no-events-key":
        p.write_text(json.dumps({"schemaVersion": 1, "other": [1, 2]}))
    elif case == "bare-list":
        p.write_text(json.dumps([{"ph": "X", "name": "a", "ts": 1, "dur": 1}]))
    elif case == "truncated-gz":
        p = tmp_path / "t.json.gz"
        p.write_bytes(traces["spec"].read_bytes()[:5000])
    elif case == "empty":
        p.write_text(json.dumps({"traceEvents": []}))
    r = subprocess.run([sys.executable, "-m", "diag", "trace", str(p)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 3, (case, r.stderr)
    assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("diag: error: ") and "Traceback" not in r.stderr


def test_no_path_is_a_usage_error():
    assert CliRunner().invoke(main, ["trace"]).exit_code == 2


@pytest.mark.release
def test_source_check_names_the_release_verdict_and_cannot_tell_on_cpu(traces, release):
    """0.5.23 captures triton's draft-extend on CUDA: TritonAttnBackend is first in
    `graph_supported_backend_types` (speculative/eagle_worker_v2.py:567-573, used on
    `_is_cuda or _is_musa` :574). A CPU profile cannot say graph or eager: no verdict on it."""
    tree = release("0.5.23").root
    doc = _json(str(traces["spec"]), "--sglang", str(tree), "--attention-backend", "triton",
                "--speculative-num-steps", "2")
    sc = doc["source_check"]
    assert sc["source"]["mode"] == "graph" and sc["source"]["platform"] == "cuda"
    assert sc["source"]["gate"].startswith("sglang/srt/speculative/eagle_worker_v2.py:")
    assert sc["agrees"] is None and "cannot be told" in sc["detail"]
    assert not any(f["status"] == "fail" for f in doc["findings"])


def test_source_options_need_the_backend(traces):
    r = CliRunner().invoke(main, ["trace", str(traces["spec"]), "--kill-switch"])
    assert r.exit_code == 2 and "--attention-backend" in r.output
