"""A file of the SGLang tree that does not parse where a probe reads it is a target error.

Before: the profiler-teardown probe parsed `srt/utils/profile_utils.py` (the V2 stop,
`ProfileManager._do_stop`) and a damaged copy raised out of it: `[ERROR] probe crashed:
SyntaxError ...`, exit 1, "report it" — diag blaming itself for the user's tree — and the
profiler fix "applicability check crashed". Now any probe whose read of a file of the tree
fails to parse gives `target error: FILE does not parse (SyntaxError at line N: ...)`, exit 3
(the documented code for a broken tree), and a fix whose check meets it is refused naming the
file. A SyntaxError from anywhere else is still a crash, said so.

The tree: a real 0.5.23 whose profile_utils.py gets a line that does not parse at its end, in a
linked copy (the cached release is never written).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.damaged_tree import copy_with as _copy_with
from tests.damaged_tree import diag as _diag

pytestmark = pytest.mark.release

PROFILE_UTILS = "sglang/srt/utils/profile_utils.py"



@pytest.fixture(scope="module")
def cut(release, tmp_path_factory):
    real = release("0.5.23").root
    text = (real / PROFILE_UTILS).read_text()
    damaged = text + ("" if text.endswith("\n") else "\n") + "def broken(:\n"
    line = damaged.count("\n")  # the added line is the last
    return _copy_with(real, tmp_path_factory.mktemp("pu") / "tree", PROFILE_UTILS, damaged), line


def test_the_probe_names_the_file_and_exits_3(cut):
    tree, line = cut
    said = f"target error: {PROFILE_UTILS} does not parse (SyntaxError at line {line}: "
    r = _diag("probe", "profiler-teardown", "--sglang", str(tree))
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert said in r.stdout and "probe crashed" not in r.stdout
    js = _diag("probe", "profiler-teardown", "--sglang", str(tree), "--json")
    assert js.returncode == 3
    [f] = json.loads(js.stdout)["findings"]
    assert f["status"] == "error" and f["target_error"] is True and said in f["summary"]
    assert (f["evidence"][0]["file"], f["evidence"][0]["line"]) == (PROFILE_UTILS, line)


def test_diagnose_exits_3_and_the_other_probes_still_run(cut):
    tree, _ = cut
    r = _diag("diagnose", "--sglang", str(tree), "--json")
    assert r.returncode == 3, r.stderr
    doc = json.loads(r.stdout)
    assert doc["exit_code"] == 3
    by_probe = {f["probe"]: f["status"] for f in doc["findings"]}
    assert by_probe["profiler-teardown"] == "error"
    assert by_probe["draft-extend-graph"] in ("ok", "warn", "fail")


def test_the_profiler_fix_is_refused_naming_the_file(cut):
    tree, line = cut
    r = _diag("fix", "list", "--sglang", str(tree), "--json")
    assert r.returncode == 0, r.stderr
    [fx] = [f for f in json.loads(r.stdout)["fixes"] if f["id"] == "profiler-controlled-teardown"]
    assert fx["status"] == "refused"
    assert fx["reason"].startswith(f"{PROFILE_UTILS} does not parse (SyntaxError at line {line}")
    assert "crashed" not in fx["reason"]


def test_a_syntax_error_from_outside_the_tree_is_not_blamed_on_it(release, tmp_path):
    from diag.probes.source import broken_source

    t = release("0.5.23")
    outside = tmp_path / "mine.py"
    outside.write_text("def broken(:\n")
    try:
        compile(outside.read_text(), str(outside), "exec")
    except SyntaxError as e:
        assert broken_source(t, e) is None
    inside = SyntaxError("invalid syntax", (str(Path(t.root) / PROFILE_UTILS), 1, 1, "x"))
    assert broken_source(t, inside) is None  # the intact file parses: not its problem


RUNNER = "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py"


def test_a_runner_the_fallbacks_are_read_from_is_named_when_it_does_not_parse(release, tmp_path):
    """The run-time fallbacks of target-verify are read from the decode runner (0.5.23
    decode_cuda_graph_runner.py:367 captures TARGET_VERIFY, read by hand): damaged, the verdict
    is what the other files say (the capture line is found by its text), and a note names the
    file, as the backend map does for its modules; before, nothing said it was skipped."""
    real = release("0.5.23").root
    text = (real / RUNNER).read_text()
    damaged = text + ("" if text.endswith("\n") else "\n") + "def broken(:\n"
    tree = _copy_with(real, tmp_path / "tree", RUNNER, damaged)
    args = ("probe", "draft-extend-graph", "--platform", "hip", "--attention-backend", "aiter",
            "--speculative-num-steps", "3", "--json")
    good, bad = _diag(*args, "--sglang", str(real)), _diag(*args, "--sglang", str(tree))
    assert (good.returncode, bad.returncode) == (0, 0), bad.stderr
    [g], [b] = json.loads(good.stdout)["findings"], json.loads(bad.stdout)["findings"]
    assert (b["status"], b["summary"]) == (g["status"], g["summary"])
    said = (f"skipped {RUNNER}: does not parse (SyntaxError at line {damaged.count(chr(10))}: "
            "invalid syntax)")
    notes = [e["detail"] for e in b["evidence"] if e["kind"] == "note"]
    assert said in notes, notes
    assert not [e for e in g["evidence"] if e["kind"] == "note" and "skipped" in e["detail"]]


RADIX = "sglang/srt/layers/attention/deepseek_v4_backend_hip_radix.py"


def test_a_gate_class_in_a_damaged_module_is_a_target_error_not_a_new_shape(release, tmp_path):
    """0.5.23's HIP gate lists `DeepseekV4HipRadixBackend` (eagle_worker_v2.py:562, read by hand),
    imported from deepseek_v4_backend_hip_radix.py, whose class is at :874. That module cut
    mid-line before the class (a partial write): the gate cannot be read, and the cause is the
    damaged module, named as a target error; before, "gate not recognised ... which is not in
    this tree" with the hint to report a new gate shape upstream."""
    real = release("0.5.23").root
    text = (real / RADIX).read_text()
    at = text.index("\nclass DeepseekV4HipRadixBackend(")
    damaged = text[:at] + "\ndef cut_here(\n"
    tree = _copy_with(real, tmp_path / "tree", RADIX, damaged)
    r = _diag("probe", "draft-extend-graph", "--sglang", str(tree), "--platform", "hip",
              "--attention-backend", "dsv4", "--speculative-num-steps", "3")
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert f"target error: {RADIX} does not parse (SyntaxError" in r.stdout
    assert "report it" not in r.stdout and "changed the gate's shape" not in r.stdout
