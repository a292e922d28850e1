"""The shipped JSON schemas accept what diag prints and reject what docs/json.md rules out."""

from __future__ import annotations

import copy

import jsonschema
import pytest
from report_schema import check_report

from diag.findings import Finding, Status, location, metric
from diag.report import to_json

HEADER = {"target": {"root": "/x", "version": "0.5.17", "origin": "release"}, "platform": "hip",
          "config": {"attention_backend": "dsv4", "draft_attention_backend": None,
                     "speculative_num_steps": 3, "speculative_algorithm": None,
                     "disable_cuda_graph": False, "source": "options"},
          "server": None}


def _doc() -> dict:
    import json

    f = Finding("draft-extend-graph", Status.FAIL, "t", "runs eager",
                [metric("capture", 0.0, "s"), location("sglang/srt/x.py", 3, "A.f")],
                hint="h", fixes=["draft-extend-allowlist"])
    return json.loads(to_json([f], HEADER, "fail"))


def test_a_real_report_validates():
    check_report(_doc())


@pytest.mark.parametrize("mutate", [
    lambda d: d["findings"][0].update(status="bad"),
    lambda d: d["findings"][0]["evidence"][0].update(unit=None),  # absent keys are omitted
    lambda d: d["findings"][0]["evidence"][1].pop("file"),
    lambda d: d["findings"][0]["evidence"][1].update(line=0),
    lambda d: d.update(schema_version=2),
    lambda d: d["summary"].pop("error"),
])
def test_the_schema_rejects(mutate):
    """(Added keys are allowed: docs/json.md's versioning rule.)"""
    d = copy.deepcopy(_doc())
    mutate(d)
    with pytest.raises(jsonschema.ValidationError):
        check_report(d)
