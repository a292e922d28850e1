"""Every JSON output validates against the schema diag ships for it (real outputs of the real
commands), the schemas are well-formed draft 2020-12 with one version number, and the event
parser keeps what it does not know instead of crashing."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.resources import files

import jsonschema
import pytest
from click.testing import CliRunner
from report_schema import BASE, check, schema_names

from diag import fixes, probes
from diag.cli import main
from diag.engine import events
from diag.schemas import SCHEMA_VERSION

DIAG = [sys.executable, "-m", "diag"]
OUTPUTS = {"report-v1.json", "fix-list-v1.json", "fix-status-v1.json", "fix-action-v1.json",
           "fix-check-v1.json", "bench-v1.json", "env-v1.json", "fleet-v1.json",
           "probe-list-v1.json", "tui-export-v1.json", "event-v1.json", "trace-v1.json",
           # validated on a real server: tests/test_engine_server.py (bench overhead)
           "overhead-v1.json",
           # validated on a real CPU server: tests/test_engine_server.py (bench eager-cost)
           "eager-cost-v1.json",
           # validated on a real kit run: tests/test_kit_run.py
           "kit-v1.json"}


def _json(*args: str) -> tuple[int, dict]:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return r.exit_code, json.loads(r.stdout)


def test_schemas_are_shipped_well_formed_and_share_one_version():
    assert set(schema_names()) == OUTPUTS
    for name in schema_names():
        doc = json.loads(files("diag").joinpath("schemas", name).read_text())
        jsonschema.Draft202012Validator.check_schema(doc)
        assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert doc["$id"] == BASE + name
        version = doc.get("properties", {}).get("schema_version")
        for branch in doc.get("oneOf", []):
            version = version or branch["properties"]["schema_version"]
        if name != "event-v1.json":  # an event line carries no version
            assert version == {"const": SCHEMA_VERSION}, name


def test_probe_list_lists_the_registry():
    code, doc = _json("probe", "--list", "--json")
    assert code == 0
    check("probe-list-v1.json", doc)
    assert [p["id"] for p in doc["probes"]] == probes.all_ids()
    assert [p["id"] for p in doc["probes"] if p["counter"] is not None] == probes.with_counter()


def test_env():
    code, doc = _json("env", "--json")
    assert code == 0
    check("env-v1.json", doc)


@pytest.mark.release
def test_fix_list_and_check(release):
    release("0.5.17")
    code, doc = _json("fix", "list", "--sglang", "0.5.17", "--platform", "hip", "--json")
    assert code == 0
    check("fix-list-v1.json", doc)
    assert [f["id"] for f in doc["fixes"]] == fixes.all_ids()
    code, doc = _json("fix", "check", "--sglang", "0.5.17", "--platform", "hip", "--no-dry",
                      "--json")
    check("fix-check-v1.json", doc)
    assert code == (0 if doc["ok"] else 4)


def test_fix_apply_and_revert_in_this_process():
    """Without --run-dir (in the diag process itself; in a child, as it may patch)."""
    fid = fixes.all_ids()[0]
    for action in ("apply", "revert"):
        p = subprocess.run([*DIAG, "fix", action, fid, "--json"], capture_output=True,
                           text=True, timeout=120)
        assert p.returncode in (0, 4), p.stderr
        doc = json.loads(p.stdout)
        check("fix-action-v1.json", doc)
        assert doc["ok"] is (p.returncode == 0)


@pytest.mark.release
@pytest.mark.slow
def test_bench(release, tmp_path):
    release("0.5.17")
    out = tmp_path / "bench.json"
    p = subprocess.run([*DIAG, "bench", "repeat-interleave-output-size", "--param", "quick=1",
                        "--param", "repeats=2", "--json", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    check("bench-v1.json", doc)
    assert doc["benches"][0]["rows"] and json.loads(out.read_text()) == doc


def test_tui_export(tmp_path):
    from diag.tui import data
    from diag.tui.model import Model

    m = Model()
    m.set_pending(probes.all_ids())
    doc = json.loads(open(data.write_export(m.export(), str(tmp_path / "x.json"))).read())
    check("tui-export-v1.json", doc)


def test_tui_export_with_engine_rows(tmp_path):
    """Timing rows and engine processes from a run directory the real EventWriter wrote."""
    from diag.engine import rundir
    from diag.tui import data

    d = rundir.create_run_dir(tmp_path / "D")
    w = rundir.EventWriter(d, pid=4242)
    fix = next(s.fixes[0] for s in probes.specs() if s.counter and "syncs" in s.counter.events)
    w.write({"kind": "start", "fixes": {fix: {"state": "pending", "reason": ""}}, "started": 1.0})
    w.write({"kind": "syncs", "builder": "B.f", "count": 2, "seconds": 0.002})
    w.write({"kind": "fix", "fix": fix, "state": "applied", "reason": ""})
    w.write({"kind": "syncs", "builder": "B.f", "count": 0, "seconds": 0.001})
    w.write({"kind": "error", "where": "x", "message": "y"})
    w.close()
    evs = [json.loads(line) for line in (d / "events-4242.jsonl").read_text().splitlines()]
    timings, syncs, _ = data.engine_view(evs)
    procs = data.engine_processes(rundir.read_state(d), evs)
    assert timings and syncs and procs[0].errors == 1
    doc = data.export_doc(data.Header("t"), [], [], timings, syncs, [], procs)
    check("tui-export-v1.json", json.loads(json.dumps(doc, default=str)))


def test_the_event_schema_rejects_what_the_fold_would_misread():
    ok = {"ts": 1.0, "kind": "syncs", "pid": 3, "n": 0, "builder": "b", "count": 2,
          "seconds": 0.1}
    check("event-v1.json", ok)
    for bad in ({**ok, "count": "two"}, {k: v for k, v in ok.items() if k != "pid"},
                {**ok, "kind": "draft_extend", "mode": "fast", "seconds": 1.0, "batch": 1}):
        with pytest.raises(jsonschema.ValidationError):
            check("event-v1.json", bad)
    check("event-v1.json", {**ok, "kind": "a-kind-from-later", "anything": [1]})


def test_parsing_keeps_unknown_kinds_and_keys_and_never_raises():
    e = events.parse_line('{"ts": 1, "kind": "later", "pid": 2, "n": 0, "x": {"y": 1}}')
    assert type(e) is events.Event and e.name == "later" and e.extra["x"] == {"y": 1}
    s = events.parse({"kind": "syncs", "builder": "b", "count": "many", "seconds": None,
                      "new_key": 1})
    assert isinstance(s, events.Syncs) and s.count == 0 and s.extra == {"count": "many",
                                                                        "new_key": 1}
    assert events.parse_line("not json") is None and events.parse_line("[1]") is None
    fold = events.Fold()
    for line in ('{"kind": "snapshot", "counters": 5}', '{"kind": "start", "fixes": "nonsense"}',
                 '{"kind": "fix", "fix": 3}', '{"kind": "draft_extend", "mode": null, '
                 '"seconds": "x"}', '{"kind": "later"}'):
        fold.add(events.parse_line(line))
    assert fold.counters["events"]["later"] == 1
    assert fold.counters["draft_extend"] == {"None": {"passes": 1, "seconds": 0.0}}


def test_every_declared_counter_event_kind_is_defined():
    """The kinds probes' counters declare are event classes (a new kind without a class is
    still folded and counted, but has no section, text or series)."""
    defined = {c.kind for c in events.counter_kinds()}
    assert set(events.declared_kinds()) <= defined


def test_the_event_schema_covers_every_kind_and_field():
    """Each event class has its branch in event-v1.json, naming each of its fields."""
    import dataclasses

    doc = json.loads(files("diag").joinpath("schemas", "event-v1.json").read_text())
    branches = {b["if"]["properties"]["kind"]["const"]: b["then"] for b in doc["allOf"]}
    for k, cls in events.kinds().items():
        assert k in branches, k
        fields = {f.name for f in dataclasses.fields(cls)} - {"ts", "pid", "n", "extra", "raw"}
        assert fields <= set(branches[k]["properties"]), (k, fields - set(branches[k]["properties"]))
