"""Issue 41, item 5 (part): `/metrics` names a fix's state exactly as the CLI does: a fix that
is `not-applied` in a process was `state="other"` on diag_fix_state."""

from __future__ import annotations

from diag.engine import metrics
from diag.fixes import base


class _Gauge:
    def __init__(self) -> None:
        self.values: dict[tuple[str, str], float] = {}

    def labels(self, fix: str, state: str):
        gauge = self

        class _Child:
            def set(self, v: float) -> None:
                gauge.values[(fix, state)] = v

        return _Child()


def test_every_state_the_cli_names_is_a_metrics_label(monkeypatch):
    states = (base.APPLIED, base.PENDING, base.REVERTED, base.NOT_APPLIED, base.FAILED,
              base.UPSTREAM, base.NOT_NEEDED, base.REFUSED)
    assert set(states) <= set(metrics.FIX_STATES)
    gauge = _Gauge()
    monkeypatch.setattr(metrics, "_reporting", lambda m: None)
    monkeypatch.setattr(metrics, "_fix_labels", {})
    for st in states:
        metrics._set_fix({"fix_state": gauge}, "profiler-controlled-teardown", st)
        assert gauge.values[("profiler-controlled-teardown", st)] == 1
    assert not any(state == "other" for _f, state in gauge.values)
    metrics._set_fix({"fix_state": gauge}, "profiler-controlled-teardown", "made-up")
    assert gauge.values[("profiler-controlled-teardown", "other")] == 1
