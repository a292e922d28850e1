"""What the GPU engine lane and the field kit (`diag kit run`) read and judge, as pure functions
(tested on CPU in CI; benchmarks/gpu_engine/checks.py re-exports them for the lane).

Why apart from the drivers: the drivers (lane.py, diag.kit.runner) need a real server; what they
conclude from a server log, from diag's counters and from timed requests must be checkable where
CI runs. Kept whole (~520 lines): one vocabulary of judgements shared by two drivers.
Each judgement is a `Check`: a name, a verdict, and the evidence it rests on. A check whose input
is missing is `ok=None` (not run), never a pass.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any

# SGLang 0.5.23 logs one line per captured runner (log_info_on_rank0 / logger.info):
#   model_executor/model_runner_components/cuda_graph_setup.py:696  "Capture {role} {verify|decode|
#       prefill} CUDA graph end. elapsed=..."  (role is "target" or "draft")
#   speculative/eagle_worker_v2.py:533  "Capture draft decode CUDA graph end. elapsed=..."
#   speculative/eagle_worker_v2.py:654  "Capture draft extend CUDA graph end. elapsed=..."
CAPTURE_END = re.compile(r"Capture (?P<name>[a-z ]+?) CUDA graph end(?P<by> \(diag [^)\n]*\))?\.[^\n]*?"
                         r"elapsed=(?P<s>[0-9.]+) s")
PHASES = ("target verify", "draft decode", "draft extend")
ERRORS = re.compile(r"Traceback \(most recent call last\)|CUDA error|operation not permitted when "
                    r"stream is capturing|cudaErrorStreamCapture|Capture .* failed|Scheduler hit an "
                    r"exception|SIGSEGV|Segmentation fault")


@dataclass
class Check:
    name: str
    ok: bool | None  # None: could not be judged (its input is missing)
    detail: str
    data: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail, "data": self.data}


def captures(log: str) -> dict[str, float]:
    """Captured runners in a server log: name ("target verify", "draft extend", ...) -> seconds."""
    out: dict[str, float] = {}
    for m in CAPTURE_END.finditer(log):
        out[m.group("name")] = out.get(m.group("name"), 0.0) + float(m.group("s"))
    return out


def log_errors(log: str, limit: int = 5) -> list[str]:
    return [line.strip()[:200] for line in log.splitlines() if ERRORS.search(line)][:limit]


def check_captures(name: str, log: str, expect: dict[str, bool]) -> Check:
    """Every phase in `expect` captured (True) or not (False), and no error in the log. A sync
    inside a capture is an error there (CUDA refuses it: the capture fails and the log says so)."""
    got = captures(log)
    errs = log_errors(log)
    wrong = [p for p, want in expect.items() if (p in got) != want]
    parts = [f"{p}: captured {got[p]:.2f} s" if p in got else f"{p}: not captured" for p in expect]
    ok = not wrong and not errs
    detail = "; ".join(parts) + (f"; log errors: {errs}" if errs else "") + \
        (f"; unexpected: {wrong}" if wrong else "")
    return Check(name, ok, detail, {"captured": got, "errors": errs})


def check_equal_tokens(name: str, runs: dict[str, list[list[int]]]) -> Check:
    """The same prompts' greedy outputs from several servers: identical, token for token."""
    names = list(runs)
    if len(names) < 2 or not all(runs.values()):
        return Check(name, None, "fewer than two servers answered")
    ref = runs[names[0]]
    diffs = {n: [i for i, (a, b) in enumerate(zip(ref, runs[n])) if a != b] for n in names[1:]}
    ok = all(not d for d in diffs.values()) and all(len(runs[n]) == len(ref) for n in names)
    n_tok = sum(len(x) for x in ref)
    return Check(name, ok, f"{len(ref)} prompts, {n_tok} tokens each server; differing prompts: "
                 + ", ".join(f"{n} {d or 'none'}" for n, d in diffs.items()),
                 {"prompts": len(ref), "tokens": n_tok, "diffs": diffs})


def modes(counters: dict[str, Any] | None, section: str = "draft_extend") -> dict[str, int]:
    """Passes by mode from a process's folded counters (`diag fix status --json`)."""
    sec = (counters or {}).get(section) or {}
    return {m: int(v.get("passes", 0)) for m, v in sec.items() if isinstance(v, dict)}


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {m: after.get(m, 0) - before.get(m, 0) for m in set(after) | set(before)
            if after.get(m, 0) - before.get(m, 0)}


def check_modes(name: str, got: dict[str, int] | None, want: str, why: str = "") -> Check:
    """All counted passes in mode `want` (graph or eager), at least one."""
    if got is None:
        return Check(name, None, "no counters (the scheduler's agent did not report)")
    other = {m: n for m, n in got.items() if m != want and n}
    ok = got.get(want, 0) > 0 and not other
    return Check(name, ok, f"passes by mode {dict(sorted(got.items()))}; expected {want} only"
                 + (f" ({why})" if why else ""), {"passes": got})


def median_ms_per_token(times_s: list[float], tokens: int) -> float | None:
    return 1e3 * statistics.median(times_s) / tokens if times_s and tokens else None


def iqr(values: list[float]) -> float | None:
    if len(values) < 4:
        return None
    q = statistics.quantiles(values, n=4)
    return q[2] - q[0]


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def eager_estimate(graph_mean_s: float | None, eager_mean_s: float | None,
                   passes_per_token: float | None) -> float | None:
    """diag's own estimate of what eager draft-extend costs per token (ms): the counters' mean
    host time of an eager pass minus a graph replay, times draft-extend passes per token."""
    if graph_mean_s is None or eager_mean_s is None or passes_per_token is None:
        return None
    return 1e3 * (eager_mean_s - graph_mean_s) * passes_per_token


def mean_s(counters: dict[str, Any] | None, mode: str, section: str = "draft_extend") -> float | None:
    m = ((counters or {}).get(section) or {}).get(mode) or {}
    n = m.get("passes") or 0
    return m.get("seconds", 0.0) / n if n else None


def phase_modes(counters: dict[str, Any] | None, phase: str) -> dict[str, int]:
    """Passes by mode of one phase: draft-extend from its own section, target-verify and
    draft-decode from `graph_phases`."""
    if phase == "draft-extend":
        return modes(counters)
    sec = ((counters or {}).get("graph_phases") or {}).get(phase) or {}
    return {m: int(v.get("passes", 0)) for m, v in sec.items() if isinstance(v, dict)}


def phase_reasons(counters: dict[str, Any] | None, phase: str) -> dict[str, int]:
    sec = (counters or {}).get("draft_extend") if phase == "draft-extend" else \
        ((counters or {}).get("graph_phases") or {}).get(phase)
    return dict(((sec or {}).get("eager") or {}).get("reasons") or {})


def phase_lines(counters: dict[str, Any] | None) -> list[str]:
    """One line per phase: captured (graph replays) or eager, and why."""
    out = []
    for phase in ("target-verify", "draft-decode", "draft-extend"):
        m = phase_modes(counters, phase)
        why = phase_reasons(counters, phase)
        out.append(f"{phase}: graph {m.get('graph', 0)}, eager {m.get('eager', 0)}"
                   + (f" (eager because: {why})" if why else ""))
    return out


def syncs_by_phase(counters: dict[str, Any] | None) -> dict[str, dict[str, int]]:
    """Runtime syncs and builder calls per phase, summed over the wrapped builders."""
    out: dict[str, dict[str, int]] = {}
    for b in ((counters or {}).get("syncs") or {}).values():
        for phase, v in (b.get("phases") or {}).items():
            o = out.setdefault(phase, {"calls": 0, "syncs": 0})
            o["calls"] += int(v.get("calls", 0))
            o["syncs"] += int(v.get("syncs", 0))
    return out


def syncs_per_step(counters: dict[str, Any] | None) -> dict[str, float | None]:
    """Measured syncs per pass of each phase: its builders' syncs / the phase's passes."""
    by = syncs_by_phase(counters)
    out: dict[str, float | None] = {}
    for phase, v in by.items():
        passes = sum(phase_modes(counters, phase).values()) if phase in (
            "target-verify", "draft-decode", "draft-extend") else None
        out[phase] = v["syncs"] / passes if passes else None
    return out


def census_per_phase(report: dict[str, Any]) -> dict[str, float]:
    """The static census's per-phase totals from a `diag probe metadata-syncs --json` report:
    evidence items whose data carry `phase` and `syncs_per_step`."""
    out: dict[str, float] = {}
    for f in report.get("findings", []):
        for ev in f.get("evidence", []):
            d = ev.get("data") or {}
            if "phase" in d and isinstance(d.get("syncs_per_step"), (int, float)):
                out[str(d["phase"])] = d["syncs_per_step"]
    return out


def census_exact(report: dict[str, Any]) -> dict[str, bool]:
    """Per phase, whether the census's total is exact for the configuration (every site on it
    decided: none behind a test no input decides, none it cannot tell) or an upper bound."""
    out: dict[str, bool] = {}
    for f in report.get("findings", []):
        for ev in f.get("evidence", []):
            d = ev.get("data") or {}
            if "phase" in d and isinstance(d.get("syncs_per_step"), (int, float)):
                out[str(d["phase"])] = d.get("exact") is True
    return out


def check_syncs_agree(name: str, measured: dict[str, float | None],
                      census: dict[str, float], exact: dict[str, bool] | None = None) -> Check:
    """Measured syncs per step per phase equal the census's, for the phases both have. With
    `exact` (census_exact), a phase whose total is only an upper bound is not judged for
    equality (check_syncs_bounded judges it); it is named in the detail."""
    bounds = sorted(p for p in census if exact is not None and not exact.get(p, False))
    both = sorted(p for p in census if measured.get(p) is not None and p not in bounds)
    if not census:
        return Check(name, None, "the census report gives no per-phase totals", {
            "measured": measured})
    if not both:
        return Check(name, None, f"no phase measured and counted exactly both (measured "
                     f"{measured}, census {census}, upper bounds only {bounds})",
                     {"measured": measured, "census": census, "bounds": bounds})
    diff = {p: (measured[p], census[p]) for p in both if abs((measured[p] or 0) - census[p]) > 1e-9}
    return Check(name, not diff, "per step, measured vs census: "
                 + ", ".join(f"{p} {measured[p]:g} vs {census[p]:g}" for p in both)
                 + (f"; upper bounds only, not judged: {', '.join(bounds)}" if bounds else ""),
                 {"measured": measured, "census": census, "differ": diff, "bounds": bounds})


def check_syncs_bounded(name: str, measured: dict[str, float | None],
                        census: dict[str, float]) -> Check:
    """Measured syncs per step never above the census's (its totals are upper bounds: it takes
    conditions on data and on configuration both ways)."""
    both = sorted(p for p in census if measured.get(p) is not None)
    if not both:
        return Check(name, None, "no phase both measured and counted", {
            "measured": measured, "census": census})
    over = {p: (measured[p], census[p]) for p in both if (measured[p] or 0) > census[p] + 1e-9}
    return Check(name, not over, ", ".join(f"{p} {measured[p]:g} <= {census[p]:g}"
                                           for p in both), {"over": over})


SHARE_ROW = re.compile(r"(?P<row>[a-z -]+) time, eager → graph\n[^\n]*\n[^\n]*?"
                       r"(?P<eager>\d+) eager, (?P<graph>\d+) graph")


def tui_shares(text: str) -> dict[str, tuple[int, int]]:
    """`diag tui --once`'s eager → graph rows (after the fix label): row name -> (eager passes,
    graph passes)."""
    return {m.group("row").split("  ")[-1].strip(): (int(m.group("eager")), int(m.group("graph")))
            for m in SHARE_ROW.finditer(text)}


def check_tui_share(name: str, rc: int, text: str) -> Check:
    """The live view shows draft-extend's eager/graph share from the run directory."""
    shares = tui_shares(text)
    de = shares.get("draft-extend")
    ok = rc == 0 and de is not None and de[1] > 0
    return Check(name, ok, f"rc {rc}; shares {shares}", {"shares": shares})


# ------------------------------------------------------------------------------- overhead bars
OVERHEAD_BAR = 1.03  # issue 25: `--probe all` per token, the interval's upper bound


def paired_rounds(times: dict[str, list[float]], base: str, other: str) -> dict[str, Any] | None:
    """`other`/`base` per round (one request to each server per round, order rotated): the
    median ratio with its bootstrap 95 % interval (`diag.paired`); None when either is missing."""
    from diag import paired

    a, b = times.get(base) or [], times.get(other) or []
    if not a or len(a) != len(b):
        return None
    return paired.paired_ratio(a, b).to_dict()


def check_overhead_bar(name: str, doc: dict[str, Any] | None, bar: float = OVERHEAD_BAR) -> Check:
    """`diag bench overhead --json`: every counter on vs off inside the server, the upper bound
    of its interval at most `bar`."""
    rows = {r.get("condition"): r for r in (doc or {}).get("results") or []}
    r = rows.get("all")
    if r is None:
        return Check(name, None, "no in-server measurement (diag bench overhead did not run)")
    f = (doc or {}).get("noise_floor") or {}
    detail = (f"every counter on/off {r['ratio']:.3f} ({r['lo']:.3f}-{r['hi']:.3f}), bar: upper "
              f"bound <= {bar}; noise floor {f.get('ratio', float('nan')):.3f} "
              f"({f.get('lo', float('nan')):.3f}-{f.get('hi', float('nan')):.3f})")
    return Check(name, r["hi"] <= bar, detail, {"all": {k: r[k] for k in ("ratio", "lo", "hi",
                                                                          "pairs")},
                                                "floor": f})


def check_within_floor(name: str, pair: dict[str, Any] | None,
                       floor: dict[str, Any] | None) -> Check:
    """Two identical servers' paired ratio inside the noise floor of two plain servers (the
    floor's interval, widened symmetrically around 1)."""
    from diag import paired

    if pair is None or floor is None:
        return Check(name, None, "a server of the pair did not run")
    r, f = paired.Ratio(**pair), paired.Ratio(**floor)
    return Check(name, r.within(f), f"identical servers {r.text()}; two plain servers {f.text()}",
                 {"pair": pair, "floor": floor})


def share_lines(doc: dict[str, Any] | None) -> list[str]:
    """Each condition of `diag bench overhead --json` as one line (per probe share)."""
    if not doc:
        return []
    out = [f"{r['condition']}: {r['ratio']:.3f} ({r['lo']:.3f}-{r['hi']:.3f})"
           + (" within noise" if r.get("within_noise") else "") for r in doc.get("results", [])]
    f = doc.get("noise_floor") or {}
    if f:
        out.append(f"noise floor: {f['ratio']:.3f} ({f['lo']:.3f}-{f['hi']:.3f})")
    own = doc.get("agent_own") or {}
    if own.get("share") is not None:
        out.append(f"agent's own work (on in every window): {own['share'] * 100:.2f} % of the "
                   f"wall time ({own['seconds'] * 1e3:.1f} ms in {own['wall_s']:.0f} s)")
    return out


# ------------------------------------------------------------------------------ the profiler crash
# The crash dumps are read by diag's own reader (diag/engine/last_words.py: Python's faulthandler
# format; SGLang 0.5.23 enables faulthandler in every scheduler, managers/scheduler.py:6295), the
# one `diag fix status` names a death with. The crash of issue 29: SIGSEGV in `~ProfilerResult`
# (torch's C++ profiler result) reached from pybind11's dealloc while the cyclic GC frees a
# stopped profiler.
from diag.engine.last_words import FATAL, Crash, crashes  # noqa: E402,F401 (re-exported)


@dataclass
class CrashTry:
    """One server of the crash check: the profiles it was given, how many finished (trace files
    written), and how it ended."""

    name: str
    side: str  # "plain" | "fix"
    profiles_sent: int
    profiles_done: int
    alive: bool  # still serving at the end
    log: str = ""
    error: str = ""  # why it stopped early (an HTTP error, a dead server), when it did

    def crash(self) -> Crash | None:
        found = crashes(self.log)
        return next((c for c in found if c.teardown), found[0] if found else None)

    def dump(self, lines: int = 150) -> str:
        """What the verdict rests on, or '': the log's profiler stop lines before its first
        fatal-error dump (the teardown signature needs a stop before the crash), then the dump."""
        m = FATAL.search(self.log)
        if not m:
            return ""
        from diag.engine.last_words import PROFILE_STOP

        stops = [ln for ln in self.log[:m.start()].splitlines() if PROFILE_STOP.search(ln)]
        return "\n".join(stops + self.log[m.start():].splitlines()[:lines])

    def as_dict(self) -> dict[str, Any]:
        c = self.crash()
        return {"name": self.name, "side": self.side, "profiles_sent": self.profiles_sent,
                "profiles_done": self.profiles_done, "alive": self.alive, "error": self.error,
                "crash": c.as_dict() if c else None, "dump": self.dump()}


def crash_side(tries: list[CrashTry]) -> dict[str, Any]:
    """A side's counts: servers, servers crashed (a fatal signal in the log), of those with the
    teardown signature, other deaths, profiles sent, and crashes per profile sent."""
    tested = [t for t in tries if t.profiles_sent > 0]
    crashed = [t for t in tested if t.crash() is not None]
    sig = [t for t in crashed if t.crash().teardown]
    other = [t for t in tested if not t.alive and t.crash() is None]
    sent = sum(t.profiles_sent for t in tested)
    return {"servers": len(tries), "tested": len(tested), "crashed": len(crashed),
            "teardown_signature": len(sig), "died_otherwise": len(other),
            "profiles_sent": sent, "profiles_done": sum(t.profiles_done for t in tested),
            "crashes_per_profile": len(crashed) / sent if sent else None}


def check_crash(name: str, tries: list[CrashTry]) -> Check:
    """The fix's before/after on real servers: passes only when plain servers crashed with the
    teardown signature and no server under the fix crashed. Neither side crashed: "not
    reproduced" (a fail: nothing was shown prevented). A side that tested nothing: not run."""
    plain = crash_side([t for t in tries if t.side == "plain"])
    fix = crash_side([t for t in tries if t.side == "fix"])
    data = {"plain": plain, "fix": fix, "servers": [t.as_dict() for t in tries]}

    def rate(s: dict) -> str:
        return (f"{s['crashed']} of {s['tested']} servers crashed ({s['teardown_signature']} with "
                f"the teardown signature) over {s['profiles_sent']} profiles sent, "
                f"{s['profiles_done']} finished")

    detail = f"plain: {rate(plain)}; under the fix: {rate(fix)}"
    if not plain["tested"] or not fix["tested"]:
        data["verdict"] = "not run"
        return Check(name, None, "not run: a side got no profile; " + detail, data)
    if fix["crashed"]:
        data["verdict"] = "not prevented"
        return Check(name, False, "not prevented: " + detail, data)
    if not plain["crashed"]:
        data["verdict"] = "not reproduced"
        return Check(name, False, "not reproduced (no plain server crashed, so nothing was shown "
                     "prevented): " + detail, data)
    if not plain["teardown_signature"]:
        data["verdict"] = "other crash"
        return Check(name, False, "plain servers crashed, but not with the profiler-teardown "
                     "signature: " + detail, data)
    data["verdict"] = "prevented"
    return Check(name, True, "prevented: " + detail, data)


def static_phases(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The per-phase verdicts for the configuration under audit from a `diag probe
    draft-extend-graph --server URL --json` report: {phase: row data (mode, runtime_fallbacks)}."""
    out: dict[str, dict[str, Any]] = {}
    for f in report.get("findings", []):
        for ev in f.get("evidence", []):
            d = ev.get("data") or {}
            if ev.get("kind") == "row" and "phase" in d and d.get("config") and "mode" in d:
                out[str(d["phase"])] = d
    return out


def check_phases_agree(name: str, static: dict[str, dict[str, Any]],
                       counters: dict[str, Any] | None) -> Check:
    """The static verdict of each phase (read from the source for the server's resolved
    configuration) against the live passes at a batch every runner captured: `graph` must
    count graph replays only, `eager` eager passes only, `none` no pass at all;
    `refused`/`depends` are not judged."""
    if not static:
        return Check(name, None, "the report has no per-phase rows (no backend under audit?)")
    if counters is None:
        return Check(name, None, "no counters (the scheduler's agent did not report)")
    seen, bad, judged = {}, {}, 0
    for phase, d in static.items():
        want, got = d.get("mode"), phase_modes(counters, phase)
        seen[phase] = {"static": want, "live": got}
        if want == "none" and sum(got.values()):  # no such pass (FROZEN_KV_MTP's draft-extend):
            judged += 1  # one counted is a disagreement; none counted proves nothing alone
            bad[phase] = seen[phase]
            continue
        if want not in ("graph", "eager"):
            continue
        if not sum(got.values()):
            continue
        judged += 1
        if got.get(want, 0) == 0 or any(n for m, n in got.items() if m != want):
            bad[phase] = seen[phase]
    if not judged:
        return Check(name, None, f"no phase both judged and counted: {seen}", {"phases": seen})
    return Check(name, not bad, "static vs live per phase: " + ", ".join(
        f"{p} {v['static']} vs {v['live']}" for p, v in seen.items()), {"phases": seen})


FORCED_EAGER = "forced-eager"  # probes.draft_extend_graph.runtime.FORCED (kept import-free)


def check_fallbacks_named(name: str, static: dict[str, dict[str, Any]],
                          counters: dict[str, Any] | None) -> Check:
    """Every live eager reason of a captured phase is one of the run-time fallbacks the static
    verdict names for it (the two views speak one vocabulary). Passes diag itself forced eager
    (`forced-eager`: `diag bench eager-cost`) are no fallback of SGLang's and are left out."""
    if not static or counters is None:
        return Check(name, None, "no per-phase rows or no counters")
    unnamed, seen = {}, {}
    for phase, d in static.items():
        if d.get("mode") != "graph":
            continue
        named = {f.get("reason") for f in d.get("runtime_fallbacks") or []}
        live = {r: n for r, n in phase_reasons(counters, phase).items() if r != FORCED_EAGER}
        seen[phase] = {"live": live, "named": sorted(n for n in named if n)}
        extra = {r: n for r, n in live.items() if r not in named}
        if extra:
            unnamed[phase] = extra
    if not any(v["live"] for v in seen.values()):
        return Check(name, None, f"no eager pass of a captured phase was counted: {seen}",
                     {"phases": seen})
    return Check(name, not unnamed, "live eager reasons not named statically: "
                 + (str(unnamed) if unnamed else "none"), {"phases": seen})


def diag_captures(log: str) -> dict[str, float]:
    """Runners a diag fix captured (its own log line, `... end (diag FIX).`): name -> seconds."""
    out: dict[str, float] = {}
    for m in CAPTURE_END.finditer(log):
        if m.group("by"):
            out[m.group("name")] = out.get(m.group("name"), 0.0) + float(m.group("s"))
    return out


def check_prediction(name: str, predicted: float | None, measured: float | None,
                     tolerance: float = 0.10) -> Check:
    """diag's predicted gain per token (before the fix) within `tolerance` of the measured one."""
    if predicted is None or measured is None or measured <= 0:
        return Check(name, None, f"predicted {predicted}, measured {measured}: nothing to compare")
    err = predicted / measured - 1
    return Check(name, abs(err) <= tolerance, f"predicted {predicted:.3f} ms/token, measured "
                 f"{measured:.3f} ms/token ({100 * err:+.1f} %, bar +-{100 * tolerance:.0f} %)",
                 {"predicted_ms": predicted, "measured_ms": measured, "error": err})


def trace_modes(doc: dict | None, phase: str = "draft-extend") -> tuple[str | None, str | None]:
    """`diag trace CUR --baseline BASE --json`: (baseline mode, current mode) of one phase."""
    for row in (doc or {}).get("compare") or []:
        if row.get("phase") == phase:
            b, c = row.get("baseline") or {}, row.get("current") or {}
            return b.get("mode"), c.get("mode")
    return None, None


# ------------------------------------------------------------------------------ the field kit
# `lane.py --only kit`: `diag kit run` on the GPU machine, its kit.json judged here.
KIT_GPU_CHECKS = ("phases-static-vs-live", "phases-log-vs-live", "trace-complete")


def _has_number(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, (int, float)):
        return True
    if isinstance(v, dict):
        return any(_has_number(x) for x in v.values())
    if isinstance(v, (list, tuple)):
        return any(_has_number(x) for x in v)
    return False


def check_kit_entries(name: str, doc: dict[str, Any] | None) -> Check:
    """Every check of a kit.json either ran with numbers (pass/fail with a measured value in
    `values`) or is `not-run` with its reason; a document without checks is not judged."""
    entries = (doc or {}).get("checks") or []
    if not entries:
        return Check(name, None, "no kit.json checks to judge")
    bad = [c.get("id") for c in entries
           if not ((c.get("status") in ("pass", "fail") and _has_number(c.get("values")))
                   or (c.get("status") == "not-run" and str(c.get("reason") or "").strip()))]
    counts = {s: sum(c.get("status") == s for c in entries) for s in ("pass", "fail", "not-run")}
    return Check(name, not bad, f"{len(entries)} checks {counts}; without numbers or reason: "
                 f"{bad or 'none'}", {"counts": counts, "bad": bad})


def check_kit_gpu_judged(name: str, doc: dict[str, Any] | None,
                         ids: tuple[str, ...] = KIT_GPU_CHECKS) -> Check:
    """On a GPU, the checks a CPU run leaves `not-run` for want of a GPU are judged."""
    entries = {c.get("id"): c for c in (doc or {}).get("checks") or []}
    if not entries:
        return Check(name, None, "no kit.json checks to judge")
    missing = {i: (entries.get(i) or {}).get("reason", "absent") for i in ids
               if (entries.get(i) or {}).get("status") not in ("pass", "fail")}
    return Check(name, not missing, "; ".join(
        f"{i} {(entries.get(i) or {}).get('status', 'absent')}" for i in ids)
        + (f"; not judged: {missing}" if missing else ""), {"not_judged": missing})


def check_kit_left(name: str, doc: dict[str, Any] | None, alive: list[int]) -> Check:
    """No process the kit started is alive afterwards: its own count (`processes_left`) and
    `alive`, what the caller found itself (psutil) in the server's process group and with the
    kit's folder on the command line."""
    if doc is None:
        return Check(name, None, "no kit.json")
    left = doc.get("processes_left")
    ok = left == [] and not alive
    return Check(name, ok, f"kit says {left}; found alive afterwards: {alive or 'none'}",
                 {"processes_left": left, "alive": alive})
