"""The gate analysis against a ground truth written from the release sources, not from diag.

tests/groundtruth/gate_cases.json holds, for every release 0.5.9-0.5.23, the facts read from its
source (gate, allow-list, factory mapping, aliases, worker selection, kill switch; each with
file:line) and one expected HIP mode per backend name x steps {1, 3} x environment
(tests/groundtruth/build_gate_cases.py says how the cases follow from the facts). Every case is
evaluated here in-process with the AST analysis (no sglang import, one parse per release).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from diag.probes.gate import UNKNOWN, backend_map, env_bool, read_gate, verdict

pytestmark = pytest.mark.release

CASES = Path(__file__).parent / "groundtruth" / "gate_cases.json"
MODES = {"graph": "graph", "eager": "eager", "not-recognised": UNKNOWN}


def _load() -> dict:
    return json.loads(CASES.read_text())


def test_ground_truth_covers_every_release_in_range():
    doc = _load()
    assert list(doc["releases"]) == [
        "0.5.9", "0.5.10", "0.5.10.post1", "0.5.11", "0.5.12", "0.5.12.post1", "0.5.13",
        "0.5.13.post1", "0.5.14", "0.5.15", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18",
        "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"]
    for v, f in doc["releases"].items():
        names = {c["backend"] for c in doc["cases"] if c["release"] == v}
        assert names == set(f["factory"]["names"]) | set(f["aliases"]), v
        assert all(c["cite"].startswith("sglang/") and ":" in c["cite"] for c in doc["cases"])


def test_gate_ground_truth_agrees(release):
    doc = _load()
    by_release: dict[str, list[dict]] = defaultdict(list)
    for c in doc["cases"]:
        by_release[c["release"]].append(c)
    wrong: list[str] = []
    n = 0
    for version, cases in by_release.items():
        t = release(version)
        bm = backend_map(t, "hip")
        gates: dict[str, object] = {}
        for c in cases:
            key = json.dumps(c["env"], sort_keys=True)
            if key not in gates:
                gates[key] = read_gate(t, environ=c["env"])
            gate = gates[key]
            killed = bool(gate.kill_switch_env) and env_bool(c["env"].get(gate.kill_switch_env))
            v = verdict(gate, bm.get(c["backend"]), "hip", c["steps"], kill_switch_set=killed,
                        release=version)
            n += 1
            if v.mode != MODES[c["mode"]]:
                wrong.append(f"{version} {c['backend']} steps={c['steps']} env={c['env']}: "
                             f"expected {c['mode']} ({c['cite']}: {c['why']}), diag says "
                             f"{v.mode} ({v.reason})")
    print(f"gate ground truth: {n - len(wrong)} of {n} cases agree "
          f"({len(by_release)} releases)")
    assert not wrong, f"{len(wrong)} of {n} cases disagree:\n" + "\n".join(wrong[:40])
    assert n == len(doc["cases"]) and n > 1000, f"gate ground truth: {n} cases agree"


def test_alias_and_none_reasons_cite_the_source(release):
    """The reason names the rewrite and the `return None`, with the lines the facts cite."""
    doc = _load()
    t = release("0.5.23")
    v = verdict(read_gate(t), backend_map(t, "hip")["compressed"], "hip", 3, release="0.5.23")
    cite = doc["releases"]["0.5.23"]["aliases"]["compressed"]["cite"]
    assert v.mode == "graph" and f"rewritten to 'dsv4' ({cite})" in v.reason
    t = release("0.5.10")
    v = verdict(read_gate(t), backend_map(t, "hip")["flashmla"], "hip", 3, release="0.5.10")
    cite = doc["releases"]["0.5.10"]["factory"]["names"]["flashmla"]["class_cite"]
    assert (v.mode, v.cause) == ("eager", "no_draft_extend_backend")
    # the cited line is the warning just before `return None`
    assert cite.rsplit(":", 1)[0] in v.reason
    src = t.file("srt/speculative/draft_utils.py").read_text().splitlines()
    line = int(v.reason.split("draft_utils.py:")[1].split(")")[0])
    assert src[line - 1].strip() == "return None"
