"""The TUI's data layer: every read of probes, fixes, benches, run directories and servers.

Headless (no textual import): the app's workers call these functions and the handlers render
what they return. Whatever cannot be read comes back as `NA` or as a `SourceState` that says
why, never as an exception (nvitop's `NA`): an unreachable server is a fact on screen.
Other packages' APIs (`diag.engine.rundir`, `diag.server`, the probes, the fixes) are called only
here, so a change in them touches this one module.
"""

from __future__ import annotations

import json
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from diag.bench import BenchResult, Row, Stats
from diag.errors import DiagError
from diag.findings import Finding, Status


class _NotApplicable(str):
    """What cannot be read: renders as 'n/a' and is falsy (test it with `is NA`: as a str it
    also equals "n/a")."""

    def __new__(cls) -> _NotApplicable:
        return super().__new__(cls, "n/a")

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "NA"


NA: Any = _NotApplicable()

# Expected failures: their message is already one readable line.
DiagErrorTypes = (DiagError,)

def concern(probe_id: str) -> str:
    """The problem a probe watches (its declaration), shown before it has run."""
    from diag.probes import spec

    try:
        return spec(probe_id).concern
    except Exception:
        return ""


def fix_of_probe(probe_id: str) -> str | None:
    """The first fix a probe declares as addressing it (None: none)."""
    from diag.probes import spec

    try:
        fixes = spec(probe_id).fixes
    except Exception:
        return None
    return fixes[0] if fixes else None


def short_error(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


# ---------------------------------------------------------------- header: target, platform, GPU


@dataclass
class Header:
    target: str = "resolving…"
    version: Any = NA
    platform: Any = NA
    gpu: Any = NA
    error: str | None = None
    sources: dict[str, str] = field(default_factory=dict)  # release | platform | config → from


def gpu_text() -> str:
    """The local GPU(s) as torch sees them (imports torch: call from a worker)."""
    from diag.gpu_platform import torch_info

    info = torch_info()
    if not info.present:
        return f"no torch ({info.error})" if info.error else "no torch"
    if info.devices:
        return f"{', '.join(info.devices)} (torch {info.version}, {info.runtime})"
    return f"none (torch {info.version}, CPU)"


def resolve_context(sglang: str | None, platform: str | None, run_dir: str | None,
                    server_url: str | None, execute: bool, log: Callable[[str], None],
                    config: dict[str, Any] | None = None):
    """(Context, Header) for the target; raises DiagError when the target cannot be had.

    `config` holds the configuration options `diag diagnose` takes (attention_backend,
    speculative_num_steps, speculative_algorithm). With a run directory and/or a server, what
    the options do not give is the engine's own (`diag.engine.facts`, as `diag fix list`)."""
    from diag.context import Context, SpecConfig
    from diag.target import resolve

    cfg = SpecConfig(**{k: v for k, v in (config or {}).items() if v is not None})
    info, server_error = None, None
    if server_url:
        from diag import server
        from diag.errors import ServerError

        try:
            info = server.get_server_info(server_url, timeout=2.0)
        except ServerError as e:  # unreachable: the probes say so; the header shows the state
            server_error = str(e)
    sources: dict[str, str] = {}
    if run_dir or info is not None:
        from diag.engine.facts import resolve as engine_facts

        res = engine_facts(sglang, platform, cfg, run_dir, info, server_url)
        sglang, platform, sources = res.sglang, res.platform, res.sources
    try:
        tgt = resolve(sglang, log=log)
    except DiagError as e:
        if sglang is None or sources.get("release", "--sglang") == "--sglang":
            raise
        sources["release"] = f"{sources['release']}, not available here ({e}): the default"
        tgt = resolve(None, log=log)
    if platform is None:
        from diag.gpu_platform import default_platform

        platform = default_platform()
        if run_dir or server_url:
            sources["platform"] = "this machine's torch (the engine recorded none)"
    ctx = Context(target=tgt, platform=platform, config=cfg, server_url=server_url,
                  run_dir=run_dir, execute=execute, log=log)
    ctx.cache["sources"] = sources
    if info is not None:
        ctx.cache["server_info"] = info
    if server_error:
        ctx.cache["server_error"] = server_error
    elif server_url:  # the configuration from /server_info, as `diag diagnose --server` takes it
        from diag import server
        from diag.errors import ServerError

        try:
            server.attach(ctx, timeout=2.0)
        except ServerError as e:
            ctx.cache["server_error"] = str(e)
    head = Header(target=f"sglang {tgt.version or '?'} [{tgt.origin}]", version=tgt.version or NA,
                  platform=platform, sources=sources)
    return ctx, head


def live_figures(state: Any, server_url: str | None, families: list | None,
                 info: Any = None) -> Any:
    """The engine's live figures (`diag.engine.live`, what `diag fix status` prints): a run
    directory's engine processes pooled, with the server's accept length and per-token time
    when there is a server too; else the server's own diag_* series; None when none counted."""
    from diag.engine import live

    speed = live.speed(server_url, info, families) if server_url else None
    if state is not None:
        return live.of_run(state, speed)
    if server_url and families is not None:
        return live.of_families(server_url, families, info)
    return None


# ---------------------------------------------------------------- findings


@dataclass
class FindingView:
    probe: str
    state: str  # "pending" | "running" | a Status value
    title: str
    summary: str
    detail: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    finding: Finding | None = None


def pending_findings(probe_ids: list[str]) -> list[FindingView]:
    return [FindingView(p, "pending", p, concern(p)) for p in probe_ids]


def probe_ids() -> list[str]:
    from diag.probes import all_ids

    return all_ids()


def run_probe(ctx, probe_id: str) -> list[Finding]:
    """The probe's findings; a probe that cannot load or crashes becomes an `error` finding."""
    from diag.probes.base import run_probe as _run

    try:
        from diag.probes import get

        probe = get(probe_id)
    except Exception as e:
        return [Finding(probe_id, Status.ERROR, probe_id, f"probe not available: {short_error(e)}")]
    found = _run(probe, ctx)
    try:  # the fixes a finding names: the same resolution as `diag diagnose` and `fix list`
        from diag.fixes.advice import advise, resolve

        return advise(found, resolve(ctx))
    except Exception as e:  # never name a fix that was not resolved here
        for f in found:
            f.fixes = []
            f.hint = f"{f.hint + '; ' if f.hint else ''}fix advice unavailable: {short_error(e)}"
        return found


def finding_view(f: Finding) -> FindingView:
    detail = [e.short() for e in f.evidence if e.short()]
    if f.hint:
        detail.append(f"hint: {f.hint}")
    if f.fixes:
        detail.append(f"fix: {', '.join(f.fixes)}")
    return FindingView(f.probe, f.status.value, f.title, f.summary, detail, list(f.fixes), f)


# ---------------------------------------------------------------- fixes


@dataclass
class FixView:
    id: str
    title: str
    applicability: Any = NA  # applicable | upstream | not-needed | refused
    reason: str = ""
    state: Any = NA  # "applied" | "not applied" | "applied (pending import)" | engine states
    revertible: bool = True
    bench: str | None = None
    ack: str = ""


def fix_ids() -> list[str]:
    from diag.fixes import all_ids

    return all_ids()


def get_fix(fix_id: str):
    from diag import fixes

    return fixes.get(fix_id)


def applicability(fix, ctx) -> tuple[str, str]:
    """(status, reason) of a fix for the TUI's target, platform and configuration: the one lookup
    every tab and `a` use — the orchestrator's, as `diag fix list` and `diag diagnose` answer."""
    if ctx is None:
        return NA, ""
    try:
        from diag import fixes
        from diag.fixes import orchestrator

        if fix.id in fixes.REGISTRY and fixes.get(fix.id) is fix:
            a = orchestrator.judge(fix.id, ctx.target, ctx.platform, ctx.config)
        else:  # a fix handed to the TUI directly (not registered): its own answer
            a = fix.applies_to(ctx.target, ctx.platform, ctx.config)
        return a.status, a.reason
    except Exception as e:
        return "error", short_error(e)


def fix_view(fix, ctx=None) -> FixView:
    v = FixView(fix.id, getattr(fix, "title", fix.id), revertible=getattr(fix, "revertible", True),
                bench=getattr(fix, "bench", None))
    v.applicability, v.reason = applicability(fix, ctx)
    v.state = fix_state(fix)
    return v


def fix_state(fix) -> Any:
    """The fix's state in this process, from its one source (`Fix.state()`)."""
    try:
        st = fix.state()
    except Exception:
        return NA
    return {"applied": "applied", "pending": "applied (pending import)",
            "not-applied": "not applied"}.get(st.state, st.state)


def refusal(fix, ctx) -> str | None:
    """Why `a` must not apply this fix here (None: it may): only an `applicable` fix is applied."""
    status, reason = applicability(fix, ctx)
    if status == "applicable":
        return None
    return f"not applied: {fix.id} is {status}" + (f" ({reason})" if reason else "")


def apply_fix(fix, ctx=None) -> str:
    """Apply in this process; the acknowledgement text (raises DiagError/FixError on refusal).

    A fix that is not `applicable` to the target is refused with its reason. A fix that needs the
    target's source to choose what to patch (`fix.target`) gets the TUI's.
    """
    why = refusal(fix, ctx) if ctx is not None else None
    if why:
        raise DiagError(why)
    if ctx is not None and getattr(fix, "target", False) is None:
        fix.target = ctx.target
    fix.apply()
    return f"applied in this process: {fix_state(fix)}"


def revert_fix(fix) -> str:
    if not getattr(fix, "revertible", True):
        return f"{fix.id} is not revertible"
    fix.revert()
    return f"reverted in this process: {fix_state(fix)}"


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
    for p in state.processes.values():
        for ack in p.acks.values():
            fid = ack.get("fix")
            if fid and ack.get("ts", 0) >= latest.get(fid, {}).get("ts", 0):
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


# ---------------------------------------------------------------- timings and syncs


@dataclass
class TimingRow:
    fix: str
    metric: str
    unit: str
    before: Stats | None
    after: Stats | None
    source: str
    note: str = ""
    expected: str = ""  # why a worse ratio is expected (the bench row's declaration)
    notes: list[str] = field(default_factory=list)  # the bench's own notes (caveats, the code run)
    release: str = ""  # the SGLang release the bench ran
    age: float | None = None  # seconds since a live value was read (None: not live)

    ratio = Row.ratio  # after/before of the medians, exactly as `diag bench` reports it


@dataclass
class SyncRow:
    builder: str
    location: str
    before: Any = NA  # syncs per call without the fix
    after: Any = NA  # with it
    source: str = ""


def bench_release(res: BenchResult) -> str:
    """The SGLang release a bench ran (its `sglang` parameter), '' when it names none."""
    v = res.params.get("sglang")
    return str(v) if v else ""


def bench_rows(res: BenchResult) -> list[TimingRow]:
    rel = bench_release(res)
    src = f"synthetic bench, sglang {rel}" if rel else "synthetic bench"
    if res.skipped:
        return [TimingRow(res.id, f"not run: {res.skipped}", "", None, None, src,
                          notes=list(res.notes), release=rel)]
    return [TimingRow(res.id, r.metric, r.unit, r.before, r.after, src, r.note or "",
                      getattr(r, "expected", None) or "", list(res.notes), rel)
            for r in res.rows]


def _stats(xs: list[float]) -> Stats | None:
    return Stats.of(xs) if xs else None


_UNITS: dict[str, str] = {}  # chart series from the run directory → unit


def _counted_kinds() -> dict[str, tuple[str, str | None]]:
    """Event kind → (the probe's title, the fix that addresses it), from the probes' runtime
    counter declarations (`Probe.counter.events`, `Probe.fixes`)."""
    from diag.probes import specs

    out: dict[str, tuple[str, str | None]] = {}
    for sp in specs():
        if sp.counter is not None:
            for kind in sp.counter.events:
                out[kind] = (sp.title, sp.fixes[0] if sp.fixes else None)
    return out


def engine_view(events: list[dict[str, Any]]) -> tuple[list[TimingRow], list[SyncRow],
                                                       dict[str, list[float]]]:
    """From a run directory's events: per counted event kind (the probes' declarations), its
    count and its seconds split by the state of the probe's fix in that process at the time
    of the event (before = off, after = on), and by `mode` where the events carry one; sync rows
    per builder; chart series.

    A fix's state in a process is the last event naming it (start, fix, control_ack, snapshot),
    folded by `diag.engine.events.replay`."""
    from diag.engine import events as ev_types

    kinds = _counted_kinds()
    counts: dict[str, dict[bool, list[float]]] = {}
    secs: dict[str, dict[bool, list[float]]] = {}
    modes: dict[str, dict[str, list[float]]] = {}
    builders: dict[str, dict[bool, list[float]]] = {}
    sampled: dict[str, int] = {}  # builder -> calls whose syncs are sampled (scaled)
    series: dict[str, list[float]] = {}
    labels: dict[str, tuple[str, str]] = {}  # key -> (row label, name)
    # the one fold of fix states (diag.engine.events.replay): fixed = a fix addressing the
    # probe whose counter emits the kind was applied in that process at that moment
    for ev, fixed in ev_types.replay(events):
        e, kind = ev.raw or ev.to_dict(), ev.name  # as written (absent keys stay absent)
        if kind not in kinds:
            continue
        # a counter that folds its passes in the engine says how many one event holds
        # (`passes`, `calls`): its values are per pass, each pass weighing one
        n_in = max(1, min(int(_num_or(e.get("passes"), _num_or(e.get("calls"), 1))), 1000))
        phase = e.get("phase")
        key = f"{kind}:{phase}" if phase else str(kind)
        name = str(kind).replace("_", "-") + (f" {phase}" if phase else "")
        labels[key] = (kinds[kind][1] or "(engine)", name)
        if e.get("count") is not None:
            n = float(e["count"]) / n_in
            counts.setdefault(key, {False: [], True: []})[fixed].extend([n] * n_in)
            series.setdefault(f"{name} per call", []).append(n)
            _UNITS[f"{name} per call"] = str(kind)
            if e.get("builder") is not None:
                builders.setdefault(str(e["builder"]), {False: [], True: []})[fixed].extend(
                    [n] * n_in)
                if e.get("sampled"):  # scaled from the stable count, not counted one by one
                    sampled[str(e["builder"])] = sampled.get(str(e["builder"]), 0) + n_in
        if e.get("seconds") is not None:
            t = float(e["seconds"]) / n_in
            secs.setdefault(key, {False: [], True: []})[fixed].extend([t] * n_in)
            series.setdefault(f"{name} time", []).append(t)
            _UNITS[f"{name} time"] = "s"
            if e.get("mode") is not None:
                modes.setdefault(key, {}).setdefault(str(e["mode"]), []).extend([t] * n_in)
    rows: list[TimingRow] = []
    for key, (label, name) in labels.items():
        kind = key.split(":", 1)[0]
        if key in counts:
            c = counts[key]
            rows.append(TimingRow(label, f"{name} per call", kind,
                                  _stats(c[False]), _stats(c[True]), "run dir"))
        if key in secs:
            t = secs[key]
            rows.append(TimingRow(label, f"{name} time", "s", _stats(t[False]),
                                  _stats(t[True]), "run dir"))
        if len(modes.get(key, {})) >= 1:
            m = modes[key]
            names = sorted(m)
            first, last = names[0], names[-1]
            note = ", ".join(f"{len(m[k])} {k}" for k in names)
            if len(names) > 1:
                rows.append(TimingRow(label, f"{name} time, {first} → {last}", "s",
                                      _stats(m[first]), _stats(m[last]), "run dir", note))
    srows = [SyncRow(b, "", _median(v[False]), _median(v[True]),
                     f"run dir, {sampled[b]} calls sampled" if sampled.get(b) else "run dir")
             for b, v in sorted(builders.items())]
    return rows, srows, series


def _num_or(value: Any, default: float) -> float:
    try:
        return float(value) if value is not None else default
    except (TypeError, ValueError):
        return default


def _median(xs: list[float]) -> Any:
    return Stats.of(xs).median if xs else NA


def finding_sync_rows(findings: list[Finding]) -> list[SyncRow]:
    """Per-builder syncs from the findings' sync evidence, read from evidence `data` (never
    `detail`): measured counts first (`metric` with data.source `cpu-counter`/`gpu-sync-debug`),
    then the static census's sites grouped per builder (`location` with data.source `static`),
    those on the path under audit (data.reach `reaches`) before others."""
    measured: list[SyncRow] = []
    census: dict[str, SyncRow] = {}
    sites: dict[str, int] = {}
    for f in findings:  # any probe's sync evidence: the rows come from evidence fields alone
        for e in f.evidence:
            d = e.data or {}
            if e.kind == "metric" and d.get("builder") and d.get("source") != "static":
                loc = f"{d['file']}:{d['line']}" if d.get("file") and d.get("line") else \
                    str(d.get("file") or "")
                how = {"cpu-counter": "cpu", "gpu-sync-debug": "gpu"}.get(
                    str(d.get("source")), str(d.get("source", "measured")))
                # "method (path)": the shape the bench join (tui/model.py) matches on
                name = f"{str(d['builder']).rsplit('.', 1)[-1]} ({d.get('path', '?')})"
                measured.append(SyncRow(name, loc, d.get("syncs", NA), NA, f"measured ({how})"))
            elif e.kind == "location" and d.get("source") == "static" and d.get("builder"):
                fn = str(d["builder"])
                # a capture-only or unreachable site is listed, never counted per call
                n = d.get("syncs", NA) if d.get("status", "live") in ("live", "cannot-tell") \
                    else 0
                where = "DE path" if d.get("reach") == "reaches" else str(d.get("reach", "other"))
                row = census.get(fn)
                if row is None:
                    loc = f"{e.file}:{e.line}" if e.line else str(e.file)
                    census[fn] = SyncRow(fn, loc, n, NA, f"static, {where}")
                    sites[fn] = 1
                else:
                    sites[fn] += 1
                    row.before = row.before + n if row.before is not NA and n is not NA else NA
                    if where == "DE path":
                        row.source = "static, DE path"
            elif e.kind == "row" and d.get("builder"):
                measured.append(SyncRow(str(d["builder"]), str(d.get("location", "")),
                                        d.get("before", d.get("syncs", NA)), d.get("after", NA),
                                        "probe"))
    for fn, row in census.items():
        if sites[fn] > 1:
            row.location += f" (+{sites[fn] - 1})"
    ordered = sorted(census.values(), key=lambda r: not r.source.endswith("DE path"))
    return measured + ordered


@dataclass
class PhaseRow:
    """Syncs per speculative step of one phase for the configuration under audit (static)."""

    phase: str  # target-extend | draft-extend | target-verify | draft-decode
    syncs_per_step: Any = NA
    syncs_per_run: Any = NA
    runs_per_step: Any = NA
    sites: Any = NA
    cannot_tell: Any = NA
    source: str = "static"
    exact: Any = NA  # True: every site decided for the configuration; False: an upper bound


def finding_phase_rows(findings: list[Finding]) -> list[PhaseRow]:
    """The per-phase totals from evidence `data` (`phase`, `syncs_per_step`, ...), in the
    order the probe gives them; a runtime source (the engine's /metrics) would add its own."""
    out: list[PhaseRow] = []
    for f in findings:
        for e in f.evidence:
            d = e.data or {}
            if e.kind == "metric" and d.get("phase") and "syncs_per_step" in d:
                out.append(PhaseRow(str(d["phase"]), d["syncs_per_step"],
                                    d.get("syncs_per_run", NA), d.get("runs_per_step", NA),
                                    d.get("sites", NA), d.get("cannot_tell", NA),
                                    str(d.get("source", "static")), d.get("exact", NA)))
    return out


def phase_line(rows: list[PhaseRow]) -> str:
    """One line for the Syncs tab: `per step (static): draft-extend 2 · draft-decode 0×2 ...`."""
    parts = []
    for r in rows:
        n = fmt_value(r.syncs_per_step)
        if r.phase == "draft-decode":
            n = f"{fmt_value(r.syncs_per_run)}×{fmt_value(r.runs_per_step)}"
        unsure = f" (+{r.cannot_tell}?)" if isinstance(r.cannot_tell, int) and r.cannot_tell \
            else ""
        bound = "≤" if r.exact is False else ""  # the probe's word: exact or an upper bound
        parts.append(f"{r.phase} {bound}{n}{unsure}")
    src = rows[0].source if rows else "static"
    return f"syncs per step ({src}): " + " · ".join(parts)


def bench_sync_rows(results: list[BenchResult]) -> list[SyncRow]:
    out = []
    for res in results:
        for r in res.rows:
            if r.unit == "syncs":
                out.append(SyncRow(f"{res.title}: {r.metric}", "",
                                   r.before.median if r.before else NA,
                                   r.after.median if r.after else NA, f"bench {res.id}"))
    return out


# ---------------------------------------------------------------- formatting


def sig(v: float, digits: int = 3) -> str:
    """`v` to `digits` significant digits in plain notation (never `1.1e+02`)."""
    if v == 0 or not math.isfinite(v):
        return "0" if v == 0 else str(v)
    places = max(0, digits - 1 - math.floor(math.log10(abs(v))))
    text = f"{round(v, places):.{places}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


_TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))


def time_unit(s: float) -> tuple[str, float]:
    """The readable unit for a time in seconds, and its scale."""
    a = abs(s)
    for name, scale in _TIME_UNITS:
        if a >= scale:
            return name, scale
    return _TIME_UNITS[-1]


def fmt_time(s: float) -> str:
    unit, scale = time_unit(s)
    return f"{sig(s / scale)} {unit}"


def fmt_value(v: Any, unit: str = "") -> str:
    """One value in its unit: times in a readable unit, counts with their unit word."""
    if v is NA or v is None:
        return "n/a"
    if unit == "s" and isinstance(v, (int, float)):
        return fmt_time(float(v))
    if isinstance(v, float):
        text = sig(v)
    else:
        return str(v)
    return f"{text} {unit}" if unit and unit != "syncs" else text


def fmt_stats(s: Stats | None, unit: str, compact: bool = False, n: bool = True) -> str:
    """Median with IQR and n in plain notation: `167 ms (IQR 110–280, n=10)`; compact:
    `167 ms (110–280) n=10` (`n=False`: without n, shown elsewhere). A spread of zero is left
    out (`2 (n=9)`)."""
    if s is None:
        return "-"
    if unit == "s":
        u, scale = time_unit(s.median)
        med, lo, hi, suffix = sig(s.median / scale), sig(s.p25 / scale), sig(s.p75 / scale), f" {u}"
    else:
        med, lo, hi = sig(s.median), sig(s.p25), sig(s.p75)
        suffix = f" {unit}" if unit and unit not in ("syncs",) and not compact else ""
    count = f" n={s.n}" if n else ""
    if s.n > 1 and lo != hi:
        return (f"{med}{suffix} ({lo}–{hi}){count}" if compact
                else f"{med}{suffix} (IQR {lo}–{hi}, n={s.n})")
    return f"{med}{suffix}{count}" if compact else f"{med}{suffix} (n={s.n})"


_WORSE = {"s": "slower", "": "more"}
_BETTER = {"s": "faster", "": "fewer"}


def ratio_text(r: TimingRow | Row, short: bool = False) -> tuple[str, str]:
    """(text, style) of after/before with its direction: `6.3× faster` green, `19× slower` red,
    or yellow with `(expected: WHY)` when the bench row declares the worse ratio expected.
    Lower is better for every before/after row diag measures (times, syncs, memory, crashes)."""
    ratio = r.ratio
    if ratio is None:
        return "-", "dim"
    kind = "s" if r.unit == "s" else ""
    expected = getattr(r, "expected", "") or ""
    if ratio == 0:
        return "none after", "bold green"
    if 0.95 <= ratio <= 1.05:
        return f"same (×{sig(ratio, 2)})", "dim"
    if ratio < 1:
        return f"{sig(1 / ratio, 2)}× {_BETTER[kind]}", "bold green"
    text = f"{sig(ratio, 2)}× {_WORSE[kind]}"
    if expected:
        return (f"{text} (expected)" if short else f"{text} (expected: {expected})"), "yellow"
    return text, "bold red"


def fmt_ratio(r: float | None) -> str:
    """The bare after/before (the export and `diag bench` keep the number)."""
    return sig(r, 3) if r is not None else "-"


def fmt_age(age: float | None) -> str:
    """How long ago a live value was read: `3 s ago`, `2 min ago`."""
    if age is None:
        return ""
    if age < 60:
        return f"{max(0, int(age))} s ago"
    return f"{int(age // 60)} min ago"


def short_path(loc: str) -> str:
    """`sglang/srt/layers/attention/x.py:12` → `x.py:12` (the export keeps it whole)."""
    return loc.removeprefix("sglang/srt/layers/attention/").removeprefix("sglang/srt/")


def shorten(name: str, width: int, prose: bool = False) -> str:
    """A name cut to `width` cells, keeping its end for dotted names (`…Backend._attach_meta`)
    and its start otherwise (always for `prose`, a sentence that may start with a dotted
    name); the whole name is in the detail pane and the export."""
    if len(name) <= width:
        return name
    if width <= 1:
        return "…"[:width]
    if not prose and "." in name.split(" ")[0]:
        return "…" + name[-(width - 1):]
    return name[:width - 1] + "…"


def sync_fix(findings: list[Finding]) -> str | None:
    """The fix the per-builder sync rows are about: the first fix of a finding that has them."""
    for f in findings:
        if finding_sync_rows([f]):
            return f.fixes[0] if f.fixes else fix_of_probe(f.probe)
    return None


# ---------------------------------------------------------------- export


def export_doc(header: Header, findings: list[FindingView], fix_rows: list[FixView],
               timings: list[TimingRow], syncs: list[SyncRow],
               sources: list[SourceState],
               processes: list[ProcessView] | None = None, live: Any = None) -> dict[str, Any]:
    """Everything on screen, as a JSON document (`kind: diag-tui`; schema tui-export-v1.json)."""
    from diag.schemas import SCHEMA_VERSION

    def st(s: Stats | None):
        return None if s is None else {"median": s.median, "p25": s.p25, "p75": s.p75,
                                       "min": s.min, "n": s.n}

    def val(v: Any):
        return None if v is NA else v

    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "diag-tui",
        "exported_at": time.time(),
        "target": header.target, "version": val(header.version),
        "platform": val(header.platform), "gpu": val(header.gpu),
        "findings": [f.finding.to_dict() if f.finding else
                     {"probe": f.probe, "status": f.state, "summary": f.summary}
                     for f in findings],
        "fixes": [{"id": x.id, "applicability": val(x.applicability), "reason": x.reason,
                   "state": val(x.state), "ack": x.ack} for x in fix_rows],
        "timings": [{"fix": t.fix, "metric": t.metric, "unit": t.unit, "before": st(t.before),
                     "after": st(t.after), "ratio": t.ratio, "change": ratio_text(t)[0],
                     "expected": t.expected or None, "source": t.source, "note": t.note,
                     "notes": t.notes, "release": t.release or None, "age_s": t.age}
                    for t in timings],
        "syncs": [{"builder": s.builder, "location": s.location, "before": val(s.before),
                   "after": val(s.after), "source": s.source} for s in syncs],
        "sources": [{"name": s.name, "ok": s.ok, "text": s.text} for s in sources],
        "resolved_from": dict(header.sources),
        "live": live.to_dict() if live is not None else None,
        "engine_processes": [{"pid": p.pid, "alive": p.alive, "stopped": p.stopped,
                              "sglang": p.sglang,
                              "fixes": p.fixes, "last_event": p.last, "errors": p.errors,
                              "last_error": p.error or None,
                              "events_lost": p.lost or None, "died": p.died or None}
                             for p in processes or []],
    }


def write_export(doc: dict[str, Any], path: str) -> str:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2, default=str)
    return path

