"""Events, the core of them: the event base, the kind registry, parsing, and the agent's kinds.

Every event has ``ts`` (epoch seconds), ``kind``, ``pid`` and ``n`` (per-process sequence
number); the fields of each kind are the dataclass fields of its class. Writers build the typed
event and `emit` it; readers `parse` what they read. The two round-trip exactly:
``parse(e.to_dict()) == e`` for any event, and ``parse(doc).to_dict()`` keeps every key of
``doc`` with its value as written.

Parsing never raises and never trusts a file: an unknown kind becomes a plain `Event`, unknown
keys are kept in ``extra``, and a value of the wrong type for its field leaves the field at its
default and is kept in ``extra`` too, where `Event.problems` names it (readers count them).

The kinds of runtime counters (`CounterEvent` and its subclasses) are defined in
`diag.engine.events` beside the fold; they register here like the kinds below.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

REJECTED = "rejected"  # a control request's acknowledgement state when it was not obeyed
_META = ("kind", "extra", "raw")  # dataclass fields that are not event keys


# ----------------------------------------------------------------------------- the base


@dataclass
class Event:
    """An event of any kind (also one this diag does not know: all its keys are in `extra`)."""

    kind: ClassVar[str] = ""
    # Number fields that are amounts (a count, seconds): a negative value read is a damaged
    # event, kept in `extra` and named by `problems` like a value of the wrong type ("*": all).
    nonnegative: ClassVar[tuple[str, ...]] = ()
    ts: float = 0.0
    pid: int | None = None
    n: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # The document it was parsed from (kept for readers that show an event as written).
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def name(self) -> str:
        """The event's `kind` as written (an unknown kind's own name)."""
        return self.kind or str(self.extra.get("kind", self.raw.get("kind")))

    def fields(self) -> dict[str, Any]:
        """The event's own fields (not `kind`, not `extra`), by name."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in _META}

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of this event: its kind, its fields, then `extra` as read (so a value
        that was not of its field's type is written back as it was)."""
        out: dict[str, Any] = {"kind": self.kind} if self.kind else {}
        out.update(self.fields())
        out.update(self.extra)
        return out

    @property
    def problems(self) -> list[str]:
        """The fields whose value read was not of their type (`start.argv is not list[str]`):
        a bounded set of names, so readers can count them."""
        known = {f.name: str(f.type) for f in dataclasses.fields(self) if f.name not in _META}
        return [f"{self.name}.{k} is negative" if _negative(self.extra[k])
                else f"{self.name}.{k} is not {known[k]}" for k in self.extra if k in known]

    def apply(self, fold: Any) -> None:
        """What this event changes in a process's state (default: nothing beyond counting it)."""

    def fix_states(self) -> dict[str, str]:
        """{fix id: state} this event reports (start, fix, control_ack)."""
        return {}


_KINDS: dict[str, type[Event]] = {}


def kind(cls: type[Event]) -> type[Event]:
    """Register an event class under its `kind`."""
    _KINDS[cls.kind] = cls
    return cls


def kinds() -> dict[str, type[Event]]:
    return dict(_KINDS)


def _coerce(value: Any, default: Any, typ: str) -> tuple[Any, bool]:
    """(value as the field's type, ok). Ints and finite floats convert into each other (JSON
    does not tell 1 from 1.0); anything else of the wrong type is not ok. None stays None."""
    if value is None:
        return None, True
    t = typ.replace(" ", "")
    try:
        if t.startswith("float"):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return default, False
            v = float(value)
            return (v, True) if math.isfinite(v) else (default, False)
        if t.startswith("int"):
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value != int(value):
                return default, False
            return int(value), True
        if t.startswith("bool"):
            return (value, True) if isinstance(value, bool) else (default, False)
        if t.startswith("str"):
            return (value, True) if isinstance(value, str) else (default, False)
        if t.startswith("dict"):
            return (value, True) if isinstance(value, dict) else (default, False)
        if t.startswith("list"):
            return (value, True) if isinstance(value, list) else (default, False)
    except (TypeError, ValueError, OverflowError):
        return default, False
    return value, True


def _negative(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0


@functools.cache
def _fields(cls: type[Event]) -> tuple[tuple[str, Any, Any, str, bool], ...]:
    """(name, default, default factory, type, whether it is an amount: never negative) of an
    event class's key fields, read once per class: parsing runs for every event an engine
    process writes (its writer folds them)."""
    amounts = set(cls.nonnegative)
    return tuple((f.name, f.default, f.default_factory, str(f.type),
                  (f.name in amounts or "*" in amounts) and f.name not in ("ts", "pid", "n")
                  and str(f.type).replace(" ", "").startswith(("int", "float")))
                 for f in dataclasses.fields(cls) if f.name not in _META)


def parse(doc: dict[str, Any]) -> Event:
    """The typed event for one decoded JSON object. Never raises."""
    if not isinstance(doc, dict):
        return Event(extra={"value": doc}, raw={})
    cls = _KINDS.get(str(doc.get("kind")), Event)
    kw: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for name, dflt, factory, typ, amount in _fields(cls):
        if name not in doc:
            continue
        default = dflt if dflt is not dataclasses.MISSING else \
            (factory() if factory is not dataclasses.MISSING else None)
        value, ok = _coerce(doc[name], default, typ)
        if amount and ok and value is not None and value < 0:
            value, ok = default, False
        kw[name] = 0.0 if value is None and name == "ts" else value
        if not ok:
            extra[name] = doc[name]
    for k, v in doc.items():
        if k not in kw and (k not in _META or (k == "kind" and cls is Event)):
            extra[k] = v
    return cls(**kw, extra=extra, raw=doc)


def parse_line(line: str | bytes) -> Event | None:
    """The event of one JSON line; None for a line that is not a JSON object."""
    try:
        doc = json.loads(line)
    except (ValueError, TypeError, RecursionError):
        return None
    return parse(doc) if isinstance(doc, dict) else None


def emit(event: Event) -> None:
    """Send a typed event to the installed sinks (`diag.telemetry`); `ts` is now unless set,
    `pid` and `n` are the writer's."""
    from diag import telemetry

    if not telemetry.active():
        return
    doc = event.to_dict()
    doc.pop("kind", None)
    for k in ("pid", "n"):
        if doc.get(k) is None:
            doc.pop(k, None)
    if not doc.get("ts"):
        doc.pop("ts", None)
    telemetry.emit(event.name, **doc)


def _fix_states(value: Any) -> dict[str, dict[str, Any]]:
    out = {}
    for fid, st in (value or {}).items() if isinstance(value, dict) else ():
        if isinstance(st, dict):
            out[str(fid)] = {"state": st.get("state"), "reason": st.get("reason", "")}
        elif isinstance(st, str):
            out[str(fid)] = {"state": st, "reason": ""}
    return out


def empty_lost() -> dict[str, Any]:
    """Events a process wrote but no reader can see: `events`, the first loss (`since`), why."""
    return {"events": 0, "since": None, "reason": ""}


# ----------------------------------------------------------------------------- agent events


@kind
@dataclass
class Start(Event):
    """A process's agent started (the first event of each process)."""

    kind: ClassVar[str] = "start"
    ppid: int | None = None
    argv: list[str] = field(default_factory=list)
    python: str | None = None
    executable: str | None = None
    started: float | None = None
    source: str | None = None  # bootstrap | plugin | api
    sglang: str | None = None
    fixes_requested: list[str] = field(default_factory=list)
    probes: list[str] = field(default_factory=list)
    fixes: dict[str, Any] = field(default_factory=dict)  # {id: {state, reason}}
    probes_state: dict[str, Any] = field(default_factory=dict)
    control: str | None = None  # "poll" at start
    # The process's torch build as its agent read it (torch/version.py, not imported):
    # {"cuda": "13.0" | None, "hip": ... | None}; null: no torch there (or not read).
    torch: dict[str, Any] | None = None
    platform: str | None = None  # hip | cuda: what the agent judged fixes for (DIAG_PLATFORM)
    # The fix ids this process's registry knows (plugins included): what `diag fix apply
    # --run-dir` may ask of it. Null: an agent from before this field.
    registry: list[str] | None = None
    # This host's first AMD GPU arch (KFD topology) and the process's Triton version, read
    # without importing anything: what the census and the DSA page size are decided by for a
    # `--run-dir` audit. Null: none there (or an agent from before these fields).
    gpu_arch: str | None = None
    triton: str | None = None

    def apply(self, fold: Any) -> None:
        fold.start = self.to_dict()
        fold.fixes.update(_fix_states(self.fixes))

    def fix_states(self) -> dict[str, str]:
        return {f: str(st["state"]) for f, st in _fix_states(self.fixes).items() if st["state"]}


@kind
@dataclass
class Sglang(Event):
    """SGLang was imported in this process (the release found)."""

    kind: ClassVar[str] = "sglang"
    version: str | None = None
    root: str | None = None

    def apply(self, fold: Any) -> None:
        fold.sglang = self.version


@kind
@dataclass
class Control(Event):
    """Where this process applies control requests: "batch" | "poll"; and whether it is an
    engine process (`engine`: it runs batches, a per-batch hook ran or its title names an SGLang
    scheduler; `diag fix apply` waits only for those once the run has one), with `reason`."""

    kind: ClassVar[str] = "control"
    mode: str | None = None
    engine: bool | None = None
    reason: str = ""  # why it is an engine process
    # The ranks SGLang names the scheduler by in its process title and log prefix ("TP1",
    # "DP0 TP1"; "" for a single-rank engine).
    rank: str | None = None

    def apply(self, fold: Any) -> None:
        if self.mode:
            fold.control = self.mode
        if self.engine is not None:
            fold.engine = bool(self.engine)
        if self.rank is not None:
            fold.rank = self.rank


@kind
@dataclass
class ProbeState(Event):
    """A runtime counter's state: on | pending | unavailable | failed."""

    kind: ClassVar[str] = "probe"
    probe: str | None = None
    state: str | None = None
    reason: str = ""

    def apply(self, fold: Any) -> None:
        if self.probe:
            fold.probes[self.probe] = {"state": self.state, "reason": self.reason or ""}


@kind
@dataclass
class FixEvent(Event):
    """A fix's state in this process (applied | pending | reverted | refused | upstream |
    not-needed | not-applicable | failed), as an event; the state itself is
    `diag.fixes.base.FixState`."""

    kind: ClassVar[str] = "fix"
    fix: str | None = None
    state: str | None = None
    reason: str = ""

    def apply(self, fold: Any) -> None:
        if self.fix:
            fold.fixes[self.fix] = {"state": self.state, "reason": self.reason or ""}

    def fix_states(self) -> dict[str, str]:
        return {self.fix: self.state} if self.fix and self.state else {}


@kind
@dataclass
class ControlAck(Event):
    """A control request acted on (once per process)."""

    kind: ClassVar[str] = "control_ack"
    request: str | None = None
    fix: str | None = None
    action: str | None = None  # apply | revert
    ok: bool = False
    state: str | None = None
    reason: str = ""

    def apply(self, fold: Any) -> None:
        fold.acks[str(self.request)] = self.to_dict()
        if self.fix and self.state and self.state != REJECTED:
            fold.fixes[self.fix] = {"state": self.state, "reason": self.reason or ""}

    def fix_states(self) -> dict[str, str]:
        """A rejected request changed nothing: it names no fix state."""
        return {self.fix: self.state} if self.fix and self.state and self.state != REJECTED \
            else {}


@kind
@dataclass
class Error(Event):
    """The agent hit a failure and left that part of the engine unpatched."""

    kind: ClassVar[str] = "error"
    where: str | None = None
    message: str | None = None

    def apply(self, fold: Any) -> None:
        fold.counters["errors"] = int(fold.counters.get("errors") or 0) + 1


@kind
@dataclass
class Gap(Event):
    """Events this process could not write (full disk, file gone): how many, since when, why.

    Written at the first successful write after the loss, followed by a `snapshot` that puts the
    true state back; the lost events' sequence numbers are the jump before it."""

    kind: ClassVar[str] = "gap"
    nonnegative: ClassVar[tuple[str, ...]] = ("lost",)
    lost: int = 0
    since: float | None = None
    reason: str = ""

    def apply(self, fold: Any) -> None:
        sec = fold.counters.setdefault("lost", empty_lost())
        sec["events"] = int(sec.get("events") or 0) + max(0, int(self.lost or 0) - fold.jumped)
        fold.jumped = 0
        if self.since is not None and (sec.get("since") is None or self.since < sec["since"]):
            sec["since"] = self.since
        sec["reason"] = self.reason or sec.get("reason") or ""


@kind
@dataclass
class Snapshot(Event):
    """First event of a file started after the cap: the totals of everything before it."""

    kind: ClassVar[str] = "snapshot"
    counters: dict[str, Any] = field(default_factory=dict)
    fixes: dict[str, Any] = field(default_factory=dict)
    start: dict[str, Any] | None = None
    probes_state: dict[str, Any] = field(default_factory=dict)
    control: str | None = None
    sglang: str | None = None
    engine: bool | None = None
    rank: str | None = None

