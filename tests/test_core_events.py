"""Events in the core (`diag.events`): built in code they serialise to their fields, and
`to_dict`/`parse` round-trip exactly for every registered kind (agent and counter kinds)."""

from __future__ import annotations

import dataclasses

import pytest

from diag import events, telemetry
from diag.engine import events as engine_events  # registers the counter kinds

SAMPLE = {"float": 2.5, "int": 7, "bool": True, "str": "x-1", "dict": {"a": {"b": 1}},
          "list": ["p", "q"]}


def _sample(cls: type[events.Event]) -> events.Event:
    """An instance of `cls` with every field set away from its default."""
    kw = {}
    for f in dataclasses.fields(cls):
        if f.name in ("extra", "raw"):
            continue
        t = str(f.type).replace(" ", "")
        kw[f.name] = next(v for k, v in SAMPLE.items() if t.startswith(k))
    return cls(**kw)


ALL = sorted(engine_events.kinds().items())


@pytest.mark.parametrize(("name", "cls"), ALL, ids=[k for k, _ in ALL])
def test_an_event_built_in_code_round_trips(name, cls):
    e = _sample(cls)
    doc = e.to_dict()
    assert doc["kind"] == name
    for f in dataclasses.fields(cls):
        if f.name not in ("extra", "raw"):
            assert doc[f.name] == getattr(e, f.name), f.name
    back = events.parse(doc)
    assert type(back) is cls and back == e and back.problems == []
    assert back.to_dict() == doc


def test_a_parsed_document_keeps_every_key_as_written():
    doc = {"ts": 3.0, "kind": "fix", "pid": 9, "n": 4, "fix": "f", "state": "applied",
           "reason": "", "backend": "triton", "memory_gb": 0.5}
    assert events.parse(doc).to_dict() == doc
    later = {"ts": 1.0, "kind": "a-later-kind", "pid": 1, "n": 0, "x": [1]}
    e = events.parse(later)
    assert type(e) is events.Event and e.name == "a-later-kind"
    assert {k: v for k, v in e.to_dict().items() if k in later} == later


@pytest.mark.parametrize(("field", "value"), [
    ("n", "12"), ("n", 1.5), ("n", True), ("pid", []), ("ts", "now"), ("ts", float("nan")),
    ("fix", 3), ("state", {"x": 1}), ("reason", 5)])
def test_a_field_of_the_wrong_type_is_a_named_problem_never_a_value(field, value):
    doc = {"ts": 1.0, "kind": "fix", "pid": 2, "n": 0, "fix": "f", "state": "applied",
           "reason": "", field: value}
    e = events.parse(doc)
    default = {f.name: f.default for f in dataclasses.fields(events.FixEvent)}[field]
    assert getattr(e, field) == (0.0 if field == "ts" else default)
    assert len(e.problems) == 1 and e.problems[0].startswith(f"fix.{field} is not ")
    assert e.to_dict()[field] is value or e.to_dict()[field] == value  # written back as read


def test_writers_emit_typed_events_through_the_sinks():
    got: list[dict] = []
    telemetry.add_sink(got.append)
    try:
        events.emit(events.ControlAck(request="r1", fix="f", action="revert", ok=True,
                                      state="reverted"))
        events.emit(events.FixEvent(fix="f", state="applied", extra={"backend": "b"}))
    finally:
        telemetry.remove_sink(got.append)
    assert [g["kind"] for g in got] == ["control_ack", "fix"]
    assert got[0]["request"] == "r1" and got[0]["ok"] is True and got[0]["state"] == "reverted"
    assert got[0]["ts"] > 0 and "pid" not in got[0] and "n" not in got[0]  # the writer's
    assert got[1]["backend"] == "b"
    parsed = events.parse({**got[0], "pid": 1, "n": 0})
    assert isinstance(parsed, events.ControlAck) and parsed.problems == []
