"""A configuration SGLang refuses at start runs no engine, so no fix judged for it applies.

Why: the per-phase verdicts say `refused`, with `file:line`, where SGLang's argument handling or
its draft worker's construction refuses a configuration (an unknown backend, topk given without
the steps, a backend's topk guard, ...). A fix that only looked at the gate or the builder would
call itself applicable to a server that never starts, in `fix list`, the findings' hints, the
TUI's Fixes tab and `fix check` alike. The verdicts are the probes' (phases.
start_refused_verdict: their modes, without the runtime fallbacks), read here, not judged again.
"""

from __future__ import annotations

from diag.context import SpecConfig
from diag.fixes.base import REFUSED, Applicability
from diag.probes.gate import GateInfo
from diag.target import Target


def refused_at_start(target: Target, platform: str, config: SpecConfig | None,
                     gate: GateInfo | None = None) -> Applicability | None:
    """REFUSED, with SGLang's reason and line, when every phase of the configuration under audit
    is refused at start, or where the argument handling the verdicts read does not parse (a
    damaged tree: whether it starts is not known); None otherwise (no configuration, a live
    server's, one that starts or one the verdicts cannot read). `gate`: the configuration's
    (`phases.gate_for`), where the caller read it already."""
    if config is None or not config.given or config.source == "server":
        return None  # a live server started: its configuration was not refused
    from diag.probes.draft_extend_graph.phases import start_refused_verdict

    try:
        pv = start_refused_verdict(target, platform, config, gate)
    except (ValueError, OSError):  # a model the report already names as unreadable
        return None
    from diag.probes.startup.resolve import damaged_rules

    damaged = damaged_rules(target)  # the verdict read them: a rule there is not known
    if damaged:
        file, why, _ = damaged[0]
        return Applicability(REFUSED, f"{file} {why}: diag cannot read SGLang's start-up rules "
                             "in this tree, so it cannot tell whether this configuration "
                             "starts", "reinstall SGLang or pass a release (--sglang VERSION)")
    if pv is None:
        return None
    where = f" ({pv.where})" if pv.where and str(pv.where) not in pv.reason else ""
    return Applicability(REFUSED, f"sglang {target.version} refuses this configuration at "
                         f"start{where}: {pv.reason}; no engine runs for a fix to change",
                         "change the configuration as the refusal says (`diag diagnose` "
                         "gives it per phase)")
