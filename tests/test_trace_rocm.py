"""`diag trace` on a real ROCm torch-profiler trace. No ROCm trace of our own exists yet (the GPU
machine is CUDA) and public ones may not be committed here, so this runs only where
DIAG_TEST_ROCM_TRACE names one: it was run on HolisticTraceAnalysis's
tests/data/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz (an MI250, ROCm 6.2). Expected
values are counted from the file's raw events."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from report_schema import check

from diag.cli import main

TRACE = os.environ.get("DIAG_TEST_ROCM_TRACE")
pytestmark = pytest.mark.skipif(not TRACE, reason="DIAG_TEST_ROCM_TRACE names no ROCm trace")


def test_rocm_trace_named_as_such_with_its_waits():
    path = Path(TRACE)
    raw = path.read_bytes()
    top = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    ev = top["traceEvents"]
    runtime = [e for e in ev if e.get("cat") == "cuda_runtime"]
    assert runtime and all(e["name"].startswith("hip") for e in runtime)
    r = CliRunner().invoke(main, ["trace", str(path), "--json", "--fail-on", "never"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    check("trace-v1.json", doc)
    f = doc["files"][0]
    assert f["platform"] == "rocm"
    keys = ("roctracer_version", "rocprofiler-sdk_version", "hip_runtime_version",
            "hip_driver_version")
    assert f["versions"] == {k: top[k] for k in keys if k in top}
    syncs = [e for e in runtime if e["name"].endswith("Synchronize")]
    assert f["host_waits"]["blocking"] == len(syncs)
    graphs = [e for e in runtime if e["name"] == "hipGraphLaunch"]
    assert bool(f["completeness"]["lossy"]) == bool(graphs)
