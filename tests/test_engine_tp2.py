"""The `engine` lane with two ranks: a real SGLang 0.5.23 server with `--tp 2` on CPU under
`diag run --probe all --fix profiler-controlled-teardown` (issue 28, the CPU part).

One server for the module, as tests/test_engine_server.py starts its tp 1 server (tiny Llama
target, EAGLE draft that agrees with it, `intel_amx` on the sgl_kernel stand-in), plus:
- `--tp 2`: two scheduler processes, one per rank. With the stand-in's AMX flag,
  `is_shm_available` (srt/utils/common.py:4528) holds once bootstrap.py:288 sets LOCAL_SIZE, so
  every all-reduce/all-gather goes through `torch.ops.sgl_kernel.shm_allreduce`/`shm_allgather`
  (srt/distributed/parallel_state.py:697, :1427): the stand-in does them through
  torch.distributed on the gloo world (tests/engine_standins/sgl_kernel; no CPU build of
  sgl_kernel is installable here).
- `SGLANG_CPU_OMP_THREADS_BIND=0|1`: with it unset, srt/utils/numa_utils.py:463
  `init_threads_binding` asserts one NUMA node per rank; these machines have one.
- `--max-total-tokens 4096`: the KV pool sized from free memory is ~1 GB per model per rank.

Expected values: the ranks are what SGLang titles its schedulers (srt/managers/scheduler.py:6289
" TP{rank}" when tp_size > 1); the tokens are the target's greedy continuation computed from its
weights in plain torch (engine_models.greedy), the same reference the tp 1 lane asserts, so the
two-rank server under diag gives the tokens a tp 1 server gives without diag.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import engine_models  # noqa: E402
import engine_server  # noqa: E402
import report_schema  # noqa: E402

from diag.engine import rundir  # noqa: E402

pytestmark = [pytest.mark.engine, pytest.mark.release, pytest.mark.slow,
              pytest.mark.timeout(1200)]

FIX = "profiler-controlled-teardown"
PROMPT = [5, 6, 7]
RANKS = {"TP0", "TP1"}


_cli = engine_server.diag_cli
_wait = engine_server.wait_for


@pytest.fixture(scope="module")
def server(release, models, tmp_path_factory):
    t = release("0.5.23")
    tmp = tmp_path_factory.mktemp("engine-tp2")
    s = engine_server.start(
        t.root, models["bigram"], tmp / "server.log", draft=models["draft"], run_dir=tmp / "run",
        diag_args=("--probe", "all", "--fix", FIX),
        server_args=("--tp", "2", "--max-total-tokens", "4096"),
        # SGLANG_PROFILE_V2: the fix applies to the V2 stop path (see test_engine_server.py)
        extra_env={"SGLANG_CPU_OMP_THREADS_BIND": "0|1", "SGLANG_PROFILE_V2": "1"},
        ready_timeout=900)
    sys.stderr.write(f"engine tp2 lane: server ready in {s.ready_s:.1f} s\n")
    try:
        yield s
    finally:
        s.stop()


def _ranks(d: Path) -> dict[str, rundir.ProcessState]:
    """The live engine processes by rank, once both have said theirs."""
    def both():
        by = {p.rank: p for p in rundir.read_state(d).live if p.engine}
        return by if set(by) == RANKS else None
    return _wait("both schedulers to report their ranks", both)


def test_greedy_tokens_are_the_targets_on_two_ranks(server, models):
    doc = server.generate(PROMPT, 24)
    assert doc["output_ids"] == engine_models.in_env(engine_server.VENV_PY, "greedy",
                                                     models["bigram"], PROMPT[-1], 24)
    assert doc["meta_info"]["spec_accept_length"] > 1.0, doc["meta_info"]


def test_each_rank_has_one_agent_with_the_fix_and_counters(server):
    ranks = _ranks(server.run_dir)
    assert len({p.pid for p in ranks.values()}) == 2
    for rank, p in ranks.items():
        starts = [e for e in rundir._read_lines(server.run_dir / f"events-{p.pid}.jsonl")
                  if e.get("kind") == "start"]
        assert len(starts) == 1, (rank, starts)  # the agent started once in that process
        assert p.sglang == "0.5.23" and p.control == "batch"
        assert p.fixes[FIX]["state"] == "applied", (rank, p.fixes)
        for probe in ("draft-extend-graph", "metadata-syncs"):
            assert p.probes[probe]["state"] == "on", (rank, p.probes)


def test_counters_are_per_rank_in_fix_status(server):
    ranks = _ranks(server.run_dir)
    server.generate(PROMPT, 16)
    for p in ranks.values():
        _wait(f"draft-extend passes on {p.rank}", lambda p=p: rundir.read_process(
            server.run_dir, p.pid).counters["draft_extend"])
    r = _cli("fix", "status", "--run-dir", str(server.run_dir), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    report_schema.check("fix-status-v1.json", doc)
    (run,) = doc["runs"]
    rows = {p["rank"]: p for p in run["processes"] if p["engine"]}
    assert set(rows) == RANKS
    for rank, row in rows.items():
        assert row["pid"] == ranks[rank].pid and row["alive"]
        assert row["counters"]["draft_extend"]["eager"]["passes"] > 0, (rank, row["counters"])
    text = _cli("fix", "status", "--run-dir", str(server.run_dir)).stdout
    for rank, p in ranks.items():
        assert f"pid {p.pid} " in text and f"engine process {rank} " in text


def test_metrics_show_each_rank(server):
    ranks = _ranks(server.run_dir)
    server.generate(PROMPT, 16)
    m = server.metrics()
    for rank, p in ranks.items():
        passes = m[f'diag_draft_extend_passes_total{{mode="eager",rank="{rank}"}}']
        # the rank's own count, the one its events folded to (read after /metrics: never fewer)
        assert 0 < passes <= rundir.read_process(
            server.run_dir, p.pid).counters["draft_extend"]["eager"]["passes"]
        assert m[f'diag_fix_state{{fix="{FIX}",rank="{rank}",state="applied"}}'] == 1
        assert m[f'diag_agent_processes{{rank="{rank}"}}'] == 1
    assert not any(k.startswith("diag_draft_extend_passes_total") and "rank=" not in k for k in m)


def test_revert_and_apply_are_acknowledged_by_both_ranks(server):
    ranks = _ranks(server.run_dir)
    for action, state in (("revert", "reverted"), ("apply", "applied")):
        r = _cli("fix", action, FIX, "--run-dir", str(server.run_dir), "--json", "--timeout", "60")
        assert r.returncode == 0, r.stdout + r.stderr
        doc = json.loads(r.stdout)
        report_schema.check("fix-action-v1.json", doc)
        rows = {row["rank"]: row for row in doc["processes"] if row["engine"]}
        assert set(rows) == RANKS, doc
        for rank, row in rows.items():
            assert row["pid"] == ranks[rank].pid
            assert row["acknowledged"] and row["ok"] and row["state"] == state, row
    assert server.generate(PROMPT, 4)["output_ids"]


def test_a_rank_that_does_not_answer_makes_revert_exit_4_naming_it(server, models):
    """TP1 stopped (SIGSTOP): the revert is not acknowledged by it, the command exits 4 and its
    row names the rank. (TP0 may stall too: SGLang's rank 0 broadcasts each loop's requests to
    the other ranks, so it waits for TP1 before it reaches its next batch boundary.) Resumed,
    both ranks take the revert (the newest request for the fix: an older one it supersedes may
    go unanswered) and the server serves the same tokens."""
    ranks = _ranks(server.run_dir)
    stopped = ranks["TP1"].pid
    stopped_at = time.time()
    os.kill(stopped, signal.SIGSTOP)
    try:
        r = _cli("fix", "revert", FIX, "--run-dir", str(server.run_dir), "--json",
                 "--timeout", "5")
        text = _cli("fix", "revert", FIX, "--run-dir", str(server.run_dir), "--timeout", "5")
    finally:
        os.kill(stopped, signal.SIGCONT)
    assert r.returncode == 4, r.stdout + r.stderr
    rows = {row["rank"]: row for row in json.loads(r.stdout)["processes"] if row["engine"]}
    assert rows["TP1"]["pid"] == stopped and not rows["TP1"]["acknowledged"]
    assert rows["TP1"]["waited"] and "no acknowledgement" in rows["TP1"]["reason"]
    assert text.returncode == 4
    assert f"pid {stopped:<8} engine TP1 revert {FIX}: no ack" in text.stdout, text.stdout
    for p in ranks.values():
        # a revert acknowledged after the stop; the second of the two finds nothing to revert
        # and its acknowledgement says "not-applied", so the state is that or "reverted"
        _wait(f"{p.rank} to take the revert once resumed", lambda p=p: any(
            a.get("action") == "revert" and a.get("ok")
            for a in rundir.read_process(server.run_dir, p.pid).acks.values()
            if a.get("ts", 0) > stopped_at), timeout=120)
        assert rundir.read_process(server.run_dir, p.pid).fixes[FIX]["state"] in (
            "reverted", "not-applied")
    assert server.generate(PROMPT, 24)["output_ids"] == engine_models.in_env(
        engine_server.VENV_PY, "greedy", models["bigram"], PROMPT[-1], 24)


def test_every_event_the_two_ranks_wrote_is_valid(server):
    assert report_schema.check_events(server.run_dir) > 0


def test_a_killed_rank_shows_as_gone_by_rank(server):  # last: SGLang then takes the server down
    ranks = _ranks(server.run_dir)
    dead = ranks["TP1"]
    os.kill(dead.pid, signal.SIGKILL)
    _wait("TP1 to be gone", lambda: not rundir.read_process(server.run_dir, dead.pid).alive)
    r = _cli("fix", "status", "--run-dir", str(server.run_dir), "--json")
    assert r.returncode == 0, r.stderr
    procs = {p["pid"]: p for p in json.loads(r.stdout)["runs"][0]["processes"]}
    assert procs[dead.pid]["alive"] is False and procs[dead.pid]["rank"] == "TP1"
    # TP0 keeps what it last said, live or taken down with the server since
    assert procs[ranks["TP0"].pid]["rank"] == "TP0"
    assert procs[ranks["TP0"].pid]["fixes"][FIX]["state"] in ("reverted", "not-applied")
    text = _cli("fix", "status", "--run-dir", str(server.run_dir)).stdout
    # "exited", or "died" with the cause once the launcher's last words name it (it saw
    # scheduler_1 end with -9): both say the rank is gone; which one depends on timing
    gone = re.search(rf"pid {dead.pid} \(parent {dead.ppid}\) (exited|died)  engine process TP1 ",
                     text)
    assert gone, text
    if gone.group(1) == "died":
        assert f"engine process {dead.pid} died: SIGKILL" in text, text
