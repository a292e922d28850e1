"""One answer to "what can be done" (diag.fixes.advice): a finding names a fix only when `diag
fix list` calls it `applicable` for the same target, platform and configuration, and no hint
points at a fix that does not apply. Both commands run through click's CliRunner on the real
releases of tests/conftest.py.

Expected verdicts (from the releases' sources, see the table in docs/probes/draft-extend-graph.md):
- 0.5.17 `speculative/eagle_worker_v2.py` `_capture_cuda_graphs`:
  `supports_hip_aiter_draft_extend_graph` checks only aiter's classes, so DSV4's draft-extend
  (`DeepseekV4HipRadixBackend`) runs eager and the allow-list fix applies;
- 0.5.23 `_capture_cuda_graphs`: `supports_hip_draft_extend_graph` admits
  `DeepseekV4HipRadixBackend`, `DeepseekSparseAttnBackend`, `QwenSparseAttnBackend`: the fix
  is `upstream`, and `TritonAttnBackend` is on no HIP allow-list.
"""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from conftest import RELEASES, release_target
from report_schema import check_fix_list
from standin_sglang_server import StandinSGLangServer, server_info

from diag.cli import main

pytestmark = pytest.mark.release

BACKENDS = ("aiter", "dsv4", "dsa", "triton", None)


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _spelled(version: str, name: str) -> bool:
    """Whether the release's sources spell the backend name at all (its registry, draft
    factory or argument handling): a plain text search, independent of diag's reading."""
    srt = release_target(version).package / "srt"
    files = [*(srt / "layers" / "attention").glob("*.py"), srt / "speculative" / "draft_utils.py",
             srt / "server_args.py"]
    return any(f'"{name}"' in f.read_text(errors="replace") for f in files if f.is_file())


def _both(version: str, backend: str | None) -> tuple[dict, dict] | None:
    """The report and `fix list` rows; None when the release does not know the backend (both
    commands then refuse it: a usage error, exit 2)."""
    release_target(version)
    opts = ["--sglang", version, "--platform", "hip"] + (
        ["--attention-backend", backend] if backend else [])
    d = invoke("diagnose", "--no-execute", "--json", *opts)
    if backend and not _spelled(version, backend):
        fl = invoke("fix", "list", "--json", *opts)
        for r in (d, fl):
            assert r.exit_code == 2 and "has no such attention backend" in r.stderr, r.output
        return None
    assert d.exit_code in (0, 1), d.output
    fl = invoke("fix", "list", "--json", *opts)
    assert fl.exit_code == 0, fl.output
    doc = json.loads(fl.stdout)
    check_fix_list(doc)
    return json.loads(d.stdout), {f["id"]: f for f in doc["fixes"]}


def _named(hint: str | None, fid: str) -> bool:
    return bool(hint) and re.search(rf"(?<![\w-]){re.escape(fid)}(?![\w-])", hint) is not None


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b or "none")
@pytest.mark.parametrize("version", RELEASES)
def test_every_fix_a_finding_names_is_applicable_in_fix_list(version, backend):
    both = _both(version, backend)
    if both is None:
        return  # the release has no such backend: refused as a usage error (checked above)
    report, listed = both
    for f in report["findings"]:
        for fid in f["fixes"]:
            assert listed[fid]["status"] == "applicable", (f["probe"], fid, listed[fid])
        for fid, row in listed.items():
            if row["status"] != "applicable" and _named(f["hint"], fid):
                # a hint may name a fix only to say why it does not apply
                assert f["hint"].startswith("no diag fix applies") or \
                    f"{fid} is {row['status']} here" in f["hint"], (f["probe"], f["hint"])
            if row["status"] != "applicable":
                assert fid not in f["fixes"]


def test_expected_advice_on_two_releases():
    report, listed = _both("0.5.17", "dsv4")
    de = [f for f in report["findings"] if f["probe"] == "draft-extend-graph"][0]
    assert listed["draft-extend-allowlist"]["status"] == "applicable"
    assert de["status"] == "fail" and de["fixes"] == ["draft-extend-allowlist"]
    ms = [f for f in report["findings"] if f["probe"] == "metadata-syncs"][0]
    # 0.5.17 deepseek_v4_backend_hip_radix.py:1116 repeat_interleave without output_size
    assert ms["fixes"] == ["repeat-interleave-output-size"]
    report, listed = _both("0.5.23", "triton")
    de = [f for f in report["findings"] if f["probe"] == "draft-extend-graph"][0]
    assert listed["draft-extend-allowlist"]["status"] == "refused"
    assert de["fixes"] == []
    assert "no upstream HIP allow-list ever admitted it" in de["hint"]
    assert "dsv4" in de["hint"]  # what to run instead: a backend 0.5.23 captures


def test_readme_first_diagnose_hints_at_no_upstream_fix():
    """`diag diagnose` of the README: no SGLang importable, so the default release (0.5.23)."""
    from diag.target import find_importable

    release_target("0.5.23")
    args = [] if find_importable() is None else ["--sglang", "0.5.23"]
    r = invoke("diagnose", "--json", "--no-execute", *args)
    report = json.loads(r.stdout)
    assert report["target"]["version"] == "0.5.23"
    listed = {f["id"]: f for f in json.loads(invoke("fix", "list", "--json", *args).stdout)["fixes"]}
    upstream = [fid for fid, f in listed.items() if f["status"] == "upstream"]
    assert set(upstream) == {"draft-extend-allowlist", "repeat-interleave-output-size"}
    for f in report["findings"]:
        assert not set(upstream) & set(f["fixes"]), f
        for fid in upstream:
            assert not _named(f["hint"], fid) or f"{fid} is upstream here" in f["hint"], f


def test_fix_list_answers_for_the_configuration_given_or_read_from_a_server():
    release_target("0.5.18")
    base = ["fix", "list", "--json", "--sglang", "0.5.18", "--platform", "hip"]
    rows = lambda r: {f["id"]: f for f in json.loads(r.stdout)["fixes"]}  # noqa: E731
    # 0.5.18's gate admits DeepseekV4HipRadixBackend, not DeepseekSparseAttnBackend (docs/probes/draft-extend-graph.md table)
    assert rows(invoke(*base, "--attention-backend", "dsv4"))["draft-extend-allowlist"][
        "status"] == "upstream"
    dsa = rows(invoke(*base, "--attention-backend", "dsa"))["draft-extend-allowlist"]
    assert dsa["status"] == "applicable" and "DeepseekSparseAttnBackend (dsa)" in dsa["reason"]
    with StandinSGLangServer() as s:
        s.json("/server_info", server_info(attention_backend="dsa", version="0.5.18"))
        r = invoke(*base, "--server", s.url)
        assert r.exit_code == 0, r.output
        doc = json.loads(r.stdout)
        assert doc["config"]["attention_backend"] == "dsa" and doc["config"]["source"] == "server"
        assert rows(r)["draft-extend-allowlist"]["reason"] == dsa["reason"]
    text = invoke("fix", "list", "--sglang", "0.5.18", "--platform", "hip",
                  "--attention-backend", "triton").output
    assert "--attention-backend triton (options)" in text.splitlines()[0]
    assert "instead: on HIP sglang 0.5.18 captures draft-extend for" in text


def test_a_capture_that_would_sync_is_refused_with_the_site():
    """0.5.13.post1 `layers/attention/dsa_backend.py:1109` (`_apply_cuda_graph_metadata`, on the
    capture path): `torch.repeat_interleave(page_indices, repeats=extend_seq_lens, dim=0)`
    without output_size; no diag fix rewrites it, so allow-listing DSA there would sync under
    capture: refused in `fix list`, and the finding names no fix and says where."""
    report, listed = _both("0.5.13.post1", "dsa")
    row = listed["draft-extend-allowlist"]
    assert row["status"] == "refused"
    assert "no fix removes: sglang/srt/layers/attention/dsa_backend.py:1109 " \
           "DeepseekSparseAttnBackend._apply_cuda_graph_metadata" in row["reason"]
    de = [f for f in report["findings"] if f["probe"] == "draft-extend-graph"][0]
    assert de["fixes"] == [] and "dsa_backend.py:1109" in de["hint"]


def _de_finding(hint: str):
    from diag.findings import Finding, Status, row

    return Finding("draft-extend-graph", Status.WARN, "Draft-extend graph capture", "eager", [
        row(backend="dsv4", draft_extend="DeepseekV4HipRadixBackend", mode="eager"),
        row(backend="triton", draft_extend="TritonAttnBackend", mode="eager"),
        row(backend="aiter", draft_extend="AiterAttnBackend", mode="graph")],
        hint=hint, fixes=["draft-extend-allowlist"])


def test_advise_keeps_a_fix_only_when_it_changes_the_finding():
    from diag.findings import Finding, Status
    from diag.fixes.advice import advise
    from diag.fixes.base import APPLICABLE, Applicability

    hint = "draft-extend-allowlist adds the missing backends to the allow-list"
    f = _de_finding(hint)
    advise([f], {"draft-extend-allowlist": Applicability(
        APPLICABLE, "captures DSV4", changes=("DeepseekV4HipRadixBackend",))})
    assert f.fixes == ["draft-extend-allowlist"] and f.hint == hint  # an eager row it captures
    f = _de_finding(hint)
    advise([f], {"draft-extend-allowlist": Applicability(
        APPLICABLE, "captures QSA", "use dsv4", changes=("QwenSparseAttnBackend",))})
    assert f.fixes == []
    assert f.hint == ("no diag fix applies: draft-extend-allowlist would not change this: it "
                      "captures QwenSparseAttnBackend, not dsv4, triton. Instead: use dsv4")
    ok = Finding("profiler-teardown", Status.OK, "t", "fine",
                 hint="apply profiler-controlled-teardown", fixes=["profiler-controlled-teardown"])
    advise([ok], {"profiler-controlled-teardown": Applicability(APPLICABLE, "adds it")})
    assert ok.fixes == [] and ok.hint is None  # nothing to change: no advice toward a fix
