"""The telemetry bus: no sink is free, a broken sink never reaches the caller."""

from __future__ import annotations

from diag import telemetry


def test_emit_without_sink_is_a_no_op():
    assert not telemetry.active()
    telemetry.emit("syncs", builder="b", count=2)  # nothing to assert but that it returns


def test_events_reach_sinks_and_broken_sinks_are_contained():
    got = []

    def broken(event):
        raise RuntimeError("sink failure")

    telemetry.add_sink(broken)
    telemetry.add_sink(got.append)
    try:
        telemetry.emit("draft_extend", mode="eager", seconds=0.001)
    finally:
        telemetry.remove_sink(broken)
        telemetry.remove_sink(got.append)
    assert len(got) == 1 and got[0]["kind"] == "draft_extend" and got[0]["mode"] == "eager"
    assert "ts" in got[0]
    assert not telemetry.active()
