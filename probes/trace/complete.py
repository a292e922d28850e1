"""Can the trace be trusted? Per captured graph, the kernels recorded per replay must be equal
across its replays; tracer and runtime versions come from the metadata; known lossy
combinations are named. What fails here turns the GPU metrics it feeds into unreliable ones.

Lossy combinations known:
- torch's vendored roctracer with HIP graph replays: kernels of replays are lost (sglang issue
  #35390: 448 of 512 kernels of one replay; 87 % of a server's decode kernels), and tools fold
  a replay into one `hipGraphLaunch` row (TraceLens issue #827).
"""

from __future__ import annotations

from collections import Counter, defaultdict

from diag.probes.trace.phases import GRAPH_LAUNCH, Pass
from diag.probes.trace.reader import Trace

ROCTRACER_GRAPHS = ("HIP graph replays recorded by roctracer (torch's Kineto without "
                    "rocprofiler-sdk) lose kernels (sglang #35390: 448 of 512 in one replay; "
                    "TraceLens #827): GPU time and kernels per replay undercount")


def check(tr: Trace, ps: list[Pass]) -> dict:
    """The completeness verdict of one file: per graph, per phase, and the tracer's."""
    graphs: dict[tuple, Counter] = defaultdict(Counter)
    in_pass = {r[0]: p for p in ps for r in p.replays if r[0] is not None}
    kernels: dict[object, list] = defaultdict(list)
    for g in tr.gpu:
        if g[0] == "kernel" and g[6] is not None:
            kernels[g[6]].append(g[7])
    ungrouped = 0
    for name, _ts, _end, _pid, _tid, corr in tr.runtime:
        if not GRAPH_LAUNCH.match(name):
            continue
        ks = kernels.get(corr, []) if corr is not None else []
        gid = next((k for k in ks if k is not None), None)
        p = in_pass.get(corr)
        if gid is not None:
            key = ("graph", gid)
        elif p is not None:
            key = ("phase,bs", p.phase, p.bs)
        else:  # no graph id, outside SGLang's phases: no way to tell which graph it replayed
            ungrouped += 1
            continue
        graphs[key][len(ks)] += 1
    rows, bad_phases = [], {}
    for key, counts in graphs.items():
        phase = key[1] if key[0] == "phase,bs" else _phase_of(ps, key[1])
        equal = len(counts) == 1
        empty = 0 in counts
        why = None
        if empty:
            why = f"{counts[0]} replay(s) with no kernel recorded"
        elif not equal:
            why = "kernels per replay differ across replays of one graph: " + ", ".join(
                f"{n} kernels x{c}" for n, c in sorted(counts.items()))
        if why:
            bad_phases.setdefault(phase or "outside phases", why)
        rows.append({"graph": key[1] if key[0] == "graph" else None, "phase": phase,
                     "bs": key[2] if key[0] == "phase,bs" else None,
                     "kernels_per_replay": {str(n): c for n, c in sorted(counts.items())},
                     "complete": why is None, "why": why})
    lossy = []
    has_hip_graphs = any(GRAPH_LAUNCH.match(r[0]) and r[0].startswith("hip") for r in tr.runtime)
    # Kineto on ROCm traces through roctracer unless it names rocprofiler-sdk in the metadata
    # (a real ROCm 6.2 trace names neither: the tracer is then roctracer, Kineto's default)
    if tr.platform == "rocm" and "rocprofiler-sdk_version" not in tr.meta and has_hip_graphs:
        lossy.append(ROCTRACER_GRAPHS)
        for p in ps:
            if p.replays:
                bad_phases.setdefault(p.phase, ROCTRACER_GRAPHS)
    graph_key_note = None
    if any(k[0] == "phase,bs" for k in graphs):
        graph_key_note = ("kernels carry no graph id: replays are grouped by phase and batch "
                          "size, one graph per (phase, bs) as SGLang captures them")
    return {"graphs": sorted(rows, key=lambda r: (r["phase"] or "", r["bs"] or 0,
                                                  str(r["graph"]))),
            "lossy": lossy, "unreliable_phases": bad_phases, "graph_key_note": graph_key_note,
            "ungrouped_replays": ungrouped,
            "gpu_recorded": bool(tr.gpu), "complete": not bad_phases and not lossy}


def _phase_of(ps: list[Pass], gid: object) -> str | None:
    for p in ps:
        if any(r[2] == gid for r in p.replays):
            return p.phase
    return None
