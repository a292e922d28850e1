"""Where the runtime counters' cost goes: the engine sampled by py-spy with the counters on, then
off, under the same load, and the functions whose share of the samples moved.

Why: `diag bench overhead` measures what the counters cost a token (a ratio with its interval)
but not where; the wrappers' own costs, measured one by one, add up to less than it. A sampling
profiler outside the process sees every frame the counters add or slow, without changing the
engine: py-spy in non-blocking mode (it reads the process's memory, never stops it).

The counters are switched in the live server exactly as the bench does (`diag.engine.overhead`'s
Switcher: control requests acknowledged by every engine process at a batch boundary); waves of
`--concurrency` greedy requests run without pause; after each switch and `--settle` seconds,
py-spy samples every engine process for `--seconds` (all threads, idle ones too, so that a share
is a share of wall time); on/off alternate over `--rounds` (ABBA...). Reported per state: the
samples, the tokens per second of the load meanwhile, the share of the engine's busiest thread
in diag's own frames; then the functions (inclusive: anywhere in the stack; self: the leaf) whose
share differs most between on and off, with the counts (a share's sampling error is about
sqrt(p(1 - p)/n)).

    python benchmarks/overhead_profile.py --run-dir D --server URL [--rounds 4] [--seconds 15]
        [--rate 250] [--concurrency 16] [--tokens 256] [--out DIR] [--py-spy PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from diag.engine import overhead  # noqa: E402

SGLANG_MARK = "/sglang/"


def diag_roots() -> list[str]:
    """The folders of diag's code as the engine imports it (the installed package; asked of this
    python from a neutral folder, so a checkout on the path does not answer instead) and as this
    script imports it."""
    code = ("import os, diag, diag.probes, diag.fixes; print('\\n'.join(os.path.dirname(m.__file__)"
            " for m in (diag, diag.probes, diag.fixes)))")
    roots = set()
    r = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True)
    roots.update(x for x in r.stdout.split() if x)
    import diag
    import diag.fixes
    import diag.probes
    roots.update(os.path.dirname(m.__file__) for m in (diag, diag.probes, diag.fixes))
    return sorted(r.rstrip("/") + "/" for r in roots)


def in_diag(frames: list[str], roots: list[str]) -> str | None:
    """Whether a sample is diag's own time: walking from the leaf up, a frame of diag's code comes
    before any frame of SGLang's (diag's code, or what it called: the standard library, torch).
    A diag wrapper around SGLang code (the batch boundary, the counters) is not, below it.
    The innermost diag frame, or None."""
    for f in reversed(frames):
        path = f[f.rfind("(") + 1:]  # "file:line)" or "file)"
        if any(path.startswith(r) for r in roots):
            return f
        if SGLANG_MARK in path:
            return None
    return None


class Load:
    """Waves of `concurrency` requests without pause, on a thread; tokens counted per state."""

    def __init__(self, url: str, concurrency: int, tokens: int) -> None:
        self.url, self.conc, self.tokens = url, concurrency, tokens
        self.pool = ThreadPoolExecutor(concurrency)
        self.made = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        timeout = max(60.0, 4.0 * self.tokens)
        while not self._stop.is_set():
            # one wave of the bench's own windows (`overhead.window`): tokens it generated
            self.made += overhead.window(self.url, self.conc, self.tokens, self.conc, timeout,
                                         self.pool)[1]

    def start(self) -> Load:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.pool.shutdown()


_LINE = re.compile(r":\d+\)$")


def function_of(frame: str) -> str:
    """`func (file:line)` -> `func (file)`: the tables compare functions, diag's own time is
    kept by line."""
    return _LINE.sub(")", frame)


def parse_raw(text: str) -> list[tuple[str, list[str], int]]:
    """py-spy's raw output (`--threads`): (thread, frames root first, samples) per line."""
    out = []
    for line in text.splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        parts = stack.split(";")
        thread = parts[0] if parts[0].startswith("thread (") else ""
        out.append((thread, parts[1:] if thread else parts, int(n)))
    return out


def busiest(stacks: list[tuple[str, list[str], int]]) -> str:
    """The thread with the most samples in SGLang's scheduler code (the engine's step loop)."""
    c: Counter = Counter()
    for thread, frames, n in stacks:
        if any("scheduler.py" in f for f in frames):
            c[thread] += n
    return c.most_common(1)[0][0] if c else ""


def tally(stacks: list[tuple[str, list[str], int]], thread: str,
          roots: list[str]) -> dict[str, Any]:
    incl: Counter = Counter()
    leaf: Counter = Counter()
    by: Counter = Counter()
    total = diag = 0
    for t, frames, n in stacks:
        if t != thread:
            continue
        total += n
        own = in_diag(frames, roots)
        if own is not None:
            diag += n
            by[own] += n
        for f in {function_of(f) for f in frames}:
            incl[f] += n
        if frames:
            leaf[function_of(frames[-1])] += n
    return {"total": total, "diag": diag, "incl": incl, "leaf": leaf, "diag_by": by}


def diffs(on: dict[str, Any], off: dict[str, Any], key: str, top: int) -> list[dict[str, Any]]:
    a, b = on[key], off[key]
    rows = []
    for f in set(a) | set(b):
        sa, sb = a[f] / max(1, on["total"]), b[f] / max(1, off["total"])
        rows.append({"function": f, "on": a[f], "off": b[f], "on_share": sa, "off_share": sb,
                     "delta": sa - sb})
    rows.sort(key=lambda r: -abs(r["delta"]))
    return rows[:top]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", required=True, type=Path)
    ap.add_argument("--server", required=True)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--settle", type=float, default=2.0)
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds of load before sampling")
    ap.add_argument("--rate", type=int, default=250)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--py-spy", default=shutil.which("py-spy") or "py-spy")
    a = ap.parse_args()
    probes, pids = overhead.engine_probes(a.run_dir)
    sw = overhead.Switcher(a.run_dir, pids)
    raw: dict[str, list] = {"on": [], "off": []}
    speed: dict[str, list[float]] = {"on": [], "off": []}
    load = Load(a.server, a.concurrency, a.tokens).start()
    tmp = tempfile.TemporaryDirectory(prefix="overhead-profile-")
    spool = Path(tmp.name)  # py-spy's raw output per window, read at once
    try:
        time.sleep(a.warmup)  # every batch size seen (a first one compiles, captures, ...)
        for r in range(a.rounds):
            for state in (("on", "off") if r % 2 == 0 else ("off", "on")):
                sw.switch(probes, set(probes) if state == "on" else set(), 30.0)
                time.sleep(a.settle)
                made0, t0 = load.made, time.perf_counter()
                procs = [subprocess.Popen(
                    [a.py_spy, "record", "--pid", str(p), "--duration", str(int(a.seconds)),
                     "--rate", str(a.rate), "--format", "raw", "--nonblocking", "--idle",
                     "--threads", "--full-filenames", "--output",
                     str(spool / f"{p}.txt")],
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for p in pids]
                for p, pr in zip(pids, procs, strict=True):
                    log = pr.communicate()[0]
                    if pr.returncode:
                        print(f"py-spy on {p} failed (rc {pr.returncode}): {log[-400:]}")
                        return 2
                    raw[state] += parse_raw((spool / f"{p}.txt").read_text())
                # tokens finished while sampling (waves end at their own pace: indicative)
                speed[state].append((load.made - made0) / (time.perf_counter() - t0))
                print(f"round {r + 1} {state}: {speed[state][-1]:.0f} tokens/s", flush=True)
    finally:
        sw.switch(probes, set(probes), 30.0)
        load.stop()
        tmp.cleanup()
    thread = busiest(raw["on"] + raw["off"])
    roots = diag_roots()
    on, off = tally(raw["on"], thread, roots), tally(raw["off"], thread, roots)
    doc = {"probes": probes, "engine_processes": pids, "thread": thread, "diag_roots": roots,
           "rounds": a.rounds, "seconds": a.seconds, "rate": a.rate,
           "states": {s: {"samples": t["total"], "diag_samples": t["diag"],
                          "diag_share": t["diag"] / max(1, t["total"]),
                          "diag_by_function": t["diag_by"].most_common(a.top),
                          "tokens_per_s": speed[s]} for s, t in (("on", on), ("off", off))},
           "inclusive": diffs(on, off, "incl", a.top), "self": diffs(on, off, "leaf", a.top)}
    lines = [f"engine thread {thread}; probes {', '.join(probes)}"]
    for s, st in doc["states"].items():
        tps = ", ".join(f"{x:.0f}" for x in st["tokens_per_s"])
        lines.append(f"  {s:>3}: {st['samples']} samples, diag's own {st['diag_samples']} "
                     f"({st['diag_share'] * 100:.2f} %); tokens/s {tps}")
        for f, n in st["diag_by_function"][:10]:
            lines.append(f"       {n:6d}  {f[:150]}")
    for key in ("inclusive", "self"):
        lines.append(f"  {key}: share on - off (samples on/off), largest first")
        for row in doc[key]:
            lines.append(f"    {row['delta'] * 100:+6.2f} %  ({row['on']}/{row['off']})  "
                         f"{row['function'][:150]}")
    text = "\n".join(lines)
    print(text)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "profile.json").write_text(json.dumps(doc, indent=1))
        (a.out / "profile.txt").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
