"""Step `capture`: per speculative phase, the server log's capture lines, the live counters of
the run directory (graph replays vs eager passes, and why) and the static verdict for the
server's resolved configuration (`diag probe draft-extend-graph --server`), and whether they
agree."""

from __future__ import annotations

from diag.kit import checks
from diag.kit.runner import Kit, Step
from diag.kit.steps.base import (
    PROMPTS,
    diag_json,
    engine_counters,
    greedy,
    platform_args,
    wait_for,
)

PHASES = ("target-verify", "draft-decode", "draft-extend")


class CaptureStep(Step):
    id = "capture"
    title = "graph or eager per phase: log, live counters, static verdict"
    checks = {
        "phases-static-vs-live": "the static per-phase verdicts agree with the live passes",
        "phases-log-vs-live": "a phase the log says was captured replays graphs, and only then",
    }

    def run(self, kit: Kit) -> None:
        s = kit.server
        kit.say(f"{len(PROMPTS)} greedy requests of {kit.opts.tokens} tokens")
        kit.state["greedy"] = greedy(s, kit.opts.tokens)
        # the agent flushes its counters at most once a second
        c = wait_for(lambda: (x := engine_counters(s)) and checks.modes(x) and x, 15)
        kit.state["counters"] = c
        kit.say("static per-phase verdicts (diag probe draft-extend-graph --server)")
        rep, err = diag_json("probe", "draft-extend-graph", "--server", s.url, "--no-execute",
                             *platform_args(kit), "--json")
        static = checks.static_phases(rep)
        kit.state["static"] = static
        log = s.log.read_text(errors="replace")
        captured = checks.captures(log)
        phases = {}
        for ph in PHASES:
            st = static.get(ph) or {}
            phases[ph] = {"log_captured_s": captured.get(ph.replace("-", " ")),
                          "live": checks.phase_modes(c, ph),
                          "live_eager_reasons": checks.phase_reasons(c, ph),
                          "static": {k: st.get(k) for k in ("mode", "reason", "why") if k in st}
                          or None}
        values = {"phases": phases, "log_errors": checks.log_errors(log)}
        if not static:
            values["probe"] = err
        v = checks.check_phases_agree("", static, c)
        if kit.opts.device == "cpu":
            # the static verdicts say what a GPU's capture gate decides; SGLang on CPU captures
            # no CUDA/HIP graph at all, so a static `graph` against live eager is no verdict
            kit.record("phases-static-vs-live", "not-run", v.detail, values,
                       "needs a GPU: the static verdicts describe CUDA/HIP graph capture, which "
                       f"SGLang on device cpu never does (here: {v.detail})")
        else:
            kit.judge("phases-static-vs-live", v.ok, v.detail, values)
        seen = {ph: p for ph, p in phases.items() if sum(p["live"].values())}
        if c is None or not seen:
            kit.record("phases-log-vs-live", "not-run", "", values,
                       "no live passes counted (the scheduler's agent did not report)")
            return
        bad = {ph: p for ph, p in seen.items()
               if (p["log_captured_s"] is not None) != (p["live"].get("graph", 0) > 0)}
        detail = "; ".join(f"{ph}: log {'captured' if p['log_captured_s'] is not None else 'no capture'}, "
                           f"live {p['live']}" for ph, p in seen.items())
        kit.judge("phases-log-vs-live", not bad, detail, values)
