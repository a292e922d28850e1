"""The fleet view: per-instance diag state read from a Prometheus server's HTTP API.

Every SGLang server's `/metrics` carries the `diag_*` series its engine processes record
(`diag.engine.metrics`). Prometheus scrapes them with the `instance` and `job` labels; this module asks
Prometheus (`/api/v1/query`, `/api/v1/query_range`, stdlib urllib with a timeout) for, per
instance: which fixes are on, syncs per step, the draft-extend eager share, SGLang's own latency
and acceptance series, and a before/after split wherever a fix changed state in the window.
Headless (no click, no textual) so the TUI can use it as one more source.
"""

from __future__ import annotations

import http.client
import json
import math
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from diag.engine import events
from diag.errors import DiagError, ServerError, one_line
from diag.schemas import SCHEMA_VERSION
from diag.server import MAX_BYTES, check_url, open_within, read_within, redirected

BY = "job, instance"
# Before/after figures for at most this many changes (the most recent): each costs two windows
# of ~11 queries, and a flapping fix or a fleet-wide restart would otherwise mean thousands.
MAX_COMPARED_CHANGES = 16
Key = tuple[str, str]  # (job, instance)

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_window(text: str) -> int:
    """'15m' → 900; Prometheus-style durations (s, m, h, d, w), one unit or several ('1h30m')."""
    parts = re.fullmatch(r"(?:\d+[smhdw])+", text.strip())
    if not parts:
        raise ValueError(f"{text!r} is not a duration like 30s, 15m, 1h or 1h30m")
    seconds = sum(int(n) * _UNITS[u] for n, u in re.findall(r"(\d+)([smhdw])", text))
    if seconds < 10:
        raise ValueError(f"{text!r} is too short: give at least 10s (a few scrapes)")
    return seconds


class Prometheus:
    """A thin client of the Prometheus HTTP API (instant and range queries)."""

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        url = url.strip().rstrip("/")
        if not re.match(r"^https?://[^/\s]+", url):
            raise DiagError(f"--prometheus {_clip(repr(url))} is not an http(s) URL",
                            exit_code=2)
        try:  # a host and a port 1-65535, no credentials, as --server (a usage error)
            check_url(url)
            parts = urllib.parse.urlsplit(url)
        except ValueError as e:
            raise DiagError(f"--prometheus {e}", exit_code=2) from None
        if parts.query or parts.fragment:  # the API's paths go after it: a query would end it
            raise DiagError(f"--prometheus {_clip(repr(url))}: a query (?…) or fragment (#…) is "
                            "not part of a Prometheus base URL", exit_code=2)
        self.url = url
        self.timeout = timeout

    def _get(self, path: str, params: dict[str, str]) -> Any:
        full = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        what = f"Prometheus at {self.url}"
        end = time.monotonic() + self.timeout
        try:
            with open_within(full, self.timeout, what) as (resp, end):
                body = read_within(resp, end, what, self.timeout)
        except urllib.error.HTTPError as e:
            raise ServerError(f"{what} answered HTTP {e.code}{redirected(e)}"
                              + self._error_text(e, end)) from None
        except (urllib.error.URLError, OSError, TimeoutError) as e:
            reason = getattr(e, "reason", e)
            if isinstance(reason, TimeoutError):  # it took the connection: not unreachable
                raise ServerError(f"{what}: no answer within {self.timeout:g} s") from None
            raise ServerError(f"{what} is unreachable: {_clip(one_line(reason))}") from None
        except http.client.HTTPException as e:  # cut short, a bad status line
            raise ServerError(f"Prometheus at {self.url} broke off its answer "
                              f"({type(e).__name__}: {_clip(e)})") from None
        if len(body) > MAX_BYTES:
            raise ServerError(f"Prometheus at {self.url}: answer larger than {MAX_BYTES} bytes")
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):
            raise ServerError(f"{self.url} did not answer like a Prometheus API "
                              f"({path} returned no JSON)") from None
        unlike = f"{self.url} did not answer like a Prometheus API ({path}"
        if not isinstance(doc, dict):
            raise ServerError(f"{unlike} returned {_json_kind(doc)}, not an object with "
                              "status and data)")
        if doc.get("status") == "error":
            err = doc.get("error")
            raise ServerError(f"Prometheus at {self.url}: query failed: "
                              f"{_clip(err) if err else 'no error given'}")
        if doc.get("status") != "success":
            raise ServerError(f"{unlike}: status is {_clip(repr(doc.get('status')))}, not "
                              "'success' or 'error')")
        data = doc.get("data")
        if data is not None and not isinstance(data, dict):
            raise ServerError(f"{unlike}: data is {_json_kind(data)}, not an object)")
        return self._result(data or {}, path)

    def _error_text(self, e: urllib.error.HTTPError, deadline: float) -> str:
        """`: ERROR` from an error answer's JSON body, read within the same deadline as an
        answer (a body sent a byte at a time must not hold the command); "" without one."""
        try:
            body = read_within(e, deadline, "", self.timeout)
            err = json.loads(body).get("error")
        except (ServerError, OSError, http.client.HTTPException, ValueError, AttributeError,
                RecursionError):
            return ""
        return f": {_clip(one_line(err))}" if err else ""

    def _result(self, data: Any, path: str) -> list[dict]:
        """`data.result` as a list of series objects, or ServerError: an answer of another
        shape is the server's fault (exit 3), not diag's."""
        result = data.get("result") if isinstance(data, dict) else None
        result = [] if result is None and isinstance(data, dict) else result
        if not isinstance(result, list) or not all(_series_shape(r) for r in result):
            raise ServerError(f"{self.url} did not answer like a Prometheus API ({path}: "
                              "data.result is not a list of series)")
        return result

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self._get("/api/v1/query", params)

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}",
                  "step": f"{step:g}"}
        return self._get("/api/v1/query_range", params)


def _json_kind(v: Any) -> str:
    return {list: "a JSON list", str: "a JSON string", bool: "a JSON boolean", int: "a number",
            float: "a number", dict: "an object"}.get(type(v), "null")


def _clip(v: Any, limit: int = 80) -> str:
    s = one_line(v)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _series_shape(r: Any) -> bool:
    """One series of a vector (`value: [t, v]`) or matrix (`values: [[t, v], ...]`) answer."""
    def pair(p: Any) -> bool:
        return isinstance(p, list) and len(p) == 2 and _value(p[0]) is not None

    if not isinstance(r, dict) or not isinstance(r.get("metric", {}), dict) \
            or not all(isinstance(v, str) for v in r.get("metric", {}).values()):
        return False  # Prometheus's label values are strings
    if "value" in r and not pair(r["value"]):
        return False
    try:
        return all(pair(p) for p in r.get("values", []))
    except TypeError:
        return False


def _value(raw: Any) -> float | None:
    try:
        v = float(raw)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) or math.isinf(v) else v


def _key(metric: dict[str, str]) -> Key:
    return (metric.get("job", ""), metric.get("instance", ""))


def _by_key(result: list[dict], extra: str | None = None) -> dict:
    """Vector result → {key: value} or {key: {extra_label: value}}."""
    out: dict = {}
    for item in result:
        v = _value((item.get("value") or [None, None])[1])
        k = _key(item.get("metric") or {})
        if extra is None:
            out[k] = v
        else:
            out.setdefault(k, {})[(item.get("metric") or {}).get(extra, "")] = v
    return out


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or not den:
        return None
    return num / den


def _sglang(name: str, suffix: str = "", matchers: str = "") -> str:
    """A selector for SGLang's series `sglang:NAME`, also matching `sglang_NAME`.

    prometheus_client 0.26 writes sample names with `:` turned into `_` in its OpenMetrics
    output (its HELP/TYPE lines keep the colon), and Prometheus asks for OpenMetrics first, so a
    scraped SGLang server may store either spelling.
    """
    extra = f", {matchers}" if matchers else ""
    return f'{{__name__=~"sglang[:_]{re.escape(name + suffix)}"{extra}}}'


def _mean_expr(hist: str, rng: str, extra: str = "") -> str:
    """Mean of a histogram over the range: increase of _sum over increase of _count."""
    by = f"{BY}, {extra}" if extra else BY
    if hist.startswith("sglang:"):
        s, c = (_sglang(hist[len("sglang:"):], suffix) for suffix in ("_sum", "_count"))
    else:
        s, c = f"{hist}_sum", f"{hist}_count"
    return (f"sum by ({by}) (increase({s}[{rng}])) / "
            f"sum by ({by}) (increase({c}[{rng}]))")


def window_stats(prom: Prometheus, seconds: int, at: float) -> dict[Key, dict[str, Any]]:
    """The rates and means over [at - seconds, at], per instance (None where no data): each
    counter event kind's figures (`CounterEvent.fleet_window`), then SGLang's own series."""
    rng = f"{max(1, int(seconds))}s"

    def q(expr: str, extra: str | None = None) -> dict:
        return _by_key(prom.query(expr, at), extra)

    figures: list[dict[Key, dict[str, Any]]] = [
        c.fleet_window(q, BY, rng) for c in events.counter_kinds()]
    itl = q(_mean_expr("sglang:inter_token_latency_seconds", rng))
    tpot = q(_mean_expr("sglang:request_time_per_output_token_seconds", rng))
    accept = q(f"avg by ({BY}) (avg_over_time({_sglang('spec_accept_length')}[{rng}]))")

    keys = set(itl) | set(tpot) | set(accept)
    for f in figures:
        keys |= set(f)
    out: dict[Key, dict[str, Any]] = {}
    for k in keys:
        row: dict[str, Any] = {}
        for c, f in zip(events.counter_kinds(), figures):
            row.update(f.get(k) or c.fleet_window_empty())
        row.update({"inter_token_latency_mean_s": itl.get(k),
                    "time_per_output_token_mean_s": tpot.get(k),
                    "spec_accept_length": accept.get(k)})
        out[k] = row
    return out


@dataclass
class Change:
    """A fix whose number of processes in state `applied` changed inside the window."""

    fix: str
    at: float  # first sample with the new value
    before_until: float  # last sample with the old value
    applied_before: float
    applied_after: float

    @property
    def direction(self) -> str:
        return "applied" if self.applied_after > self.applied_before else "reverted"


def find_changes(prom: Prometheus, start: float, end: float, step: float
                 ) -> dict[Key, list[Change]]:
    """Points in the window where a fix's `applied` count changed, per instance."""
    result = prom.query_range(
        f'sum by ({BY}, fix) (diag_fix_state{{state="applied"}})', start, end, step)
    out: dict[Key, list[Change]] = {}
    for series in result:
        metric = series.get("metric") or {}
        points = [(float(t), _value(v)) for t, v in series.get("values") or []]
        points = [(t, v) for t, v in points if v is not None]
        if not points:
            continue
        prev_t, prev_v = points[0]
        if prev_t > start + 2 * step and prev_v > 0:
            # The series appeared inside the window already applied: it was absent (0) before.
            out.setdefault(_key(metric), []).append(
                Change(metric.get("fix", ""), prev_t, prev_t - step, 0.0, prev_v))
        found = out.setdefault(_key(metric), [])
        for t, v in points[1:]:
            if v != prev_v:
                last = found[-1] if found else None
                if last and last.fix == metric.get("fix", "") and prev_t - last.at <= step \
                        and (v > prev_v) == (last.applied_after > last.applied_before):
                    # One roll-out seen across adjacent steps (rank 1 flipped a scrape before
                    # rank 2): one change, from the first old value to the last new one.
                    last.at, last.applied_after = t, v
                else:
                    found.append(Change(metric.get("fix", ""), t, prev_t, prev_v, v))
            prev_t, prev_v = t, v
    return {k: v for k, v in out.items() if v}


@dataclass
class FleetReport:
    prometheus: str
    window_s: int
    end: float
    instances: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "prometheus": self.prometheus,
                "window_s": self.window_s, "end": self.end, "instances": self.instances}


def _fix_summary(states: dict[str, float | None]) -> dict[str, Any]:
    counts = {s: int(v) for s, v in states.items() if v}
    applied = counts.get("applied", 0)
    others = sum(n for s, n in counts.items() if s != "applied")
    if applied and not others:
        summary = "on"
    elif applied:
        summary = f"partial ({applied} of {applied + others} processes)"
    elif counts:
        summary = max(counts, key=lambda s: counts[s])
    else:
        summary = "unknown"
    return {"state": summary, "processes": counts}


def collect(url: str, window_s: int = 900, timeout: float = 5.0,
            end: float | None = None, prom: Prometheus | None = None) -> FleetReport:
    """Query Prometheus once and build the per-instance report."""
    prom = prom or Prometheus(url, timeout=timeout)
    end = time.time() if end is None else end
    start = end - window_s
    instances = _by_key(prom.query(
        f'group by ({BY}) ({{__name__=~"diag_.+|sglang[:_].+"}})', end))
    processes = _by_key(prom.query(f"sum by ({BY}) (diag_agent_processes)", end))
    fix_states: dict[Key, dict[str, dict[str, float | None]]] = {}
    for item in prom.query(f"sum by ({BY}, fix, state) (diag_fix_state)", end):
        m = item.get("metric") or {}
        fix_states.setdefault(_key(m), {}).setdefault(m.get("fix", ""), {})[
            m.get("state", "")] = _value((item.get("value") or [None, None])[1])
    capture_sel = _sglang("startup_cuda_graph_time_seconds", matchers='phase="draft_extend"')
    capture = _by_key(prom.query(f"max by ({BY}) ({capture_sel})", end))

    whole = window_stats(prom, window_s, end)
    step = max(1.0, window_s / 500)
    changes = find_changes(prom, start, end, step)

    report = FleetReport(prometheus=prom.url, window_s=window_s, end=end)
    keys = sorted(set(instances) | set(processes) | set(fix_states) | set(whole))
    cache: dict[tuple[int, float], dict[Key, dict[str, Any]]] = {}

    def stats(seconds: float, at: float) -> dict[Key, dict[str, Any]]:
        ck = (int(seconds), round(at, 3))
        if ck not in cache:
            cache[ck] = window_stats(prom, int(seconds), at) if seconds >= 1 else {}
        return cache[ck]

    compared = {id(ch) for ch in sorted((c for cs in changes.values() for c in cs),
                                        key=lambda c: c.at, reverse=True)[:MAX_COMPARED_CHANGES]}
    for k in keys:
        fixes = {f: _fix_summary(s)
                 for f, s in sorted((fix_states.get(k) or {}).items())}
        row: dict[str, Any] = {
            "job": k[0], "instance": k[1],
            "processes": int(processes[k]) if processes.get(k) is not None else None,
            "fixes": fixes,
            "fixes_on": [f for f, s in fixes.items() if s["state"] == "on"],
            **(whole.get(k) or {f: v for c in events.counter_kinds()
                                 for f, v in c.fleet_defaults.items()}),
            "draft_extend_capture_s": capture.get(k),
            "changes": [],
        }
        for ch in changes.get(k, []):
            before = after = None
            if id(ch) in compared:
                before = stats(ch.before_until - start, ch.before_until).get(k)
                after = stats(end - ch.at, end).get(k)
            row["changes"].append({
                "fix": ch.fix, "direction": ch.direction, "at": ch.at,
                "applied_processes": [ch.applied_before, ch.applied_after],
                "before": before, "after": after,
            })
        report.instances.append(row)
    return report


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "NA"
    if unit == "s":
        return f"{v * 1e3:.3g} ms"
    if unit == "%":
        return f"{v * 100:.1f} %"
    return f"{v:.3g}"


_COMPARED = (*(f for c in events.counter_kinds() for f in c.fleet_compared),
             ("inter_token_latency_mean_s", "ITL mean", "s"),
             ("time_per_output_token_mean_s", "TPOT mean", "s"),
             ("spec_accept_length", "accept length", ""))


def render(report: FleetReport) -> str:
    """Human text (not a stable format: use --json for scripts)."""
    mins = report.window_s / 60
    lines = [f"diag fleet: {len(report.instances)} instance(s) in {report.prometheus}, "
             f"window {mins:g} min"]
    for r in report.instances:
        procs = "NA" if r["processes"] is None else str(r["processes"])
        lines.append(f"\n{r['instance']} (job {r['job'] or '-'}): {procs} process(es) with diag")
        if r["fixes"]:
            lines.append("  fixes: " + ", ".join(f"{f} {s['state']}" for f, s in r["fixes"].items()))
        else:
            lines.append("  fixes: none reported (no diag agent, or no PROMETHEUS_MULTIPROC_DIR)")
        lines.append("  " + "   ".join(f"{label} {_fmt(r.get(name), unit)}"
                                       for name, label, unit in _COMPARED))
        de = r.get("draft_extend_mean_s") or {}
        if de:
            lines.append("  draft-extend pass mean: " + ", ".join(
                f"{m} {_fmt(v, 's')}" for m, v in sorted(de.items())))
        cap = r.get("draft_extend_capture_s")
        if cap is not None:
            lines.append(f"  draft-extend graph capture: {cap:.3g} s"
                         + ("  (0: not captured, runs eager)" if cap == 0 else ""))
        for ch in r["changes"]:
            when = time.strftime("%H:%M:%S", time.localtime(ch["at"]))
            lines.append(f"  {ch['fix']} {ch['direction']} at {when}:")
            if ch["before"] is None and ch["after"] is None:
                lines.append(f"    not compared (only the {MAX_COMPARED_CHANGES} most recent "
                             "changes are)")
            for name, label, unit in _COMPARED:
                b = (ch["before"] or {}).get(name)
                a = (ch["after"] or {}).get(name)
                if b is None and a is None:
                    continue
                ratio = f"  ({a / b:.3g}x)" if a is not None and b else ""
                lines.append(f"    {label:<20} {_fmt(b, unit):>10} -> {_fmt(a, unit):>10}{ratio}")
    if not report.instances:
        lines.append("no instance has diag_* or sglang:* series in this Prometheus")
    return "\n".join(lines)
