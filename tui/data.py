"""The TUI's data layer: every read of probes, fixes, benches, run directories and servers.

Headless (no textual import): the app's workers call these functions and the handlers render
what they return. Whatever cannot be read comes back as `NA` or as a `SourceState` that says
why, never as an exception (nvitop's `NA`): an unreachable server is a fact on screen.
Other packages' APIs (`diag.engine.rundir`, `diag.server`, the probes, the fixes) are called only
here, so a change in them touches this one module.
"""

from __future__ import annotations

import importlib
import json
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


def gpu_text() -> str:
    """The local GPU(s) as torch sees them (imports torch: call from a worker)."""
    from diag.platform import torch_info

    info = torch_info()
    if not info.present:
        return f"no torch ({info.error})" if info.error else "no torch"
    if info.devices:
        return f"{', '.join(info.devices)} (torch {info.version}, {info.runtime})"
    return f"none (torch {info.version}, CPU)"


def resolve_context(sglang: str | None, platform: str | None, run_dir: str | None,
                    server_url: str | None, execute: bool, log: Callable[[str], None]):
    """(Context, Header) for the target; raises DiagError when the target cannot be had."""
    from diag.context import Context, SpecConfig
    from diag.target import resolve

    tgt = resolve(sglang, log=log)
    if platform is None:
        from diag.platform import default_platform

        platform = default_platform()
    ctx = Context(target=tgt, platform=platform, config=SpecConfig(), server_url=server_url,
                  run_dir=run_dir, execute=execute, log=log)
    head = Header(target=f"sglang {tgt.version or '?'} [{tgt.origin}]", version=tgt.version or NA,
                  platform=platform)
    return ctx, head


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
    return _run(probe, ctx)


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


def fix_view(fix, target=None, platform: str | None = None) -> FixView:
    v = FixView(fix.id, getattr(fix, "title", fix.id), revertible=getattr(fix, "revertible", True),
                bench=getattr(fix, "bench", None))
    if target is not None and platform:
        try:
            a = fix.applies_to(target, platform)
            v.applicability, v.reason = a.status, a.reason
        except Exception as e:
            v.applicability, v.reason = "error", short_error(e)
    v.state = fix_state(fix)
    return v


def fix_state(fix) -> Any:
    try:
        if not fix.is_applied():
            return "not applied"
    except Exception:
        return NA
    patch = getattr(fix, "patch", None) or getattr(fix, "_patch", None)
    pending = getattr(patch, "pending", None)
    return "applied (pending import)" if pending else "applied"


def apply_fix(fix, target=None) -> str:
    """Apply in this process; the acknowledgement text (raises DiagError/FixError on refusal).

    A fix that needs the target's source to choose what to patch (`fix.target`) gets the TUI's.
    """
    if target is not None and getattr(fix, "target", False) is None:
        fix.target = target
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
    """Ask the engine's agents (through the run directory) to apply/revert a fix."""
    from diag.engine import rundir

    rid = rundir.request(run_dir, fix_id, action)
    return f"requested {action} of {fix_id} in the engine (request {rid}); waiting for the ack"


def discover_run_dirs() -> list[str]:
    """Run directories of live engines started under `diag run` (process scan + registry)."""
    from diag.engine import rundir

    return [str(p) for p in rundir.discover()]


class RunDirReader:
    """Tails a run directory's event files (`events-<pid>[.1].jsonl`, schema in `diag.engine.rundir`).

    Each poll reads only what was appended since the last one; the fix states and acks come from
    `rundir.read_state`, the one authority on them. Raises DiagError on an unsafe/missing dir.
    """

    MAX_EVENTS = 50_000

    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir
        self.offsets: dict[str, int] = {}
        self.events: deque[dict[str, Any]] = deque(maxlen=self.MAX_EVENTS)

    def poll(self) -> tuple[Any, list[dict[str, Any]]]:
        from pathlib import Path

        from diag.engine import rundir

        state = rundir.read_state(self.run_dir)
        d = Path(state.run_dir)
        new: list[dict[str, Any]] = []
        for path in sorted(d.glob("events-*.jsonl")):
            if path.name.count(".") > 1:
                continue  # a rotated file: its totals are in the new file's snapshot
            new.extend(self._tail(path))
        new.sort(key=lambda e: e.get("ts", 0))
        self.events.extend(new)
        return state, new

    def _tail(self, path) -> list[dict[str, Any]]:
        key = str(path)
        try:
            size = path.stat().st_size
            off = self.offsets.get(key, 0)
            if size < off:
                off = 0  # rotated: the file started over
            with open(path, "rb") as fh:
                fh.seek(off)
                chunk = fh.read(size - off)
        except OSError:
            return []
        end = chunk.rfind(b"\n") + 1  # a half-written last line waits for the next poll
        self.offsets[key] = off + end
        out = []
        for line in chunk[:end].splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if isinstance(ev, dict):
                out.append(ev)
        return out


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

    The first read (and one after a server restart, when the counts go down) gives the mean
    since the server started; an interval with no new observations gives no point for it.
    """

    def __init__(self, url: str, timeout: float = 2.0) -> None:
        self.url, self.timeout = url, timeout
        self._last: dict[str, tuple[float, float]] = {}  # label → (sum, count) at the last read

    def read(self) -> dict[str, float]:
        from diag import server

        return self.values(server.get_metrics(self.url, self.timeout))

    def values(self, got: Any) -> dict[str, float]:
        out, sums, counts = _series(got)
        for label, c in counts.items():
            s = sums.get(label, 0.0)
            ps, pc = self._last.get(label, (0.0, 0.0))
            self._last[label] = (s, c)
            if c < pc:
                ps, pc = 0.0, 0.0  # the server restarted: its histograms started over
            if c > pc:
                out[label] = (s - ps) / (c - pc)
        return out


# SGLang's /metrics names (SGLANG.md) → the TUI's labels; histograms read as sum/count.
SERVER_SERIES = {
    "sglang:inter_token_latency_seconds": ("inter-token latency", "s"),
    "sglang:request_time_per_output_token_seconds": ("time per output token", "s"),
    "sglang:time_per_output_token_seconds": ("time per output token", "s"),
    "sglang:spec_accept_length": ("accept length", "tokens"),
    "sglang:startup_cuda_graph_time_seconds": ("draft-extend capture time", "s"),
}


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

    ratio = Row.ratio  # after/before of the medians, exactly as `diag bench` reports it


@dataclass
class SyncRow:
    builder: str
    location: str
    before: Any = NA  # syncs per call without the fix
    after: Any = NA  # with it
    source: str = ""


def bench_rows(res: BenchResult) -> list[TimingRow]:
    if res.skipped:
        return [TimingRow(res.id, f"not run: {res.skipped}", "", None, None, "bench")]
    return [TimingRow(res.id, r.metric, r.unit, r.before, r.after, "bench", r.note or "")
            for r in res.rows]


def run_bench(fix, params: dict[str, Any], progress: Callable[[str], None]) -> BenchResult:
    """Run the fix's bench (`Fix.bench = "module:function"`); raises when it has none."""
    path = getattr(fix, "bench", None)
    if not path:
        raise DiagError(f"{fix.id} has no bench")
    module, attr = path.split(":")
    return getattr(importlib.import_module(module), attr)(dict(params), progress)


def _stats(xs: list[float]) -> Stats | None:
    return Stats.of(xs) if xs else None


def engine_view(events: list[dict[str, Any]]) -> tuple[list[TimingRow], list[SyncRow],
                                                       dict[str, list[float]]]:
    """From a run directory's events: timing rows split by the fix's state in that process at the
    time of each event (before = off, after = on), sync rows per builder, and chart series."""
    on: dict[tuple[Any, str], bool] = {}  # (pid, fix) → applied

    def mark(pid: Any, fid: Any, st: Any) -> None:
        if fid and st:
            on[(pid, fid)] = str(st) == "applied"

    de: dict[str, list[float]] = {"eager": [], "graph": []}
    syncs: dict[str, dict[bool, list[float]]] = {}
    sync_secs: dict[bool, list[float]] = {False: [], True: []}
    prof: dict[bool, list[float]] = {False: [], True: []}
    series: dict[str, list[float]] = {"syncs per call": [], "draft-extend step (s)": []}
    for e in events:
        kind, pid = e.get("kind"), e.get("pid")
        if kind in ("start", "snapshot"):
            for fid, st in (e.get("fixes") or {}).items():
                mark(pid, fid, (st or {}).get("state") if isinstance(st, dict) else st)
        elif kind in ("fix", "control_ack"):
            mark(pid, e.get("fix"), e.get("state"))
        elif kind == "syncs":
            b = str(e.get("builder", "?"))
            fixed = on.get((pid, "repeat-interleave-output-size"), False)
            n = float(e.get("count") or 0)
            syncs.setdefault(b, {False: [], True: []})[fixed].append(n)
            if e.get("seconds") is not None:
                sync_secs[fixed].append(float(e["seconds"]))
            series["syncs per call"].append(n)
        elif kind == "draft_extend" and e.get("seconds") is not None:
            mode = "graph" if e.get("mode") == "graph" else "eager"
            de[mode].append(float(e["seconds"]))
            series["draft-extend step (s)"].append(float(e["seconds"]))
        elif kind == "profiler_stop" and e.get("seconds") is not None:
            prof[on.get((pid, "profiler-controlled-teardown"), False)].append(float(e["seconds"]))
    rows: list[TimingRow] = []
    if de["eager"] or de["graph"]:
        rows.append(TimingRow("draft-extend-allowlist", "draft-extend step (eager → graph)", "s",
                              _stats(de["eager"]), _stats(de["graph"]), "run dir",
                              f"{len(de['eager'])} eager, {len(de['graph'])} graph passes"))
    if any(v[False] or v[True] for v in syncs.values()):
        allb = {k: [x for v in syncs.values() for x in v[k]] for k in (False, True)}
        rows.append(TimingRow("repeat-interleave-output-size", "syncs per metadata build",
                              "syncs", _stats(allb[False]), _stats(allb[True]), "run dir"))
    if sync_secs[False] or sync_secs[True]:
        rows.append(TimingRow("repeat-interleave-output-size", "metadata build host time", "s",
                              _stats(sync_secs[False]), _stats(sync_secs[True]), "run dir"))
    if prof[False] or prof[True]:
        rows.append(TimingRow("profiler-controlled-teardown", "profiler stop", "s",
                              _stats(prof[False]), _stats(prof[True]), "run dir"))
    srows = [SyncRow(b, "", _median(v[False]), _median(v[True]), "run dir")
             for b, v in sorted(syncs.items())]
    return rows, srows, series


def _median(xs: list[float]) -> Any:
    return Stats.of(xs).median if xs else NA


def finding_sync_rows(findings: list[Finding]) -> list[SyncRow]:
    """Per-builder syncs from the metadata-syncs finding, read from evidence `data` (never
    `detail`): measured counts first (`metric` with data.source `cpu-counter`/`gpu-sync-debug`),
    then the static census's sites grouped per builder (`location` with data.source `static`),
    those on the path under audit (data.reach `reaches`) before others."""
    measured: list[SyncRow] = []
    census: dict[str, SyncRow] = {}
    sites: dict[str, int] = {}
    for f in findings:
        if f.probe != "metadata-syncs":
            continue
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
                n = d.get("syncs", NA)
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


def fmt_time(s: float) -> str:
    a = abs(s)
    if a >= 1:
        return f"{s:.3g} s"
    if a >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    if a >= 1e-6:
        return f"{s * 1e6:.3g} µs"
    return f"{s * 1e9:.3g} ns"


def fmt_stats(s: Stats | None, unit: str) -> str:
    if s is None:
        return "-"
    if unit == "s":
        med = fmt_time(s.median)
        if not s.iqr:
            return med
        num, tu = med.split(" ")
        scale = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9}[tu]
        return f"{num} ± {s.iqr / scale:.2g} {tu}"
    return f"{s.median:.3g} ± {s.iqr:.2g}" if s.iqr else f"{s.median:.3g}"


def short_path(loc: str) -> str:
    """`sglang/srt/layers/attention/x.py:12` → `x.py:12` (the export keeps it whole)."""
    return loc.removeprefix("sglang/srt/layers/attention/").removeprefix("sglang/srt/")


def fmt_value(v: Any) -> str:
    if v is NA or v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def fmt_ratio(r: float | None) -> str:
    return f"{r:.3f}" if r is not None else "-"


# ---------------------------------------------------------------- export


def export_doc(header: Header, findings: list[FindingView], fix_rows: list[FixView],
               timings: list[TimingRow], syncs: list[SyncRow],
               sources: list[SourceState]) -> dict[str, Any]:
    """Everything on screen, as a JSON document (schema_version 1, `kind: diag-tui`)."""
    def st(s: Stats | None):
        return None if s is None else {"median": s.median, "p25": s.p25, "p75": s.p75,
                                       "min": s.min, "n": s.n}

    def val(v: Any):
        return None if v is NA else v

    return {
        "schema_version": 1,
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
                     "after": st(t.after), "ratio": t.ratio, "source": t.source, "note": t.note}
                    for t in timings],
        "syncs": [{"builder": s.builder, "location": s.location, "before": val(s.before),
                   "after": val(s.after), "source": s.source} for s in syncs],
        "sources": [{"name": s.name, "ok": s.ok, "text": s.text} for s in sources],
    }


def write_export(doc: dict[str, Any], path: str) -> str:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2, default=str)
    return path

