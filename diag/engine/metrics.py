"""`diag_*` Prometheus series recorded inside engine processes, read by SGLang's own `/metrics`.

SGLang runs `prometheus_client` in multiprocess mode: the launcher sets `PROMETHEUS_MULTIPROC_DIR`
(`set_prometheus_multiproc_dir` in `sglang/srt/utils/common.py`) before it spawns the schedulers,
and its `/metrics` merges every `.db` file in that directory (`MultiProcessCollector`). Values
recorded here in any engine process therefore show up on the server's own `/metrics`.

`prometheus_client` chooses its value class once, at import: imported before that variable is
set, every value stays in process memory and nothing reaches the directory (SGLang's own metrics
would break the same way). So this module never imports `prometheus_client` until the variable
is present in this process. `install()` adds a telemetry sink that costs a dict lookup while the
variable is absent (the launcher process, where the agent starts before SGLang sets it), keeps
the latest fix states and a bounded backlog, and creates the metrics on the first event (or
`poll()`) after the variable appears. Nothing here raises into the engine.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from collections import deque
from typing import Any

from diag import telemetry
from diag.engine import events
from diag.engine.events import Series

ENV = "PROMETHEUS_MULTIPROC_DIR"
PREFIX = "diag_"

# Label values are kept to small, known sets; anything else is folded into "other".
# The states the agent reports (diag.engine.agent; fixes.base applicability statuses).
# Named exactly as `diag fix status` names them (fixes.base's states; `not-applied` too).
FIX_STATES = ("applied", "pending", "reverted", "not-applied", "refused", "failed", "upstream",
              "not-needed", "not-applicable")
MAX_BUILDERS = 32
MAX_FIXES = 16
MAX_LABEL_CHARS = 80
BACKLOG = 1024

# The agent's own series; each counter event kind declares its series (`diag.engine.events`).
AGENT_SERIES: tuple[Series, ...] = (
    Series("fix_state", "gauge", ("fix", "state"), "processes",
           "Live engine processes in which a diag fix is in this state (livesum)."),
    Series("agent_processes", "gauge", (), "processes",
           "Live engine processes that reported a fix state or a counter (livesum)."),
    Series("events_lost", "counter", (), "events",
           "Events the diag agent could not write to its run directory (full disk, file gone)."),
)


def series() -> list[Series]:
    """Every `diag_*` series (name without the prefix): the counter event kinds', the agent's."""
    return [s for c in events.counter_kinds() for s in c.series] + list(AGENT_SERIES)


# Counter event kind -> its class: the kinds this sink records.
_COUNTED = {c.kind: c for c in events.counter_kinds()}

_log = logging.getLogger("diag.metrics")
_lock = threading.RLock()
_installed = False
_metrics: dict[str, Any] | None = None  # created once the variable is present
_unusable = ""  # why recording is off for good in this process ("" while it may still start)
_fix_state: dict[str, str] = {}  # latest state per fix, in this process
_backlog: deque[dict[str, Any]] = deque(maxlen=BACKLOG)  # events seen before the variable
_builders: set[str] = set()
_counted = False  # diag_agent_processes set for this process
_forked = False  # a forked child: its own files start empty; replay the fix states once
_fix_labels: dict[str, set[str]] = {}  # fix label → states written in this process
_lost_pending = 0  # lost event writes counted before the metrics exist
# A scheduler's ranks ("TP1", from the agent's `control` event): once known, every series this
# process writes carries them as a `rank` label, so `/metrics` shows ranks, not their sum.
# Single-rank engines and the launcher/detokenizer never learn one: their series are unlabelled.
_rank = ""


# Processes that are no engine process whatever their agent answers: multiprocessing's resource
# tracker (`python -c 'from multiprocessing.resource_tracker import main;main(fd)'`, started by
# SGLang's launcher) acknowledges control requests like any process and would count as one more
# live process with every fix `pending`. Found in the interpreter's own command line.
HELPERS = ("multiprocessing.resource_tracker",)


def helper(argv: list[str] | None = None) -> str | None:
    """The helper this process is (an entry of `HELPERS`), None for any other process. `argv`:
    the interpreter's command line (default `sys.orig_argv`, where `-c CODE` is kept)."""
    import sys

    if argv is None:
        argv = list(getattr(sys, "orig_argv", None) or sys.argv)
    return next((h for h in HELPERS if any(h in str(a) for a in argv)), None)


def install() -> bool:
    """Add the Prometheus sink to `diag.telemetry` (idempotent; never raises).

    Returns True when the sink is in place. It records nothing, and `prometheus_client` is not
    imported, until `PROMETHEUS_MULTIPROC_DIR` is set in this process. In a helper process
    (`HELPERS`: no engine process) it is never put in place.
    """
    global _installed, _unusable
    try:
        h = helper()
        if h is not None:
            _unusable = f"{h} is no engine process: not counted"
            return False
        with _lock:
            if not _installed:
                telemetry.add_sink(_sink)
                _installed = True
                if not os.environ.get(ENV):
                    _when_engine_imports_prometheus_client()
        poll()
        return True
    except Exception:
        _log.debug("diag.engine.metrics install failed", exc_info=True)
        return False


def _when_engine_imports_prometheus_client() -> None:
    """Start recording as soon as the engine imports prometheus_client (after it set the variable).

    In SGLang's launcher the variable appears late (`set_prometheus_multiproc_dir`, just before
    the schedulers are spawned) and few events follow, so wait for its own import instead of a
    thread or a timer.
    """
    try:
        import wrapt

        wrapt.register_post_import_hook(lambda _module: poll(), "prometheus_client")
    except Exception:
        _log.debug("diag.engine.metrics: no post-import hook", exc_info=True)


def uninstall() -> None:
    """Remove the sink (metrics already written stay in the directory)."""
    global _installed
    try:
        with _lock:
            telemetry.remove_sink(_sink)
            _installed = False
    except Exception:
        _log.debug("diag.engine.metrics uninstall failed", exc_info=True)


def poll() -> bool:
    """Start recording if the variable has appeared since; True when recording (never raises).

    The agent may call this from its periodic loop so a process with no later events (the
    launcher) still publishes the fix states it already has.
    """
    try:
        m = _ensure()
        if m is not None and _forked:
            with _lock:
                if _forked:  # a forked child's files start empty: publish its fix states now
                    _after_fork_replay(m)
        return m is not None
    except Exception:
        _log.debug("diag.engine.metrics poll failed", exc_info=True)
        return False


def active() -> bool:
    """True once metrics are being written to the multiprocess directory."""
    return _metrics is not None


def status() -> str:
    """A one-line account of the sink in this process (for the agent's log and `diag run`)."""
    if _metrics is not None:
        return f"recording into {os.environ.get(ENV)}"
    if _unusable:
        return f"off: {_unusable}"
    if not _installed:
        return "not installed"
    return f"waiting for {ENV} ({len(_backlog)} events kept)"


def _fix_updates(event: dict[str, Any]) -> dict[str, str]:
    """Fix states an event carries (`Event.fix_states`); a start event's only where SGLang was
    already imported: elsewhere "pending" is the agent's placeholder (a helper process that never
    imports SGLang would otherwise count as pending forever)."""
    ev = events.parse(event)
    if isinstance(ev, events.Start) and not ev.sglang:
        return {}
    return ev.fix_states()


def _sink(event: dict[str, Any]) -> None:
    if event.get("kind") == "control":
        if event.get("rank"):
            _set_rank(str(event["rank"]))
        return
    counted = event.get("kind") in _COUNTED
    updates = {} if counted else _fix_updates(event)
    if not updates and not counted:
        return
    m = _metrics
    if m is not None and not updates and not _forked:
        _record(m, event)  # the hot path (a counter per builder call): prometheus_client locks
        return
    if m is None:
        _ensure()  # before the lock: it may import prometheus_client (`_prometheus`)
    with _lock:
        _fix_state.update(updates)
        m = _metrics
        if m is not None and _forked:
            _after_fork_replay(m)
        if m is None:
            if not _unusable and not updates:  # fix states are replayed from _fix_state
                _backlog.append(event)
            return
        for fix, state in updates.items():
            _set_fix(m, fix, state)
        if not updates:
            _record(m, event)


def count_lost(n: int) -> None:
    """`n` events the agent could not write (never raises; kept until recording starts)."""
    global _lost_pending
    try:
        _ensure()  # before the lock (`_prometheus`)
        with _lock:
            m = _metrics
            if m is None:
                _lost_pending += n
                return
            m["events_lost"].inc(n + _lost_pending)
            _lost_pending = 0
    except Exception:
        _log.debug("diag.engine.metrics count_lost failed", exc_info=True)


def _prometheus() -> Any | None:
    """prometheus_client once the variable is set, imported while no diag lock is held. Why:
    the engine's main thread imports prometheus_client and, inside that import (its module lock
    held), runs our post-import hook, which takes `_lock`; an agent thread importing it while
    holding `_lock` waited for that module lock: each waited for the other and SGLang's
    launcher hung at start (stacks recorded by the CPU engine lane, 2026-12-03)."""
    if not os.environ.get(ENV):
        return None
    import prometheus_client
    import prometheus_client.values  # noqa: F401

    return prometheus_client


def _ensure() -> dict[str, Any] | None:
    """The metric objects, created on the first call that finds the variable set."""
    global _metrics, _unusable
    if _metrics is not None or _unusable:
        return _metrics
    prom = _prometheus()  # never under `_lock`
    if prom is None:
        return None  # the cheap path: no import while the engine has not set it
    with _lock:
        if _metrics is not None or _unusable:
            return _metrics
        directory = os.environ[ENV]
        if not os.path.isdir(directory):
            _unusable = f"{ENV}={directory} is not a directory"
            _log.warning("diag metrics off: %s", _unusable)
            return None
        if not getattr(prom.values.ValueClass, "_multiprocess", False):
            _unusable = (f"prometheus_client was imported before {ENV} was set, so its values "
                         "stay in process memory")
            _log.warning("diag metrics off: %s", _unusable)
            return None
        m = _create(_rank, prom)
        for fix, state in _fix_state.items():
            _set_fix(m, fix, state)
        _metrics = m
        atexit.register(_mark_dead)
        while _backlog:
            _record(m, _backlog.popleft())
        global _lost_pending
        if _lost_pending:
            m["events_lost"].inc(_lost_pending)
            _lost_pending = 0
        return m


def _create(rank: str = "", prom: Any = None) -> dict[str, Any]:
    """The series; `prom`: prometheus_client, imported by the caller outside `_lock` (a
    re-creation, `_set_rank`, finds it imported long since)."""
    prom = prom or sys.modules["prometheus_client"]
    Counter, Gauge, Histogram = prom.Counter, prom.Gauge, prom.Histogram  # noqa: N806

    made: dict[str, Any] = {}
    for sr in series():
        name = PREFIX + sr.name
        labels = (*sr.labels, "rank") if rank else sr.labels
        if sr.type == "counter":
            made[sr.name] = Counter(name, sr.help, labels, registry=None)
        elif sr.type == "histogram":
            kw = {"buckets": sr.buckets} if sr.buckets else {}
            made[sr.name] = Histogram(name, sr.help, labels, registry=None, **kw)
        else:
            # livesum: the value is "how many live processes are in this state"; the files of a
            # process that exits are removed (atexit → mark_process_dead), so a finished
            # scheduler stops counting, and a partial roll-out (3 of 4 ranks) stays visible.
            made[sr.name] = Gauge(name, sr.help, labels, registry=None,
                                  multiprocess_mode="livesum")
        if rank:
            made[sr.name] = _Ranked(made[sr.name], rank)
    return made


class _Ranked:
    """A series with this process's `rank` label filled in (the callers name only their own)."""

    def __init__(self, metric: Any, rank: str) -> None:
        self.metric, self.rank = metric, rank

    def labels(self, **kw: str) -> Any:
        return self.metric.labels(rank=self.rank, **kw)

    def inc(self, amount: float = 1) -> None:
        self.labels().inc(amount)

    def set(self, value: float) -> None:
        self.labels().set(value)

    def observe(self, value: float) -> None:
        self.labels().observe(value)


def _set_rank(rank: str) -> None:
    """This process learnt its ranks: from now on its series carry them. Its live gauges written
    without them are set to 0 (so the livesum over processes stays right) and written again."""
    global _rank, _metrics, _counted
    with _lock:
        if rank == _rank:
            return
        _rank = rank
        m = _metrics
        if m is None:
            return  # created with the rank when the variable appears
        for fix, seen in _fix_labels.items():
            for state in seen:
                m["fix_state"].labels(fix=fix, state=state).set(0)
        if _counted:
            m["agent_processes"].set(0)
        _counted = False
        _fix_labels.clear()
        _metrics = m = _create(rank)
        for fix, state in _fix_state.items():
            _set_fix(m, fix, state)


def _reporting(m: dict[str, Any]) -> None:
    """Count this process in diag_agent_processes once it reports anything."""
    global _counted
    if not _counted:
        m["agent_processes"].set(1)
        _counted = True


def _record(m: dict[str, Any], event: dict[str, Any]) -> None:
    _reporting(m)
    ev = events.parse(event)
    if isinstance(ev, events.CounterEvent):
        ev.record(m.__getitem__, _label)


def _label(name: str, value: Any) -> str:
    """A bounded label value: builder names are clipped and capped (`other` past the cap)."""
    if name == "builder":
        return _builder_label(value)
    return _clip(str(value))


def _set_fix(m: dict[str, Any], fix: str, state: str) -> None:
    """One state per fix per process: 1 for the current one, 0 for the others seen so far."""
    _reporting(m)
    fix = _clip(fix)
    state = state if state in FIX_STATES else "other"
    if fix not in _fix_labels and len(_fix_labels) >= MAX_FIXES:
        fix = "other"
    seen = _fix_labels.setdefault(fix, set())
    gauge = m["fix_state"]
    for other in seen - {state}:
        gauge.labels(fix=fix, state=other).set(0)
    gauge.labels(fix=fix, state=state).set(1)
    seen.add(state)


def _builder_label(value: Any) -> str:
    name = _clip(str(value or "unknown"))
    if name not in _builders:
        if len(_builders) >= MAX_BUILDERS:
            return "other"
        _builders.add(name)
    return name


def _clip(text: str) -> str:
    return text if len(text) <= MAX_LABEL_CHARS else text[: MAX_LABEL_CHARS - 1] + "…"


def _on_fork_child() -> None:
    global _counted, _forked
    _counted = False
    _forked = _metrics is not None


def _after_fork_replay(m: dict[str, Any]) -> None:
    global _forked
    _forked = False
    _fix_labels.clear()
    for fix, state in _fix_state.items():
        _set_fix(m, fix, state)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_on_fork_child)


def _mark_dead() -> None:
    """At exit: drop this process's live-gauge files so livesum counts only live processes."""
    try:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(os.getpid())
    except Exception:
        pass
