"""Probe `profiler-teardown`: is a stopped `torch.profiler.profile` left to the cyclic GC?

A stopped profiler keeps bound methods of itself (`action_map`), so it is freed only by the cyclic
GC at an arbitrary later moment; SGLang servers crashed there (double free in the C++
destructors) and memory grows until a collection runs. SGLang 0.5.18 drops the reference and
calls `gc.collect()` at once in `_stop_profile`; the V2 path (`SGLANG_PROFILE_V2`,
`utils/profile_utils.py::ProfileManager._do_stop`) drops it without collecting, even in 0.5.23.

Three parts: (a) static, on the target's source (AST, found by name and shape, never by line:
`stops`, `requests`, `stage_site`); (b) runtime, on the local torch: the reference cycle and its
path (`cycle`); (c) the crash reproducer in child processes (`reproducer`), only with
`ctx.full`. The counter that runs inside the engine is `runtime`.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from packaging.version import Version

from diag.context import Context
from diag.findings import Evidence, Finding, Status, location, metric, note, row
from diag.probes.base import Counter, Probe
from diag.probes.profiler_teardown import stage_site
from diag.probes.profiler_teardown.cycle import (
    CYCLE_REPORT,
    cached_cycle,
    cached_runtime_cycle,
    collect_cycle_child,
    runtime_cycle_quietly,
    start_cycle_child,
    store_cycle,
)
from diag.probes.profiler_teardown.stops import (
    CLASSIC_FILES,
    CLASSIC_NAMES,
    V2_ENV,
    V2_FILE,
    StopSite,
    locate_stops,
    patched_here,
    v2_in_use,
)

# ------------------------------------------------------------------------------ the probe


def _torch_importable() -> str | None:
    """None when torch imports, else why not."""
    try:
        import torch  # noqa: F401
    except Exception as e:  # ImportError or a broken build
        return f"torch does not import here ({type(e).__name__}: {e})"
    return None


class ProfilerTeardownProbe(Probe):
    id = "profiler-teardown"
    title = "Profiler teardown (reference cycle freed by the cyclic GC)"
    concern = "torch.profiler stop / cyclic-GC teardown"
    fixes = ("profiler-controlled-teardown",)
    counter = Counter("diag.probes.profiler_teardown.runtime:runtime_patch", ("profiler_stop",))
    needs_torch = True

    def measured_already(self) -> bool:
        return cached_cycle() is not None

    def measure_early(self) -> dict[str, Any]:
        """The cycle check needs only torch: measured before the job (and stored)."""
        if cached_cycle() is not None:
            return {}
        rep = runtime_cycle_quietly()
        store_cycle(rep)
        return {CYCLE_REPORT: rep}

    def prepare(self, ctx: Context) -> None:
        if ctx.execute and CYCLE_REPORT not in ctx.cache \
                and importlib.util.find_spec("torch") is not None:
            ctx.cache["profiler-cycle-child"] = start_cycle_child()

    def run(self, ctx: Context) -> list[Finding]:
        static = self.static(ctx)
        out = [static]
        if not ctx.execute:
            out.append(self.finding(Status.SKIP, "runtime check not run (execution disabled)"))
        else:
            out.append(self.runtime(ctx, static))
        if ctx.full:
            out.append(self.reproducer(ctx))
        return out

    # (a) -------------------------------------------------------------------------------------
    def static(self, ctx: Context) -> Finding:
        t = ctx.target
        sites = locate_stops(t)
        classic = [s for s in sites if s.path == "classic"]
        v2 = [s for s in sites if s.path == "v2"]
        patched = {id(s) for s in sites if not s.controlled and patched_here(s)}
        ev: list[Evidence] = [location(
            s.file, s.line, s.qualname, f"[{s.path}] {s.describe()}" + (
                "; patched in this process by profiler-controlled-teardown (drop and collect "
                "at the stop)" if id(s) in patched else "")) for s in sites]
        switch = stage_site.locate(t)
        if switch is not None:  # the stage switch runs inside a span: torch's profiler crashes
            ev.append(location(
                switch.file, switch.call_line, "Scheduler.run_batch",
                f"stage profiling (profile_by_stage; always with {V2_ENV}) stops one profile and "
                f"starts the next inside run_batch's profiler span (@{', @'.join(switch.decorators)}"
                "): a span crossing two profiler sessions crashes torch's profiler, with any "
                "teardown; profiler-controlled-teardown moves the switch before the span"))
        where = ", ".join(f for f, _ in CLASSIC_FILES)
        if not classic:
            return self.finding(
                Status.SKIP, f"no profiler stop found in sglang {t.version} (looked for "
                f"{'/'.join(CLASSIC_NAMES)} calling self.torch_profiler.stop() in {where}): "
                "unrecognised shape", evidence=ev,
                hint="this release's profiler code has moved; the fix refuses it too")
        if not v2:
            ev.append(note(f"no V2 profiler stop (ProfileManager._do_stop in "
                           f"sglang/{V2_FILE[0]}) in this release"))
        bad_classic = [s for s in classic if not s.controlled and id(s) not in patched]
        bad_v2 = [s for s in v2 if not s.controlled and id(s) not in patched]
        used = v2_in_use(ctx) if v2 else None
        risks = self.requests(ctx, v2[0] if v2 else None, bool(bad_v2), used)
        ev += risks
        fatal = [e.data["request"].split(" (")[0] for e in risks
                 if e.data["risk"] == "kills the server"]
        refused = (f"; with {V2_ENV} on, SGLang itself refuses {', '.join(fatal)}: the "
                   "scheduler raises and the server goes down (send profile_by_stage=true, "
                   "never /stop_profile)") if used and fatal else ""
        if bad_classic:
            s = bad_classic[0]
            status = Status.FAIL if ctx.platform == "hip" else Status.WARN
            summary = (f"{s.qualname} ({s.file}:{s.line}) leaves the stopped profiler to the "
                       "cyclic GC" + (" (and so does the V2 path)" if bad_v2 else "") + refused)
        elif bad_v2:
            s = bad_v2[0]
            status = (Status.FAIL if ctx.platform == "hip" else Status.WARN) if used \
                else Status.WARN
            summary = (f"default stop collects at once, but the V2 path (SGLANG_PROFILE_V2) "
                       f"{s.qualname} ({s.file}:{s.line}) drops the profiler without gc.collect()"
                       + (f"; the configuration under audit uses it ({used})" if used else
                          "; only a configuration with SGLANG_PROFILE_V2 set uses it (not set "
                          "in diag's environment nor in the server's arguments)") + refused)
        else:
            how = " (patched in this process)" if patched else ""
            return self.finding(Status.WARN if refused else Status.OK, "every profiler stop "
                                f"drops the profiler and frees it at once{how}{refused}",
                                evidence=ev)
        fix = ("apply profiler-controlled-teardown (frees the stopped profiler at the stop by "
               "breaking its reference cycle, no full collection)")
        if not bad_classic:  # advice that fits the release: its default path is fine already
            hint = f"{fix}; this release's default stop already frees it, only the V2 path needs it"
        else:
            ver = ctx.target.parsed_version
            older = ver is None or ver < Version("0.5.18")
            hint = fix + (", or upgrade to >= 0.5.18 for the default path" if older else "")
        return self.finding(status, summary, evidence=ev, hint=hint)

    def requests(self, ctx: Context, v2_stop: StopSite | None, fix_applies: bool,
                 used: str | None) -> list[Evidence]:
        """One typed row per profiling request that matters on a V2 server (the release's source,
        `requests`): what the release does with it and whether it is at risk."""
        from diag.probes.profiler_teardown import requests as profiler_requests

        out = []
        for r in profiler_requests.assess(ctx.target, v2_stop,
                                          self.fixes[0] if fix_applies else None):
            prevented = f"; {r.prevented_by} frees it at the stop" if r.prevented_by else ""
            out.append(row(f"{r.outcome}{prevented}", **r.data(), v2_in_use=bool(used)))
        return out

    # (b) -------------------------------------------------------------------------------------
    def runtime(self, ctx: Context, static: Finding) -> Finding:
        rep = ctx.cache.pop(CYCLE_REPORT, None)  # measured in this run by diag's torch worker
        child = ctx.cache.pop("profiler-cycle-child", None)
        if rep is None and child is not None:
            rep = collect_cycle_child(child)
        reused_at = None
        if rep is None:
            hit = cached_cycle()  # torch itself is imported only to measure
            if hit is not None:
                rep, reused_at = hit
            else:
                why = _torch_importable()
                if why:
                    return self.finding(Status.SKIP, f"runtime cycle check skipped: {why}")
                rep, reused_at = cached_runtime_cycle()
        ev = [metric("alive_after_del", rep.alive_after_del),
              metric("collected_by_gc_collect", rep.collected, "objects"),
              metric("collect_time", round(rep.collect_seconds, 6), "s")]
        if rep.path:
            ev.append(row("reference cycle of a stopped profiler", path=" ".join(rep.path)))
        cost = rep.collect_cost or {}
        if cost.get("s_per_object"):
            per = cost["s_per_object"]
            ev.append(metric("full collection cost per live object", round(per * 1e9, 2), "ns",
                             detail=f"measured: gc.collect() took {cost['collect_s'] * 1e3:.1f} "
                                    f"ms with {cost['tracked_objects']} tracked objects"))
            ev.append(note("upstream's teardown (gc.collect() at the stop) in a scheduler holding "
                           f"1e6 / 1e7 live objects: ~{per * 1e6:.2f} s / ~{per * 1e7:.1f} s per "
                           "stop, every request stalled meanwhile (an estimate: the measured cost "
                           "per object times the heap size); profiler-controlled-teardown breaks "
                           "the cycle instead and collects nothing. Inside an engine, the agent's "
                           "profiler-teardown counter reports the heap (pymalloc blocks) and the "
                           "cost estimated from its own automatic full collections with each stop"))
        if reused_at:
            ev.append(note(f"runtime check reused from the diag cache (measured {reused_at} "
                           f"on this machine with the same torch and diag code); "
                           f"DIAG_NO_CACHE=1 measures again"))
        if not rep.alive_after_del:
            return self.finding(Status.OK, f"torch {rep.torch_version}: a stopped profiler is "
                                "freed at once when dropped (no reference cycle)", evidence=ev)
        summary = (f"torch {rep.torch_version}: a stopped profiler is still alive after `del` "
                   f"and only gc.collect() frees it ({rep.collected} objects)")
        if static.status in (Status.OK, Status.SKIP):
            return self.finding(Status.OK, summary + "; the target collects at a controlled "
                                "point" if static.status == Status.OK else summary, evidence=ev)
        return self.finding(Status.WARN, summary + ": the precondition for the late-collection "
                            "crash is present", evidence=ev,
                            hint="run `diag diagnose --full` for the crash reproducer")

    # (c) -------------------------------------------------------------------------------------
    def reproducer(self, ctx: Context) -> Finding:
        from diag.probes.profiler_teardown import reproducer as rp

        results = rp.run_scenarios(tries=rp.DEFAULT_TRIES, progress=ctx.log)
        ev = [row(r.description, scenario=r.name, tries=r.tries, crashes=r.crashes,
                  not_run=r.not_run, outcomes=", ".join(r.outcomes), device=r.device or "?",
                  freed_on=r.freed_where() or "-") for r in results]
        late = [r for r in results if r.name.startswith("late-collection") and r.crashes]
        other = [r for r in results if not r.name.startswith("late-collection") and r.crashes
                 or r.hangs]  # a try killed at the time limit did not finish: never a pass
        missed = [r for r in results if r.not_run]  # a try that tested nothing is no pass
        verdicts = "; ".join(r.verdict() for r in results)
        if late:
            return self.finding(Status.FAIL, f"reproduced: {verdicts}", evidence=ev)
        if missed:
            if all(r.not_run == r.tries for r in results):
                verdicts = f"crash reproducer not run: {missed[0].why_not_run()}"
            no_torch = all(r.no_torch for r in missed)
            return self.finding(
                Status.SKIP if no_torch else Status.ERROR, verdicts, evidence=ev,
                hint="install torch in this environment to run the reproducer" if no_torch else
                "run `python -m diag.probes.profiler_teardown.reproducer --tries 1` to see the child fail")
        status = Status.WARN if other else Status.OK
        return self.finding(status, verdicts, evidence=ev)
