"""STAND-IN engine (not SGLang): a launcher that starts a scheduler child with `multiprocessing`
spawn, as SGLang's `entrypoints/engine.py` does. The child runs batches through
`StandinScheduler.run_batch` and appends one JSON line per batch to OUT: {pid, batch, first,
last}. It stops after BATCHES batches or when the file STOP exists; the launcher exits with the
child's code plus EXIT_BASE.

Usage: python standin_engine.py OUT STOP BATCHES PAUSE [inject-hook-error] [exit=N]
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys

import standin_fixes

standin_fixes.register()  # module level: runs in the launcher and (spawn re-imports it) the child


def scheduler(out: str, stop: str, batches: int, pause: float, inject: bool) -> None:
    from standin_scheduler import StandinScheduler

    if inject:  # make the agent's per-batch safe point raise: the engine must not notice
        from diag.engine import agent

        def boom() -> None:
            raise RuntimeError("injected failure in the per-batch hook")

        agent.current().safe_point = boom
    sched = StandinScheduler()
    for i in range(batches):
        if os.path.exists(stop):
            break
        first, last = sched.run_batch(pause)
        with open(out, "a") as fh:
            fh.write(json.dumps({"pid": os.getpid(), "batch": i, "first": first,
                                 "last": last}) + "\n")


def main() -> int:
    out, stop, batches, pause = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    extra = sys.argv[5:]
    code = next((int(a.split("=", 1)[1]) for a in extra if a.startswith("exit=")), 0)
    mp.set_start_method("spawn")
    p = mp.Process(target=scheduler, args=(out, stop, batches, pause,
                                           "inject-hook-error" in extra))
    p.start()
    p.join()
    return (p.exitcode or 0) + code


if __name__ == "__main__":
    sys.exit(main())
