"""Bench of `profiler-controlled-teardown`: N profiler start/stop cycles, without and with it.

Each series runs in a child process (a crash there is counted, not suffered): per cycle a
profiler (CPU, plus CUDA activity and GPU work when there is a GPU) is started, records a small
workload, and is stopped by a stop method shaped like SGLang's before 0.5.18 (`self.torch_profiler
.stop()` then `self.torch_profiler = None`; a stand-in class, `_StopperStandIn`, since the real
scheduler cannot run here). "Without": the dropped profiler is left to the cyclic GC (the
release's behaviour). "With": the same stop wrapped by the fix's real `wrap_stop` (drop and
`gc.collect()` at the stop). Measured: stop time, RSS growth (psutil), stopped profilers not yet
freed, crashes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from diag.bench import BenchResult, Row, Stats

_ROOT = Path(__file__).resolve().parents[1]
MARK = "BENCH-PROFILER "
TITLE = "profiler stop: left to the cyclic GC vs controlled teardown"


class _StopperStandIn:
    """Stand-in for SGLang's profiler owner: the stop has 0.5.17's shape (stop, then drop)."""

    def __init__(self) -> None:
        self.torch_profiler: Any = None

    def _stop_profile(self) -> None:
        self.torch_profiler.stop()
        self.torch_profiler = None


def _child(mode: str, cycles: int, gpu_arg: str) -> None:
    import weakref

    import psutil
    import torch

    from diag.fixes.profiler_controlled_teardown import wrap_stop

    gpu = torch.cuda.is_available() if gpu_arg == "auto" else gpu_arg == "1"
    dev = "cuda" if gpu else "cpu"
    acts = [torch.profiler.ProfilerActivity.CPU] + (
        [torch.profiler.ProfilerActivity.CUDA] if gpu else [])
    stop = _StopperStandIn._stop_profile
    if mode == "with":
        stop = wrap_stop(stop, "torch_profiler", "bench", controlled=lambda: True)
    owner = _StopperStandIn()
    proc = psutil.Process()
    x = torch.randn(128, 128, device=dev)

    def cycle() -> float:
        owner.torch_profiler = torch.profiler.profile(activities=acts)
        owner.torch_profiler.start()
        y = x
        for _ in range(100):
            y = torch.tanh(y @ x * 0.01)
        if gpu:
            torch.cuda.synchronize()
        refs.append(weakref.ref(owner.torch_profiler))
        t0 = time.perf_counter()
        stop(owner)
        return time.perf_counter() - t0

    refs: list = []
    cycle()  # warm-up: lazy imports and first-profile set-up stay out of the numbers
    import gc

    gc.collect()
    refs.clear()
    rss0 = proc.memory_info().rss
    stop_s, alive, rss = [], [], []
    for _ in range(cycles):
        stop_s.append(cycle())
        alive.append(sum(r() is not None for r in refs))
        rss.append(proc.memory_info().rss - rss0)
    out = {"mode": mode, "device": torch.cuda.get_device_name() if gpu else "cpu",
           "torch": torch.__version__, "stop_s": stop_s, "alive": alive,
           "rss_growth": rss[-1], "rss_peak_growth": max(rss)}
    print(MARK + json.dumps(out), flush=True)


def _run_child(mode: str, cycles: int, gpu: str, timeout: float) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-c", "import sys; from fixes.bench_profiler import _child; "
           "_child(sys.argv[1], int(sys.argv[2]), sys.argv[3])", mode, str(cycles), gpu]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"crash": f"hung (killed after {timeout:.0f} s)"}
    for line in p.stdout.splitlines():
        if line.startswith(MARK):
            res = json.loads(line[len(MARK):])
            if p.returncode != 0:
                res["crash"] = f"exit {p.returncode} after the cycles"
            return res
    err = [ln for ln in p.stderr.splitlines() if ln.strip() and "USDT:" not in ln]
    return {"crash": f"exit {p.returncode}" + (f": {err[-1][:200]}" if err else "")}


def run(params: dict[str, Any], progress: Callable[[str], None]) -> BenchResult:
    quick = bool(params.get("quick"))
    cycles = int(params.get("cycles", 10 if quick else 50))
    children = int(params.get("children", 1 if quick else 3))
    gpu = str(params.get("gpu", "auto"))
    timeout = float(params.get("timeout", 300))
    try:
        import torch  # noqa: F401
    except Exception as e:
        return BenchResult("profiler-controlled-teardown", TITLE, "none", skipped=f"no torch: {e}")
    series: dict[str, list[dict]] = {"without": [], "with": []}
    for i in range(children):
        for mode in ("without", "with"):
            progress(f"profiler bench: {mode} controlled teardown, child {i + 1}/{children}, "
                     f"{cycles} cycles")
            series[mode].append(_run_child(mode, cycles, gpu, timeout))
    ok = {m: [r for r in rs if "stop_s" in r] for m, rs in series.items()}
    device = next((r["device"] for rs in ok.values() for r in rs), "unknown")
    res = BenchResult("profiler-controlled-teardown", TITLE, device,
                      params={"cycles": cycles, "children": children})
    mib = 1024 * 1024

    def stats(mode: str, fn: Callable[[dict], list[float]]) -> Stats | None:
        vals = [v for r in ok[mode] for v in fn(r)]
        return Stats.of(vals) if vals else None

    res.rows = [
        Row("stop (incl. teardown when on)", "s", stats("without", lambda r: r["stop_s"]),
            stats("with", lambda r: r["stop_s"]), expected="collects at the stop"),
        Row(f"RSS growth after {cycles} cycles", "MiB",
            stats("without", lambda r: [r["rss_growth"] / mib]),
            stats("with", lambda r: [r["rss_growth"] / mib])),
        Row("RSS growth, peak", "MiB", stats("without", lambda r: [r["rss_peak_growth"] / mib]),
            stats("with", lambda r: [r["rss_peak_growth"] / mib])),
        Row("stopped profilers not yet freed, peak", "profilers",
            stats("without", lambda r: [max(r["alive"])]),
            stats("with", lambda r: [max(r["alive"])])),
        Row("crashed or hung children", "children",
            Stats.of([float(sum("crash" in r for r in series["without"]))]),
            Stats.of([float(sum("crash" in r for r in series["with"]))])),
    ]
    for mode, rs in series.items():
        for r in rs:
            if "crash" in r:
                res.notes.append(f"{mode}: child {r['crash']}")
    torch_v = next((r["torch"] for rs in ok.values() for r in rs), "?")
    res.notes.append(f"torch {torch_v}; the stop is a stand-in with SGLang 0.5.17's shape; "
                     "'with' wraps it in the fix's real wrap_stop.")
    return res
