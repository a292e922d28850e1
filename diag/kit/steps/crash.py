"""Step `crash` (only with `--crash`: it kills servers on purpose): the profiler A/B of the GPU
lane on the user's host. Plain servers and as many under `diag run --fix
profiler-controlled-teardown`, all with SGLANG_PROFILE_V2=1, each given a stage profile with GPU
activities and stacks while serving; each server log's crash dump is read by diag's reader and
`checks.check_crash` counts crashes per profile on each side (prevented / not reproduced / not
prevented). `crash_try` is also the GPU lane's (benchmarks/gpu_engine/lane.py --only crash)."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import time
from pathlib import Path

from diag.kit import checks
from diag.kit.runner import Kit, Step
from diag.kit.server import Server
from diag.kit.steps.base import ready, start_server

FIX = "profiler-controlled-teardown"

CRASH_PROFILE = {"activities": ["CPU", "GPU"], "profile_by_stage": True, "num_steps": 3,
                 "with_stack": True}
STAGE_TRACES = 2  # V2 stage profiling writes one trace per stage: prefill, decode
# (utils/profile_utils.py in 0.5.23: `_StageBasedTrigger`, interesting stages ["prefill",
# "decode"], file name ...-TP-0-<stage>.trace.json.gz)


def _serve(s: Server, width: int = 2, n: int = 12) -> None:
    with cf.ThreadPoolExecutor(width) as ex:
        for f in [ex.submit(s.generate, [7 + i, 8, 9], n, 30) for i in range(width)]:
            f.result()


def _dead(s: Server) -> bool:
    return s.proc.poll() is not None or bool(checks.crashes(s.log.read_text(errors="replace")))


def crash_try(name: str, side: str, s: Server, work: Path, profiles: int,
              per_profile_s: float = 60.0, body: dict | None = None,
              serve_after: int = 3) -> checks.CrashTry:
    """Give one server the profile up to `profiles` times, each while serving requests until its
    stage traces are written, then serve a little more (a stopped profiler is freed later, by
    the cyclic GC); stop at the first sign of death."""
    sent = done = 0
    error = ""
    for i in range(profiles):
        if _dead(s):
            break
        out = work / f"cprof-{name}-{i}"
        try:
            code, text = s.post("/start_profile", {**(body or CRASH_PROFILE),
                                                   "output_dir": str(out)}, 60)
        except OSError as e:
            error = f"/start_profile: {type(e).__name__}: {e}"
            break
        sent += 1
        if code != 200:
            error = f"/start_profile: HTTP {code}: {text[:200]}"
            break
        deadline = time.monotonic() + per_profile_s
        traces = 0
        while time.monotonic() < deadline and not _dead(s):
            try:
                _serve(s)
            except (OSError, RuntimeError, ValueError) as e:
                error = f"request: {type(e).__name__}: {e}"[:300]
                break
            traces = len(list(out.glob("*.trace.json.gz"))) if out.exists() else 0
            if traces >= STAGE_TRACES:
                break
        done += traces >= STAGE_TRACES
        if error or traces < STAGE_TRACES:
            error = error or f"profile {i}: {traces} of {STAGE_TRACES} stage traces in " \
                             f"{per_profile_s:g} s"
            break
        with contextlib.suppress(OSError, RuntimeError, ValueError):
            for _ in range(serve_after):  # allocations, so that a full cyclic GC comes
                _serve(s)
    time.sleep(2.0)  # a scheduler that just died: let its log and the launcher catch up
    alive = not _dead(s)
    if alive:
        try:
            s.generate([5, 6], 4, timeout=30)
        except (OSError, RuntimeError, ValueError) as e:
            alive = False
            error = error or f"final request: {type(e).__name__}: {e}"[:300]
    return checks.CrashTry(name, side, sent, done, alive, s.log.read_text(errors="replace"), error)


class CrashStep(Step):
    id = "crash"
    title = "profiler A/B: plain servers vs under the fix (--crash)"
    checks = {"profiler-crash": "plain servers crash with the teardown signature, none under "
                                "the fix"}
    needs_server = False

    def run(self, kit: Kit) -> None:
        o = kit.opts
        if not o.crash:
            kit.record("profiler-crash", "not-run", "", {}, "not asked: --crash starts servers "
                       "that may crash on purpose (the profiler A/B)")
            return
        if not kit.gpu:
            kit.record("profiler-crash", "not-run", "", {}, "needs a GPU: the crash comes from "
                       "profiling GPU activities (CUDA/HIP), which a CPU server does not record")
            return
        if not kit.models:
            kit.record("profiler-crash", "not-run", "", {}, "no model (the model step failed)")
            return
        v2 = {"SGLANG_PROFILE_V2": "1"}
        started: dict[str, tuple[str, Server]] = {}
        for i in range(o.crash_servers):
            started[f"plain-{i}"] = ("plain", start_server(kit, f"crash-plain-{i}",
                                                           under_diag=False, env=v2))
            started[f"fix-{i}"] = ("fix", start_server(kit, f"crash-fix-{i}", env=v2,
                                                       diag_args=("--fix", FIX)))
        for _, s in started.values():
            ready(kit, s)
        kit.say(f"{len(started)} servers, {o.crash_profiles} stage profiles each")
        # not `with`: on Ctrl-C or the step's limit the main thread must go on to stop the
        # servers (the workers then fail fast) instead of joining workers that wait on them
        ex = cf.ThreadPoolExecutor(len(started))
        try:
            futs = [ex.submit(crash_try, n, side, s, kit.work, o.crash_profiles)
                    for n, (side, s) in started.items()]
            tries = [f.result() for f in futs]
        finally:
            ex.shutdown(wait=False, cancel_futures=True)
        c = checks.check_crash("", tries)
        data = {k: c.data[k] for k in ("plain", "fix", "verdict") if k in c.data}
        data["servers"] = [{k: v for k, v in t.items() if k != "dump"}
                           for t in c.data.get("servers", [])]
        kit.judge("profiler-crash", c.ok, c.detail, data)
