"""Crash reproducer for the profiler teardown, one child process per try.

Each scenario runs in a fresh interpreter (`sys.executable`) with a time limit, so a crash or a
hang costs the child, never the parent. A try is a *crash* when the child dies by a signal
(SIGSEGV, SIGABRT, ...), a *hang* when it passes the time limit (killed), an *error* when it exits
non-zero by itself. GPU activity is added when the child's torch sees a GPU.

A try whose child never got to run the scenario (torch does not import there, diag does not
import, an exception before the end) did not test anything: it is *not run*, with the reason,
and never counts as "no crash".

Run it alone (the GPU command of docs/probes/profiler-teardown.md):
    python -m diag.probes.profiler_teardown.reproducer --tries 10 [--scenario NAME]... [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

SCENARIOS: dict[str, str] = {
    "late-collection": "stop, export, drop the reference; the automatic cyclic GC frees the "
                       "profiler later, under allocation pressure (and GPU work on a GPU)",
    "late-collection-thread": "as late-collection, but the collection runs on another thread "
                              "while the main thread keeps working",
    "never-stopped": "a profiler started and never stopped when the interpreter exits",
    "stop-twice": "stop() called twice, then dropped and collected",
    "controlled-teardown": "stop, export, drop and gc.collect() at once (the 0.5.18 teardown), "
                           "then the same pressure",
}
DEFAULT_TRIES = 3
DEFAULT_TIMEOUT_S = 120.0
REPORT = "PROFILER-REPRO-REPORT "
EXIT_NO_TORCH = 3  # the child's exit code when torch does not import there (it says why first)


@dataclass
class Attempt:
    returncode: int | None  # None when killed for the time limit
    signal: str | None  # the signal that killed it
    timed_out: bool
    seconds: float
    report: dict | None  # what the child said before it ended (None if it never got there)
    stderr_tail: str = ""

    @property
    def crashed(self) -> bool:
        return self.signal is not None and not self.timed_out

    @property
    def ran(self) -> bool:
        """The try tested something: it crashed, hung, or ran the scenario to its end."""
        return self.crashed or self.timed_out or (
            self.returncode == 0 and bool(self.report and self.report.get("done")))

    @property
    def no_torch(self) -> bool:
        """The child could not import torch (it said so): nothing to reproduce with."""
        return bool(self.report and self.report.get("no_torch"))

    def why_not_run(self) -> str | None:
        """One line: why the child did not run the scenario (None when it ran)."""
        if self.ran:
            return None
        said = self.report and (self.report.get("no_torch") or self.report.get("error"))
        if said:
            return str(said)
        lines = [ln.strip() for ln in self.stderr_tail.splitlines() if ln.strip()]
        last = lines[-1] if lines else "no output"
        return f"child exited {self.returncode} before the end of the scenario: {last}"[:300]

    def outcome(self) -> str:
        if self.timed_out:
            return "hang (killed at the time limit)"
        if self.signal:
            where = " at exit" if self.report and self.report.get("done") else ""
            return f"{self.signal}{where}"
        if not self.ran:
            return f"not run (exit {self.returncode})"
        return f"exit {self.returncode}"


@dataclass
class ScenarioResult:
    name: str
    description: str
    tries: int
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def crashes(self) -> int:
        return sum(a.crashed for a in self.attempts)

    @property
    def hangs(self) -> int:
        return sum(a.timed_out for a in self.attempts)

    @property
    def not_run(self) -> int:
        """Tries that tested nothing (the child could not start the scenario or finish it)."""
        return sum(not a.ran for a in self.attempts)

    @property
    def no_torch(self) -> bool:
        """Every try that did not run failed for want of torch (a skip, not an error)."""
        missed = [a for a in self.attempts if not a.ran]
        return bool(missed) and all(a.no_torch for a in missed)

    def why_not_run(self) -> str | None:
        """The first reason a try did not run (None when every try ran)."""
        return next((w for a in self.attempts if (w := a.why_not_run())), None)

    @property
    def outcomes(self) -> list[str]:
        counts: dict[str, int] = {}
        for a in self.attempts:
            counts[a.outcome()] = counts.get(a.outcome(), 0) + 1
        return [f"{k} x{v}" for k, v in counts.items()]

    @property
    def device(self) -> str | None:
        for a in self.attempts:
            if a.report and a.report.get("device"):
                return str(a.report["device"])
        return None

    def verdict(self) -> str:
        n = len(self.attempts)
        if self.crashes:
            return f"{self.name}: crashed in {self.crashes} of {n} tries ({', '.join(self.outcomes)})"
        if self.hangs:
            return f"{self.name}: hung in {self.hangs} of {n} tries"
        if self.not_run:
            return f"{self.name}: not run in {self.not_run} of {n} tries ({self.why_not_run()})"
        if self.name.startswith("late-collection") and self.precondition:
            return f"{self.name}: precondition present, not reproduced in {n} tries"
        return f"{self.name}: no crash in {n} tries"

    @property
    def precondition(self) -> bool:
        """The stopped profiler outlived `del` and a late collection freed it (in some try)."""
        return any(a.report and a.report.get("alive_after_del") and a.report.get("freed")
                   for a in self.attempts)

    def freed_where(self) -> str | None:
        """Where the late collection happened, from the children's reports."""
        seen = sorted({f"thread {a.report['freed']['thread']}" for a in self.attempts
                       if a.report and a.report.get("freed")})
        return ", ".join(seen) or None

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(crashes=self.crashes, hangs=self.hangs, not_run=self.not_run,
                 why_not_run=self.why_not_run(), outcomes=self.outcomes,
                 device=self.device, precondition=self.precondition,
                 freed_on=self.freed_where(), verdict=self.verdict())
        return d


def _signal_name(rc: int | None) -> str | None:
    if rc is None or rc >= 0:
        return None
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def run_once(name: str, gpu: str = "auto", timeout: float = DEFAULT_TIMEOUT_S) -> Attempt:
    """One try of one scenario in a fresh interpreter; never raises for what the child does."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r} (known: {', '.join(SCENARIOS)})")
    env = dict(os.environ)
    home = str(_diag_home())  # where `import diag` works: never diag/ itself (it would shadow
    env["PYTHONPATH"] = os.pathsep.join(p for p in (home, env.get("PYTHONPATH")) if p)  # stdlib)
    cmd = [sys.executable, "-X", "faulthandler", "-c",
           "import sys; from diag.probes.profiler_teardown.reproducer import child_main; "
           "sys.exit(child_main(sys.argv[1:]))", name, gpu]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                              stdin=subprocess.DEVNULL)
        rc, out, err, timed_out = proc.returncode, proc.stdout, proc.stderr, False
    except subprocess.TimeoutExpired as e:  # subprocess.run has killed the child
        rc, timed_out = None, True
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout or ""
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr or ""
    secs = time.perf_counter() - t0
    report = None
    for line in out.splitlines():
        if line.startswith(REPORT):
            try:
                report = json.loads(line[len(REPORT):])
            except ValueError:
                pass
    tail = "\n".join(ln for ln in err.splitlines() if "USDT:" not in ln)[-1500:]
    return Attempt(rc, _signal_name(rc), timed_out, round(secs, 2), report, tail)


def _diag_home() -> Path:
    from diag.home import home

    return home()


def run_scenarios(names: list[str] | None = None, tries: int = DEFAULT_TRIES, gpu: str = "auto",
                  timeout: float = DEFAULT_TIMEOUT_S,
                  progress: Callable[[str], None] | None = None) -> list[ScenarioResult]:
    """Every scenario (or `names`) `tries` times, each try in its own child process."""
    results = []
    for name in names or list(SCENARIOS):
        res = ScenarioResult(name, SCENARIOS[name], tries)
        for i in range(tries):
            if progress:
                progress(f"profiler reproducer: {name} try {i + 1}/{tries}")
            res.attempts.append(run_once(name, gpu, timeout))
        results.append(res)
    return results


# ------------------------------------------------------------------------------ the child side

_keep: list = []  # keeps the never-stopped profiler alive until interpreter exit


def child_main(argv: list[str]) -> int:
    """Runs inside the child: one scenario, a JSON report line on stdout, then a normal exit."""
    import gc
    import tempfile
    import threading
    import weakref

    name, gpu_arg = argv[0], argv[1] if len(argv) > 1 else "auto"
    try:
        import torch
    except Exception as e:  # not installed (a skip) or a broken build (an error): test nothing
        missing = isinstance(e, ModuleNotFoundError) and e.name == "torch"
        print(REPORT + json.dumps({"scenario": name, "done": False,
                                   "no_torch" if missing else "error":
                                   f"torch does not import in the child ({sys.executable}): "
                                   f"{type(e).__name__}: {e}"[:300]}), flush=True)
        return EXIT_NO_TORCH
    gpu = torch.cuda.is_available() if gpu_arg == "auto" else gpu_arg == "1"
    dev = "cuda" if gpu else "cpu"
    acts = [torch.profiler.ProfilerActivity.CPU]
    if gpu:
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    rep: dict = {"scenario": name, "torch": torch.__version__, "device": dev,
                 "hip": getattr(torch.version, "hip", None), "done": False}
    tmp = tempfile.mkdtemp(prefix="diag-prof-")

    def say() -> None:
        print(REPORT + json.dumps(rep), flush=True)

    def work(n: int = 20) -> None:
        x = torch.randn(256, 256, device=dev)
        for _ in range(n):
            x = torch.tanh(x @ x * 0.01)
        if gpu:
            torch.cuda.synchronize()

    def profiled():
        p = torch.profiler.profile(activities=acts)
        p.start()
        work()
        return p

    freed: dict = {}

    def watch(p) -> weakref.ref:
        t0 = time.perf_counter()
        weakref.finalize(p, lambda: freed.update(
            thread=threading.current_thread().name, after_s=round(time.perf_counter() - t0, 4)))
        return weakref.ref(p)

    def pressure(limit: int = 6_000_000, until_freed: bool = True) -> int:
        """gc-tracked allocations that stay alive (survivors promoted to the oldest generation
        are what triggers an automatic full collection), plus tensors and GPU kernels."""
        junk: list = []
        n = 0
        while n < limit and not (until_freed and freed):
            junk.append([{} for _ in range(50)])
            n += 51
            torch.empty(1 << 12, device=dev)
            if gpu and n % 5100 == 0:
                work(2)
        rep["gc_counts"] = gc.get_count()
        return n

    if name == "never-stopped":
        _keep.append(profiled())
        rep["done"] = True
        say()
        return 0

    p = profiled()
    p.stop()
    if name == "stop-twice":
        try:
            p.stop()
            rep["second_stop"] = "returned"
        except Exception as e:  # what a second stop does is part of the result
            rep["second_stop"] = f"raised {type(e).__name__}: {e}"[:200]
    else:
        p.export_chrome_trace(os.path.join(tmp, "trace.json"))
    ref = watch(p)
    del p
    rep["alive_after_del"] = ref() is not None
    if name == "controlled-teardown" or name == "stop-twice":
        t0 = time.perf_counter()
        rep["collected"] = gc.collect()
        rep["collect_s"] = round(time.perf_counter() - t0, 4)
        rep["allocations"] = pressure(200_000, until_freed=False)
    elif name == "late-collection":
        rep["allocations"] = pressure()
    elif name == "late-collection-thread":
        stop = threading.Event()

        def collector() -> None:
            rep["allocations"] = pressure()
            if not freed:
                rep["explicit_collect_on_thread"] = gc.collect()
            stop.set()

        th = threading.Thread(target=collector, name="collector")
        th.start()
        while not stop.is_set():
            work(2)
        th.join()
    else:
        raise SystemExit(f"unknown scenario {name!r}")
    rep["freed"] = freed or None
    rep["done"] = True
    say()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m diag.probes.profiler_teardown.reproducer",
                                 description="Profiler teardown crash reproducer (child processes).")
    ap.add_argument("--scenario", action="append", choices=list(SCENARIOS),
                    help="run only this scenario (repeatable; default all)")
    ap.add_argument("--tries", type=int, default=DEFAULT_TRIES)
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per try")
    ap.add_argument("--gpu", choices=["auto", "0", "1"], default="auto")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    res = run_scenarios(a.scenario, a.tries, a.gpu, a.timeout,
                        progress=lambda m: print(m, file=sys.stderr, flush=True))
    if a.json:
        print(json.dumps([r.to_dict() for r in res], indent=2))
    else:
        for r in res:
            secs = [a.seconds for a in r.attempts]
            freed = f", freed on {r.freed_where()}" if r.freed_where() else ""
            print(f"{r.verdict()}  [device {r.device}{freed}, "
                  f"{min(secs):.1f}-{max(secs):.1f} s/try]")
    return 0 if all(not r.not_run for r in res) else 3  # a try that did not run is no pass


if __name__ == "__main__":
    sys.exit(main())
