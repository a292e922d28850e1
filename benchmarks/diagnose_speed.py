"""`diag diagnose --sglang 0.5.23` vs `python -m torch.utils.collect_env`, side by side.

The issue's speed bar: diagnosing a release takes no longer than torch's own environment
report on the same machine. Both run as fresh subprocesses of the same interpreter, interleaved
(A, B, A, B, ...) so that load changes hit both alike; one warm-up run of each first (pip
caches, the release download, page cache). Prints the medians and the ratio diag/collect_env.

    python benchmarks/diagnose_speed.py [--repeats 5] [--sglang 0.5.23] [--cold] [--json]

`--cold` runs every diag with `DIAG_NO_CACHE=1`, so nothing measured earlier is reused (the
release itself stays downloaded): the first run after an install or an upgrade. Each round
alternates which command goes first.

The load average before and after is printed with the ratio: a cold diag spreads ~4 s of CPU
over two processes (the torch worker's import and checks, the parent's census and gate), while
collect_env spends ~2.5 s in one, so on a host whose cores are busy with other work the ratio
rises towards the ratio of CPU times; on free cores the two processes overlap.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _diag_cmd(sglang: str, extra: list[str]) -> list[str]:
    exe = Path(sys.executable).with_name("diag")
    base = [str(exe)] if exe.exists() else [shutil.which("diag") or "diag"]
    return base + ["diagnose", "--sglang", sglang, *extra]


def _time(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - t0, proc.returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sglang", default="0.5.23")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--cold", action="store_true", help="diag reuses no cached result")
    ap.add_argument("diag_args", nargs="*", help="extra arguments for diag diagnose")
    a = ap.parse_args(argv)
    cmds = {
        "diag diagnose": _diag_cmd(a.sglang, a.diag_args),
        "collect_env": [sys.executable, "-m", "torch.utils.collect_env"],
    }
    samples: dict[str, list[float]] = {k: [] for k in cmds}
    codes: dict[str, set[int]] = {k: set() for k in cmds}
    envs = {name: None for name in cmds}
    if a.cold:
        envs["diag diagnose"] = dict(os.environ, DIAG_NO_CACHE="1")
    for name, cmd in cmds.items():  # warm-up, not counted
        _time(cmd, envs[name])
    names = list(cmds)
    load_before = os.getloadavg()
    for i in range(a.repeats):
        for name in names if i % 2 == 0 else reversed(names):
            s, rc = _time(cmds[name], envs[name])
            samples[name].append(s)
            codes[name].add(rc)
    load_after = os.getloadavg()
    med = {k: statistics.median(v) for k, v in samples.items()}
    ratio = med["diag diagnose"] / med["collect_env"]
    doc = {"repeats": a.repeats, "sglang": a.sglang, "cold": a.cold, "python": sys.executable,
           "commands": {k: " ".join(v) for k, v in cmds.items()},
           "median_s": med, "min_s": {k: min(v) for k, v in samples.items()},
           "max_s": {k: max(v) for k, v in samples.items()},
           "exit_codes": {k: sorted(v) for k, v in codes.items()},
           "ratio_diag_over_collect_env": ratio, "cpus": os.cpu_count(),
           "loadavg_before": load_before, "loadavg_after": load_after}
    if a.json:
        print(json.dumps(doc, indent=2))
    else:
        for k in cmds:
            v = samples[k]
            print(f"{k:<14} median {med[k]:6.2f} s  min {min(v):6.2f}  max {max(v):6.2f}  "
                  f"(n={len(v)}, exit {sorted(codes[k])})")
        print(f"ratio diag/collect_env = {ratio:.2f} "
              f"({'within' if ratio <= 1 else 'OVER'} the bar of 1.0); load average "
              f"{load_before[0]:.2f} -> {load_after[0]:.2f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
