"""The GPU lane's crash driver (`lane.crash_try`), run against a real SGLang 0.5.23 server on CPU
under `diag run --fix profiler-controlled-teardown` with SGLANG_PROFILE_V2=1: what it sends, how
it knows a stage profile finished, and what it records, before it costs GPU time.

Expected from 0.5.23 `utils/profile_utils.py`: `_StageBasedTrigger` profiles the stages
["prefill", "decode"] (`interesting_stages=profile_stages or ["prefill", "decode"]`,
line 132 in `configure`), and `_ProfilerTorch.stop` writes one `<id>-TP-0-<stage>.trace.json.gz` per
stage (`output_suffix=f"-{stage}"`): two traces per profile. CPU activities only here (this torch
has no CUDA); the body is otherwise the lane's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks" / "gpu_engine"), str(ROOT / "tests")]

import engine_server  # noqa: E402

pytestmark = [pytest.mark.engine, pytest.mark.release, pytest.mark.slow,
              pytest.mark.timeout(900)]


def test_crash_driver_on_a_real_v2_server(release, models, tmp_path):
    import checks
    import lane

    t = release("0.5.23")
    d = tmp_path / "run"
    s = engine_server.start(t.root, models["bigram"], tmp_path / "server-fix-0.log", run_dir=d,
                            diag_args=("--fix", lane.FIX), extra_env={"SGLANG_PROFILE_V2": "1"})
    try:
        body = {**lane.CRASH_PROFILE, "activities": ["CPU"]}
        got = lane.crash_try("fix-0", "fix", s, tmp_path, 2, per_profile_s=120, body=body)
    finally:
        s.stop()
    assert got.error == "", got.error
    assert got.profiles_sent == 2 and got.profiles_done == 2 and got.alive
    for i in range(2):
        traces = sorted(p.name for p in (tmp_path / f"cprof-fix-0-{i}").glob("*.trace.json.gz"))
        assert [n.rsplit("-", 1)[-1] for n in traces] == ["decode.trace.json.gz",
                                                         "prefill.trace.json.gz"], traces
    assert got.crash() is None and got.as_dict()["dump"] == ""
    c = checks.check_crash("crash", [got])
    assert c.ok is None and c.data["verdict"] == "not run"  # one side only: nothing judged
