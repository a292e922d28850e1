"""The per-phase verdicts on the command line: options in, rows in the JSON (schema'd), the
text table, the exit code; one computation (`probes.draft_extend_graph.phases`) behind every surface."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from standin_sglang_server import StandinSGLangServer, server_info

from diag.cli import main
from diag.context import SpecConfig
from diag.probes.draft_extend_graph import phases
from tests.conftest import release_target
from tests.report_schema import check

ARGS = ["probe", "draft-extend-graph", "--sglang", "0.5.23", "--no-execute"]


def _run(*extra: str):
    return CliRunner().invoke(main, [*ARGS, *extra])


def _phase_rows(doc: dict) -> list[dict]:
    return [e["data"] for f in doc["findings"] for e in f["evidence"]
            if e["kind"] == "row" and "phase" in e["data"] and e["data"].get("config")]


def test_refused_configuration_fails_in_every_surface():
    """DeepSeek-V3.2 (DSA) forces page size 64 on CUDA and topk 4 with page size > 1 is refused
    for dsa (0.5.23 arg_groups/speculative_hook.py:1278, read by hand)."""
    opts = ["--platform", "cuda", "--attention-backend", "dsa", "--model", "deepseek-v32",
            "--speculative-eagle-topk", "4", "--speculative-num-steps", "3"]
    r = _run(*opts, "--json")
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    check("report-v1.json", doc)
    rows = _phase_rows(doc)
    assert [(d["phase"], d["mode"]) for d in rows] == [
        ("target-verify", "refused"), ("draft-decode", "refused"), ("draft-extend", "refused")]
    assert {(d["file"], d["line"]) for d in rows} == {
        ("sglang/srt/arg_groups/speculative_hook.py", 1278)}
    # the same verdicts as the module computes them, and the same in the text table
    cfg = SpecConfig(attention_backend="dsa", model="deepseek-v32", speculative_eagle_topk=4,
                     speculative_num_steps=3)
    direct = phases.phase_verdicts(release_target("0.5.23"), "cuda", cfg, "dsa")
    assert [(v.phase, v.mode) for v in direct] == [(d["phase"], d["mode"]) for d in rows]
    text = _run(*opts)
    assert text.exit_code == 1
    lines = [ln.split() for ln in text.stdout.splitlines()]
    table = {ln[0]: ln[1] for ln in lines if ln and ln[0] in phases.PHASES}
    assert table == {d["phase"]: d["mode"] for d in rows}
    assert "refuses to start" in text.stdout


def test_captured_phases_carry_runtime_fallbacks_in_json():
    r = _run("--platform", "cuda", "--attention-backend", "triton", "--model", "llama",
             "--speculative-eagle-topk", "1", "--speculative-num-steps", "3", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    check("report-v1.json", doc)
    rows = {d["phase"]: d for d in _phase_rows(doc)}
    assert all(rows[p]["mode"] == "graph" for p in phases.PHASES)
    for p in phases.PHASES:
        assert "batch-above-captured" in {f["reason"] for f in rows[p]["runtime_fallbacks"]}


def test_env_decides_the_hip_page_size():
    """On HIP a DSA model's page size follows SGLANG_USE_AITER (0.5.23
    model_overrides/deepseek_v2.py:151): unset -> page 1 -> topk 4 is allowed; set -> depends on
    the server's Triton (dsa/utils.py:34)."""
    # --dcp 1: with no --dcp, DSA's DCP rule (0.5.22+ deepseek_v2.py:26, topk 1 with
    # --dcp-size > 1) makes topk 4 `depends` whatever the page size
    base = ["--platform", "hip", "--attention-backend", "dsa", "--model", "deepseek-v32",
            "--speculative-eagle-topk", "4", "--speculative-num-steps", "3", "--dcp", "1",
            "--json"]
    off = json.loads(_run(*base, "--env", "SGLANG_USE_AITER=0").stdout)
    on = json.loads(_run(*base, "--env", "SGLANG_USE_AITER=1").stdout)
    assert {d["mode"] for d in _phase_rows(off)} == {"graph"}
    assert {d["mode"] for d in _phase_rows(on)} == {"depends"}


@pytest.mark.parametrize("bad, needle", [
    (["--env", "NOEQUALS"], "is not KEY=VALUE"),
    (["--speculative-eagle-topk", "0"], "speculative-eagle-topk"),
])
def test_bad_config_options_are_usage_errors(bad, needle):
    r = _run("--platform", "cuda", *bad)
    assert r.exit_code == 2 and needle in r.output and "Traceback" not in r.output


def test_model_path_without_config_is_a_usage_error(tmp_path):
    r = _run("--platform", "cuda", "--model", str(tmp_path))
    assert r.exit_code == 2, r.output
    assert "no config.json" in r.output and "Traceback" not in r.output


FIX_CHECK = ["fix", "check", "--no-dry", "--sglang", "0.5.23", "--platform", "hip",
             "--attention-backend", "aiter"]


@pytest.mark.parametrize("steps, code", [("1", 1), ("3", 0)])
def test_fix_check_require_phase_gates_draft_extend(steps, code):
    """aiter's draft-extend is captured on HIP only through the multi-step decode backend,
    absent with one step (0.5.23 eagle_worker_v2.py:560 tests draft_attn_backend)."""
    r = CliRunner().invoke(main, [*FIX_CHECK, "--speculative-num-steps", steps,
                                  "--require-phase", "draft-extend=graph", "--json"])
    assert r.exit_code == code, r.output
    doc = json.loads(r.stdout)
    check("fix-check-v1.json", doc)
    [row] = doc["phases"]
    assert row["phase"] == "draft-extend" and row["required_mode"] == "graph"
    assert row["ok"] is (code == 0) and doc["ok"] is (code == 0)
    assert row["mode"] == ("graph" if code == 0 else "eager")
    assert (row["file"], row["line"]) == ("sglang/srt/speculative/eagle_worker_v2.py", 560)


@pytest.mark.parametrize("args", [
    ["--require-phase", "draft-extend=fast"],
    ["--require-phase", "prefill=graph"],
])
def test_fix_check_bad_phase_requirement_is_usage(args):
    r = CliRunner().invoke(main, [*FIX_CHECK, *args])
    assert r.exit_code == 2 and "PHASE=MODE" in r.output


def test_fix_check_phase_needs_a_backend():
    r = CliRunner().invoke(main, ["fix", "check", "--no-dry", "--sglang", "0.5.23",
                                  "--platform", "hip", "--require-phase", "draft-extend=graph"])
    assert r.exit_code == 2 and "needs the attention backend" in r.output


def test_tui_overview_detail_shows_the_same_phase_table():
    """The Overview's detail of the draft-extend-graph finding lists each phase with the mode the
    JSON rows carry (one computation, rendered twice)."""
    from diag.context import Context
    from diag.probes import get
    from diag.tui.data import finding_view
    from diag.tui.model import Model
    from diag.tui.overview import finding_detail

    cfg = SpecConfig(attention_backend="aiter", model="llama", speculative_eagle_topk=1,
                     speculative_num_steps=1, environ={})
    ctx = Context(target=release_target("0.5.23"), platform="hip", config=cfg, execute=False)
    [f] = get("draft-extend-graph").run(ctx)
    rows = [e.data for e in f.evidence if e.kind == "row" and "phase" in e.data]
    assert [r["mode"] for r in rows] == ["graph", "eager", "eager"]
    text = finding_detail(Model(), finding_view(f)).plain
    shown = {ln.split()[0]: ln.split()[1] for ln in text.splitlines()
             if ln.split() and ln.split()[0] in phases.PHASES}
    assert shown == {r["phase"]: r["mode"] for r in rows}


def test_server_fills_topk_and_page_size():
    """`--server` gives the configuration: topk 4 and page size 64 from /server_info make dsa
    refused at start (0.5.23 arg_groups/speculative_hook.py:1278, read by hand)."""
    info = server_info(attention_backend="dsa", steps=3)
    info.update(speculative_eagle_topk=4, page_size=64, speculative_num_draft_tokens=8)
    with StandinSGLangServer() as s:
        s.json("/server_info", info)
        r = _run("--platform", "cuda", "--server", s.url, "--json")
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    check("report-v1.json", doc)
    rows = _phase_rows(doc)
    assert [d["mode"] for d in rows] == ["refused"] * 3
    assert {d["line"] for d in rows} == {1278}
    static = [f for f in doc["findings"] if f["summary"].startswith("dsa on CUDA")]
    assert static and "(server)" in static[0]["summary"]


def test_census_audits_the_backend_the_verdicts_audit():
    """DeepSeek-V4 runs dsv4 whatever --attention-backend says (0.5.23
    arg_groups/model_overrides/deepseek_v4.py:24 `{"attention_backend": "dsv4"}`, read by
    hand): the per-phase rows and the sync census's configured path both name dsv4, and on HIP
    the census's draft-extend total counts DeepseekV4HipRadixBackend, not triton's class."""
    opts = ["--sglang", "0.5.23", "--platform", "hip", "--attention-backend", "triton",
            "--model", "deepseek-v4", "--speculative-eagle-topk", "1",
            "--speculative-num-steps", "3", "--no-execute", "--json"]
    r = CliRunner().invoke(main, ["diagnose", *opts])
    doc = json.loads(r.stdout)
    check("report-v1.json", doc)
    rows = _phase_rows(doc)
    assert {d["backend"] for d in rows} == {"dsv4"}, rows
    [syncs] = [f for f in doc["findings"] if f["probe"] == "metadata-syncs"]
    assert "on the dsv4 (DeepseekV4ForCausalLM runs dsv4" in syncs["summary"], syncs["summary"]
    # the fix for DeepseekV4HipRadixBackend's builder is judged for dsv4 too (not "triton does
    # not build it")
    assert "triton does not build" not in (syncs.get("hint") or ""), syncs.get("hint")
    totals = {e["data"]["phase"]: e["data"] for e in syncs["evidence"]
              if e["kind"] == "metric" and (e.get("data") or {}).get("phase")}
    assert totals["draft-extend"]["backends"] == ["DeepseekV4HipRadixBackend"], totals
    assert not any("Triton" in c for t in totals.values() for c in t["backends"]), totals
    # and `fix list` judges the allow-list fix for dsv4, which the HIP gate already admits
    r = CliRunner().invoke(main, ["fix", "list", *[o for o in opts if o != "--no-execute"]])
    doc = json.loads(r.stdout)
    rows = doc.get("fixes", doc) if isinstance(doc, dict) else doc
    [al] = [f for f in rows if f.get("id") == "draft-extend-allowlist"]
    assert al["reason"].startswith("dsv4:") and "triton" not in al["reason"], al


@pytest.mark.parametrize("algo,mode,status", [("EAGLE", "graph", "not-needed"),
                                              ("NEXTN", "eager", "refused")])
def test_fix_list_agrees_with_the_multi_layer_worker(algo, mode, status):
    """MiMoV2 with EAGLE switches multi-layer EAGLE on (0.5.23
    arg_groups/model_overrides/mimo_v2.py:25, read by hand), whose worker captures draft-extend
    with no backend allow-list: the report says graph and `fix list` offers nothing for triton on
    HIP; with NEXTN the EAGLE worker's HIP gate leaves triton eager and the fix (whose list has
    no triton) is refused. `fix list` had judged the EAGLE worker's gate in both."""
    opts = ["--sglang", "0.5.23", "--platform", "hip", "--attention-backend", "triton",
            "--model", "MiMoV2ForCausalLM", "--speculative-algorithm", algo,
            "--speculative-eagle-topk", "1", "--speculative-num-steps", "3", "--json"]
    r = CliRunner().invoke(main, ["diagnose", *opts, "--no-execute"])
    rows = {d["phase"]: d["mode"] for d in _phase_rows(json.loads(r.stdout))}
    assert rows["draft-extend"] == mode, rows
    doc = json.loads(CliRunner().invoke(main, ["fix", "list", *opts]).stdout)
    [al] = [f for f in doc["fixes"] if f["id"] == "draft-extend-allowlist"]
    assert al["status"] == status, al
    if algo == "EAGLE":
        assert "multi-layer" in al["reason"], al
