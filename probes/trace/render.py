"""The text form of the `diag trace` document (the JSON is the stable format; this is not)."""

from __future__ import annotations


def _us(x: float | None) -> str:
    return "-" if x is None else f"{x / 1000:.3f} ms" if x >= 1000 else f"{x:.1f} us"


def _stats(s: dict | None) -> str:
    if not s:
        return "-"
    return f"{_us(s['median'])} [{_us(s['p25'])}..{_us(s['p75'])}]"


def _gpu(g: dict) -> str:
    if g["stats"] is None:
        return "-" if g["why"] is None else f"not recorded ({g['why']})"
    if not g["reliable"]:
        val = f"~{_stats(g['stats'])} " if g["stats"] else ""
        return f"{val}UNRELIABLE ({g['why']})"
    return _stats(g["stats"])


def phase_lines(phases: dict, indent: str = "  ") -> list[str]:
    lines = []
    for phase, ph in phases.items():
        kpr = ph["kernels_per_replay"]
        k = ", ".join(f"{n} x{c}" for n, c in kpr["counts"].items()) or "-"
        if kpr["counts"] and not kpr["reliable"]:
            k += " (UNRELIABLE)"
        lines.append(f"{indent}{phase}: {ph['passes']} passes, {ph['graph_passes']} graph "
                     f"({ph['graph_replays']} replays), {ph['eager_passes']} eager"
                     + (f", {ph['unknown_passes']} graph/eager unknown (no runtime calls "
                        "recorded)" if ph["unknown_passes"] else "") + "; "
                     f"kernels/replay {k}")
        for reason, n in ph["eager_reasons"].items():
            lines.append(f"{indent}    eager x{n}: {reason}")
        for mode, m in ph["by_mode"].items():
            launches = m["launches"]["median"] if m["launches"] else None
            lines.append(f"{indent}    {mode}: host {_stats(m['host_us'])}, "
                         f"GPU busy {_gpu(m['gpu_us'])}, launches/pass "
                         f"{'-' if launches is None else f'{launches:g}'}")
    return lines or [f"{indent}no speculative phase annotations found"]


def render(doc: dict) -> str:
    out = []
    for f in doc["files"]:
        head = [f"platform {f['platform']}"]
        if f["rank"] is not None:
            head.append(f"rank {f['rank']}")
        if f["stage"]:
            head.append(f"stage {f['stage']}")
        head += [f"{k} {v}" for k, v in f["versions"].items()]
        out.append(f"{f['path']}: {f['events']} events, " + ", ".join(head))
        c = f["completeness"]
        out.append("  completeness: " + ("complete" if c["complete"] else "INCOMPLETE"))
        for g in c["graphs"]:
            if not g["complete"]:
                out.append(f"    {g['phase']} bs={g['bs']}: {g['why']}")
        out.extend(f"    lossy: {why}" for why in c["lossy"])
        if c["ungrouped_replays"]:
            out.append(f"    {c['ungrouped_replays']} graph replays outside SGLang's phases "
                       "without graph ids: not checked")
        out.extend(phase_lines(f["phases"]))
        w = f["host_waits"]
        out.append(f"  host waits: {w['blocking']} blocking, {w['async_copies']} async copies")
        for r in w["by_site"][:12]:
            out.append(f"    {r['count']:>5} x {r['kind']} in {r['phase'] or 'no phase'} at "
                       f"{r['site'] or '(no stack)'}: wait {_us(r['wait_us_median'])}, GPU idle "
                       f"after {_us(r['gpu_idle_after_us_median'])} (medians)")
        out.extend(f"    note: {n}" for n in w["notes"])
        unknown = [a for a in f["annotations"] if not a["known"]]
        if unknown:
            out.append("  annotations diag does not know: " + ", ".join(
                f"{a['name']} x{a['count']}" for a in unknown[:10]))
    if len(doc["files"]) > 1:
        for r in doc["ranks"]:
            out.append(f"rank {r['rank']} ({len(r['files'])} files):")
            out.extend(phase_lines(r["phases"]))
        out.append("all files merged:")
        out.extend(phase_lines(doc["merged"]["phases"]))
    if doc["compare"] is not None:
        out.append("against the baseline (" + ", ".join(doc["baseline"]["merged"]["files"]) + "):")
        for row in doc["compare"]:
            if row["baseline"] is None or row["current"] is None:
                side = "only in the baseline" if row["current"] is None else "not in the baseline"
                out.append(f"  {row['phase']}: {side}")
                continue
            b, c = row["baseline"], row["current"]
            g = row["gpu_us_delta"]
            gs = "-" if g["value"] is None else f"{g['value']:+.1f} us" + (
                "" if g["reliable"] else f" UNRELIABLE ({g['why']})")
            hs = "-" if row["host_us_delta"] is None else f"{row['host_us_delta']:+.1f} us"
            ls = "-" if row["launches_delta"] is None else f"{row['launches_delta']:+g}"
            out.append(f"  {row['phase']}: {b['mode']} -> {c['mode']}, host/pass {hs}, "
                       f"GPU/pass {gs}, launches/pass {ls}")
    sc = doc.get("source_check")
    if sc is not None:
        src = sc["source"]
        verdict = {True: "agrees", False: "DISAGREES", None: "cannot tell"}[sc["agrees"]]
        out.append(f"source check (sglang {src['release']}, {src['platform']}, "
                   f"{src['attention_backend']}): draft-extend {src['mode']} by the source; "
                   f"the trace {verdict}: {sc['detail']}")
    fs = doc["findings"]
    out.extend(f"{x['status'].upper()}: {x['title']}" + (f" ({x['file']})" if x["file"] else "")
               + (f": {x['detail']}" if x["detail"] else "") for x in fs)
    out.append(f"{len(doc['files'])} file(s), {len(fs)} finding(s)")
    return "\n".join(out)


PHASE_COLUMNS = ("phase", "passes", "graph", "eager", "unknown", "replays", "kernels/replay",
                 "host/pass", "GPU/pass", "launches/pass", "eager why")


def _main(ph: dict) -> dict | None:
    modes = ph["by_mode"]
    key = max(modes, key=lambda m: modes[m]["passes"]) if modes else None
    return modes.get(key) if key else None


def phase_rows(phases: dict) -> list[tuple[str, ...]]:
    """One row per phase for a table (the TUI's Trace tab), from the same document: times are
    the medians of the mode most passes ran in; an unreliable GPU figure says so."""
    rows = []
    for phase, ph in phases.items():
        kpr = ph["kernels_per_replay"]
        k = ", ".join(f"{n}x{c}" for n, c in kpr["counts"].items()) or "-"
        if kpr["counts"] and not kpr["reliable"]:
            k = "UNRELIABLE " + k
        m = _main(ph)
        gpu = "-"
        if m is not None:
            g = m["gpu_us"]
            gpu = ("not recorded" if g["stats"] is None else
                   _us(g["stats"]["median"]) if g["reliable"] else
                   "UNRELIABLE ~" + _us(g["stats"]["median"]))
        launches = m["launches"]["median"] if m is not None and m["launches"] else None
        why = "; ".join(f"{n}x {r.split(':')[0]}" for r, n in ph["eager_reasons"].items())
        rows.append((phase, str(ph["passes"]), str(ph["graph_passes"]), str(ph["eager_passes"]),
                     str(ph["unknown_passes"]), str(ph["graph_replays"]), k,
                     _us(m["host_us"]["median"]) if m and m["host_us"] else "-", gpu,
                     "-" if launches is None else f"{launches:g}", why or "-"))
    return rows
