"""A damaged file of SGLang's argument handling is a target error, not a configuration that starts.

Before: the start-up readers look for SGLang's rules by their text and shape; in a file cut short
(a partial write, an edit) the rule was simply not found, so a configuration the release refuses
read as one that starts: `draft-extend-graph` said `ok`, the fixes `upstream`/`applicable`. Now a
file of the argument handling a reader looked in and could not parse makes the verdict a target
error (exit 3, as a broken worker file does), and both fixes judged from the verdicts refused,
each naming the file.

The tree is a real 0.5.23 with `srt/arg_groups/speculative_hook.py` cut in the middle of
`_PAGE_TREE_SPEC_BACKENDS = ("flashinfer", "fa3", "triton")` (0.5.23 :1271, read by hand; the
`raise ValueError(` for topk > 1 with page_size > 1 outside it at :1278). The configuration:
aiter on HIP, topk 4, page size 64: the intact tree refuses it at :1278.
"""

from __future__ import annotations

import ast
import json

import pytest

from tests.damaged_tree import copy_with as _copy_with
from tests.damaged_tree import diag as _diag

pytestmark = pytest.mark.release

HOOK = "sglang/srt/arg_groups/speculative_hook.py"
CONFIG = ["--platform", "hip", "--attention-backend", "aiter", "--speculative-num-steps", "3",
          "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8",
          "--page-size", "64"]



@pytest.fixture(scope="module")
def trees(release, tmp_path_factory):
    real = release("0.5.23").root
    text = (real / HOOK).read_text()
    cut = text.index('_PAGE_TREE_SPEC_BACKENDS = ("flashinfer", "fa')
    damaged = text[:cut + len('_PAGE_TREE_SPEC_BACKENDS = ("flashinfer", "fa')]
    with pytest.raises(SyntaxError):  # the precondition: the cut file does not parse
        ast.parse(damaged)
    return real, _copy_with(real, tmp_path_factory.mktemp("cut") / "tree", HOOK, damaged)


def test_the_intact_release_refuses_the_configuration_at_the_hand_read_line(trees):
    real, _ = trees
    r = _diag("probe", "draft-extend-graph", "--sglang", str(real), *CONFIG)
    assert r.returncode == 1, r.stderr
    assert "SGLang refuses to start with this configuration" in r.stdout
    assert "speculative_hook.py:1278" in r.stdout


def test_the_cut_file_is_a_target_error_in_text_and_json(trees):
    _, cut = trees
    r = _diag("probe", "draft-extend-graph", "--sglang", str(cut), *CONFIG)
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert f"target error: {HOOK} does not parse (SyntaxError" in r.stdout
    assert "Traceback" not in r.stderr
    js = _diag("probe", "draft-extend-graph", "--sglang", str(cut), *CONFIG, "--json")
    assert js.returncode == 3
    [f] = [f for f in json.loads(js.stdout)["findings"] if f["probe"] == "draft-extend-graph"]
    assert f["status"] == "error" and f["target_error"] is True
    assert f["evidence"][0]["file"] == HOOK


def test_the_fixes_judged_from_the_verdicts_are_refused_naming_the_file(trees):
    _, cut = trees
    r = _diag("fix", "list", "--sglang", str(cut), *CONFIG, "--json")
    assert r.returncode == 0, r.stderr
    got = {f["id"]: f for f in json.loads(r.stdout)["fixes"]}
    for fid in ("draft-extend-allowlist", "repeat-interleave-output-size"):
        assert got[fid]["status"] == "refused", got[fid]
        assert f"{HOOK} does not parse" in got[fid]["reason"]
        assert "cannot tell whether this configuration starts" in got[fid]["reason"]


def test_a_ci_gate_on_the_phases_stops_with_exit_3(trees):
    """`fix check --require-phase draft-extend=graph` read the phases of the cut tree as a
    release without the page-tree rule: `ok`, exit 0, where the intact release refuses the
    configuration at start. Now one line naming the file, exit 3 (text and JSON alike)."""
    real, cut = trees
    args = ("fix", "check", "--no-dry", "--require-phase", "draft-extend=graph", *CONFIG)
    intact = _diag(*args, "--sglang", str(real))
    assert intact.returncode == 1, intact.stdout  # refused at start: not graph
    for extra in ((), ("--json",)):
        r = _diag(*args, *extra, "--sglang", str(cut))
        assert r.returncode == 3, (r.stdout, r.stderr)
        assert r.stderr.startswith(f"diag: error: {HOOK} does not parse (SyntaxError")
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_the_sync_census_says_whether_it_starts_is_not_known(trees):
    """The census reads the same start refusal (probes.startup.refused_start): on the cut tree
    it cannot tell whether a server starts, and says so rather than calling it refused or
    judging it as one that starts."""
    real, cut = trees
    args = ("probe", "metadata-syncs", *CONFIG, "--json")
    for tree, words in ((real, "no server starts with this configuration"),
                        (cut, "whether a server starts with this configuration is not known")):
        r = _diag(*args, "--sglang", str(tree))
        [f] = json.loads(r.stdout)["findings"]
        notes = [e["detail"] for e in f["evidence"] if e["kind"] == "note"]
        assert any(words in n for n in notes), notes
        assert f["status"] == "warn"
    [n] = [n for n in notes if "is not known" in n]
    assert n.startswith(f"{HOOK} does not parse (SyntaxError")
