"""Bench of `profiler-controlled-teardown`: N profiler start/stop cycles, without and with it.

Each series runs in a child process (a crash there is counted, not suffered) that holds
`heap_objects` live GC-tracked objects (a scheduler holds millions) during the cycles: per cycle
a profiler (CPU, plus CUDA activity and GPU work when there is a GPU) is started, records a
small workload, and is stopped by a stop method shaped like SGLang's before 0.5.18
(`self.torch_profiler.stop()` then `self.torch_profiler = None`; a stand-in class,
`_StopperStandIn`, since the real scheduler cannot run here). Three series:
"without" (released): the dropped profiler is left to the cyclic GC; "with": the same stop
wrapped by the fix's real `wrap_stop` (cycles broken at the stop, `gc.collect()` only if that
did not free it); "upstream": 0.5.18's shape (drop, then `gc.collect()`), the third figure.
"without" and "with" run side by side (two children at once: load on a shared host hits both
alike), "upstream" after them. Measured: stop time, RSS growth (psutil), stopped profilers not
yet freed, how the fix tore down, crashes. Params: cycles, children, heap_objects (default 0), gpu (auto|0|1), timeout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from diag.bench import BenchResult, Param, Row, Stats
from diag.fixes.profiler_controlled_teardown import TEARDOWNS

# The --param keys this bench takes (diag bench checks them before any work).
PARAMS = {
    "cycles": Param(int, 1, doc="profiler start/stop cycles per child", maximum=10_000),
    "children": Param(int, 1, doc="child processes per series", maximum=64),
    "gpu": Param(str, choices=("auto", "0", "1"), doc="profile GPU work"),
    "timeout": Param(float, 1, doc="seconds per child", maximum=3600),
    "heap_objects": Param(int, 0, doc="live objects the cyclic GC walks (a scheduler holds "
                          "millions; each costs ~60 bytes)", maximum=5e7),
    "teardown": Param(str, choices=TEARDOWNS, doc="the fix's teardown mode"),
}

MARK = "BENCH-PROFILER "
TITLE = "profiler stop: left to the cyclic GC vs controlled teardown"


class _StopperStandIn:
    """Stand-in for SGLang's profiler owner: the stop has 0.5.17's shape (stop, then drop)."""

    def __init__(self) -> None:
        self.torch_profiler: Any = None

    def _stop_profile(self) -> None:
        self.torch_profiler.stop()
        self.torch_profiler = None

    def _stop_profile_upstream(self) -> None:
        """0.5.18's teardown: drop the profiler and collect at once."""
        import gc

        self.torch_profiler.stop()
        self.torch_profiler = None
        gc.collect()


def _child(mode: str, cycles: int, gpu_arg: str, heap_objects: int = 0) -> None:
    import weakref

    import psutil
    import torch

    from diag import telemetry
    from diag.fixes.profiler_controlled_teardown import wrap_stop

    heap = [[] for _ in range(heap_objects)]  # live, GC-tracked: what a full collection walks
    events: list[dict] = []

    gpu = torch.cuda.is_available() if gpu_arg == "auto" else gpu_arg == "1"
    dev = "cuda" if gpu else "cpu"
    acts = [torch.profiler.ProfilerActivity.CPU] + (
        [torch.profiler.ProfilerActivity.CUDA] if gpu else [])
    stop = _StopperStandIn._stop_profile
    if mode == "with":
        stop = wrap_stop(stop, "torch_profiler", "bench", controlled=lambda: True)
        telemetry.add_sink(events.append)
    elif mode == "upstream":
        stop = _StopperStandIn._stop_profile_upstream
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
    events.clear()
    rss0 = proc.memory_info().rss
    stop_s, alive, rss = [], [], []
    for _ in range(cycles):
        stop_s.append(cycle())
        alive.append(sum(r() is not None for r in refs))
        rss.append(proc.memory_info().rss - rss0)
    out = {"mode": mode, "device": torch.cuda.get_device_name() if gpu else "cpu",
           "torch": torch.__version__, "stop_s": stop_s, "alive": alive,
           "rss_growth": rss[-1], "rss_peak_growth": max(rss), "heap_objects": len(heap),
           "teardowns": [e.get("teardown") for e in events if e.get("kind") == "profiler_stop"],
           "teardown_s": [e["teardown_s"] for e in events
                          if e.get("kind") == "profiler_stop" and e.get("teardown_s") is not None]}
    print(MARK + json.dumps(out), flush=True)


def _run_child(mode: str, cycles: int, gpu: str, timeout: float,
               heap_objects: int = 0, teardown: str | None = None) -> dict[str, Any]:
    env = dict(os.environ)
    if teardown:
        from diag.fixes.profiler_controlled_teardown import ENV_TEARDOWN

        env[ENV_TEARDOWN] = teardown
    from diag.home import home

    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(home()), env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-c", "import sys; from diag.fixes.bench_profiler import _child; "
           "_child(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))", mode,
           str(cycles), gpu, str(heap_objects)]
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
    heap_objects = int(float(params.get("heap_objects", 0)))
    from diag.fixes.profiler_controlled_teardown import teardown_mode

    teardown = str(params.get("teardown", teardown_mode()))  # the fix's mode under test
    if teardown not in TEARDOWNS:
        raise ValueError(f"teardown must be one of {', '.join(TEARDOWNS)}, not {teardown!r}")
    try:
        import torch  # noqa: F401
    except Exception as e:
        return BenchResult("profiler-controlled-teardown", TITLE, "none", skipped=f"no torch: {e}")
    series: dict[str, list[dict]] = {"without": [], "with": [], "upstream": []}
    from concurrent.futures import ThreadPoolExecutor

    for i in range(children):
        # "without" and "with" run at the same time, so that the machine's load (other work on
        # a shared host) changes both alike; "upstream" (seconds of collections) runs after
        progress(f"profiler bench: without and with, side by side, child {i + 1}/{children}, "
                 f"{cycles} cycles, {heap_objects} live objects")
        with ThreadPoolExecutor(2) as pool:
            pair = {m: pool.submit(_run_child, m, cycles, gpu, timeout, heap_objects, teardown)
                    for m in ("without", "with")}
        for m, fut in pair.items():
            series[m].append(fut.result())
        progress(f"profiler bench: upstream, child {i + 1}/{children}")
        series["upstream"].append(_run_child("upstream", cycles, gpu, timeout, heap_objects))
    ok = {m: [r for r in rs if "stop_s" in r] for m, rs in series.items()}
    device = next((r["device"] for rs in ok.values() for r in rs), "unknown")
    res = BenchResult("profiler-controlled-teardown", TITLE, device,
                      params={"cycles": cycles, "children": children,
                              "heap_objects": heap_objects, "teardown": teardown})
    mib = 1024 * 1024

    def stats(mode: str, fn: Callable[[dict], list[float]]) -> Stats | None:
        vals = [v for r in ok[mode] for v in fn(r)]
        return Stats.of(vals) if vals else None

    res.rows = [
        Row("stop (incl. teardown when on)", "s", stats("without", lambda r: r["stop_s"]),
            stats("with", lambda r: r["stop_s"]), expected="frees the profiler at the stop"),
        Row("stop, upstream's gc.collect() (0.5.18) as 'after'", "s",
            stats("without", lambda r: r["stop_s"]), stats("upstream", lambda r: r["stop_s"]),
            expected="a full collection at the stop"),
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
    kinds = [t for r in ok["with"] for t in r.get("teardowns", [])]
    if kinds:
        tds = [v for r in ok["with"] for v in r.get("teardown_s", [])]
        res.notes.append("fix teardown: " + ", ".join(
            f"{k} {kinds.count(k)}/{len(kinds)}" for k in sorted(set(map(str, kinds))))
            + (f"; teardown median {Stats.of(tds).median * 1e3:.3f} ms" if tds else ""))
    up, rel = stats("upstream", lambda r: r["stop_s"]), stats("without", lambda r: r["stop_s"])
    if up and rel:
        res.notes.append(f"upstream (0.5.18) stop with gc.collect(): median "
                         f"{up.median * 1e3:.2f} ms against {rel.median * 1e3:.2f} ms released, "
                         f"with {heap_objects} live objects held")
    from diag.fixes import profiler_crash_record

    rec = profiler_crash_record.load()
    if rec is not None:  # the crash itself needs a GPU and a real server: the lane's record
        res.notes.append(profiler_crash_record.note(rec))
    return res
