"""The timings and syncs views: before/after rows from benches and engine events, per-builder
sync rows and per-phase rows from findings, and a ratio's text and style.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from diag.bench import BenchResult, Row, Stats
from diag.findings import Finding
from diag.tui.data.common import NA, fix_of_probe
from diag.tui.data.fmt import fmt_value, sig

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
        typed = ev.fields()
        damaged = [k for k in ev.extra if k in typed]  # read problems: the fold's value, as
        if damaged:  # `diag fix status` takes it (a count of the wrong type counts nothing)
            e = {k: v for k, v in e.items() if k not in damaged}
            e.update({k: typed[k] for k in damaged if typed[k] is not None})
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
    # a helper two backends call (0.5.23 dcp/planner.py's, from aiter and flashinfer MLA) is
    # one site per line in its builder's row: a call does its syncs once, whoever calls it
    seen: dict[tuple, Any] = {}  # (builder, file, line, call, why) -> the backend first seen
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
                # a capture-only, once or unreachable site is listed, never counted per call
                n = d.get("syncs", NA) if d.get("status", "live") in ("live", "cannot-tell") \
                    else 0
                where = "DE path" if d.get("reach") == "reaches" else str(d.get("reach", "other"))
                key = (fn, str(e.file), e.line, d.get("call"), d.get("why"))
                if seen.setdefault(key, d.get("backend")) != d.get("backend"):
                    if where == "DE path":
                        census[fn].source = "static, DE path"
                    continue
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
    not_read: tuple[str, ...] = ()  # classes running the phase the census could not read


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
                                    str(d.get("source", "static")), d.get("exact", NA),
                                    tuple(d.get("not_read") or ())))
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
        if r.not_read:  # the probe's word: not known (a class it could not read runs it)
            parts.append(f"{r.phase} ? ({', '.join(r.not_read)} not read)")
            continue
        parts.append(f"{r.phase} {bound}{n}{unsure}")
    src = rows[0].source if rows else "static"
    return f"syncs per step ({src}): " + " · ".join(parts)


def finding_forward_rows(findings: list[Finding]) -> list[dict[str, Any]]:
    """The attention forward's syncs per layer on an eager pass of each phase (metadata-syncs
    evidence with `scope` forward), in the probe's order."""
    return [dict(e.data) for f in findings for e in f.evidence
            if e.kind == "metric" and (e.data or {}).get("scope") == "forward"
            and "syncs_per_layer" in (e.data or {})]


def forward_line(rows: list[dict[str, Any]]) -> str:
    """One line for the Syncs tab: `forward, syncs per layer of an eager pass (static):
    target-extend ≤10 · draft-extend ≤1 ...`."""
    parts = [f"{r['forward_phase']} {'' if r.get('exact') else '≤'}"
             f"{fmt_value(r['syncs_per_layer'])}"
             for r in rows]
    return "attention forward, syncs per layer of an eager pass (static): " + " · ".join(parts)


def bench_sync_rows(results: list[BenchResult]) -> list[SyncRow]:
    out = []
    for res in results:
        for r in res.rows:
            if r.unit == "syncs":
                out.append(SyncRow(f"{res.title}: {r.metric}", "",
                                   r.before.median if r.before else NA,
                                   r.after.median if r.after else NA, f"bench {res.id}"))
    return out


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


def sync_fix(findings: list[Finding]) -> str | None:
    """The fix the per-builder sync rows are about: the first fix of a finding that has them."""
    for f in findings:
        if finding_sync_rows([f]):
            return f.fixes[0] if f.fixes else fix_of_probe(f.probe)
    return None
