"""Validate diag's JSON against the schemas it ships (diag/schemas/*.json) with jsonschema,
plus the one rule a schema cannot state (the summary counts the findings)."""

from __future__ import annotations

import functools
import json
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource

BASE = "https://sglang-diag/schemas/"


@functools.cache
def _registry() -> Registry:
    """Every shipped schema under its $id, so that one may refer to another."""
    reg = Registry()
    for f in files("diag").joinpath("schemas").iterdir():
        if f.name.endswith(".json"):
            doc = json.loads(f.read_text())
            assert doc["$id"] == BASE + f.name, f.name
            reg = reg.with_resource(doc["$id"], Resource.from_contents(doc))
    return reg


def schema_names() -> list[str]:
    return sorted(f.name for f in files("diag").joinpath("schemas").iterdir()
                  if f.name.endswith(".json"))


def check(name: str, doc: Any) -> None:
    """Raise jsonschema.ValidationError unless `doc` is valid against schemas/`name`."""
    schema = _registry().contents(BASE + name)
    jsonschema.Draft202012Validator(schema, registry=_registry()).validate(doc)


def check_report(doc: dict[str, Any]) -> None:
    check("report-v1.json", doc)
    assert sum(doc["summary"].values()) == len(doc["findings"])


def check_fix_list(doc: dict[str, Any]) -> None:
    check("fix-list-v1.json", doc)


def check_events(run_dir: str | Path) -> int:
    """Every line of every events file in a run directory against event-v1.json; how many."""
    n = 0
    for path in sorted(Path(run_dir).glob("events-*.jsonl")):
        for line in path.read_text().splitlines():
            check("event-v1.json", json.loads(line))
            n += 1
    return n
