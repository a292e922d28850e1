"""`diag probe draft-extend-graph` on real releases: a broken tree is a target error (exit 3,
CLI and JSON agree), the worker the environment selects is the one judged and named, aliases
and a factory's `None` are read as the release reads them, and severity follows evidence."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from report_schema import check_report
from standin_sglang_server import StandinSGLangServer, server_info

from diag.cli import main

pytestmark = pytest.mark.release

WORKER = "sglang/srt/speculative/eagle_worker_v2.py"


def probe(*args: str, env: dict[str, str] | None = None):
    return CliRunner(env=env).invoke(main, ["probe", "draft-extend-graph", "--platform", "hip",
                                            *args], catch_exceptions=False)


def _doc(r) -> dict:
    doc = json.loads(r.stdout)
    check_report(doc)
    return doc


@pytest.fixture(scope="module")
def tree_0523(release, tmp_path_factory) -> Path:
    """A writable copy of the 0.5.23 speculative package inside links to the rest."""
    real = release("0.5.23").root
    root = tmp_path_factory.mktemp("t0523")
    for child in real.iterdir():
        if child.name != "sglang":
            (root / child.name).symlink_to(child)
    pkg = root / "sglang"
    pkg.mkdir()
    for child in (real / "sglang").iterdir():
        if child.name != "srt":
            (pkg / child.name).symlink_to(child)
    (pkg / "srt").mkdir()
    for child in (real / "sglang/srt").iterdir():
        if child.name != "speculative":
            (pkg / "srt" / child.name).symlink_to(child)
    shutil.copytree(real / "sglang/srt/speculative", pkg / "srt/speculative")
    return root


@pytest.mark.parametrize("damage,what,line", [
    ("syntax", "does not parse (SyntaxError at line", True),
    ("empty", "is empty", False),
    ("missing", "is missing", False),
])
def test_broken_worker_is_a_target_error(tree_0523, damage, what, line):
    path = tree_0523 / WORKER
    original = path.read_text()
    n = len(original.splitlines())
    try:
        if damage == "syntax":
            path.write_text(original + "\ndef broken(:\n")
        elif damage == "empty":
            path.write_text("")
        else:
            path.unlink()
        r = probe("--sglang", str(tree_0523))
        assert r.exit_code == 3, r.output
        assert f"[ERROR] draft-extend-graph: target error: {WORKER} {what}" in \
            " ".join(r.output.split())  # the report wraps to 100 columns
        assert "changed the gate's shape" not in r.output
        rj = probe("--sglang", str(tree_0523), "--json")
        doc = _doc(rj)
        f = doc["findings"][0]
        assert rj.exit_code == doc["exit_code"] == 3
        assert f["status"] == "error" and f["target_error"] is True and what in f["summary"]
        loc = next(e for e in f["evidence"] if e["kind"] == "location")
        assert loc["file"] == WORKER
        assert loc.get("line") == (n + 2 if line else None)
    finally:
        path.write_text(original)


def test_broken_factory_is_a_target_error(tree_0523):
    path = tree_0523 / "sglang/srt/speculative/draft_utils.py"
    original = path.read_text()
    try:
        path.write_text(original.replace("def create_draft_extend_backend(self):",
                                         "def create_draft_extend_backend(self:", 1))
        line = 1 + original.splitlines().index("    def create_draft_extend_backend(self):")
        r = probe("--sglang", str(tree_0523), "--json")
        doc = _doc(r)
        f = doc["findings"][0]
        assert r.exit_code == doc["exit_code"] == 3 and f["status"] == "error"
        assert f["summary"].startswith("target error: sglang/srt/speculative/draft_utils.py "
                                       "does not parse (SyntaxError at line")
        loc = next(e for e in f["evidence"] if e["kind"] == "location")
        assert loc["file"] == "sglang/srt/speculative/draft_utils.py" and loc["line"] == line
    finally:
        path.write_text(original)


def test_unrecognised_gate_is_a_warning_that_exits_3_unless_allowed(tree_0523):
    """A worker that parses but has no gate of a known shape: `warn`, not a target error, but
    diag cannot tell: exit 3 (issue 41), 0 with --allow-unrecognised."""
    path = tree_0523 / WORKER
    original = path.read_text()
    try:
        path.write_text(original.replace("self.cuda_graph_runner_for_draft_extend = ",
                                         "self.runner_elsewhere = "))
        r = probe("--sglang", str(tree_0523), "--json")
        doc = _doc(r)
        f = doc["findings"][0]
        assert f["status"] == "warn" and "not recognised" in f["summary"]
        assert "target_error" not in f and f["unrecognised"] is True
        assert r.exit_code == doc["exit_code"] == 3 and doc["allow_unrecognised"] is False
        r = probe("--sglang", str(tree_0523), "--json", "--allow-unrecognised")
        doc = _doc(r)
        assert r.exit_code == doc["exit_code"] == 0 and doc["allow_unrecognised"] is True
        # a name in the allow-list that binds nothing the analysis can follow: not a guess
        edited = original.replace(
            "or isinstance(self.draft_extend_attn_backend, QwenSparseAttnBackend)",
            "or isinstance(self.draft_extend_attn_backend, _qsa_types())")
        assert edited != original
        line = 1 + next(i for i, ln in enumerate(edited.splitlines()) if "_qsa_types()" in ln)
        path.write_text(edited)
        for backend in ([], ["--attention-backend", "qsa"], ["--attention-backend", "dsa"]):
            r = probe("--sglang", str(tree_0523), "--json", *backend)
            f = _doc(r)["findings"][0]
            assert f["status"] == "warn" and "not recognised" in f["summary"], f["summary"]
            assert f"_qsa_types() (sglang/srt/speculative/eagle_worker_v2.py:{line})" \
                in f["summary"]
    finally:
        path.write_text(original)


def test_spec_v2_env_selects_the_worker_and_is_named(release):
    """0.5.10 reads SGLANG_ENABLE_SPEC_V2 = EnvBool(False) (environ.py): unset runs the v1
    worker (eagle_worker.py, captures on every non-NPU device), 1 the v2 worker (HIP allow-list
    of aiter only): triton goes from graph to eager."""
    release("0.5.10")
    r = probe("--sglang", "0.5.10", "--attention-backend", "triton", "--json",
              env={"SGLANG_ENABLE_SPEC_V2": None})
    f = _doc(r)["findings"][0]
    assert f["status"] == "ok", f["summary"]
    notes = " ".join(e.get("detail", "") for e in f["evidence"] if e["kind"] == "note")
    assert "SGLANG_ENABLE_SPEC_V2 unset (EnvBool(False), sglang/srt/environ.py:442)" in notes
    assert "v1 eagle_worker.py" in notes
    r = probe("--sglang", "0.5.10", "--attention-backend", "triton", "--json",
              env={"SGLANG_ENABLE_SPEC_V2": "1"})
    f = _doc(r)["findings"][0]
    assert f["status"] == "fail" and "not on the HIP allow-list" in f["summary"]
    notes = " ".join(e.get("detail", "") for e in f["evidence"] if e["kind"] == "note")
    assert "SGLANG_ENABLE_SPEC_V2='1'" in notes and "v2 eagle_worker_v2.py" in notes
    loc = next(e for e in f["evidence"] if e["kind"] == "location")
    assert loc["file"] == WORKER


def test_factory_none_is_eager_with_its_line(release):
    release("0.5.10")
    r = probe("--sglang", "0.5.10", "--attention-backend", "flashmla", "--json",
              env={"SGLANG_ENABLE_SPEC_V2": None})
    f = _doc(r)["findings"][0]
    assert f["status"] == "fail"
    assert "builds no backend for 'flashmla'" in f["summary"]
    assert "sglang/srt/speculative/draft_utils.py:268" in f["summary"]


def test_alias_is_resolved_and_said(release):
    release("0.5.18")
    f = _doc(probe("--sglang", "0.5.18", "--attention-backend", "compressed",
                   "--speculative-eagle-topk", "1", "--speculative-num-steps", "3", "--json"))
    f = f["findings"][0]
    assert f["status"] == "ok" and "unknown" not in f["summary"]
    assert "'compressed' is rewritten to 'dsv4' (sglang/srt/server_args.py:4164)" in f["summary"]
    # without a topk the implied DeepSeek-V4's hook decides the start: its assert
    # `speculative_eagle_topk == 1` runs on the value given (0.5.18
    # arg_groups/deepseek_v4_hook.py:150-152), so only topk 1 starts: the verdict is topk 1's,
    # and says so
    f = _doc(probe("--sglang", "0.5.18", "--attention-backend", "compressed", "--json"))
    f = f["findings"][0]
    assert f["status"] == "ok"
    assert "--speculative-eagle-topk not given: read for topk 1, the only one that starts" \
        in json.dumps(f)
    assert "sglang/srt/arg_groups/deepseek_v4_hook.py:152" in json.dumps(f)


def test_server_overlap_setting_selects_the_worker(release):
    """A server's resolved disable_overlap_schedule decides the worker (spec_info.py)."""
    release("0.5.12.post1")
    with StandinSGLangServer() as s:
        info = server_info(attention_backend="triton", version="0.5.12.post1")
        for off, status in ((True, "ok"), (False, "fail")):
            s.json("/server_info", {**info, "disable_overlap_schedule": off})
            doc = _doc(probe("--sglang", "0.5.12.post1", "--server", s.url, "--json"))
            f = doc["findings"][0]
            assert f["status"] == status, f["summary"]
            notes = " ".join(e.get("detail", "") for e in f["evidence"] if e["kind"] == "note")
            assert f"disable_overlap_schedule={off}" in notes


@pytest.mark.parametrize("env", [{}, {"SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH": "1"}])
def test_no_configuration_gives_no_fail(release, env):
    """Without a backend or a server nothing is proven on a configuration: at most `warn`,
    naming the backends that would run eager."""
    release("0.5.23")
    r = CliRunner(env=env).invoke(main, ["diagnose", "--sglang", "0.5.23", "--platform", "hip",
                                         "--no-execute", "--json"], catch_exceptions=False)
    doc = _doc(r)
    mine = [f for f in doc["findings"] if f["probe"] == "draft-extend-graph"]
    assert mine and all(f["status"] in ("ok", "warn") for f in mine), mine
    assert "triton" in mine[0]["summary"]
