"""A configuration SGLang refuses at start runs no engine, so no fix judged for it applies.

Why: the per-phase verdicts say `refused`, with `file:line`, where SGLang's argument handling or
its draft worker's construction refuses a configuration (an unknown backend, topk given without
the steps, a backend's topk guard, ...). A fix that only looked at the gate or the builder would
call itself applicable to a server that never starts, in `fix list`, the findings' hints, the
TUI's Fixes tab and `fix check` alike. The verdicts are the probes' (phases.audited_verdicts),
read here rather than judged again.
"""

from __future__ import annotations

from diag.context import SpecConfig
from diag.fixes.base import REFUSED, Applicability
from diag.target import Target


def refused_at_start(target: Target, platform: str, config: SpecConfig | None
                     ) -> Applicability | None:
    """REFUSED, with SGLang's reason and line, when every phase of the configuration under audit
    is refused at start; None otherwise (no configuration, a live server's, one that starts or
    one the verdicts cannot read)."""
    if config is None or not config.given or config.source == "server":
        return None  # a live server started: its configuration was not refused
    from diag.probes.draft_extend_graph.phases import REFUSED as PHASE_REFUSED
    from diag.probes.draft_extend_graph.phases import audited_verdicts

    try:
        audit = audited_verdicts(target, platform, config)
    except (ValueError, OSError):  # a model the report already names as unreadable
        return None
    if audit is None or not audit.verdicts or \
            any(pv.mode != PHASE_REFUSED for pv in audit.verdicts):
        return None
    pv = audit.verdicts[-1]
    where = f" ({pv.where})" if pv.where and str(pv.where) not in pv.reason else ""
    return Applicability(REFUSED, f"sglang {target.version} refuses this configuration at "
                         f"start{where}: {pv.reason}; no engine runs for a fix to change",
                         "change the configuration as the refusal says (`diag diagnose` "
                         "gives it per phase)")
