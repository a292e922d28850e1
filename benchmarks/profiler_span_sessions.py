"""Does torch's profiler survive a `record_function` span that crosses two profiler sessions?

Why: SGLang's stage profiling stops one profile and starts the next inside `Scheduler.run_batch`,
whose own span (`record_function("scheduler.run_batch")`) was opened in the first session; the
profiler-controlled-teardown fix moves that switch out of the span (fixes/profiler_stage_switch.py).
This measures the hazard itself on the local torch, in child processes (it can kill them):
per variant, `--runs` children each doing `--switches` switches. Variants: the span `cross`es
sessions or closes in its `own`; the stopped profile is `kept` (left to the GC) or `freed` at
the stop. Prints one row per variant: runs that ended well, by signal, or with an exception.

    python benchmarks/profiler_span_sessions.py [--runs 6] [--switches 30] [--json]
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys

CHILD = r"""
import gc, sys, weakref, torch
from torch.profiler import profile, record_function, ProfilerActivity
cross, free, n = sys.argv[1] == "cross", sys.argv[2] == "freed", int(sys.argv[3])
x = torch.randn(32, 32)
for i in range(n):
    p1 = profile(activities=[ProfilerActivity.CPU], with_stack=True); p1.start()
    rf = record_function("outer"); rf.__enter__()
    for _ in range(3): x = (x @ x).tanh()
    if not cross: rf.__exit__(None, None, None)
    p1.stop()
    if free:
        del p1; gc.collect()
    p2 = profile(activities=[ProfilerActivity.CPU], with_stack=True); p2.start()
    for _ in range(3): x = (x @ x).tanh()
    if cross: rf.__exit__(None, None, None)
    p2.stop()
    if free:
        del p2; gc.collect()
print("OK")
"""


def one(span: str, stopped: str, switches: int) -> str:
    p = subprocess.run([sys.executable, "-c", CHILD, span, stopped, str(switches)],
                       capture_output=True, text=True, timeout=300)
    if p.returncode == 0 and "OK" in p.stdout:
        return "ok"
    if p.returncode < 0:
        return signal.Signals(-p.returncode).name
    last = (p.stderr.strip().splitlines() or ["?"])[-1]
    return f"exception: {last[:80]}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--switches", type=int, default=30)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    import torch

    rows = []
    for span in ("cross", "own"):
        for stopped in ("kept", "freed"):
            outcomes = [one(span, stopped, a.switches) for _ in range(a.runs)]
            rows.append({"span": span, "stopped_profile": stopped, "runs": a.runs,
                         "ok": outcomes.count("ok"),
                         "failed": [o for o in outcomes if o != "ok"]})
    doc = {"torch": torch.__version__, "switches_per_run": a.switches, "rows": rows}
    if a.json:
        print(json.dumps(doc, indent=2))
        return
    print(f"torch {doc['torch']}, {a.switches} session switches per run")
    for r in rows:
        print(f"  span {r['span']:<5} stopped profile {r['stopped_profile']:<5}: "
              f"{r['ok']}/{r['runs']} ok" + (f"; failed: {', '.join(r['failed'])}"
                                             if r["failed"] else ""))


if __name__ == "__main__":
    main()
