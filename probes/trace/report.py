"""The one document `diag trace` computes (schema diag/schemas/trace-v1.json): per file, per
rank and merged, per phase; host waits; completeness; the A/B against a baseline; findings.
The text report and the TUI tab render this document and nothing else."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Callable

from diag.probes.trace import complete as trace_complete
from diag.probes.trace import phases as trace_phases
from diag.probes.trace import waits as trace_waits
from diag.probes.trace.phases import PHASES, Pass
from diag.probes.trace.reader import Trace, read
from diag.probes.trace.verdict import agreement
from diag.schemas import SCHEMA_VERSION

GPU_NOT_RECORDED = "no GPU activity in the trace (CPU-only profile)"


def metric(value: float | None, why: str | None = None) -> dict:
    """A number with its trust: unreliable numbers carry the reason, never a bare value."""
    return {"value": value, "reliable": value is not None and why is None, "why": why}


def _spread(xs: list[float]) -> dict | None:
    if not xs:
        return None
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0], xs[0], xs[0]]
    return {"median": statistics.median(xs), "p25": q[0], "p75": q[2],
            "min": min(xs), "max": max(xs), "n": len(xs)}


def phase_stats(ps: list[Pass], unreliable: dict[str, str], gpu_recorded: bool) -> dict:
    """Per phase: passes, replays, eager passes with reasons, kernels per replay, launches,
    host and GPU time per pass (median and spread, per mode)."""
    out = {}
    for phase in PHASES:
        mine = [p for p in ps if p.phase == phase]
        if not mine:
            continue
        why = unreliable.get(phase) or (None if gpu_recorded else GPU_NOT_RECORDED)
        kpr = Counter(n for p in mine for _c, n, _g in p.replays)
        reasons = Counter(p.reason or "no reason shown in the trace"
                          for p in mine if p.mode == "eager")
        modes = {}
        for mode in ("graph", "eager", "unknown"):
            sub = [p for p in mine if p.mode == mode]
            if not sub:
                continue
            gpu = _spread([p.gpu_us for p in sub if p.gpu_us is not None])
            modes[mode] = {"passes": len(sub),
                           "launches": _spread([float(p.launches) for p in sub]),
                           "host_us": _spread([p.host_us for p in sub]),
                           "gpu_us": {"stats": gpu, "reliable": why is None, "why": why}}
        out[phase] = {"passes": len(mine),
                      "graph_replays": sum(p.graph_launches for p in mine),
                      "graph_passes": sum(1 for p in mine if p.mode == "graph"),
                      "eager_passes": sum(1 for p in mine if p.mode == "eager"),
                      "unknown_passes": sum(1 for p in mine if p.mode == "unknown"),
                      "eager_reasons": dict(reasons),
                      "kernels_per_replay": {"counts": {str(k): v for k, v in sorted(kpr.items())},
                                             "reliable": why is None, "why": why},
                      "batch_sizes": dict(sorted(Counter(str(p.bs) for p in mine).items())),
                      "by_mode": modes}
    return out


def analyse_file(tr: Trace, max_bs: int | None = None) -> tuple[dict, list[Pass]]:
    ps = trace_phases.passes(tr, max_bs)
    comp = trace_complete.check(tr, ps)
    ws = trace_waits.waits(tr, ps)
    doc = {"path": tr.path, "rank": tr.rank, "stage": tr.stage, "platform": tr.platform,
           "versions": tr.versions, "events": tr.events, "with_stacks": len(tr.frames) > 0,
           "annotations": trace_phases.annotation_counts(tr),
           "completeness": comp,
           "phases": phase_stats(ps, comp["unreliable_phases"], comp["gpu_recorded"]),
           "host_waits": trace_waits.summary(tr, ws)}
    return doc, ps


def _merge(files: list[tuple[dict, list[Pass]]]) -> dict:
    unreliable: dict[str, str] = {}
    for d, _ in files:
        for k, v in d["completeness"]["unreliable_phases"].items():
            unreliable.setdefault(k, f"{d['path']}: {v}")
    ps = [p for _, pl in files for p in pl]
    gpu = all(d["completeness"]["gpu_recorded"] for d, _ in files)
    return {"files": [d["path"] for d, _ in files],
            "phases": phase_stats(ps, unreliable, gpu)}


def expand(paths: list[str]) -> list[str]:
    """Paths as given, a directory replaced by the traces in it (`*.json`, `*.json.gz`, sorted):
    what `/start_profile` or stage profiling wrote, one file per rank or stage."""
    import os

    from diag.probes.trace.reader import TraceReadError

    out = []
    for p in paths:
        if os.path.isdir(p):
            found = sorted(os.path.join(p, n) for n in os.listdir(p)
                           if n.endswith((".json", ".json.gz"))
                           and os.path.isfile(os.path.join(p, n)))
            if not found:
                raise TraceReadError(f"{p}: a directory with no .json or .json.gz trace in it")
            out.extend(found)
        else:
            out.append(p)
    return out


def analyse(paths: list[str], max_bs: int | None = None) -> tuple[list[dict], list[dict], dict]:
    """(per file, per rank, merged across all) for the trace files `paths`."""
    files = []
    for path in expand(paths):
        tr = read(path)
        files.append(analyse_file(tr, max_bs))
        del tr
    by_rank: dict[object, list] = defaultdict(list)
    for f in files:
        by_rank[f[0]["rank"]].append(f)
    ranks = [{"rank": r, **_merge(fs)} for r, fs in sorted(by_rank.items(), key=lambda kv: str(kv[0]))]
    return [d for d, _ in files], ranks, _merge(files)


def _med(phase: dict, mode: str, what: str) -> float | None:
    m = phase.get("by_mode", {}).get(mode)
    if not m:
        return None
    s = m[what]["stats"] if what == "gpu_us" else m[what]
    return s["median"] if s else None


def _main_mode(phase: dict) -> str:
    """The mode most of the phase's passes ran in."""
    counts = {"graph": phase["graph_passes"], "eager": phase["eager_passes"],
              "unknown": phase["unknown_passes"]}
    return max(counts, key=lambda m: counts[m])


def compare(base: dict, cur: dict) -> list[dict]:
    """Per phase: mode and per-pass host/GPU time and launches, baseline -> this trace."""
    rows = []
    for phase in PHASES:
        b, c = base["phases"].get(phase), cur["phases"].get(phase)
        if b is None and c is None:
            continue
        row: dict = {"phase": phase, "baseline": None, "current": None}
        for side, ph in (("baseline", b), ("current", c)):
            if ph is None:
                continue
            mode = _main_mode(ph)
            gpu = ph["by_mode"][mode]["gpu_us"]
            row[side] = {"mode": mode, "passes": ph["passes"],
                         "graph_passes": ph["graph_passes"], "eager_passes": ph["eager_passes"],
                         "host_us_median": _med(ph, mode, "host_us"),
                         "gpu_us_median": metric(_med(ph, mode, "gpu_us"), gpu["why"]),
                         "launches_median": _med(ph, mode, "launches")}
        if b is not None and c is not None:
            bb, cc = row["baseline"], row["current"]
            row["mode_change"] = None if bb["mode"] == cc["mode"] else f"{bb['mode']} -> {cc['mode']}"
            row["host_us_delta"] = _delta(bb["host_us_median"], cc["host_us_median"])
            g_why = bb["gpu_us_median"]["why"] or cc["gpu_us_median"]["why"]
            row["gpu_us_delta"] = metric(_delta(bb["gpu_us_median"]["value"],
                                                cc["gpu_us_median"]["value"]), g_why)
            row["launches_delta"] = _delta(bb["launches_median"], cc["launches_median"])
        rows.append(row)
    return rows


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


def findings(files: list[dict], merged: dict, comparison: list[dict] | None,
             source_check: dict | None = None) -> list[dict]:
    """What the reader of the trace must know: incomplete records, unknown annotations,
    eager passes with no reason shown, phases that changed mode against the baseline."""
    out = []
    for f in files:
        c = f["completeness"]
        for why in c["lossy"]:
            out.append({"status": "warn", "title": "trace is lossy", "file": f["path"],
                        "detail": why})
        for phase, why in c["unreliable_phases"].items():
            if why not in c["lossy"]:
                out.append({"status": "warn", "title": f"{phase}: incomplete records",
                            "file": f["path"], "detail": why})
        unknown = [a["name"] for a in f["annotations"] if not a["known"]]
        if unknown:
            out.append({"status": "warn", "title": "annotations diag does not know",
                        "file": f["path"], "detail": ", ".join(unknown[:10])})
        for note in f["host_waits"]["notes"]:
            out.append({"status": "warn", "title": "host waits not fully visible",
                        "file": f["path"], "detail": note})
        if not any(f["phases"].values()) and f["annotations"]:
            out.append({"status": "warn", "title": "no speculative phase annotations",
                        "file": f["path"], "detail": "none of SGLang's draft/draft_extend/"
                        "step[...] annotations is in this trace"})
    for phase, ph in merged["phases"].items():
        unexplained = ph["eager_reasons"].get("no reason shown in the trace", 0)
        if unexplained and ph["graph_passes"]:
            out.append({"status": "warn", "title": f"{phase}: eager passes beside graph replays",
                        "file": None, "detail": f"{unexplained} of {ph['passes']} passes ran "
                        "eager with no reason the trace shows"})
    if source_check is not None and source_check["agrees"] is False:
        out.append({"status": "fail", "title": "draft-extend: the trace disagrees with the "
                    f"release's source (sglang {source_check['source']['release']})",
                    "file": None, "detail": source_check["detail"]})
    for row in comparison or []:
        if row.get("mode_change"):
            out.append({"status": "warn", "title": f"{row['phase']}: {row['mode_change']} "
                        "against the baseline", "file": None,
                        "detail": f"host per pass {row['host_us_delta']:+.1f} us"
                        if row.get("host_us_delta") is not None else ""})
    return out


def build(paths: list[str], baseline: list[str] | None = None,
          source: Callable[[str], dict] | None = None, max_bs: int | None = None) -> dict:
    """The whole `diag trace` document. `source(platform)` gives the release's draft-extend
    verdict (probes.trace.verdict.source_verdict) for the trace's platform, when asked for."""
    files, ranks, merged = analyse(paths, max_bs)
    doc = {"schema_version": SCHEMA_VERSION, "kind": "trace", "files": files, "ranks": ranks,
           "merged": merged, "baseline": None, "compare": None, "source_check": None}
    if baseline:
        bfiles, _branks, bmerged = analyse(baseline, max_bs)
        doc["baseline"] = {"files": bfiles, "merged": bmerged}
        doc["compare"] = compare(bmerged, merged)
    if source is not None:
        plats = {f["platform"] for f in files}
        plat = "hip" if "rocm" in plats else "cuda"
        doc["source_check"] = agreement(source(plat), merged["phases"])
    doc["findings"] = findings(files, merged, doc["compare"], doc["source_check"])
    return doc
