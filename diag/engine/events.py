"""The run directory's event stream: the runtime counters' event kinds and ONE fold.

The event base, the kind registry, parsing and the agent's own kinds live in the core module
`diag.events` (re-exported here); this module adds the counter kinds and the fold.

Counter events (`CounterEvent`) are what probes' runtime counters emit (the kinds a probe's
`Counter(events=...)` declares). Each class says how its events aggregate per process
(`section`, `empty`, `add_to`), how the aggregate reads as text (`describe`), and the Prometheus
series it feeds (`series`, `record`): the fold, `diag fix status`, `diag.engine.metrics` and
`diag.engine.fleet` iterate over `counter_kinds()` and name no kind themselves.

The fold (`Fold`) turns one process's events into its state: the start event, fix states (the
last of start/fix/control_ack that names a fix), counter states, acknowledgements, where control
requests apply, the release seen, counters, the last events. A `snapshot` event (first of a file
started after the cap) carries the totals of everything before it.

Size (over ~600 lines, kept whole): one class per counter kind, each with its aggregation, text
and series, and the one fold over them: a new counter adds one class here (docs/extending.md).
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from diag.events import (  # noqa: F401  (the core's names, where readers look)
    REJECTED,
    Control,
    ControlAck,
    Error,
    Event,
    FixEvent,
    Gap,
    ProbeState,
    Sglang,
    Snapshot,
    Start,
    _coerce,
    _fix_states,
    emit,
    empty_lost,
    kind,
    kinds,
    parse,
    parse_line,
)

LAST_EVENTS = 20


# ----------------------------------------------------------------------------- counter events


@dataclass(frozen=True)
class Series:
    """A Prometheus series a counter event feeds (`diag_` + name; counters get `_total`)."""

    name: str
    type: str  # counter | histogram | gauge
    labels: tuple[str, ...]
    unit: str
    help: str
    buckets: tuple[float, ...] | None = None


Metric = Callable[[str], Any]  # series name -> the prometheus_client object
Label = Callable[[str, Any], str]  # (label name, raw value) -> a bounded label value


@dataclass
class CounterEvent(Event):
    """An event a runtime counter emits: how it aggregates, reads and records as metrics."""

    section: ClassVar[str] = ""  # its key under a process's `counters`
    series: ClassVar[tuple[Series, ...]] = ()
    nonnegative: ClassVar[tuple[str, ...]] = ("*",)  # every number of a counter is an amount
    # The section's shape as a snapshot carries it (`clean`): {key: shape} ("*": any key,
    # "key?": optional), leaves "n" (a count), "s" (seconds), "n?"/"s?" (or null), "str".
    shape: ClassVar[Any] = {}

    @staticmethod
    def empty() -> Any:
        return {}

    def add_to(self, section: Any) -> Any:
        """Fold this event into the section (mutate it, or return a new value)."""
        return section

    @classmethod
    def describe(cls, section: Any) -> list[str]:
        """The section as lines of text (`diag fix status`)."""
        return []

    def record(self, metric: Metric, label: Label) -> None:
        """Record this event into its series."""

    # The fleet view: per-instance figures over a window, from this kind's series.
    fleet_defaults: ClassVar[dict[str, Any]] = {}  # in an instance row with no window data
    fleet_empty: ClassVar[dict[str, Any]] = {}  # its figures for an instance without its series
    fleet_compared: ClassVar[tuple[tuple[str, str, str], ...]] = ()  # (key, label, unit)

    @classmethod
    def fleet_window(cls, query: Callable[[str], dict], by: str, rng: str
                     ) -> dict[Any, dict[str, Any]]:
        """{instance key: {figure: value}} from Prometheus (`query(expr)` -> {key: value})."""
        return {}

    @classmethod
    def fleet_window_empty(cls) -> dict[str, Any]:
        return json.loads(json.dumps(cls.fleet_empty))


def _num(value: Any, default: float | None = 0.0) -> Any:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return default
    return v if math.isfinite(v) else default


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or not den:
        return None
    return num / den


@kind
@dataclass
class Syncs(CounterEvent):
    """Calls of an attention metadata builder (`calls`, one when absent; folded in the engine) and
    the implicit device->host syncs counted inside them (`count`, in all; `per_call` each)."""

    kind: ClassVar[str] = "syncs"
    section: ClassVar[str] = "syncs"
    builder: str = "unknown"
    count: int = 0
    calls: int = 1
    per_call: int | None = None
    seconds: float = 0.0
    sites: list[str] = field(default_factory=list)
    phase: str | None = None  # target-extend | target-verify | draft-extend | draft-decode
    sampled: bool = False  # not counted one by one: count = per_call (the stable count) x calls
    shape: ClassVar[Any] = {"*": {"calls": "n", "syncs": "n", "seconds": "s", "sampled_calls?": "n",
                                  "phases?": {"*": {"calls": "n", "syncs": "n"}}}}
    series: ClassVar[tuple[Series, ...]] = (
        Series("metadata_builds", "counter", ("builder",), "calls",
               "Calls of an attention metadata builder observed by diag."),
        Series("metadata_builds_sampled", "counter", ("builder",), "calls",
               "Of those, calls whose syncs are scaled from the stable count of that builder, "
               "phase and batch size instead of counted (DIAG_SYNC_SAMPLE=1: every call)."),
        Series("metadata_phase_builds", "counter", ("phase",), "calls",
               "Metadata builder calls by the phase of the step they serve."),
        Series("metadata_phase_syncs", "counter", ("phase",), "syncs",
               "Implicit device-to-host syncs inside metadata builders, by phase."),
        Series("metadata_syncs", "counter", ("builder",), "syncs",
               "Implicit device-to-host syncs made inside a metadata builder."),
        Series("metadata_build_seconds", "counter", ("builder",), "seconds",
               "Host time spent inside a metadata builder."),
    )

    def add_to(self, section: dict) -> dict:
        b = section.setdefault(str(self.builder), {"calls": 0, "syncs": 0, "seconds": 0.0})
        b["calls"] += int(self.calls or 0)
        b["syncs"] += int(self.count or 0)
        b["seconds"] += float(self.seconds or 0.0)
        if self.sampled:
            b["sampled_calls"] = b.get("sampled_calls", 0) + int(self.calls or 0)
        if self.phase:
            p = b.setdefault("phases", {}).setdefault(self.phase, {"calls": 0, "syncs": 0})
            p["calls"] += int(self.calls or 0)
            p["syncs"] += int(self.count or 0)
            # per phase too: the draft-extend prediction takes its metadata build time from here
            p["seconds"] = p.get("seconds", 0.0) + float(self.seconds or 0.0)
        return section

    @classmethod
    def describe(cls, section: dict) -> list[str]:
        return [f"syncs {b}: {v['syncs']} in {v['calls']} calls, {v['seconds'] * 1e3:.2f} ms"
                + (f" ({v['sampled_calls']} calls sampled: scaled from the stable count)"
                   if v.get("sampled_calls") else "")
                for b, v in sorted(section.items())]

    def record(self, metric: Metric, label: Label) -> None:
        builder = label("builder", self.builder)
        calls = max(int(self.calls or 0), 0)
        metric("metadata_builds").labels(builder=builder).inc(calls)
        if self.sampled:
            metric("metadata_builds_sampled").labels(builder=builder).inc(calls)
        if self.count and self.count > 0:
            metric("metadata_syncs").labels(builder=builder).inc(self.count)
        if self.seconds and self.seconds > 0:
            metric("metadata_build_seconds").labels(builder=builder).inc(self.seconds)
        if self.phase:
            phase = label("phase", self.phase)
            metric("metadata_phase_builds").labels(phase=phase).inc(calls)
            if self.count and self.count > 0:
                metric("metadata_phase_syncs").labels(phase=phase).inc(self.count)

    fleet_defaults: ClassVar[dict[str, Any]] = {"syncs_per_step": None}
    fleet_empty: ClassVar[dict[str, Any]] = {"metadata_builds": None, "syncs": None,
                                             "syncs_per_step": None, "builders": {}}
    fleet_compared: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("syncs_per_step", "syncs/step", ""),)

    @classmethod
    def fleet_window(cls, query, by, rng):
        syncs = query(f"sum by ({by}) (increase(diag_metadata_syncs_total[{rng}]))")
        builds = query(f"sum by ({by}) (increase(diag_metadata_builds_total[{rng}]))")
        pb_syncs = query(f"sum by ({by}, builder) (increase(diag_metadata_syncs_total[{rng}]))",
                         "builder")
        pb_builds = query(f"sum by ({by}, builder) (increase(diag_metadata_builds_total[{rng}]))",
                          "builder")
        out: dict[Any, dict[str, Any]] = {}
        for k in set(syncs) | set(builds):
            builders = {}
            for b, n in (pb_builds.get(k) or {}).items():
                s = (pb_syncs.get(k) or {}).get(b)
                builders[b] = {"calls": n, "syncs": s, "syncs_per_call": _ratio(s, n)}
            out[k] = {"metadata_builds": builds.get(k), "syncs": syncs.get(k),
                      "syncs_per_step": _ratio(syncs.get(k), builds.get(k)),
                      "builders": builders}
        return out


DRAFT_EXTEND_MODES = ("graph", "eager")


def _why(reasons: dict | None) -> str:
    return f" (eager because: {', '.join(f'{k} {n}' for k, n in sorted(reasons.items()))})" \
        if reasons else ""


@kind
@dataclass
class DraftExtend(CounterEvent):
    """Draft-extend passes of one mode, batch size and reason (`passes`, one when absent; folded
    in the engine): graph replay or eager (and why), their host time in all."""

    kind: ClassVar[str] = "draft_extend"
    section: ClassVar[str] = "draft_extend"
    mode: str | None = None  # graph | eager
    seconds: float | None = None
    batch: int | None = None
    reason: str | None = None  # eager only: kill-switch | no-runner | batch-above-captured |
    # runner-declined | forced-eager (diag bench eager-cost)
    passes: int = 1
    shape: ClassVar[Any] = {"*": {"passes": "n", "seconds": "s", "reasons?": {"*": "n"}}}
    series: ClassVar[tuple[Series, ...]] = (
        Series("draft_extend_passes", "counter", ("mode",), "passes",
               "Draft-extend forward passes by mode (graph replay or eager)."),
        Series("draft_extend_seconds", "histogram", ("mode",), "seconds",
               "Host time of one draft-extend forward pass, by mode.",
               (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                1.0)),
        Series("draft_extend_eager_passes", "counter", ("reason",), "passes",
               "Eager draft-extend passes by why they ran eager."),
    )

    def add_to(self, section: dict) -> dict:
        n = int(self.passes or 0)
        m = section.setdefault(str(self.mode), {"passes": 0, "seconds": 0.0})
        m["passes"] += n
        m["seconds"] += float(self.seconds or 0.0)
        if self.reason:
            r = m.setdefault("reasons", {})
            r[self.reason] = r.get(self.reason, 0) + n
        return section

    @classmethod
    def describe(cls, section: dict) -> list[str]:
        return [f"draft-extend {m}: {v['passes']} passes, {v['seconds'] * 1e3:.2f} ms"
                + _why(v.get("reasons")) for m, v in sorted(section.items())]

    def record(self, metric: Metric, label: Label) -> None:
        mode = self.mode if self.mode in DRAFT_EXTEND_MODES else "other"
        n = max(int(self.passes or 0), 0)
        metric("draft_extend_passes").labels(mode=mode).inc(n)
        if self.seconds is not None and self.seconds >= 0 and n:
            # folded passes observe their mean (one event folds at most a second of passes)
            hist = metric("draft_extend_seconds").labels(mode=mode)
            for _ in range(n):
                hist.observe(self.seconds / n)
        if mode == "eager":
            metric("draft_extend_eager_passes").labels(
                reason=label("reason", self.reason or "unknown")).inc(n)

    fleet_defaults: ClassVar[dict[str, Any]] = {"draft_extend_eager_share": None}
    fleet_empty: ClassVar[dict[str, Any]] = {"draft_extend_passes": {},
                                             "draft_extend_eager_share": None,
                                             "draft_extend_mean_s": {}}
    fleet_compared: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("draft_extend_eager_share", "draft-extend eager", "%"),)

    @classmethod
    def fleet_window(cls, query, by, rng):
        passes = query(f"sum by ({by}, mode) (increase(diag_draft_extend_passes_total[{rng}]))",
                       "mode")
        mean = query(f"sum by ({by}, mode) (increase(diag_draft_extend_seconds_sum[{rng}])) / "
                     f"sum by ({by}, mode) (increase(diag_draft_extend_seconds_count[{rng}]))",
                     "mode")
        out: dict[Any, dict[str, Any]] = {}
        for k in passes:
            p = {m: v for m, v in (passes.get(k) or {}).items() if v is not None}
            total = sum(p.values()) if p else None
            out[k] = {"draft_extend_passes": p,
                      "draft_extend_eager_share": _ratio(p.get("eager"), total),
                      "draft_extend_mean_s": {m: v for m, v in (mean.get(k) or {}).items()
                                              if v is not None}}
        return out


@kind
@dataclass
class GraphPhase(CounterEvent):
    """Target-verify or draft-decode passes by mode since the last such event (folded in the
    engine, emitted at most once a second): graph replay or eager, why eager, host time."""

    kind: ClassVar[str] = "graph_phase"
    section: ClassVar[str] = "graph_phases"
    phase: str | None = None  # target-verify | draft-decode
    mode: str | None = None  # graph | eager
    reason: str | None = None
    passes: int = 0
    seconds: float | None = None
    shape: ClassVar[Any] = {"*": {"*": {"passes": "n", "seconds": "s", "reasons?": {"*": "n"}}}}
    series: ClassVar[tuple[Series, ...]] = (
        Series("graph_phase_passes", "counter", ("phase", "mode"), "passes",
               "Target-verify and draft-decode passes by mode (graph replay or eager)."),
        Series("graph_phase_seconds", "counter", ("phase", "mode"), "seconds",
               "Host time of target-verify and draft-decode passes, by mode."),
    )

    def add_to(self, section: dict) -> dict:
        m = section.setdefault(str(self.phase), {}).setdefault(
            str(self.mode), {"passes": 0, "seconds": 0.0})
        m["passes"] += int(self.passes or 0)
        m["seconds"] += float(self.seconds or 0.0)
        if self.reason:
            r = m.setdefault("reasons", {})
            r[self.reason] = r.get(self.reason, 0) + int(self.passes or 0)
        return section

    @classmethod
    def describe(cls, section: dict) -> list[str]:
        return [f"{phase} {m}: {v['passes']} passes, {v['seconds'] * 1e3:.2f} ms"
                + _why(v.get("reasons"))
                for phase, modes in sorted(section.items()) for m, v in sorted(modes.items())]

    def record(self, metric: Metric, label: Label) -> None:
        mode = self.mode if self.mode in DRAFT_EXTEND_MODES else "other"
        phase = label("phase", self.phase or "unknown")
        if self.passes and self.passes > 0:
            metric("graph_phase_passes").labels(phase=phase, mode=mode).inc(self.passes)
        if self.seconds and self.seconds > 0:
            metric("graph_phase_seconds").labels(phase=phase, mode=mode).inc(self.seconds)


@kind
@dataclass
class AgentTime(CounterEvent):
    """The diag agent's own work since the last such event (control poll, counters' flush,
    control requests applied), by where it ran: `boundary` (between batches), `thread` (the poll
    thread, in a process with no batch boundary or an idle engine), `control` (requests applied
    at a safe point). What the live view costs beyond its counters' hot paths, so users see it."""

    kind: ClassVar[str] = "agent_time"
    section: ClassVar[str] = "agent"
    where: str = "thread"
    runs: int = 0
    seconds: float = 0.0
    shape: ClassVar[Any] = {"*": {"runs": "n", "seconds": "s"}}
    series: ClassVar[tuple[Series, ...]] = (
        Series("agent_seconds", "counter", ("where",), "seconds",
               "Time the diag agent spent on its own work (poll, flush, control), by where it "
               "ran (boundary: between batches; thread: its poll thread; control)."),
    )

    def add_to(self, section: dict) -> dict:
        w = section.setdefault(str(self.where), {"runs": 0, "seconds": 0.0})
        w["runs"] += int(self.runs or 0)
        w["seconds"] += float(self.seconds or 0.0)
        return section

    @classmethod
    def describe(cls, section: dict) -> list[str]:
        return [f"diag agent at {w}: {v['runs']} runs, {v['seconds'] * 1e3:.2f} ms"
                for w, v in sorted(section.items())]

    def record(self, metric: Metric, label: Label) -> None:
        if self.seconds and self.seconds > 0:
            metric("agent_seconds").labels(where=label("where", self.where)).inc(self.seconds)


@kind
@dataclass
class ProfilerStop(CounterEvent):
    """One torch.profiler stop and its teardown."""

    kind: ClassVar[str] = "profiler_stop"
    section: ClassVar[str] = "profiler_stop"
    seconds: float | None = None
    collected: int = 0
    path: str | None = None
    controlled: bool | None = None
    freed: bool | None = None
    function: str | None = None
    teardown: str | None = None  # how the fix freed it: cycle-broken | gc-collect
    teardown_s: float | None = None
    heap_blocks: int | None = None  # with a sink: the heap then, and what a full collection
    full_gc_est_s: float | None = None  # would cost (an estimate from measured ones)
    shape: ClassVar[Any] = {"stops": "n", "seconds": "s", "collected": "n", "teardown?": {"*": "n"},
                            "teardown_s?": "s", "heap_blocks?": "n?", "full_gc_est_s?": "s?"}
    series: ClassVar[tuple[Series, ...]] = (
        Series("profiler_stops", "counter", (), "stops",
               "torch.profiler stops (teardowns) observed."),
        Series("profiler_stop_seconds", "histogram", (), "seconds",
               "Time of one torch.profiler stop including its teardown.",
               (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)),
        Series("profiler_stop_collected_objects", "counter", (), "objects",
               "Objects freed by the garbage collection at profiler stop."),
        Series("profiler_teardowns", "counter", ("how",), "stops",
               "Profiler stops torn down by the fix, by how (cycle-broken, gc-collect)."),
    )
    TEARDOWNS: ClassVar[tuple[str, ...]] = ("cycle-broken", "gc-collect")

    @staticmethod
    def empty() -> dict:
        return {"stops": 0, "seconds": 0.0, "collected": 0}

    def add_to(self, section: dict) -> dict:
        section["stops"] = section.get("stops", 0) + 1
        section["seconds"] = section.get("seconds", 0.0) + float(self.seconds or 0.0)
        section["collected"] = section.get("collected", 0) + int(self.collected or 0)
        if self.teardown:
            td = section.setdefault("teardown", {})
            td[str(self.teardown)] = td.get(str(self.teardown), 0) + 1
            section["teardown_s"] = section.get("teardown_s", 0.0) + float(self.teardown_s or 0.0)
        if self.heap_blocks is not None:  # the latest heap and full-collection estimate
            section["heap_blocks"] = self.heap_blocks
            section["full_gc_est_s"] = self.full_gc_est_s
        return section

    @classmethod
    def describe(cls, section: dict) -> list[str]:
        if not section.get("stops"):
            return []
        td = ", ".join(f"{k} {v}" for k, v in sorted((section.get("teardown") or {}).items()))
        est = section.get("full_gc_est_s")
        return [f"profiler stops: {section['stops']}, {section['seconds']:.3f} s, "
                f"{section['collected']} objects collected" + (f"; teardown: {td}" if td else "")
                + (f"; a full collection now: ~{est:.3f} s (estimate)" if est else "")]

    def record(self, metric: Metric, label: Label) -> None:
        metric("profiler_stops").inc()
        if self.seconds is not None and self.seconds >= 0:
            metric("profiler_stop_seconds").observe(self.seconds)
        if self.collected and self.collected > 0:
            metric("profiler_stop_collected_objects").inc(self.collected)
        if self.teardown in self.TEARDOWNS:
            metric("profiler_teardowns").labels(how=self.teardown).inc()

    fleet_empty: ClassVar[dict[str, Any]] = {"profiler_stops": None, "profiler_stop_mean_s": None}

    @classmethod
    def fleet_window(cls, query, by, rng):
        stops = query(f"sum by ({by}) (increase(diag_profiler_stops_total[{rng}]))")
        mean = query(f"sum by ({by}) (increase(diag_profiler_stop_seconds_sum[{rng}])) / "
                     f"sum by ({by}) (increase(diag_profiler_stop_seconds_count[{rng}]))")
        return {k: {"profiler_stops": stops.get(k), "profiler_stop_mean_s": mean.get(k)}
                for k in stops}


def counter_kinds() -> list[type[CounterEvent]]:
    """Every counter event class, in definition order."""
    return [c for c in kinds().values() if issubclass(c, CounterEvent)]


def declared_kinds() -> dict[str, list[str]]:
    """Event kind -> the probes whose runtime counter declares it (`Counter(events=...)`)."""
    from diag import probes

    out: dict[str, list[str]] = {}
    for spec in probes.specs():
        if spec.counter is not None:
            for k in spec.counter.events:
                out.setdefault(k, []).append(spec.id)
    return out


def started(e: Event) -> float | None:
    """When a process's agent started, from its first event (a start, or a snapshot carrying
    it): to tell a live process from a later one that reuses its pid."""
    if isinstance(e, Start):
        return e.started
    if isinstance(e, Snapshot) and isinstance(e.start, dict):
        v, ok = _coerce(e.start.get("started"), None, "float")
        return v if ok else None
    return None


# ----------------------------------------------------------------------------- the fold


def empty_counters() -> dict[str, Any]:
    out: dict[str, Any] = {c.section: c.empty() for c in counter_kinds()}
    out["errors"] = 0
    out["events"] = {}
    out["lost"] = empty_lost()
    return out


UNKNOWN = "unknown"  # a state the events cannot tell (some were lost): never the last known one

_LOST_SHAPE = {"events": "n", "since": "s?", "reason": "str"}


def _leaf(value: Any, shape: str, where: str) -> tuple[Any, str | None]:
    """(the value, or its default when it is not of the shape; the problem)."""
    if shape == "str":
        return (value, None) if isinstance(value, str) else ("", f"{where} is not a string")
    default = None if shape.endswith("?") else (0 if shape.startswith("n") else 0.0)
    if value is None and shape.endswith("?"):
        return None, None
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or (shape.startswith("n") and value != int(value)):
        return default, f"{where} is not {'a count' if shape.startswith('n') else 'seconds'}"
    if value < 0:
        return default, f"{where} is negative"
    return (int(value) if shape.startswith("n") else float(value)), None


def clean(value: Any, shape: Any, where: str, problems: list[str]) -> Any:
    """`value` in `shape` (see `CounterEvent.shape`): what is not of it is left out (a missing
    key gets its default) and named in `problems`, by a bounded name (`*` for any key)."""
    if isinstance(shape, str):
        v, why = _leaf(value, shape, where)
        if why:
            problems.append(why)
        return v
    if not isinstance(value, dict):
        problems.append(f"{where} is not an object")
        return _default(shape)
    out: dict[str, Any] = {}
    if "*" in shape:
        for k, v in value.items():
            out[str(k)] = clean(v, shape["*"], f"{where}.*", problems)
        return out
    for key, sub in shape.items():
        name = key.rstrip("?")
        if name in value:
            out[name] = clean(value[name], sub, f"{where}.{name}", problems)
        elif not key.endswith("?"):
            out[name] = _default(sub)
            problems.append(f"{where}.{name} is missing")
    return out


def _default(shape: Any) -> Any:
    if isinstance(shape, dict):
        return {k: _default(v) for k, v in shape.items() if k != "*" and not k.endswith("?")}
    return "" if shape == "str" else None if shape.endswith("?") else 0 if shape == "n" else 0.0


def clean_counters(value: Any, where: str = "snapshot.counters") -> tuple[dict[str, Any],
                                                                              list[str]]:
    """A process's counters as a snapshot carries them, each section in its shape; what was
    not (a count of the wrong type, a negative count, a number where an object belongs) is left
    out and named (readers count these as read problems, never show them)."""
    problems: list[str] = []
    if not isinstance(value, dict):
        return empty_counters(), ([f"{where} is not an object"] if value is not None else [])
    out = empty_counters()
    for c in counter_kinds():
        if c.section in value:
            out[c.section] = clean(value[c.section], c.shape, f"{where}.{c.section}", problems)
    if "errors" in value:
        out["errors"] = clean(value["errors"], "n", f"{where}.errors", problems)
    if "events" in value:
        out["events"] = clean(value["events"], {"*": "n"}, f"{where}.events", problems)
    if "lost" in value:
        out["lost"] = {**empty_lost(), **clean(value["lost"], {k + "?": v for k, v in
                                                              _LOST_SHAPE.items()},
                                               f"{where}.lost", problems)}
    return out, problems


class Fold:
    """Folds one process's events into its state (every reader and the writer use this one)."""

    def __init__(self, check_sequence: bool = True) -> None:
        self.check_sequence = check_sequence  # off in the writer: it numbers its own markers
        self.counters = empty_counters()
        self.fixes: dict[str, dict[str, Any]] = {}
        self.start: dict[str, Any] | None = None
        self.acks: dict[str, dict[str, Any]] = {}
        self.probes: dict[str, dict[str, Any]] = {}
        self.control = "poll"
        self.engine = False
        self.rank: str | None = None  # the scheduler's ranks (Control.rank)
        self.sglang: str | None = None
        self.last: deque[dict[str, Any]] = deque(maxlen=LAST_EVENTS)
        self.next_n: int | None = None  # the sequence number the next event should carry
        self.jumped = 0  # events missing from the sequence, not yet explained by a `gap`
        self.problems: list[str] = []  # what a snapshot carried that was not of its shape

    def add(self, ev: Event | dict[str, Any]) -> Event:
        e = ev if isinstance(ev, Event) else parse(ev)
        self._check_sequence(e)
        if isinstance(e, Snapshot):
            self._restore(e)
            return e
        events = self.counters.setdefault("events", {})
        events[e.name] = events.get(e.name, 0) + 1
        self.last.append(e.raw or e.to_dict())  # as written (what the event schema describes)
        if isinstance(e, CounterEvent):
            sec = self.counters.get(e.section)
            if sec is None:
                sec = e.empty()
            self.counters[e.section] = e.add_to(sec)
        else:
            e.apply(self)
        return e

    def _check_sequence(self, e: Event) -> None:
        """A jump in `n` means events were lost: count them, and what they may have changed
        (fix states) becomes unknown until a `snapshot` says again."""
        if e.n is None or not self.check_sequence:
            return
        if self.next_n is None:
            self.next_n = 0  # a process's first event is number 0: a file cut before is a loss
        if e.n > self.next_n:
            missing = e.n - self.next_n
            self.jumped += missing
            sec = self.counters.setdefault("lost", empty_lost())
            sec["events"] = int(sec.get("events") or 0) + missing
            if sec.get("since") is None:
                sec["since"] = self.last[-1].get("ts") if self.last else e.ts
            sec["reason"] = sec.get("reason") or f"events {self.next_n}-{e.n - 1} missing"
            for fid, st in self.fixes.items():
                if st.get("state") != UNKNOWN:
                    self.fixes[fid] = {"state": UNKNOWN, "reason": f"events lost; last known: "
                                                                   f"{st.get('state')}"}
        self.next_n = e.n + 1

    def _restore(self, s: Snapshot) -> None:
        self.counters, problems = clean_counters(s.counters)
        self.problems.extend(problems)
        self.jumped = 0
        self.fixes.update(_fix_states(s.fixes))
        for pid, st in (s.probes_state or {}).items():
            if isinstance(st, dict) and isinstance(st.get("state"), str):
                self.probes[str(pid)] = {"state": st["state"], "reason": _text(st.get("reason"))}
            else:
                self.problems.append("snapshot.probes_state.* is not a counter state")
        self.control = s.control or self.control
        self.engine = bool(s.engine) if s.engine is not None else self.engine
        self.rank = s.rank if s.rank is not None else self.rank
        self.sglang = s.sglang or self.sglang
        if s.start and self.start is None:
            self.start = s.start

    def snapshot(self, ts: float, pid: int, n: int) -> dict[str, Any]:
        """The `snapshot` event carrying everything folded so far."""
        return {"ts": ts, "kind": Snapshot.kind, "pid": pid, "n": n, "counters": self.counters,
                "fixes": self.fixes, "start": self.start, "probes_state": self.probes,
                "control": self.control, "engine": self.engine, "rank": self.rank,
                "sglang": self.sglang}


def _text(v: Any) -> str:
    return v if isinstance(v, str) else ""


def describe_counters(counters: dict[str, Any]) -> list[str]:
    """A process's counters as text lines, one per builder/mode/kind (`diag fix status`)."""
    out: list[str] = []
    for c in counter_kinds():
        sec = counters.get(c.section)
        if sec:
            out.extend(c.describe(sec))
    known = {c.kind for c in counter_kinds()}
    for k in sorted(declared_kinds()):
        if k not in known and (counters.get("events") or {}).get(k):
            out.append(f"{k}: {counters['events'][k]} events")
    if counters.get("errors"):
        out.append(f"agent errors: {counters['errors']}")
    text = lost_text(counters)
    if text:
        out.append(text)
    return out


def lost_text(counters: dict[str, Any]) -> str:
    """`events lost since 12:03:04: 17 (ENOSPC ...)`, or "" when none were lost."""
    import time as _time

    sec = counters.get("lost") or {}
    if not sec.get("events"):
        return ""
    since = sec.get("since")
    try:  # a time no clock gives (1e300, NaN) is said as not known, never a crash
        when = _time.strftime(" since %H:%M:%S", _time.localtime(since)) if since else ""
    except (TypeError, ValueError, OverflowError, OSError):
        when = ""
    why = f" ({sec['reason']})" if sec.get("reason") else ""
    return f"events lost{when}: {sec['events']}{why}"


def replay(docs: Iterable[dict[str, Any]]) -> Iterator[tuple[Event, bool]]:
    """Each event with whether, in its process at that moment, a fix addressing the probe whose
    counter emits its kind was applied (before/after splits of a run's figures)."""
    from diag import probes

    fixes_of: dict[str, set[str]] = {}
    for spec in probes.specs():
        if spec.counter is not None:
            for k in spec.counter.events:
                fixes_of.setdefault(k, set()).update(spec.fixes)
    on: dict[tuple[Any, str], bool] = {}
    for doc in docs:
        e = doc if isinstance(doc, Event) else parse(doc)
        states = _fix_states(e.fixes) if isinstance(e, Snapshot) else \
            {f: {"state": st} for f, st in e.fix_states().items()}
        for fid, st in states.items():
            on[(e.pid, fid)] = st.get("state") == "applied"
        fixed = any(on.get((e.pid, f), False) for f in fixes_of.get(e.name, ()))
        yield e, fixed
