"""`diag diagnose --sglang 0.5.23` vs `python -m torch.utils.collect_env`, side by side.

The issue's speed bar: diagnosing a release takes no longer than torch's own environment
report on the same machine. Both run as fresh subprocesses of the same interpreter; one warm-up
run of each first (pip caches, the release download, page cache). Each round runs collect_env,
diag, and collect_env again, in a rotating order, so that load changes hit all three alike;
per round the ratio diag/collect_env (against the first collect_env) and the noise floor of the
same method, collect_env/collect_env. Prints the median ratio of each with its bootstrap 95 %
interval over the rounds (diag.paired), and the medians of the times.

    python benchmarks/diagnose_speed.py [--repeats 12] [--sglang 0.5.23] [--cold] [--json]

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

from diag import paired


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
    ap.add_argument("--repeats", type=int, default=12, help="rounds (pairs)")
    ap.add_argument("--sglang", default="0.5.23")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--cold", action="store_true", help="diag reuses no cached result")
    ap.add_argument("diag_args", nargs="*", help="extra arguments for diag diagnose")
    a = ap.parse_args(argv)
    collect_env = [sys.executable, "-m", "torch.utils.collect_env"]
    runs = {"collect_env": (collect_env, None), "collect_env again": (collect_env, None),
            "diag diagnose": (_diag_cmd(a.sglang, a.diag_args),
                              dict(os.environ, DIAG_NO_CACHE="1") if a.cold else None)}
    samples: dict[str, list[float]] = {k: [] for k in runs}
    codes: dict[str, set[int]] = {k: set() for k in runs}
    for name in ("collect_env", "diag diagnose"):  # warm-up, not counted
        _time(*runs[name])
    names = list(runs)
    load_before = os.getloadavg()
    for i in range(a.repeats):
        for name in names[i % 3:] + names[:i % 3]:  # each command first, second, third in turn
            s, rc = _time(*runs[name])
            samples[name].append(s)
            codes[name].add(rc)
    load_after = os.getloadavg()
    med = {k: statistics.median(v) for k, v in samples.items()}
    ratio = paired.paired_ratio(samples["collect_env"], samples["diag diagnose"])
    floor = paired.paired_ratio(samples["collect_env"], samples["collect_env again"])
    doc = {"repeats": a.repeats, "sglang": a.sglang, "cold": a.cold, "python": sys.executable,
           "commands": {k: " ".join(v[0]) for k, v in runs.items()},
           "seconds": samples, "median_s": med,
           "exit_codes": {k: sorted(v) for k, v in codes.items()},
           "ratio_diag_over_collect_env": ratio.to_dict(), "noise_floor": floor.to_dict(),
           "cpus": os.cpu_count(), "loadavg_before": load_before, "loadavg_after": load_after}
    if a.json:
        print(json.dumps(doc, indent=2))
    else:
        for k, v in samples.items():
            print(f"{k:<18} median {med[k]:6.2f} s  min {min(v):6.2f}  max {max(v):6.2f}  "
                  f"(n={len(v)}, exit {sorted(codes[k])})")
        verdict = ("within the bar of 1.0" if ratio.hi <= 1 else
                   "not shown within 1.0" if ratio.lo <= 1 else "OVER the bar of 1.0")
        print(f"diag/collect_env {ratio.text()}: {verdict}; noise floor "
              f"collect_env/collect_env {floor.text()}; load average "
              f"{load_before[0]:.2f} -> {load_after[0]:.2f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
