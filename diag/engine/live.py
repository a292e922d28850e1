"""One engine's own counters as "graph vs eager" figures per speculative phase, and what each
fix not applied there predicts from them: computed once here, rendered by `diag fix status`
(text and JSON), `diag fix list --run-dir/--server` and the TUI's Timings tab.

Inputs are the counters one process folds (`diag fix status --json` `counters`: `draft_extend`
{mode: {passes, seconds, reasons}}, `graph_phases` {phase: {mode: ...}}), several engine
processes pooled (the TUI pools ranks), or a server's `diag_*` series on `/metrics`
(`counters_from_metrics`: the same shape, totals since the server started, every rank summed).
`Speed` is what the server says about a token: its accept length (`/server_info`
internal_states[].avg_spec_accept_length) and its per-token time (`/metrics`
`sglang:inter_token_latency_seconds` sum/count); each figure says where it came from.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from diag.fixes.base import Prediction

PHASES = ("draft-extend", "target-verify", "draft-decode")
MODES = ("eager", "graph")  # before (eager) → after (graph)
ITL = "sglang:inter_token_latency_seconds"


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _count(v: Any) -> int:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


@dataclass
class ModeFigure:
    """One phase's passes in one mode: how many, their host time in all, why eager."""

    passes: int
    seconds: float
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def ms_per_pass(self) -> float | None:
        return 1e3 * self.seconds / self.passes if self.passes else None

    def to_dict(self) -> dict[str, Any]:
        ms = self.ms_per_pass
        return {"passes": self.passes, "seconds": round(self.seconds, 6),
                "ms_per_pass": None if ms is None else round(ms, 4), "reasons": self.reasons}

    def text(self, mode: str) -> str:
        ms = self.ms_per_pass
        why = ("; eager because: " + ", ".join(f"{k} {n}" for k, n in sorted(self.reasons.items()))
               if self.reasons else "")
        return f"{mode} {'n/a' if ms is None else f'{ms:.3f}'} ms/pass ({self.passes} passes{why})"


@dataclass
class PhaseFigure:
    phase: str
    modes: dict[str, ModeFigure]  # "eager" | "graph" (others kept as read)

    @property
    def ratio(self) -> float | None:
        """graph ms/pass over eager ms/pass (after/before), when both ran."""
        e, g = self.modes.get("eager"), self.modes.get("graph")
        if e and g and e.ms_per_pass and g.ms_per_pass is not None:
            return g.ms_per_pass / e.ms_per_pass
        return None

    def to_dict(self) -> dict[str, Any]:
        r = self.ratio
        return {"phase": self.phase, "modes": {m: v.to_dict() for m, v in self.modes.items()},
                "graph_over_eager": None if r is None else round(r, 4)}

    def text(self) -> str:
        order = [m for m in MODES if m in self.modes] + sorted(set(self.modes) - set(MODES))
        out = f"{self.phase:<14} " + " · ".join(self.modes[m].text(m) for m in order)
        if self.ratio is not None:
            out += f"; graph/eager {self.ratio:.3f}"
        return out


@dataclass
class Speed:
    """A server's accept length and per-token time, each with where it came from (None: not
    known)."""

    accept_length: float | None = None
    accept_source: str = ""
    token_ms: float | None = None
    token_source: str = ""

    @property
    def passes_per_token(self) -> float | None:
        """Draft-extend passes per output token at batch 1: one pass a verify step, each step
        yields `accept_length` tokens of the request."""
        return 1.0 / self.accept_length if self.accept_length else None

    def to_dict(self) -> dict[str, Any]:
        return {"accept_length": self.accept_length, "accept_source": self.accept_source or None,
                "passes_per_token": self.passes_per_token, "token_ms": self.token_ms,
                "token_source": self.token_source or None}


@dataclass
class Live:
    """The figures of one engine (a process, ranks pooled, or a server) and the predictions."""

    source: str  # "run dir D, pid N" | "run dir D, 2 engine processes" | "server URL"
    phases: list[PhaseFigure]
    predictions: list[Prediction]
    speed: Speed = field(default_factory=Speed)

    @property
    def label(self) -> str:
        return f"live counters ({self.source})"

    def percent(self, p: Prediction) -> float | None:
        """The predicted per-token saving as a per cent of the server's per-token time."""
        if p.per_token_ms is None or not self.speed.token_ms:
            return None
        return 100.0 * p.per_token_ms / self.speed.token_ms

    def prediction_text(self, p: Prediction) -> str:
        text = f"{p.fix} should save {p.per_pass_ms:.3f} ms per {p.phase} pass"
        s = self.speed
        if p.per_token_ms is not None:
            text += (f", {p.per_token_ms:.3f} ms per token (1/accept length {s.accept_length:.3g}"
                     f" from {s.accept_source})")
            pct = self.percent(p)
            if pct is not None:
                text += (f", {pct:.1f} % of {s.token_ms:.3f} ms per token ({s.token_source})")
        elif s.accept_source:
            text += f" (per token: {s.accept_source})"
        return text + f" ({p.passes} passes it would change; {p.basis})"

    def lines(self) -> list[str]:
        """The text every surface prints: the label, a line per phase, a line per prediction."""
        out = [f"{self.label}:"]
        out += [f"  {ph.text()}" for ph in self.phases] or ["  no graph/eager passes counted"]
        out += [f"predicted from live counters: {self.prediction_text(p)}"
                for p in self.predictions]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "label": self.label,
                "phases": [ph.to_dict() for ph in self.phases],
                "predictions": [{**p.to_dict(), "percent_of_token": _round(self.percent(p))}
                                for p in self.predictions],
                "speed": self.speed.to_dict()}


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


# ----------------------------------------------------------------------------- from counters


def _mode(v: Any) -> ModeFigure | None:
    if not isinstance(v, dict):
        return None
    n = _count(v.get("passes"))
    s = _num(v.get("seconds")) or 0.0
    reasons = {str(k): c for k, c in (v.get("reasons") or {}).items() if _count(c)} \
        if isinstance(v.get("reasons"), dict) else {}
    return ModeFigure(n, s, reasons) if n else None


def phase_figures(counters: Any) -> list[PhaseFigure]:
    """Per phase (draft-extend, target-verify, draft-decode), per mode: passes, host ms per pass,
    eager reasons, from one engine's counters."""
    if not isinstance(counters, dict):
        return []
    secs = {"draft-extend": counters.get("draft_extend")}
    gp = counters.get("graph_phases")
    for ph in PHASES[1:]:
        secs[ph] = gp.get(ph) if isinstance(gp, dict) else None
    out = []
    for ph in PHASES:
        modes = {str(m): f for m, v in (secs[ph] or {}).items()
                 if (f := _mode(v)) is not None} if isinstance(secs[ph], dict) else {}
        if modes:
            out.append(PhaseFigure(ph, modes))
    return out


def applied_in(fixes: Any) -> set[str]:
    """The fixes a process reports `applied`."""
    return {str(f) for f, st in fixes.items() if isinstance(st, dict)
            and st.get("state") == "applied"} if isinstance(fixes, dict) else set()


def predictions(counters: Any, applied: Iterable[str] = (),
                passes_per_token: float | None = None) -> list[Prediction]:
    """`Fix.predict` of every registered fix not applied there (a prediction never raises)."""
    from diag import fixes

    if not isinstance(counters, dict):
        return []
    skip = set(applied)
    out = []
    for fid in fixes.all_ids():
        if fid in skip:
            continue
        try:
            pred = fixes.get(fid).predict(counters, passes_per_token=passes_per_token)
        except Exception:
            pred = None
        if pred is not None:
            out.append(pred)
    return out


def figures(counters: Any, source: str, applied: Iterable[str] = (),
            speed: Speed | None = None) -> Live:
    speed = speed or Speed()
    return Live(source, phase_figures(counters),
                predictions(counters, applied, speed.passes_per_token), speed)


def of_process(p: Any, run_dir: str, speed: Speed | None = None) -> Live | None:
    """An engine process of a run directory (`rundir.ProcessState`); None for any other."""
    if not getattr(p, "engine", False) or not isinstance(getattr(p, "counters", None), dict):
        return None
    return figures(p.counters, f"run dir {run_dir}, pid {p.pid}", applied_in(p.fixes), speed)


def pool(counters: Iterable[Any]) -> dict[str, Any]:
    """Several processes' `draft_extend` and `graph_phases` sections added up (ranks pooled)."""
    out: dict[str, Any] = {"draft_extend": {}, "graph_phases": {}}

    def add(dst: dict, src: Any) -> None:
        for mode, v in (src or {}).items() if isinstance(src, dict) else ():
            f = _mode(v)
            if f is None:
                continue
            d = dst.setdefault(str(mode), {"passes": 0, "seconds": 0.0})
            d["passes"] += f.passes
            d["seconds"] += f.seconds
            for r, n in f.reasons.items():
                d.setdefault("reasons", {})[r] = d.get("reasons", {}).get(r, 0) + n

    for c in counters:
        if not isinstance(c, dict):
            continue
        add(out["draft_extend"], c.get("draft_extend"))
        gp = c.get("graph_phases")
        for ph, modes in gp.items() if isinstance(gp, dict) else ():
            add(out["graph_phases"].setdefault(str(ph), {}), modes)
    return out


def of_run(state: Any, speed: Speed | None = None) -> Live | None:
    """A run directory's engine processes, pooled (one process: exactly `of_process`'s
    figures); None when none has counted a pass."""
    procs = [p for p in state.processes.values() if getattr(p, "engine", False)]
    if not procs:
        return None
    if len(procs) == 1:
        live = of_process(procs[0], state.run_dir, speed)
        return live if live and live.phases else None
    applied = set.intersection(*(applied_in(p.fixes) for p in procs))
    live = figures(pool(p.counters for p in procs),
                   f"run dir {state.run_dir}, {len(procs)} engine processes", applied, speed)
    return live if live.phases else None


# ----------------------------------------------------------------------------- from a server


def counters_from_metrics(families: list) -> dict[str, Any]:
    """diag's own series on a server's /metrics as counters of the fold's shape (totals since
    the server started, every rank summed): draft-extend passes, host seconds and eager reasons
    per mode; target-verify/draft-decode passes and seconds per mode."""
    from diag.engine.metrics import PREFIX

    de: dict[str, dict[str, Any]] = {}
    gp: dict[str, dict[str, dict[str, Any]]] = {}

    def slot(d: dict, mode: str) -> dict[str, Any]:
        return d.setdefault(mode, {"passes": 0, "seconds": 0.0})

    for fam in families or []:
        for s in fam.samples:
            n, lab, v = s.name, s.labels, float(s.value)
            if not math.isfinite(v) or v < 0:  # not a count nor seconds (NaN, +Inf, -1)
                continue
            mode = lab.get("mode", "other")
            if n in (PREFIX + "draft_extend_passes_total", PREFIX + "draft_extend_passes"):
                slot(de, mode)["passes"] += int(v)
            elif n == PREFIX + "draft_extend_seconds_sum":
                slot(de, mode)["seconds"] += v
            elif n in (PREFIX + "draft_extend_eager_passes_total",
                       PREFIX + "draft_extend_eager_passes"):
                r = slot(de, "eager").setdefault("reasons", {})
                r[lab.get("reason", "unknown")] = r.get(lab.get("reason", "unknown"), 0) + int(v)
            elif n in (PREFIX + "graph_phase_passes_total", PREFIX + "graph_phase_passes"):
                slot(gp.setdefault(lab.get("phase", "unknown"), {}), mode)["passes"] += int(v)
            elif n in (PREFIX + "graph_phase_seconds_total", PREFIX + "graph_phase_seconds"):
                slot(gp.setdefault(lab.get("phase", "unknown"), {}), mode)["seconds"] += v
    return {"draft_extend": de, "graph_phases": gp}


def token_ms(families: list) -> float | None:
    """SGLang's mean inter-token latency since the server started (sum/count), in ms."""
    s = c = 0.0
    for fam in families or []:
        for smp in fam.samples:
            if smp.name == ITL + "_sum":
                s += float(smp.value)
            elif smp.name == ITL + "_count":
                c += float(smp.value)
    ms = 1e3 * s / c if c else None
    return ms if ms is not None and math.isfinite(ms) and ms > 0 else None  # NaN, -5/-1: none


def accept_length(info: Any) -> float | None:
    """The mean of `/server_info` internal_states[].avg_spec_accept_length over ranks."""
    states = info.get("internal_states") if isinstance(info, dict) else None
    vals = [v for st in states if isinstance(st, dict)
            and (v := _num(st.get("avg_spec_accept_length"))) is not None and v > 0] \
        if isinstance(states, list) else []
    return sum(vals) / len(vals) if vals else None


def speed(url: str, info: Any = None, families: list | None = None) -> Speed:
    """Where each figure came from, named in words; what the server does not give is None."""
    sp = Speed()
    acc = accept_length(info)
    if acc is not None:
        sp.accept_length = acc
        sp.accept_source = f"/server_info internal_states avg_spec_accept_length of {url}"
    tok = token_ms(families)
    if tok is not None:
        sp.token_ms = tok
        sp.token_source = f"{ITL} sum/count on {url}/metrics"
    return sp


def applied_on_server(families: list) -> set[str]:
    """Fixes `diag_fix_state` says are applied in every live process of the server that
    reports them (none reports another state)."""
    from diag.engine.metrics import PREFIX

    states: dict[str, dict[str, float]] = {}
    for fam in families or []:
        for s in fam.samples:
            if s.name == PREFIX + "fix_state" and s.labels.get("fix") and s.value:
                st = states.setdefault(s.labels["fix"], {})
                st[s.labels.get("state", "")] = st.get(s.labels.get("state", ""), 0) + s.value
    return {f for f, st in states.items() if set(st) == {"applied"}}


def read_server(url: str, timeout: float = 5.0, info: Any = None
                ) -> tuple[Speed, dict[str, Any], set[str]]:
    """(Speed, counters from diag_* series, fixes applied there) of a live server; raises
    ServerError when /metrics cannot be read (an unreadable /server_info leaves the accept
    length unknown)."""
    from diag import server
    from diag.errors import ServerError

    if info is None:
        try:
            info = server.get_server_info(url, timeout)
        except ServerError:
            info = None
    fams = server.get_metrics(url, timeout)
    return speed(url, info, fams), counters_from_metrics(fams), applied_on_server(fams)


def of_server(url: str, timeout: float = 5.0, info: Any = None) -> Live | None:
    """The server's own figures (diag_* series: `diag run --probe` under --enable-metrics);
    None when it counted no pass."""
    sp, counters, applied = read_server(url, timeout, info)
    live = figures(counters, f"server {url}", applied, sp)
    return live if live.phases else None


def of_families(url: str, families: list, info: Any = None) -> Live | None:
    """As `of_server`, from /metrics already read (the TUI's poll)."""
    live = figures(counters_from_metrics(families), f"server {url}",
                   applied_on_server(families), speed(url, info, families))
    return live if live.phases else None


def server_speed(url: str, timeout: float = 5.0, info: Any = None) -> tuple[Speed, list[str]]:
    """(Speed, what could not be read) of a server: never raises; an unreadable endpoint leaves
    its figure unknown and is named."""
    from diag import server
    from diag.errors import ServerError

    problems = []
    if info is None:
        try:
            info = server.get_server_info(url, timeout)
        except ServerError as e:
            problems.append(str(e))
    try:
        fams = server.get_metrics(url, timeout)
    except ServerError as e:
        fams = None
        problems.append(str(e))
    return speed(url, info, fams), problems
