"""The `engine` lane: diag end to end on a real SGLang 0.5.23 server (CPU) with EAGLE.

One server for the module: `diag run --probe all -- python -m sglang.launch_server` with a tiny
Llama target and an EAGLE draft that agrees with it (tests/engine_models.py), the
`intel_amx` attention backend on the plain-torch sgl_kernel stand-in (tests/engine_standins: no
CPU build of sgl_kernel is installable here, and the AMX flag stand-in because these CPUs lack
amx_tile), `--enable-metrics`. Tests run in file order; the last one kills the scheduler.

Expected values come from the release and from what the test itself launched:
- 0.5.23 `srt/speculative/eagle_worker_v2.py` `_capture_cuda_graphs`: on CPU neither the CUDA
  nor the HIP branch admits a backend, so no draft-extend runner exists and every draft-extend
  pass is eager (the `draft-extend-graph` counter says `eager`, never `graph`).
- `srt/managers/scheduler_components/profiler_manager.py` `_stop_profile` already drops and
  collects (upstream since 0.5.18); the V2 path (`SGLANG_PROFILE_V2`, `srt/utils/profile_utils.py`
  `ProfileManager._do_stop`) does not, so `profiler-controlled-teardown` applies there: the
  server runs with SGLANG_PROFILE_V2=1 and a profile started with `num_steps` stops through it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import engine_models  # noqa: E402
import engine_server  # noqa: E402
import report_schema  # noqa: E402

from diag.engine import rundir  # noqa: E402

pytestmark = [pytest.mark.engine, pytest.mark.release, pytest.mark.slow,
              pytest.mark.timeout(900)]

FIX = "profiler-controlled-teardown"
FAULT = "standin-engine-fault"
PROMPT = [5, 6, 7]


_cli = engine_server.diag_cli
_wait = engine_server.wait_for


@pytest.fixture(scope="module")
def server(release, models, tmp_path_factory):
    t = release("0.5.23")
    tmp = tmp_path_factory.mktemp("engine")
    d = tmp / "run"
    # --fix at start: `ProfileManager.__init__` binds `on_stop=self._do_stop`
    # (srt/utils/profile_utils.py:77) when the scheduler starts, so a V2 stop triggered by
    # num_steps only goes through a patch that was in before then.
    s = engine_server.start(
        t.root, models["bigram"], tmp / "server.log", draft=models["draft"], run_dir=d,
        diag_args=("--probe", "all", "--fix", FIX),
        extra_env={"SGLANG_PROFILE_V2": "1", "DIAG_STANDIN_FAULT_FIX": "1"})
    sys.stderr.write(f"engine lane: server ready in {s.ready_s:.1f} s\n")
    try:
        yield s
    finally:
        s.stop()


def _valid(doc: dict, schema: str) -> dict:
    """`doc` against the JSON Schema diag ships (diag/schemas/<schema>-v1.json)."""
    report_schema.check(f"{schema}-v1.json", doc)
    return doc


def _scheduler(d: Path) -> rundir.ProcessState:
    return _wait("the scheduler to report itself as an engine process", lambda: next(
        (p for p in rundir.read_state(d).live if p.engine), None))


def test_eagle_tokens_are_the_targets_and_drafts_are_accepted(server, models):
    doc = server.generate(PROMPT, 24)
    # The bigram target's greedy continuation, computed from its weights in plain torch.
    assert doc["output_ids"] == engine_models.in_env(engine_server.VENV_PY, "greedy",
                                                     models["bigram"], PROMPT[-1], 24)
    meta = doc["meta_info"]
    assert meta["spec_verify_ct"] > 0
    assert meta["spec_accept_length"] > 1.0, meta  # the accepted path ran


def test_agent_in_scheduler_counts_eager_draft_extend(server):
    sched = _scheduler(server.run_dir)
    assert sched.sglang == "0.5.23" and sched.control == "batch"
    assert sched.probes["draft-extend-graph"]["state"] == "on", sched.probes
    server.generate(PROMPT, 16)
    c = _wait("draft-extend passes", lambda: (
        rundir.read_process(server.run_dir, sched.pid).counters["draft_extend"] or None))
    assert c["eager"]["passes"] > 0 and c["eager"]["seconds"] > 0
    assert "graph" not in c  # no draft-extend runner on CPU (see the module docstring)
    others = [p for p in rundir.read_state(server.run_dir).live if p.pid != sched.pid]
    assert others and not any(p.engine for p in others)  # launcher, detokenizer, helpers


def test_fix_apply_and_revert_exit_0_on_the_healthy_engine(server):
    sched = _scheduler(server.run_dir)
    for action, state in (("apply", "applied"), ("revert", "reverted")):
        r = _cli("fix", action, FIX, "--run-dir", str(server.run_dir), "--json", "--timeout", "60")
        assert r.returncode == 0, r.stdout + r.stderr
        rows = {row["pid"]: row for row in _valid(json.loads(r.stdout), "fix-action")["processes"]}
        assert rows[sched.pid]["engine"] and rows[sched.pid]["ok"]
        assert rows[sched.pid]["state"] == state
        launcher = rows[server.proc.pid]  # `diag run` exec'd into the launcher: same pid
        assert not launcher["engine"] and not launcher["waited"]
        assert server.generate(PROMPT, 4)["output_ids"]


def test_fix_status_lists_processes_and_roles(server):
    sched = _scheduler(server.run_dir)
    r = _cli("fix", "status", "--run-dir", str(server.run_dir), "--json")
    assert r.returncode == 0, r.stderr
    (run,) = _valid(json.loads(r.stdout), "fix-status")["runs"]
    procs = {p["pid"]: p for p in run["processes"]}
    assert procs[sched.pid]["engine"] and procs[sched.pid]["alive"]
    assert procs[sched.pid]["fixes"][FIX]["state"] == "reverted"
    assert procs[sched.pid]["counters"]["draft_extend"]["eager"]["passes"] > 0
    text = _cli("fix", "status", "--run-dir", str(server.run_dir))
    assert f"pid {sched.pid} " in text.stdout and "engine process" in text.stdout


def test_server_metrics_carry_diag_beside_sglang(server):
    server.generate(PROMPT, 16)
    m = server.metrics()
    assert any(k.startswith("sglang:") for k in m)
    assert m['diag_draft_extend_passes_total{mode="eager"}'] > 0
    assert any(k.startswith("diag_fix_state") for k in m), sorted(k for k in m if "diag" in k)


def test_diagnose_takes_configuration_from_server_info(server):
    code, body = server.get("/server_info")
    assert code == 200 and json.loads(body)["attention_backend"] == "intel_amx"
    r = _cli("diagnose", "--server", server.url, "--json", "--no-execute")
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    cfg = doc["config"]
    assert cfg["source"] == "server"
    # what this test launched the server with (engine_server.EAGLE_ARGS, start())
    assert cfg["attention_backend"] == "intel_amx"
    assert cfg["speculative_algorithm"] == "EAGLE" and cfg["speculative_num_steps"] == 2


def test_tui_once_shows_live_server_values(server):
    # SGLang totals the accept length every decode_log_interval (40) decode passes (0.5.23
    # managers/scheduler_components/metrics_reporter.py:934, :999-1000): 3 x 64 tokens at 3 a
    # pass are ~64 passes, whatever ran on this module's server before (alone, one 64-token
    # request was ~22 passes: no accept length yet)
    for _ in range(3):
        server.generate(PROMPT, 64)
    r = _cli("tui", "--server", server.url, "--once", "--no-execute", "--width", "160")
    assert r.returncode == 0, r.stderr
    assert f"server {server.url}: ok" in r.stdout
    lines = [line for line in r.stdout.splitlines() if "accept length" in line]
    # /server_info internal_states[].avg_spec_accept_length: every draft is accepted, so it is
    # the number of draft tokens this test launched with (3)
    assert any("avg accept length = 3.0 tokens" in line for line in lines), lines
    # and the live-values row read from /metrics (sglang:spec_accept_length)
    assert any(line.startswith("(server)") for line in lines), lines


PROFILES = 3  # V2 stage profiles in a row: without the stage-switch move the first one crashed


def test_profile_with_num_steps_stops_through_the_controlled_teardown(server, tmp_path):
    """Three V2 stage profiles (prefill, then decode), each stop torn down by breaking the
    profiler's cycles (the default), both traces of each written, and the server serving after.

    Without the fix's stage-switch move, this very sequence on this server crashed the scheduler
    (SIGSEGV) at the first decode stop, with either teardown, in 3 of 3 tries; without the fix
    at all it crashed inside a later automatic collection (the bug the fix is for)."""
    sched = _scheduler(server.run_dir)
    r = _cli("fix", "apply", FIX, "--run-dir", str(server.run_dir), "--json", "--timeout", "60")
    assert r.returncode == 0, r.stdout + r.stderr
    events = server.run_dir / f"events-{sched.pid}.jsonl"
    for i in range(PROFILES):
        out = tmp_path / f"prof{i}"
        code, body = server.post("/start_profile", {"num_steps": 2, "activities": ["CPU"],
                                                    "profile_by_stage": True,  # V2 needs it
                                                    "output_dir": str(out)})
        assert code == 200, body
        want = 2 * (i + 1)

        def stop_events(want=want):  # one per stage: prefill, then decode
            evs = [e for e in rundir._read_lines(events) if e.get("kind") == "profiler_stop"]
            if len(evs) < want:
                server.generate(PROMPT, 8)  # each stage stops after its steps
                return None
            return evs

        evs = _wait(f"profile {i}: two profiler_stop events", stop_events, timeout=180)
        for ev in evs[want - 2:want]:
            assert ev["controlled"] is True and ev["path"] == "v2" and ev["freed"] is True, ev
            assert ev["teardown"] == "cycle-broken" and ev["collect_seconds"] is None, ev
            assert ev["links_cut"] > 0, ev
        traces = sorted(p.name.rsplit("-", 1)[-1] for p in out.glob("*.trace.json.gz"))
        assert traces == ["decode.trace.json.gz", "prefill.trace.json.gz"], traces
    assert server.proc.poll() is None
    assert server.generate(PROMPT, 4)["output_ids"]  # still serving


def test_fix_whose_patch_raises_leaves_the_server_serving(server):
    sched = _scheduler(server.run_dir)
    r = _cli("fix", "apply", FAULT, "--run-dir", str(server.run_dir), "--pid", str(sched.pid),
             "--json", "--timeout", "60")
    assert r.returncode == 4, r.stdout + r.stderr
    (row,) = json.loads(r.stdout)["processes"]
    assert row["acknowledged"] and not row["ok"] and row["state"] == "failed"
    assert "injected failure" in row["reason"]
    ps = rundir.read_process(server.run_dir, sched.pid)
    assert ps.counters["errors"] >= 1
    assert any(e["kind"] == "error" and FAULT in e.get("where", "") for e in ps.last_events)
    doc = server.generate(PROMPT, 8)
    assert doc["meta_info"]["spec_accept_length"] > 1.0


def test_fleet_through_prometheus_scraping_the_server(server, tmp_path):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("the prometheus binary is absent (scripts/test.sh installs it)")
    instance = server.url.removeprefix("http://")
    config = tmp_path / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                      "scrape_configs:\n  - job_name: sglang\n    static_configs:\n"
                      f"      - targets: ['{instance}']\n")
    port = engine_server.free_port()
    url = f"http://127.0.0.1:{port}"
    with open(tmp_path / "prometheus.log", "w") as log:
        prom = subprocess.Popen([binary, f"--config.file={config}",
                                 f"--storage.tsdb.path={tmp_path / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                                stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        def scraped() -> bool:
            q = urllib.parse.urlencode({"query": "count_over_time(diag_agent_processes[1m])"})
            try:
                with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=2) as resp:
                    res = json.loads(resp.read())["data"]["result"]
            except OSError:
                return False
            server.generate(PROMPT, 8)
            return bool(res) and float(res[0]["value"][1]) >= 4

        _wait("4 scrapes of the server", scraped, timeout=120, interval=0.5)
        r = _cli("fleet", "--prometheus", url, "--window", "2m", "--json")
        assert r.returncode == 0, r.stderr
        rows = {row["instance"]: row for row in json.loads(r.stdout)["instances"]}
        row = rows[instance]
        assert row["job"] == "sglang" and row["processes"] >= 1
        assert row["draft_extend_eager_share"] == pytest.approx(1.0)
    finally:
        prom.terminate()
        prom.wait(20)


def _state_changes(probes: list[str], conditions: list[tuple[str, set[str]]],
                   pairs: int) -> int:
    """Switch requests the documented method makes: windows A (all off) and B (the condition's
    counters on), AB then BA, every condition, then (with more than one condition) the floor
    (both A); a request per counter whose state differs from the last one asked (none asked
    yet: asked), all on at the end."""
    state: dict[str, bool] = {}
    n = 0
    floor = [("floor", set())] if len(conditions) > 1 else []
    for i in range(pairs):
        sides = ("A", "B") if i % 2 == 0 else ("B", "A")
        for _name, on in [*conditions, *floor]:
            for side in (sides if on else ("A", "A")):
                for p in probes:
                    want = side == "B" and p in on
                    n += state.get(p) != want
                    state[p] = want
    return n + sum(not state[p] for p in probes)


def test_bench_overhead_switches_the_counters_inside_the_server(server):
    """`diag bench overhead` on the real server: every window starts with each counter in its
    state, switched where it changes and acknowledged by every engine process (the same control
    path as fixes, at a batch boundary), the method's structure is in the JSON (schema'd), and
    the counters are on again at the end. No speed figure is asserted: CPU timings here say
    nothing about a GPU."""
    sched = _scheduler(server.run_dir)
    on = sorted(p for p, s in sched.probes.items() if s["state"] == "on")
    assert on  # `--probe all`: the counters the release has
    r = _cli("bench", "overhead", "--run-dir", str(server.run_dir), "--server", server.url,
             "--windows", "2", "--requests-per-window", "1", "--tokens", "4", "--json",
             timeout=600)
    assert r.returncode == 0, r.stderr
    doc = _valid(json.loads(r.stdout), "overhead")
    assert doc["probes"] == on
    engines = doc["engine_processes"]
    assert sched.pid in engines
    conditions = ["all", *on] if len(on) > 1 else ["all"]
    assert [x["condition"] for x in doc["results"]] == conditions
    # per condition and (several conditions) an off/off pair: 2 pairs of 2 windows (AB, then
    # BA), each counter asked
    # only where its state changes (the first window asks every one), acknowledged by every
    # engine process; and back on at the end
    switches = _state_changes(on, [(c, {c} if c in on else set(on)) for c in conditions], 2)
    assert doc["acks"] == switches * len(engines)
    for x in doc["results"]:
        assert x["pairs"] == 2 and len(x["off_s_per_token"]) == len(x["on_s_per_token"]) == 2
        assert x["lo"] <= x["ratio"] <= x["hi"]
    # the floor: adjacent windows in one state; with several conditions the off/off pair of
    # each round is one (and no other neighbours share a state: A ALL A P1 ... A A | ALL A ...)
    assert doc["noise_floor"]["pairs"] == (2 if len(conditions) > 1 else 1)
    # what no switch toggles, beside the ratios: the agent's own time over the windows (every
    # window's 1 request x 4 tokens, ignore_eos: the tokens are known)
    own = doc["agent_own"]
    assert own["tokens"] == (len(conditions) + (len(conditions) > 1)) * 2 * 2 * 4
    assert own["seconds"] >= 0 and own["wall_s"] > 0 and own["share"] == \
        pytest.approx(own["seconds"] / own["wall_s"])
    after = rundir.read_process(server.run_dir, sched.pid)
    assert {p: after.probes[p]["state"] for p in on} == dict.fromkeys(on, "on")
    # --no-shares: every counter together and the floor only
    r = _cli("bench", "overhead", "--run-dir", str(server.run_dir), "--server", server.url,
             "--windows", "2", "--requests-per-window", "1", "--tokens", "2", "--no-shares",
             "--json", timeout=600)
    assert r.returncode == 0, r.stderr
    doc2 = _valid(json.loads(r.stdout), "overhead")
    assert [x["condition"] for x in doc2["results"]] == ["all"]
    # off (asked: state unknown), on; on (in place), off; on at the end: no window of its own
    # for the floor, which is the boundary of the two pairs (on|on)
    assert doc2["acks"] == 4 * len(on) * len(engines)
    assert doc2["noise_floor"]["pairs"] == 1
    assert doc2["noise_floor"]["a_s_per_token"] == doc2["results"][0]["on_s_per_token"][:1]
    assert doc2["noise_floor"]["b_s_per_token"] == doc2["results"][0]["on_s_per_token"][1:]
    assert sum(1 for a in after.acks.values() if a.get("fix") is None and a.get("ok")) >= \
        switches
    # --max-seconds: no pair starts once the budget is spent (two at least); the result says
    # how many ran of how many asked, and its interval is of those
    r = _cli("bench", "overhead", "--run-dir", str(server.run_dir), "--server", server.url,
             "--windows", "200", "--requests-per-window", "1", "--tokens", "2", "--no-shares",
             "--max-seconds", "1", "--json", timeout=600)
    assert r.returncode == 0, r.stderr
    doc3 = _valid(json.loads(r.stdout), "overhead")
    assert doc3["windows_asked"] == 200 and doc3["max_seconds"] == 1
    assert 2 <= doc3["windows"] < 200
    assert doc3["results"][0]["pairs"] == doc3["noise_floor"]["pairs"] + 1 == doc3["windows"]
    assert doc3["agent_own"]["wall_s"] >= 1 or doc3["windows"] == 2
    text = _cli("bench", "overhead", "--run-dir", str(server.run_dir), "--server", server.url,
                "--windows", "200", "--requests-per-window", "1", "--tokens", "2",
                "--no-shares", "--max-seconds", "1", timeout=600)
    assert text.returncode == 0, text.stderr
    assert "of 200 asked, stopped at --max-seconds 1" in text.stdout.splitlines()[0]


def test_bench_eager_cost_forces_and_releases_draft_extend_inside_the_server(server):
    """`diag bench eager-cost` on the real CPU server: each timed window follows a
    `mode:draft-extend-eager` request every engine process acknowledged, the graph is released
    at the end, and the JSON (schema'd) says no pass was forced: a CPU server captures no
    draft-extend graph (`--disable-cuda-graph`), so there is nothing to force off, no cost is
    reported and the command exits 3. The eager
    cost itself is a GPU measurement (benchmarks/gpu_engine/lane.py); no figure asserted here."""
    from diag.probes.draft_extend_graph.runtime import FORCED

    sched = _scheduler(server.run_dir)
    r = _cli("bench", "eager-cost", "--run-dir", str(server.run_dir), "--server", server.url,
             "--windows", "2", "--requests-per-window", "1", "--tokens", "4", "--json",
             timeout=600)
    # nothing forced (no captured graph): no cost is reported, and the exit says so (3)
    assert r.returncode == 3 and "nothing measured" in r.stderr, r.stderr
    doc = _valid(json.loads(r.stdout), "eager-cost")
    engines = doc["engine_processes"]
    assert sched.pid in engines
    # 2 pairs, AB then BA: graph (asked: state unknown), forced; forced (in place), graph;
    # graph at the end (in place): three requests, each acknowledged by every engine process
    assert doc["acks"] == 3 * len(engines)
    assert len(doc["graph_s_per_token"]) == len(doc["eager_s_per_token"]) == 2
    # the floor: the one boundary of the two pairs (forced|forced), no window of its own
    assert doc["noise_floor"]["pairs"] == 1 and doc["forced_passes"] == 0
    assert doc["noise_floor"]["b_s_per_token"] == doc["eager_s_per_token"][1:] and \
        doc["noise_floor"]["a_s_per_token"] == doc["eager_s_per_token"][:1]
    assert doc["measured"] is False and doc["eager_cost"] is None and doc["ratio"] is None
    assert doc["prediction"] is None  # no forced pass: nothing for the counters to predict
    after = rundir.read_process(server.run_dir, sched.pid)
    states = [a["state"] for a in after.acks.values() if a.get("ok") and a.get("fix") is None
              and a.get("state") in ("forced", "released")]
    assert states[-1] == "released" and states.count("forced") == 1
    assert FORCED not in json.dumps(after.counters.get("draft_extend") or {})
    assert "mode:draft-extend-eager" not in (after.fixes or {})  # a mode, not a fix
    text = _cli("bench", "eager-cost", "--run-dir", str(server.run_dir), "--server", server.url,
                "--windows", "2", "--requests-per-window", "1", "--tokens", "2", timeout=600)
    assert text.returncode == 3 and "not measured: no pass was forced" in text.stdout, \
        text.stderr
    assert "ms/token" not in text.stdout  # no number from windows that compared graph to graph


def test_every_event_the_real_engine_wrote_is_valid(server):
    assert report_schema.check_events(server.run_dir) > 0


def test_killed_scheduler_shows_in_fix_status(server):  # last: it ends the server
    sched = _scheduler(server.run_dir)
    os.kill(sched.pid, signal.SIGKILL)
    _wait("the scheduler to be gone", lambda: not rundir.read_process(server.run_dir,
                                                                      sched.pid).alive)
    r = _cli("fix", "status", "--run-dir", str(server.run_dir), "--json")
    assert r.returncode == 0, r.stderr
    procs = {p["pid"]: p for p in json.loads(r.stdout)["runs"][0]["processes"]}
    assert procs[sched.pid]["alive"] is False and procs[sched.pid]["engine"] is True
    text = _cli("fix", "status", "--run-dir", str(server.run_dir)).stdout
    # SGLang's launcher logs the death ("Subprocess scheduler_0 (pid=N) crashed with exit code
    # -9", 0.5.23 utils/watchdog.py:216) unless it goes down first; its agent keeps that line,
    # and fix status then says how the scheduler died (diag/engine/last_words.py)
    m = re.search(rf"pid {sched.pid} \(parent {sched.ppid}\) (exited|died)", text)
    assert m, text
    if m.group(1) == "died":
        assert f"process {sched.pid} died: SIGKILL (SGLang's launcher" in text, text
    death = procs[sched.pid]["death"]
    assert death is None or death["signal"] == "SIGKILL", death
