"""Turn a GPU-lane crash run into the recorded result `diag bench` and the TUI show
(fixes/recorded/profiler-crash.json): the fix's before/after on real servers, crashes per profile,
with where and when it was measured. The verdict is `checks.check_crash`'s, computed here from
the run's own server logs, never copied from elsewhere.

    python benchmarks/gpu_engine/record_crash.py --lane tests/gpu_lane/crash-DATE/lane.json
    python benchmarks/gpu_engine/record_crash.py --prototype DIR   (record.json + server-*.log)
Keep the run's data under tests/gpu_lane/ first: the record names it (`evidence`) and
tests/test_profiler_crash_record.py recomputes the verdict from it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import checks  # noqa: E402

OUT = HERE.parents[1] / "fixes" / "recorded" / "profiler-crash.json"
STAGE_TRACES = 2  # V2 stage profiling: one trace per stage (prefill, decode)


def tries_from_prototype(d: Path) -> list[checks.CrashTry]:
    """The coordinator's first prototype: record.json's per-server profiles and the logs."""
    rec = json.loads((d / "record.json").read_text())
    out = []
    for name, srv in sorted(rec.get("crash", {}).items()):
        profiles = srv.get("profiles") or []
        done = sum(len(p.get("files") or []) >= STAGE_TRACES for p in profiles)
        log = d / f"server-{name}.log"
        out.append(checks.CrashTry(name, "fix" if name.startswith("fix") else "plain",
                                   len(profiles), done, bool(srv.get("alive_at_end")),
                                   log.read_text(errors="replace") if log.exists() else ""))
    return out


def tries_from_lane(path: Path) -> list[checks.CrashTry]:
    """`lane.py --only crash`'s lane.json: each server's counts and its log's dump; a
    `server-<name>.log` kept beside it is read instead of the dump (a dump from a lane older
    than `CrashTry.dump`'s profiler lines lacks the stop that the teardown signature needs)."""
    crash = json.loads(path.read_text()).get("crash") or {}
    out = []
    for t in crash.get("servers", []):
        log = path.parent / f"server-{t['name']}.log"
        text = log.read_text(errors="replace") if log.exists() else t.get("dump", "")
        out.append(checks.CrashTry(t["name"], t["side"], t["profiles_sent"], t["profiles_done"],
                                   t["alive"], text, t.get("error", "")))
    return out


def tries_from(evidence: Path) -> list[checks.CrashTry]:
    """The run a record names: a lane.json, or a prototype folder."""
    return tries_from_lane(evidence) if evidence.suffix == ".json" else \
        tries_from_prototype(evidence)


def record(tries: list[checks.CrashTry], measured: dict, profile: dict | None) -> dict:
    c = checks.check_crash("profiler crash", tries)
    sides = {k: {f: c.data[k][f] for f in ("servers", "tested", "crashed", "teardown_signature",
                                          "died_otherwise", "profiles_sent", "profiles_done",
                                          "crashes_per_profile")} for k in ("plain", "fix")}
    return {"schema_version": 1, "what": "SGLang servers given stage profiles while serving, "
            "with SGLANG_PROFILE_V2=1: plain vs under `diag run --fix "
            "profiler-controlled-teardown`", "measured": measured, "profile": profile,
            "verdict": c.data["verdict"], "passed": c.ok, "detail": c.detail, **sides}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lane", type=Path, help="lane.json of `lane.py --only crash`")
    ap.add_argument("--prototype", type=Path, help="a folder with record.json and server-*.log")
    ap.add_argument("--where", default="", help="the machine, e.g. 'NVIDIA H200, torch 2.11'")
    ap.add_argument("--when", default="", help="ISO time (default: from the run)")
    ap.add_argument("--source", default="", help="which run this is")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    if a.lane:
        res = json.loads(a.lane.read_text())
        tries = tries_from_lane(a.lane)
        dev = res.get("device") or {}
        measured = {"where": a.where or ", ".join(f"{k} {v}" for k, v in dev.items()
                                                  if k != "started"),
                    "when": a.when or dev.get("started", ""), "source": a.source or str(a.lane)}
        profile = res.get("profile")
    elif a.prototype:
        tries = tries_from_prototype(a.prototype)
        rec = json.loads((a.prototype / "record.json").read_text())
        measured = {"where": a.where, "when": a.when or rec.get("started", ""),
                    "source": a.source or str(a.prototype)}
        profile = None
    else:
        ap.error("give --lane or --prototype")
    doc = record(tries, measured, profile)
    src = (a.lane or a.prototype).resolve()
    repo = HERE.parents[1]
    # the run's data, kept in the repo (tests/gpu_lane/), so that the record can be recomputed
    doc["evidence"] = str(src.relative_to(repo)) if src.is_relative_to(repo) else str(src)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
