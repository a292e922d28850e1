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
    """Counted passes held in-process from before a first sink are dropped, as they were never
    seen: a sink gets what happens once it is in."""
    if not _sinks:
        flush()
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


class Slot:
    """One key's running totals, updated in place on the hot path: `n` passes, `s` seconds."""

    __slots__ = ("n", "s", "fields", "seen_n", "seen_s")

    def __init__(self, fields: dict[str, Any]) -> None:
        self.n, self.s, self.fields = 0, 0.0, fields
        self.seen_n, self.seen_s = 0, 0.0  # what the last flush emitted (the flusher's own)


class Tally:
    """A counter's keys as preallocated slots: the hot path does `slot.n += 1; slot.s += dt`
    (no allocation, no lock, no dict built, no clock read of its own), and `flush` — called by
    the agent's poll thread, off the step — emits per key the passes and seconds added since the
    last flush. One writer per slot (the thread that runs the pass); the flusher only reads, so a
    flush that reads `n` before a pass and `s` after it emits that pass's seconds one flush
    early: the totals stay exact.

    `scale=(field, per_field)` adds `field` = passes x the slot's `per_field` to each event
    (e.g. syncs = calls x the stable count per call).

    `slot(key, **fields)`: the slot of a key (made once, on its first pass); keep the slot of a
    key known in advance (e.g. the graph mode) in a module variable and skip even the lookup."""

    def __init__(self, kind: str, count_field: str, sum_field: str = "seconds",
                 scale: tuple[str, str] | None = None) -> None:
        self.kind, self.count_field, self.sum_field = kind, count_field, sum_field
        self.scale = scale  # (field, per-pass field): emit field = passes x fields[per-pass]
        self.slots: dict[Any, Slot] = {}
        add_flusher(self.flush)

    def slot(self, key: Any, **fields: Any) -> Slot:
        s = self.slots.get(key)
        if s is None:  # first pass of this key: setdefault keeps one slot if two threads race
            s = self.slots.setdefault(key, Slot(fields))
        return s

    def totals(self) -> list[tuple[dict[str, Any], int, float]]:
        """(key fields, passes, seconds) per key since the process started."""
        return [(s.fields, s.n, s.s) for s in list(self.slots.values())]

    def flush(self) -> None:
        for s in list(self.slots.values()):
            n, sec = s.n, s.s
            if n == s.seen_n:
                continue
            dn, ds = n - s.seen_n, sec - s.seen_s
            s.seen_n, s.seen_s = n, sec
            sums = {self.count_field: dn, self.sum_field: ds}
            if self.scale is not None:
                out, per = self.scale
                sums[out] = dn * s.fields[per]
            emit(self.kind, **s.fields, **sums)


class Folder:
    """Sums one counter's events in-process and emits them as one event per key on `flush`
    (the agent's periodic work, at a batch boundary or on its poll thread), never on the hot
    path: a write and a metrics update per pass is most of what a counter would cost a serving
    engine. (`Tally` is the cheaper form for keys known in advance.)

    `add(key_fields, **sums)`: the event for a key carries the key's fields, `count_field` (how
    many adds it folds) and each summed field."""

    def __init__(self, kind: str, count_field: str, every: float = 1.0) -> None:
        self.kind, self.count_field, self.every = kind, count_field, every
        self.lock = threading.Lock()
        self.pending: dict[tuple, dict[str, Any]] = {}
        self.last = time.monotonic()
        add_flusher(self.flush)

    def add(self, key: dict[str, Any], **sums: float) -> None:
        if not _sinks:
            return
        k = tuple(sorted((n, v if not isinstance(v, list) else tuple(v)) for n, v in key.items()))
        with self.lock:
            p = self.pending.get(k)
            if p is None:
                p = self.pending[k] = {**key, self.count_field: 0, **dict.fromkeys(sums, 0)}
            p[self.count_field] += 1
            for n, v in sums.items():
                p[n] += v

    def flush(self) -> None:
        with self.lock:
            pending, self.pending = self.pending, {}
            self.last = time.monotonic()
        for fields in pending.values():
            emit(self.kind, **fields)

