"""Issue 41, item 5: an attention-backend source file that does not parse was skipped without a
word (probes/backends.py reads the registry and the backend modules; a module that does not
parse gave no bases, no capability method, and nothing said so). It is named now: a `note` on
the findings that use the backend map ("skipped FILE: does not parse (...)"), text and JSON of
`diag probe draft-extend-graph`, the verdict as it was. A real 0.5.23 tree, its
triton_backend.py (the class HIP's gate is asked about through its bases) damaged in a copy."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.damaged_tree import copy_with as _copy_with

pytestmark = pytest.mark.release

DIAG = [sys.executable, "-m", "diag"]
DAMAGED = "sglang/srt/layers/attention/triton_backend.py"
PROBE = ["probe", "draft-extend-graph", "--platform", "hip"]


def _run(*args: str) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    text = subprocess.run([*DIAG, *PROBE, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "400"})
    js = subprocess.run([*DIAG, *PROBE, *args, "--json"], capture_output=True, text=True,
                        timeout=300)
    return text, js


def test_a_backend_file_that_does_not_parse_is_named_verdict_unchanged(tmp_path, release):
    real = release("0.5.23").root
    lines = (real / DAMAGED).read_text().splitlines()
    tree = _copy_with(real, tmp_path / "tree", DAMAGED, "\n".join(lines + ["def broken(:"]) + "\n")
    said = (f"skipped {DAMAGED}: does not parse (SyntaxError at line {len(lines) + 1}: "
            "invalid syntax)")
    bad_text, bad_js = _run("--sglang", str(tree))
    good_text, good_js = _run("--sglang", str(real))
    assert (bad_text.returncode, good_text.returncode) == (0, 0), bad_text.stderr
    assert (bad_js.returncode, good_js.returncode) == (0, 0), bad_js.stderr
    # text: one evidence line more, nothing else changed (the header names the tree)
    bad, good = bad_text.stdout.splitlines(), good_text.stdout.splitlines()
    assert f"        {said}" in bad, bad_text.stdout
    assert [x for x in bad[1:] if x != f"        {said}"] == good[1:]
    assert "skipped" not in good_text.stdout  # a tree that parses: no note
    # JSON: the note evidence on the finding, the verdict (status, summary, rows) the same
    (bf,), (gf,) = json.loads(bad_js.stdout)["findings"], json.loads(good_js.stdout)["findings"]
    assert bf["evidence"][-1] == {"kind": "note", "detail": said}
    assert [e for e in bf["evidence"] if e != {"kind": "note", "detail": said}] == gf["evidence"]
    assert (bf["status"], bf["summary"]) == (gf["status"], gf["summary"]) == \
        ("warn", gf["summary"])
    assert not any("skipped" in (e.get("detail") or "") for e in gf["evidence"])
