"""The engine and server views: the run directory and a live server as sources (their state,
the engine's processes and fix requests), the series the charts plot.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from diag.errors import DiagError
from diag.tui.data.timings import _UNITS

# ---------------------------------------------------------------- sources: run dir, server


@dataclass
class SourceState:
    name: str  # "run dir DIR" | "server URL"
    ok: bool | None  # None: not configured / not yet read
    text: str


def request_engine_fix(run_dir: str, fix_id: str, action: str) -> str:
    """Ask the engine's agents (through the run directory) to apply/revert a fix; the request id.

    Refuses at once (DiagError) when no engine process of the run is alive, as `diag fix` does:
    nobody would ever acknowledge the request."""
    from diag.engine import rundir

    d = rundir.check_run_dir(run_dir)
    if not rundir.read_state(d).live:
        raise DiagError(f"no live engine process in {d} (is the engine running under diag run?)")
    return rundir.request(d, fix_id, action, wait=False)  # the TUI reads the acks as they come


def request_acks(state: Any, request_id: str) -> str | None:
    """The acknowledgements of one control request so far, as one line (None: none yet)."""
    got = []
    waiting = 0
    for p in state.processes.values():
        ack = p.acks.get(request_id)
        if ack is not None:
            got.append(f"pid {p.pid} {'ok' if ack.get('ok') else 'REFUSED'} → {ack.get('state')}"
                       + (f" ({ack['reason']})" if ack.get("reason") else ""))
        elif p.alive:
            waiting += 1
    if not got:
        return None
    return "; ".join(got) + (f"; waiting for {waiting} more" if waiting else "")


def discover_run_dirs() -> list[str]:
    """Run directories of live engines started under `diag run` (process scan + registry)."""
    from diag.engine import rundir

    return [str(p) for p in rundir.discover()]


class RunDirReader:
    """The TUI's view of a run directory: `rundir.RunReader` (the one reader: each poll reads
    only what the event files gained) and the typed events kept so far. Raises DiagError on an
    unsafe/missing dir."""

    MAX_EVENTS = 50_000

    def __init__(self, run_dir: str) -> None:
        from diag.engine import rundir

        self.run_dir = run_dir
        self.reader = rundir.RunReader(run_dir)
        self.events: deque[Any] = deque(maxlen=self.MAX_EVENTS)

    def poll(self) -> tuple[Any, list[Any]]:
        """(RunState, the typed events new since the last poll)."""
        state, new = self.reader.poll()
        self.events.extend(new)
        return state, new


def lost_suffix(state: Any) -> str:
    """`, 17 events lost` across the run's processes (the header says it), what could not be
    read, and where a replaced directory's engine went; or ""."""
    n = sum(int(((p.counters or {}).get("lost") or {}).get("events") or 0)
            for p in state.processes.values())
    bad = sum(sum((getattr(p, "problems", None) or {}).values())
              for p in state.processes.values())
    moved = getattr(state, "moved_to", None) or []
    return (f", {n} events lost" if n else "") + \
        (f", {bad} read problems (diag fix status)" if bad else "") + \
        (f", replaced under a live engine: now {moved[0]}" if moved else "")


def engine_fix_states(state: Any) -> dict[str, str]:
    """Each fix's state across the engine's processes, e.g. 'applied ×2, refused ×1 (why)'."""
    per: dict[str, dict[str, int]] = {}
    why: dict[str, str] = {}
    for p in state.processes.values():
        if not p.alive:
            continue
        for fid, st in p.fixes.items():
            s = str(st.get("state"))
            per.setdefault(fid, {})
            per[fid][s] = per[fid].get(s, 0) + 1
            if st.get("reason") and s not in ("applied", "reverted"):
                why[fid] = st["reason"]
    out = {}
    for fid, c in per.items():
        text = ", ".join(f"{s} ×{n}" for s, n in sorted(c.items()))
        out[fid] = f"engine: {text}" + (f" ({why[fid]})" if fid in why else "")
    return out


def engine_acks(state: Any) -> dict[str, str]:
    """The newest control acknowledgement per fix, as one line."""
    latest: dict[str, dict[str, Any]] = {}

    def ts(ack: dict[str, Any]) -> float:  # an ack's time as written may be of any type
        t = ack.get("ts")
        try:
            t = float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else 0.0
        except OverflowError:
            return 0.0
        return t if math.isfinite(t) else 0.0

    for p in state.processes.values():
        for ack in p.acks.values():
            fid = ack.get("fix")
            if isinstance(fid, str) and fid and ts(ack) >= ts(latest.get(fid, {})):
                latest[fid] = ack
    return {fid: (f"ack pid {a.get('pid')}: {a.get('action')} "
                  f"{'ok' if a.get('ok') else 'FAILED'} → {a.get('state')}"
                  + (f" ({a['reason']})" if a.get("reason") else ""))
            for fid, a in latest.items()}


@dataclass
class ProcessView:
    """One engine process of a run directory, as the engine pane shows it."""

    pid: int
    alive: bool
    sglang: str
    fixes: str  # "fix=state, ..."
    last: str  # the newest event's kind
    last_ts: float | None
    errors: int
    error: str  # the newest agent error, "where: message"
    lost: str = ""  # "events lost since 12:03:04: 17 (ENOSPC ...)", "" when none
    died: str = ""  # how it died, from its last words (diag.engine.last_words), "" when unknown
    rank: str | None = None  # a scheduler's ranks as SGLang names them ("TP1"; "" single-rank)
    stopped: bool = False  # alive but stopped (SIGSTOP, a tracer): answers nothing until continued


def engine_processes(state: Any, events: list[Any] | None = None) -> list[ProcessView]:
    """Every process of the run (live first): its fixes, newest event and agent errors.

    The agent's errors are the events its `Aggregator` counts under `errors`; the newest one's
    text is the last event that carries `where` and `message` (the error event's fields), from
    `events` (all kept so far) or else the process's last events."""
    from diag import events as ev_types

    errors: dict[Any, str] = {}
    for ev in events or []:
        e = ev if isinstance(ev, ev_types.Event) else ev_types.parse(ev)
        if isinstance(e, ev_types.Error):
            errors[e.pid] = f"{e.where}: {e.message}"
    from diag.engine import last_words

    died = last_words.deaths(state)  # the reading `diag fix status` shows
    out = []
    for p in state.processes.values():
        fixes = ", ".join(f"{fid}={(st or {}).get('state')}" for fid, st in sorted(p.fixes.items()))
        last = p.last_events[-1] if p.last_events else {}
        err = errors.get(p.pid, "")
        for ev in reversed(p.last_events if not err else []):
            if "where" in ev and "message" in ev:
                err = f"{ev['where']}: {ev['message']}"
                break
        from diag.engine.events import lost_text

        out.append(ProcessView(p.pid, p.alive, p.sglang or "?", fixes or "none",
                               str(last.get("kind", "-")), last.get("ts"),
                               int((p.counters or {}).get("errors", 0)), err,
                               lost_text(p.counters or {}),
                               died[p.pid].summary if p.pid in died else "",
                               getattr(p, "rank", None), bool(getattr(p, "stopped", False))))
    out.sort(key=lambda v: (not v.alive, v.rank or "", v.pid))
    return out


def read_server(url: str, timeout: float = 2.0) -> dict[str, float]:
    """The few SGLang series the TUI charts, from the server's /metrics (raises on failure);
    histograms as their mean since the server started (`ServerReader` gives recent means)."""
    from diag import server

    got = server.get_metrics(url, timeout)
    return metric_values(got)


class ServerReader:
    """Reads the charted series on each poll; a histogram's value is its mean over the interval
    since the previous poll (the increase of _sum over the increase of _count, as PromQL's
    `increase(x_sum) / increase(x_count)`), so a fix applied mid-run shows in the next point.
    diag's own counters (`diag_*`, recorded by the agent into SGLang's multiprocess /metrics)
    are read the same way: syncs per metadata build (in total and per builder) and draft-extend
    passes by mode over the interval; `diag_fix_state` gives each fix's processes per state.

    The first read (and one after a server restart, when the counts go down) gives the totals
    since the server started; an interval with no new observations gives no point for it.
    """

    def __init__(self, url: str, timeout: float = 2.0) -> None:
        self.url, self.timeout = url, timeout
        self._last: dict[str, tuple[float, float]] = {}  # label → (sum, count) at the last read
        self.fix_states: dict[str, dict[str, float]] = {}  # fix → {state: live processes}
        self.builders: dict[str, float] = {}  # builder → syncs per build over the last interval
        self.families: list | None = None  # the last /metrics read, parsed

    def read(self) -> dict[str, float]:
        from diag import server

        self.families = server.get_metrics(self.url, self.timeout)
        return self.values(self.families)

    def _increase(self, key: str, s: float, c: float) -> tuple[float, float] | None:
        ps, pc = self._last.get(key, (0.0, 0.0))
        self._last[key] = (s, c)
        if c < pc:
            ps, pc = 0.0, 0.0  # the server restarted: its counters started over
        return (s - ps, c - pc) if c > pc else None

    def values(self, got: Any) -> dict[str, float]:
        if isinstance(got, str):
            from prometheus_client.parser import text_string_to_metric_families

            got = list(text_string_to_metric_families(got))
        out, sums, counts = _series(got)
        for label, c in counts.items():
            d = self._increase(label, sums.get(label, 0.0), c)
            if d:
                out[label] = d[0] / d[1]
        ds = diag_series(got)
        self.fix_states = ds.fix_states
        syncs = builds = 0.0
        self.builders = {}
        for b, (n_syncs, n_builds) in sorted(ds.builders.items()):
            d = self._increase(f"builder {b}", n_syncs, n_builds)
            if d:
                self.builders[b] = d[0] / d[1]
                syncs, builds = syncs + d[0], builds + d[1]
        if builds:
            out[SYNCS_PER_BUILD] = syncs / builds
        for mode, n in sorted(ds.passes.items()):
            d = self._increase(f"passes {mode}", n, n)
            if d:
                out[f"{DE_PASSES}, {mode}"] = d[0]
        return out


SYNCS_PER_BUILD = "syncs per metadata build"
DE_PASSES = "draft-extend passes"


@dataclass
class DiagSeries:
    """diag's own series on a server's /metrics (names: `diag.engine.metrics.SERIES`)."""

    builders: dict[str, tuple[float, float]] = field(default_factory=dict)  # (syncs, builds)
    passes: dict[str, float] = field(default_factory=dict)  # mode → passes
    fix_states: dict[str, dict[str, float]] = field(default_factory=dict)


def diag_series(families: list) -> DiagSeries:
    """The `diag_*` samples of parsed /metrics families (totals since the server started)."""
    from diag.engine.metrics import PREFIX

    def name(series: str) -> tuple[str, ...]:
        return (PREFIX + series, PREFIX + series + "_total")

    syncs, builds = name("metadata_syncs"), name("metadata_builds")
    passes, state = name("draft_extend_passes"), name("fix_state")
    out = DiagSeries()
    for fam in families or []:
        for smp in fam.samples:
            n, lab, v = smp.name, smp.labels, float(smp.value)
            if n in syncs or n in builds:
                b = lab.get("builder", "?")
                s0, c0 = out.builders.get(b, (0.0, 0.0))
                out.builders[b] = (s0 + v, c0) if n in syncs else (s0, c0 + v)
            elif n in passes:
                m = lab.get("mode", "other")
                out.passes[m] = out.passes.get(m, 0.0) + v
            elif n in state and lab.get("fix") and v:
                st = out.fix_states.setdefault(lab["fix"], {})
                st[lab.get("state", "other")] = st.get(lab.get("state", "other"), 0.0) + v
    return out


def server_fix_states(states: dict[str, dict[str, float]]) -> dict[str, str]:
    """'server: applied ×3, refused ×1' per fix, from `diag_fix_state` (live processes)."""
    return {fid: "server: " + ", ".join(f"{s} ×{n:g}" for s, n in sorted(st.items()))
            for fid, st in states.items() if st}


# SGLang's /metrics names → the TUI's labels; histograms read as sum/count. In sglang 0.5.23
# srt/observability/metrics_collector.py: :2051, :2058 (from 0.5.22), :512, :1849 (from 0.5.17);
# `sglang:time_per_output_token_seconds` is in none of 0.5.9 - 0.5.23.
SERVER_SERIES = {
    "sglang:inter_token_latency_seconds": ("inter-token latency", "s"),
    "sglang:request_time_per_output_token_seconds": ("time per output token", "s"),
    "sglang:time_per_output_token_seconds": ("time per output token", "s"),
    "sglang:spec_accept_length": ("accept length", "tokens"),
    "sglang:startup_cuda_graph_time_seconds": ("draft-extend capture time", "s"),
}


def series_unit(label: str) -> str:
    """The unit of a charted series (its values and its chart title use the same one)."""
    for lab, unit in SERVER_SERIES.values():
        if lab == label:
            return unit
    if label in _UNITS:
        return _UNITS[label]
    if label == SYNCS_PER_BUILD or label.startswith("syncs"):
        return "syncs"
    if label.startswith(DE_PASSES):
        return "passes"
    return "s" if label.endswith(("(s)", "step", "time", "latency")) else ""


def metric_values(got: Any) -> dict[str, float]:
    """Prometheus text, parsed families, or a name→value dict → {label: value}.

    Histograms give the mean (sum/count, cumulative); the capture time is the sample with
    phase="draft_extend".
    """
    out, sums, counts = _series(got)
    for label, c in counts.items():
        if c:
            out[label] = sums.get(label, 0.0) / c
    return out


def _series(got: Any) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """(plain values, histogram _sum per label, histogram _count per label)."""
    if isinstance(got, str):
        from prometheus_client.parser import text_string_to_metric_families

        got = list(text_string_to_metric_families(got))
    out: dict[str, float] = {}
    if isinstance(got, dict):
        for name, val in got.items():
            base = name.split("{")[0]
            if base in SERVER_SERIES and isinstance(val, (int, float)):
                if base.endswith("startup_cuda_graph_time_seconds") and "draft_extend" not in name:
                    continue
                out[SERVER_SERIES[base][0]] = float(val)
        return out, {}, {}
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for fam in got or []:
        for s in fam.samples:
            name, labels, value = s.name, s.labels, s.value
            for base, (label, _unit) in SERVER_SERIES.items():
                if name in (base, base + "_sum", base + "_count"):
                    if base.endswith("startup_cuda_graph_time_seconds"):
                        if labels.get("phase") == "draft_extend" and name == base:
                            out[label] = value
                    elif name.endswith("_sum"):
                        sums[label] = sums.get(label, 0.0) + value
                    elif name.endswith("_count"):
                        counts[label] = counts.get(label, 0.0) + value
                    elif name == base:
                        out[label] = value
    return out, sums, counts
