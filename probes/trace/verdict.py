"""One truth: the release's own draft-extend verdict for the configuration the trace was recorded
with (the `draft-extend-graph` probe's gate, probes.gate) against what the trace shows.

A draft-extend that the source says is captured but the trace shows eager with no reason of its
own (a prefill's draft extend, a batch above the replayed sizes), or the reverse, is a finding.
"""

from __future__ import annotations

from diag.probes.gate import EAGER, GRAPH, backend_map, read_gate, verdict


def source_verdict(target, platform: str, backend: str, num_steps: int | None,
                   kill_switch: bool) -> dict:
    """The release's verdict for draft-extend with this backend and configuration."""
    gate = read_gate(target)
    v = verdict(gate, backend_map(target, platform).get(backend), platform, num_steps,
                kill_switch, False, False, target.version)
    return {"release": target.version, "platform": platform, "attention_backend": backend,
            "speculative_num_steps": num_steps, "kill_switch": kill_switch, "mode": v.mode,
            "reason": v.reason, "gate": f"{gate.file}:{gate.line}" if gate.file else None}


def agreement(src: dict, phases: dict) -> dict:
    """Does the trace's draft-extend agree with the source verdict? Eager passes whose reason
    the trace shows (prefill, batch size) are not counted against a graph verdict."""
    ph = phases.get("draft-extend")
    out = {"source": src, "trace": None, "agrees": None, "detail": None}
    if ph is None:
        out["detail"] = "the trace has no draft-extend pass"
        return out
    unexplained = ph["eager_reasons"].get("no reason shown in the trace", 0)
    out["trace"] = {"graph_passes": ph["graph_passes"], "eager_passes": ph["eager_passes"],
                    "eager_unexplained": unexplained, "unknown_passes": ph["unknown_passes"]}
    if ph["unknown_passes"] == ph["passes"]:
        out["detail"] = "the trace recorded no runtime calls: graph or eager cannot be told"
    elif src["mode"] == GRAPH:
        out["agrees"] = unexplained == 0 and ph["graph_passes"] > 0
        out["detail"] = (f"source: captured ({src['reason']}); trace: {ph['graph_passes']} graph "
                         f"passes, {unexplained} eager with no reason the trace shows")
    elif src["mode"] == EAGER:
        out["agrees"] = ph["graph_passes"] == 0
        out["detail"] = (f"source: eager ({src['reason']}); trace: {ph['graph_passes']} graph "
                         f"passes, {ph['eager_passes']} eager")
    else:
        out["detail"] = f"source: {src['mode']} ({src['reason']}): nothing to compare"
    return out
