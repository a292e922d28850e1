"""Validate diag's JSON against the schemas it ships (diag/schemas/*.json) with jsonschema,
plus the one rule a schema cannot state (the summary counts the findings)."""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

import jsonschema


def _schema(name: str) -> dict[str, Any]:
    return json.loads(files("diag").joinpath("schemas", name).read_text())


def check_report(doc: dict[str, Any]) -> None:
    jsonschema.validate(doc, _schema("report-v1.json"))
    assert sum(doc["summary"].values()) == len(doc["findings"])


def check_fix_list(doc: dict[str, Any]) -> None:
    jsonschema.validate(doc, _schema("fix-list-v1.json"))
