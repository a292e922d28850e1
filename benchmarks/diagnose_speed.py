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

Whether diag's modules have current bytecode is printed too: with `PYTHONDONTWRITEBYTECODE=1`
(set on these machines, and in many container images) an editable install never gets any, so
every diag run compiles the ~60 modules a diagnose imports again (~9 % of a cold diagnose
here), while torch, installed by pip, has its bytecode. `pip install .` (the README's quick
start) compiles at install; `scripts/test.sh` compiles the editable tree.

The load average before and after is printed with the ratio: a cold diag spreads ~4 s of CPU
over two processes (the torch worker's import and checks, the parent's census and gate), while
collect_env spends ~2.5 s in one, so on a host whose cores are busy with other work the ratio
rises towards the ratio of CPU times; on free cores the two processes overlap.
"""

from __future__ import annotations

import argparse
import importlib.util
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


def bytecode_state(python: str, diag_args: list[str]) -> tuple[int, int]:
    """(modules with current bytecode, modules) of what one `diag diagnose` imports of diag in
    its parent (run here in `python`, output dropped), read from each pyc's header as the
    import system reads it (the source's mtime and size, or a hash)."""
    code = ("import contextlib, io, json, sys\nimport diag.cli.probe_worker\n"
            "from diag.cli import main\nwith contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        main(sys.argv[1:], standalone_mode=False)\n"
            "    except BaseException:\n        pass\n"
            "print(json.dumps([getattr(m, '__file__', None) for n, m in list(sys.modules.items())"
            " if n == 'diag' or n.startswith('diag.')]))")
    proc = subprocess.run([python, "-c", code, "diagnose", *diag_args], capture_output=True,
                          text=True, env=dict(os.environ, DIAG_NO_CACHE="1"))
    lines = proc.stdout.strip().splitlines()
    files = [Path(f) for f in json.loads(lines[-1] if lines else "[]") if f and f.endswith(".py")]
    return sum(_current(f) for f in files), len(files)


def _current(src: Path) -> bool:
    pyc = Path(importlib.util.cache_from_source(str(src)))
    try:
        head, st = pyc.read_bytes()[:16], src.stat()
    except OSError:
        return False
    if len(head) < 16 or head[:4] != importlib.util.MAGIC_NUMBER:
        return False
    if int.from_bytes(head[4:8], "little") & 1:  # hash-based pyc: the import checks the hash
        return True
    return (int.from_bytes(head[8:12], "little") == int(st.st_mtime) & 0xFFFFFFFF
            and int.from_bytes(head[12:16], "little") == st.st_size & 0xFFFFFFFF)


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
    compiled, modules = bytecode_state(sys.executable, ["--sglang", a.sglang, *a.diag_args])
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
           "diag_modules_with_bytecode": [compiled, modules],
           "python_dont_write_bytecode": os.environ.get("PYTHONDONTWRITEBYTECODE", ""),
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
        print(f"diag modules with current bytecode: {compiled} of {modules}" + (
            "" if compiled == modules else " (the others compile on every run: python -m "
            "compileall diag's folders, or pip install . rather than -e)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
