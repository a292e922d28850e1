"""The recorded profiler crash on real servers (fixes/recorded/profiler-crash.json), shown by
`diag bench`'s profiler section and the TUI: it must be what the lane's own judgement
(benchmarks/gpu_engine/checks.py `check_crash`) makes of the run's server logs.

The run: the coordinator's first prototype of the crash check on the GPU lane (NVIDIA H200,
SGLang 0.5.23, torch 2.11, 2026-12-02T18:30:24Z), 3 plain servers and 3 under the fix, all with
SGLANG_PROFILE_V2=1; tests/gpu_lane/crash-h200-run1/ holds its record.json as written and each
server log's profiler lines and last 15 lines (the rest is start-up). Read by eye: each server
got 3 profiles, each wrote its prefill and decode traces (record.json "files"), no log holds
"Fatal Python error", every server was alive at the end ("alive_at_end"; the "crashed with exit
code -15" line at each log's end is the lane stopping it with SIGTERM)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu_engine"))

import record_crash  # noqa: E402

from diag.fixes import profiler_crash_record  # noqa: E402

RUN = ROOT / "tests" / "gpu_lane" / "crash-h200-run1"


def test_the_record_is_the_lanes_verdict_on_its_own_logs():
    rec = profiler_crash_record.load()
    assert rec is not None
    got = record_crash.record(record_crash.tries_from(ROOT / rec["evidence"]), {}, None)
    assert got["verdict"] == rec["verdict"] and got["passed"] == rec["passed"]
    for side in ("plain", "fix"):
        assert got[side] == rec[side]


def test_the_prototype_run_was_not_reproduced():
    tries = record_crash.tries_from_prototype(RUN)
    assert sorted(t.name for t in tries) == ["fix0", "fix1", "fix2", "plain0", "plain1", "plain2"]
    assert all(t.profiles_sent == 3 and t.profiles_done == 3 and t.alive for t in tries)
    assert all(t.crash() is None for t in tries)
    got = record_crash.record(tries, {}, None)
    assert got["verdict"] == "not reproduced" and got["passed"] is False  # never "prevented"
    for side in ("plain", "fix"):
        assert got[side]["crashed"] == 0 and got[side]["profiles_sent"] == 9
    assert json.loads((RUN / "record.json").read_text())["started"] == "2026-12-02T18:30:24Z"


def test_note_says_what_was_shown(tmp_path):
    rec = profiler_crash_record.load()
    n = profiler_crash_record.note(rec)
    assert rec["measured"]["where"] in n and rec["measured"]["when"] in n
    p, f = rec["plain"], rec["fix"]
    assert f"before (plain) {p['crashed']} crashed of {p['tested']} servers over " \
           f"{p['profiles_sent']} profiles" in n
    assert f"after (under the fix) {f['crashed']} crashed of {f['tested']} servers" in n
    assert ("the fix prevented it" in n) == (rec["verdict"] == "prevented")
    shown = {**rec, "verdict": "prevented", "plain": {**rec["plain"], "crashed": 2}}
    p = tmp_path / "r.json"
    p.write_text(json.dumps(shown))
    assert "the fix prevented it" in profiler_crash_record.note(profiler_crash_record.load(p))


def test_a_damaged_record_is_not_shown(tmp_path):
    p = tmp_path / "r.json"
    rec = profiler_crash_record.load()
    for bad in ("{", json.dumps({**rec, "verdict": "fine"}),
                json.dumps({**rec, "fix": {"crashed": "0"}}), json.dumps([1])):
        p.write_text(bad)
        assert profiler_crash_record.load(p) is None
    assert profiler_crash_record.load(tmp_path / "missing.json") is None


RUN2 = ROOT / "tests" / "gpu_lane" / "crash-h200-run2"


def test_the_second_run_reproduced_it_without_the_fix_only():
    """The GPU lane's crash mode (H200, SGLang 0.5.23, torch 2.11, 2026-12-03T00:06:58Z; 3 plain
    servers and 3 under the fix, 4 profiles each, 40 rounds of requests after each stop).
    Read by eye: server-plain-2.log logs "Stop profiling..." twice (prefill, decode stages), then
    `free(): invalid next size (fast)`, "Fatal Python error: Aborted" and, in the current thread,
    "Garbage-collecting" above SGLang's forward frames; lane.json: plain-0/1 and fix-0/1/2 sent
    4 profiles each and were alive at the end, plain-2 sent 1 (it died after it)."""
    tries = {t.name: t for t in record_crash.tries_from_lane(RUN2 / "lane.json")}
    assert sorted(tries) == ["fix-0", "fix-1", "fix-2", "plain-0", "plain-1", "plain-2"]
    dead = tries["plain-2"]
    assert not dead.alive and dead.profiles_sent == 1
    c = dead.crash()
    assert c is not None and c.teardown and c.garbage_collecting and c.after_profile_stop
    assert c.signal == "Aborted"
    assert all(t.alive and t.crash() is None for n, t in tries.items() if n != "plain-2")
    got = record_crash.record(list(tries.values()), {}, None)
    assert got["verdict"] == "prevented" and got["passed"] is True
    assert (got["plain"]["crashed"], got["plain"]["profiles_sent"]) == (1, 9)
    assert (got["fix"]["crashed"], got["fix"]["profiles_sent"]) == (0, 12)
