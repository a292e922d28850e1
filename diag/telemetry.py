"""A tiny in-process event bus: hooks emit, sinks (the agent's files, Prometheus) record.

Emitting with no sink installed costs one attribute check. Sinks never raise into the caller:
this runs inside the user's engine.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

Sink = Callable[[dict[str, Any]], None]

_sinks: list[Sink] = []
_lock = threading.Lock()
_log = logging.getLogger("diag.telemetry")

# Event kinds (the `kind` field) and their fields are defined in `diag.engine.events`; a probe's
# runtime counter declares the kinds it emits (`diag.probes.base.Counter.events`).


def add_sink(sink: Sink) -> None:
    with _lock:
        if sink not in _sinks:
            _sinks.append(sink)


def remove_sink(sink: Sink) -> None:
    with _lock:
        if sink in _sinks:
            _sinks.remove(sink)


def active() -> bool:
    return bool(_sinks)


_flushers: list[Callable[[], None]] = []


def add_flusher(fn: Callable[[], None]) -> None:
    """A counter that folds events in-process (to keep per-pass cost low) registers how to emit
    what it holds; the agent calls `flush` from its poll thread, so an idle engine's last passes
    are not held back."""
    with _lock:
        if fn not in _flushers:
            _flushers.append(fn)


def flush() -> None:
    for fn in list(_flushers):
        try:
            fn()
        except Exception:  # never into the engine
            _log.debug("telemetry flusher failed", exc_info=True)


def emit(kind: str, **fields: Any) -> None:
    if not _sinks:
        return
    event = {"ts": time.time(), "kind": kind, **fields}
    for sink in list(_sinks):
        try:
            sink(event)
        except Exception:  # a broken sink must not break the engine
            _log.debug("telemetry sink failed", exc_info=True)
