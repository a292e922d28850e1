"""contrib/ (Prometheus rules, Grafana dashboard) and the docs' metrics table name only the
`diag_*` series that diag declares (`diag.engine.metrics.series()`: each counter event kind's and
the agent's own), with the suffixes prometheus_client gives each type."""

from __future__ import annotations

import re
from pathlib import Path

from diag.engine import metrics

ROOT = Path(__file__).resolve().parent.parent
SUFFIXES = {"counter": ("_total",), "histogram": ("", "_sum", "_count", "_bucket"),
            "gauge": ("",)}
# a series name: not the middle of a recording rule's name (level:metric:operations)
NAME = re.compile(r"(?<![:\w])diag_[a-z_]+[a-z](?!\w*:)")


def _declared() -> set[str]:
    return {metrics.PREFIX + s.name + suffix for s in metrics.series()
            for suffix in SUFFIXES[s.type]}


def test_contrib_names_only_declared_series():
    declared = _declared()
    for path in sorted((ROOT / "contrib").iterdir()):
        names = set(NAME.findall(path.read_text()))
        assert names, f"{path.name} names no diag_* series"
        assert names <= declared, f"{path.name}: {sorted(names - declared)}"


def test_docs_table_lists_every_series():
    text = (ROOT / "docs" / "metrics.md").read_text()
    rows = set(re.findall(r"^\| `(diag_[a-z_]+)` \| (\w+)", text, re.M))
    want = {(metrics.PREFIX + s.name + SUFFIXES[s.type][0], s.type) for s in metrics.series()}
    assert {name for name, _ in rows} == {name for name, _ in want}
