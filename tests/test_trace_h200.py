"""`diag trace` on real torch-profiler traces of a real SGLang 0.5.23 server on an H200 (CUDA,
triton, EAGLE, graphs on; tests/fixtures/traces/README.md says how each was recorded). Every
expected number is counted in this file from the raw events (gzip + json, a few lines per
count), never taken from the reader; the counts are also stated per fixture.

Per fixture, from the raw events (annotation counts; cudaGraphLaunch inside the span; kernels
with the launch's correlation):
- captured-bs1: verify 5 (5 graph, 44 kernels each), draft 5 (5 graph, 31), draft_extend 6
  (5 graph, 28 kernels; 1 eager right after the `step[EXTEND ...]` prefill), extend 1.
- killswitch-bs1: verify 6 (graph, 44), draft 6 (graph, 31), draft_extend 6, all eager.
- captured-bs16: batch 16 above the captured 8: verify 1, draft 1, draft_extend 3 (2 after a
  prefill, 1 at bs=16), all eager.
- stage: decode file 4/4/4 graph; prefill file draft_extend 1 eager after extend 1.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from report_schema import check

from diag.cli import main

FIX = Path(__file__).parent / "fixtures" / "traces"


def _file(scenario: str, part: str = "") -> Path:
    return next(p for p in sorted((FIX / scenario).glob("*.trace.json.gz")) if part in p.name)


def _raw(path: Path) -> list[dict]:
    return json.loads(gzip.open(path).read())["traceEvents"]


def _json(*args: str) -> dict:
    r = CliRunner().invoke(main, ["trace", *args, "--json", "--fail-on", "never"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    check("trace-v1.json", doc)
    return doc


def _count(path: Path, span: str) -> dict:
    """From the raw events: passes of the annotation `span` (a name, or a `step[X` prefix),
    those holding a cudaGraphLaunch on their thread, and kernels per launch."""
    ev = _raw(path)
    spans = [e for e in ev if e.get("cat") == "user_annotation"
             and (e["name"] == span or (span.startswith("step[") and e["name"].startswith(span)))]
    launches = [e for e in ev if e.get("cat") == "cuda_runtime" and e["name"] == "cudaGraphLaunch"]
    per_corr = Counter(e["args"]["correlation"] for e in ev if e.get("cat") == "kernel")
    graph, kpr = 0, Counter()
    for s in spans:
        inside = [g for g in launches if g["tid"] == s["tid"]
                  and s["ts"] <= g["ts"] <= s["ts"] + s["dur"]]
        graph += bool(inside)
        kpr.update(per_corr[g["args"]["correlation"]] for g in inside)
    return {"passes": len(spans), "graph": graph, "eager": len(spans) - graph,
            "kpr": {str(k): v for k, v in kpr.items()}}


PHASE_SPAN = {"target-verify": "step[VERIFY", "draft-decode": "draft",
              "draft-extend": "draft_extend", "target-extend": "step[EXTEND"}


@pytest.mark.parametrize("scenario,stated", [
    ("tr-captured-bs1", {"target-verify": (5, 5, {"44": 5}), "draft-decode": (5, 5, {"31": 5}),
                         "draft-extend": (6, 5, {"28": 5}), "target-extend": (1, 0, {})}),
    ("tr-killswitch-bs1", {"target-verify": (6, 6, {"44": 6}), "draft-decode": (6, 6, {"31": 6}),
                           "draft-extend": (6, 0, {})}),
    ("tr-captured-bs16", {"target-verify": (1, 0, {}), "draft-decode": (1, 0, {}),
                          "draft-extend": (3, 0, {}), "target-extend": (2, 0, {})}),
])
def test_passes_replays_and_kernels_per_replay_exact(scenario, stated):
    path = _file(scenario)
    ph = _json(str(path))["files"][0]["phases"]
    assert set(ph) == set(stated)
    for phase, (passes, graph, kpr) in stated.items():
        raw = _count(path, PHASE_SPAN[phase])
        assert (raw["passes"], raw["graph"], raw["kpr"]) == (passes, graph, kpr), phase
        got = ph[phase]
        assert (got["passes"], got["graph_passes"], got["eager_passes"]) == \
            (passes, graph, passes - graph), phase
        assert got["graph_replays"] == sum(kpr.values())
        assert got["kernels_per_replay"]["counts"] == kpr and got["kernels_per_replay"]["reliable"]


def test_eager_reasons_the_trace_shows():
    """The prefill's draft extend follows its `step[EXTEND` on the thread; bs=16 passes are above
    the captured 8 (`--cuda-graph-max-bs-decode 8`, README) when that is given."""
    path = _file("tr-captured-bs16")
    ev = sorted((e for e in _raw(path) if e.get("cat") == "user_annotation"),
                key=lambda e: e["ts"])
    after_prefill, prev = 0, None
    for e in ev:
        if e["name"] == "draft_extend" and prev is not None and prev.startswith("step[EXTEND"):
            after_prefill += 1
        if e["name"] in ("draft", "draft_extend") or e["name"].startswith(("step[VERIFY",
                                                                           "step[EXTEND")):
            prev = e["name"]
    assert after_prefill == 2
    ph = _json(str(path), "--max-captured-bs", "8")["files"][0]["phases"]
    reasons = ph["draft-extend"]["eager_reasons"]
    assert sum(n for r, n in reasons.items() if r.startswith("follows a prefill")) == 2
    assert reasons["batch 16 above the largest captured batch (8, as given)"] == 1
    assert ph["target-verify"]["eager_reasons"] == {
        "batch 16 above the largest captured batch (8, as given)": 1}
    plain = _json(str(path))["files"][0]["phases"]  # without the size: not invented
    assert plain["target-verify"]["eager_reasons"] == {"no reason shown in the trace": 1}


def test_host_waits_at_their_call_sites():
    path = _file("tr-captured-bs1")
    ev = _raw(path)
    syncs = [e for e in ev if e.get("cat") == "cuda_runtime"
             and e["name"] in ("cudaEventSynchronize", "cudaDeviceSynchronize",
                               "cudaStreamSynchronize")]
    frames = [e for e in ev if e.get("cat") == "python_function"]

    def sglang_site(s):  # innermost enclosing frame of SGLang's own code
        enclosing = [f for f in frames if f["tid"] == s["tid"] and f["ts"] <= s["ts"]
                     and f["ts"] + f["dur"] >= s["ts"] + s["dur"]
                     and f["name"].startswith("sglang/")]
        return max(enclosing, key=lambda f: f["ts"])["name"] if enclosing else None

    want = Counter((s["name"], sglang_site(s)) for s in syncs)
    w = _json(str(path))["files"][0]["host_waits"]
    got = Counter({(r["kind"], r["site"]): r["count"] for r in w["by_site"] if r["blocking"]})
    assert got == want and sum(want.values()) == 6
    # SGLang 0.5.23 managers/scheduler_components/batch_result_processor.py:952 is
    # `def process_batch_result_decode` (the stack names a function by its `def` line)
    assert want[("cudaEventSynchronize", "sglang/srt/managers/scheduler_components/"
                 "batch_result_processor.py(952): process_batch_result_decode")] == 4
    assert w["with_stacks"] and w["visible"] and w["notes"] == []
    copies = [e for e in ev if e.get("cat") == "gpu_memcpy" and "DtoH" in e["name"]]
    assert w["async_copies"] == len(copies) == 11  # each followed by no wait on its thread
    assert all(r["gpu_idle_after_us_median"] is not None for r in w["by_site"]
               if r["kind"] == "cudaEventSynchronize")


def test_no_stacks_says_what_is_lost():
    w = _json(str(_file("tr-captured-bs16")))["files"][0]["host_waits"]
    assert not w["with_stacks"] and all(r["site"] is None for r in w["by_site"])
    assert any("cannot be tied to a call site" in n for n in w["notes"])


def test_versions_from_the_metadata():
    path = _file("tr-captured-bs1")
    top = json.loads(gzip.open(path).read())
    f = _json(str(path))["files"][0]
    assert f["platform"] == "cuda"
    assert f["versions"] == {k: top[k] for k in ("cupti_version", "cuda_runtime_version",
                                                 "cuda_driver_version")}
    assert f["completeness"]["complete"] and f["completeness"]["lossy"] == []


def test_stage_files_merge_per_rank():
    dec, pre = _file("tr-stage", "decode"), _file("tr-stage", "prefill")
    doc = _json(str(dec), str(pre))
    assert [(f["stage"], f["rank"]) for f in doc["files"]] == [("decode", 0), ("prefill", 0)]
    n = {p: _count(dec, PHASE_SPAN["draft-extend"])[p] + _count(pre, PHASE_SPAN["draft-extend"])[p]
         for p in ("passes", "graph")}
    m = doc["merged"]["phases"]["draft-extend"]
    assert (m["passes"], m["graph_passes"]) == (n["passes"], n["graph"]) == (5, 4)
    assert doc["ranks"][0]["rank"] == 0 and doc["ranks"][0]["phases"] == doc["merged"]["phases"]


def test_kill_switch_against_captured_baseline():
    cur, base = _file("tr-killswitch-bs1"), _file("tr-captured-bs1")
    doc = _json(str(cur), "--baseline", str(base))
    row = next(r for r in doc["compare"] if r["phase"] == "draft-extend")
    assert row["mode_change"] == "graph -> eager"
    assert row["gpu_us_delta"]["reliable"]
    ev_c, ev_b = _raw(cur), _raw(base)

    def host_median(ev, graph: bool):
        import statistics

        launches = [e for e in ev if e.get("name") == "cudaGraphLaunch"]
        spans = [e for e in ev if e.get("cat") == "user_annotation" and e["name"] == "draft_extend"
                 and any(g["tid"] == e["tid"] and e["ts"] <= g["ts"] <= e["ts"] + e["dur"]
                         for g in launches) == graph]
        return statistics.median(e["dur"] for e in spans)

    assert row["host_us_delta"] == pytest.approx(host_median(ev_c, False) - host_median(ev_b, True))
    assert any(f["title"].startswith("draft-extend: graph -> eager") for f in doc["findings"])


@pytest.mark.release
@pytest.mark.parametrize("scenario,kill,agrees,code", [
    ("tr-captured-bs1", False, True, 0),  # 5 graph; the 1 eager follows the prefill
    ("tr-killswitch-bs1", True, True, 0),  # the kill switch set: eager by the source too
    ("tr-killswitch-bs1", False, False, 1),  # told it was not set: 6 eager with no reason
])
def test_source_verdict_against_the_trace(release, scenario, kill, agrees, code):
    """0.5.23 on CUDA captures triton's draft-extend (speculative/eagle_worker_v2.py:567-574,
    TritonAttnBackend on the CUDA list) unless the kill switch is set."""
    args = ["trace", str(_file(scenario)), "--sglang", str(release("0.5.23").root),
            "--attention-backend", "triton", "--speculative-num-steps", "2"]
    if kill:
        args.append("--kill-switch")
    r = CliRunner().invoke(main, [*args, "--json"])
    assert r.exit_code == code, r.output
    sc = json.loads(r.stdout)["source_check"]
    assert sc["source"]["mode"] == ("eager" if kill else "graph")
    assert sc["agrees"] is agrees
    text = CliRunner().invoke(main, args).stdout
    assert ("DISAGREES" in text) == (not agrees)


def test_reads_traces_where_torch_is_not_installed(notorch_python):
    """A trace is often read on a laptop, not on the GPU host: no torch, no SGLang needed."""
    path = _file("tr-captured-bs16")
    r = subprocess.run([str(notorch_python), "-m", "diag", "trace", str(path), "--json"],
                       capture_output=True, text=True, timeout=240,
                       env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["files"][0]["phases"]["draft-extend"]["passes"] == \
        _count(path, "draft_extend")["passes"] == 3


def test_a_directory_stands_for_its_traces():
    d = FIX / "tr-stage"
    doc = _json(str(d))
    assert [Path(f["path"]).name for f in doc["files"]] == sorted(
        p.name for p in d.glob("*.trace.json.gz"))
    assert len(doc["files"]) == 2


def test_text_tells_the_json_figures():
    path = _file("tr-captured-bs1")
    doc = _json(str(path))
    text = CliRunner().invoke(main, ["trace", str(path)]).stdout
    for phase, ph in doc["files"][0]["phases"].items():
        k = ", ".join(f"{n} x{c}" for n, c in ph["kernels_per_replay"]["counts"].items()) or "-"
        assert (f"{phase}: {ph['passes']} passes, {ph['graph_passes']} graph "
                f"({ph['graph_replays']} replays), {ph['eager_passes']} eager; "
                f"kernels/replay {k}") in text
    for r in doc["files"][0]["host_waits"]["by_site"]:
        assert f"{r['count']:>5} x {r['kind']} in {r['phase'] or 'no phase'} at " \
               f"{r['site'] or '(no stack)'}" in text
