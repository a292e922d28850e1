"""Added cost per call of a method wrapped by the in-engine agent, idle and counting.

Each case calls a method of a small stand-in class (it returns its argument) many times in a
loop; the cost added by a wrapper is its time per call minus the unwrapped method's, both
measured in the same process, interleaved, median of the repeats. The wrappers are the real
ones:

- `batch hook, idle`: the agent's per-batch wrapper (`Agent._make_batch_wrapper`, what wraps
  `Scheduler.run_batch` / `process_input_requests`) with no control request pending;
- `sync counter, no sink`: `probes.metadata_syncs.sync_counter`'s builder wrapper with no telemetry sink (the
  agent not running);
- `sync counter, sink, no GPU`: the same with the agent's event file installed as a sink, on a
  machine without a GPU (it calls straight through after checking for one);
- `draft-extend counter, counting`: `probes.draft_extend_graph.runtime`'s pass wrapper, timing every
  call and writing one event per call to the agent's event file (JSON line, flushed);
- on a machine with a GPU, the sync counter as it runs there (a batch with a mode and a size):
  `sync counter, GPU, exact` (every call in torch's sync-debug scope, `DIAG_SYNC_SAMPLE=1`) and
  `sync counter, GPU, sampled` (a stable key: the calls between two counted ones, tallied in
  place).

    python benchmarks/agent_overhead.py [--calls 200000] [--repeats 7] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


class StandinWorker:
    """STAND-IN for an engine object whose method gets wrapped."""

    batch_size = 8

    def step(self, x):
        return x


class StandinBatch:
    """STAND-IN for SGLang's ForwardBatch: what the sync counter reads of a call."""

    def __init__(self) -> None:
        self.forward_mode = type("Mode", (), {"name": "TARGET_VERIFY"})()
        self.batch_size = 16


def _loop(fn: Callable, obj: object, calls: int) -> float:
    t0 = time.perf_counter()
    for i in range(calls):
        fn(obj, i)
    return (time.perf_counter() - t0) / calls


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from diag import telemetry
    from diag.engine import rundir
    from diag.engine.agent import Agent
    from diag.probes.draft_extend_graph import runtime as draft_extend_runtime
    from diag.probes.metadata_syncs import sync_counter

    plain = StandinWorker.step
    agent = Agent.__new__(Agent)
    agent.pending = False  # what the idle per-batch wrapper reads: nothing queued, and
    agent.engine = True  # the process already known as the engine (its steady state)
    cases_idle = {
        "batch hook, idle": Agent._make_batch_wrapper(agent, plain),
        "sync counter, no sink": sync_counter._telemetry_wrapper(plain, "Standin.step"),
    }
    with tempfile.TemporaryDirectory() as tmp:
        d = rundir.create_run_dir(Path(tmp) / "run")
        writer = rundir.EventWriter(d, max_bytes=1 << 30)
        cases_sink = {
            "sync counter, sink, no GPU": sync_counter._telemetry_wrapper(plain, "Standin.step"),
            "draft-extend counter, counting": draft_extend_runtime._wrap_pass(plain),
        }
        samplers: dict[str, Any] = {}
        if sync_counter.gpu_available():
            fb = StandinBatch()
            for name, every in (("sync counter, GPU, exact", 1),
                                ("sync counter, GPU, sampled", 10**9)):
                w = sync_counter._telemetry_wrapper(plain, f"Standin.{every}")
                cases_sink[name] = lambda _o, _i, w=w: w(_o, fb)
                samplers[name] = sync_counter.Sampler(every=every)
        results: dict[str, list[float]] = {k: [] for k in [*cases_idle, *cases_sink]}
        base: list[float] = []
        obj = StandinWorker()
        for fn in [plain, *cases_idle.values()]:  # warm-up
            _loop(fn, obj, 1000)
        for _ in range(args.repeats):
            b = _loop(plain, obj, args.calls)
            base.append(b)
            for name, fn in cases_idle.items():
                results[name].append(_loop(fn, obj, args.calls) - b)
            telemetry.add_sink(writer)
            try:
                for name, fn in cases_sink.items():
                    n = args.calls if "no GPU" in name else max(1000, args.calls // 20)
                    if name in samplers:  # its own sampling rule (exact, or a stable key)
                        sync_counter._SAMPLER = samplers[name]
                        _loop(fn, obj, 10)  # the key's first counted calls (stable after 5)
                    results[name].append(_loop(fn, obj, n) - b)
                telemetry.flush()  # the agent's periodic work: counters fold in-process
            finally:
                telemetry.remove_sink(writer)
        events = sum(1 for _ in open(writer.path)) if writer.path.exists() else 0
        writer.close()

    rows = [{"case": "unwrapped call (baseline)", "ns_per_call": statistics.median(base) * 1e9,
             "kind": "baseline"}]
    for name, vals in results.items():
        rows.append({"case": name, "ns_per_call": statistics.median(vals) * 1e9,
                     "spread_ns": (max(vals) - min(vals)) * 1e9,
                     "kind": "counting" if "counting" in name else "idle"})
    if args.json:
        print(json.dumps({"calls": args.calls, "repeats": args.repeats,
                          "events_written": events, "rows": rows}, indent=2))
        return 0
    print(f"added cost per call (median of {args.repeats}; {args.calls} calls each, the "
          f"counting case {max(1000, args.calls // 20)}; {events} events written)")
    for r in rows:
        label = "per call" if r["kind"] == "baseline" else "added"
        spread = f"  (spread {r['spread_ns']:.0f} ns)" if "spread_ns" in r else ""
        print(f"  {r['case']:<34} {r['ns_per_call']:>9.1f} ns {label}{spread}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
