"""Time and peak memory of `diag trace` on a large real torch-profiler trace.

The trace is recorded here with real torch (tests/trace_programs.py: SGLang 0.5.23's annotations
around real CPU ops, Python stacks on), as many rounds as it takes to reach the size asked, and
exported by Kineto as plain JSON and as .json.gz. Each measurement runs the installed command in
a fresh child (`python -m diag trace PATH --json`), wall time and the child's peak RSS
(`ru_maxrss`); the noise floor is the same child reading a tiny trace (import and start cost).
For scale, the peak RSS of `json.load` on the same file is measured once in another child.

    python benchmarks/trace_read.py [--rounds 4200] [--repeats 3] [--dir /tmp/diag-trace-bench]
    python benchmarks/trace_read.py --trace BIG.trace.json.gz   # a trace recorded elsewhere
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

PROGRAM = Path(__file__).resolve().parent.parent / "tests" / "trace_programs.py"


def _child(cmd: list[str]) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds user+sys, peak RSS MiB) of one child run to completion. On a
    shared machine the CPU time is the steadier figure: wall time includes waiting for a core."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({status})")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4200)  # ~200 MB of JSON
    ap.add_argument("--trace", default=None, help="time this trace instead of recording one")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default="/tmp/diag-trace-bench")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    d = Path(a.dir)
    d.mkdir(parents=True, exist_ok=True)
    plain = d / f"big-{a.rounds}.trace.json"
    gz = d / f"big-{a.rounds}.trace.json.gz"
    tiny = d / "tiny.trace.json"
    todo = ((plain, a.rounds), (gz, a.rounds), (tiny, 2))
    if a.trace:
        given = Path(a.trace)
        plain, gz = (given, None) if given.suffix != ".gz" else (None, given)
        todo = ((tiny, 2),)
    for path, rounds in todo:
        if not path.exists():
            t0 = time.perf_counter()
            subprocess.run([sys.executable, str(PROGRAM), str(path), "--rounds", str(rounds)],
                           check=True, capture_output=True)
            print(f"recorded {path.name} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    diag = [sys.executable, "-m", "diag", "trace", "--json"]
    rows = {}
    for name, path in (("tiny (floor)", tiny), ("plain", plain), ("gz", gz)):
        if path is None:
            continue
        runs = [_child([*diag, str(path)]) for _ in range(a.repeats)]
        rows[name] = {"file_mb": path.stat().st_size / 2**20,
                      "wall_s": [r[0] for r in runs], "cpu_s": [r[1] for r in runs],
                      "peak_rss_mib": [r[2] for r in runs]}
    src = plain or gz
    opener = "gzip.open" if src.suffix == ".gz" else "open"
    load = [sys.executable, "-c", f"import gzip, json; json.load({opener}({str(src)!r}))"]
    rows["json.load (for scale)"] = dict(zip(("wall_s", "cpu_s", "peak_rss_mib"),
                                             ([v] for v in _child(load))))
    rows["json.load (for scale)"]["file_mb"] = src.stat().st_size / 2**20
    import gzip

    events = len(json.load(gzip.open(src) if src.suffix == ".gz" else open(src))["traceEvents"])
    if a.json:
        print(json.dumps({"events": events, "rows": rows}, indent=1))
        return
    print(f"trace: {events} events; load average {os.getloadavg()[0]:.1f}")
    for name, r in rows.items():
        print(f"{name:<30} file {r['file_mb']:6.1f} MiB  wall median "
              f"{statistics.median(r['wall_s']):6.2f} s [{min(r['wall_s']):.2f}..{max(r['wall_s']):.2f}]"
              f"  CPU median {statistics.median(r['cpu_s']):6.2f} s [{min(r['cpu_s']):.2f}.."
              f"{max(r['cpu_s']):.2f}] n={len(r['wall_s'])}  peak RSS median "
              f"{statistics.median(r['peak_rss_mib']):6.1f} MiB")


if __name__ == "__main__":
    main()
