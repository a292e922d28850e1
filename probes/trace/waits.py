"""Host waits in a trace: every synchronize and blocking device-to-host copy, by the Python call
site (the innermost frame outside torch) and phase, with the GPU idle time that follows.

Why a copy is blocking: `Tensor.item()`/`.cpu()`/`.tolist()` issue a `cudaMemcpyAsync` and then
wait on the stream (`cudaStreamSynchronize`) before returning; a copy not followed by a wait on
its thread is asynchronous (`non_blocking=True`). The plain `cudaMemcpy`/`hipMemcpy` always block,
and so does `hipMemcpyWithStream`: torch on ROCm makes its blocking copies with it, no separate
wait call (`c10/cuda/CUDAFunctions.h` `memcpy_and_sync`, `TORCH_HIP_VERSION >= 301`).
"""

from __future__ import annotations

import bisect
import re
import statistics
from array import array
from collections import defaultdict

from diag.probes.trace.phases import Pass
from diag.probes.trace.reader import Frames, Trace

SYNC = re.compile(r"^(cuda|hip|cu)(Device|Stream|Event|Ctx)Synchronize")
COPY = re.compile(r"^(cuda|hip|cu)Memcpy")
BLOCKING_COPY = re.compile(r"^(cudaMemcpy|hipMemcpy|hipMemcpyDtoH|hipMemcpyWithStream|"
                           r"cuMemcpyDtoH)(_v\d+)?$")
D2H = re.compile(r"DtoH|DeviceToHost|Device -> (Pageable|Pinned)", re.I)
TORCH_FRAME = re.compile(r"^(<built-in|torch/|.*/torch/|nn\.Module:|<string>)")
NO_STACKS = ("the trace has no Python stacks (recorded without with_stack=True): host waits "
             "are counted and timed but cannot be tied to a call site")
NO_SYNC_EVENTS = ("no synchronize call in this ROCm trace: torch on ROCm waits inside "
                  "hipMemcpyWithStream (counted as blocking copies); waits of other kinds, if "
                  "any, are not visible here")


def waits(tr: Trace, ps: list[Pass]) -> list[dict]:
    """One record per host wait: kind, phase, call site, wait time, GPU idle after it."""
    rt_by_tid: dict[tuple, list[tuple]] = defaultdict(list)
    for r in tr.runtime:
        rt_by_tid[(r[3], r[4])].append(r)
    copy_dir: dict[object, str] = {}
    for g in tr.gpu:
        if g[0] == "gpu_memcpy" and g[6] is not None:
            copy_dir[g[6]] = g[1]
    gpu_starts = [g[2] for g in tr.gpu]
    stacks: _Stacks | None = None
    pass_idx = _passes_by_tid(ps)
    out: list[dict] = []
    for key, rts in rt_by_tid.items():
        skip = -1
        for i, (name, ts, end, _pid, _tid, corr) in enumerate(rts):
            if i == skip:
                continue
            kind = None
            w_end = end
            if COPY.match(name) and D2H.search(copy_dir.get(corr, "") + " " + name):
                nxt = rts[i + 1] if i + 1 < len(rts) else None
                if BLOCKING_COPY.match(name):
                    kind = "blocking D2H copy"
                elif nxt is not None and SYNC.match(nxt[0]):
                    kind, w_end, skip = "blocking D2H copy", nxt[2], i + 1
                else:
                    kind = "async D2H copy"
            elif SYNC.match(name):
                kind = name.split("_v")[0]
            if kind is None:
                continue
            if stacks is None and len(tr.frames):
                stacks = _Stacks(tr.frames)  # only for a trace with waits and stacks
            j = bisect.bisect_left(gpu_starts, w_end)
            idle = gpu_starts[j] - w_end if j < len(gpu_starts) else None
            out.append({"kind": kind, "call": name, "ts": ts, "wait_us": w_end - ts,
                        "gpu_idle_after_us": idle, "phase": _phase_at(pass_idx, key, ts),
                        "site": stacks.site(key, ts, w_end) if stacks else None})
    out.sort(key=lambda w: w["ts"])
    return out


def summary(tr: Trace, ws: list[dict]) -> dict:
    """The waits grouped by (kind, call site, phase), with what the trace cannot tell."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for w in ws:
        groups[(w["kind"], w["site"], w["phase"])].append(w)
    rows = []
    for (kind, site, phase), g in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        idles = [w["gpu_idle_after_us"] for w in g if w["gpu_idle_after_us"] is not None]
        rows.append({"kind": kind, "site": site, "phase": phase, "count": len(g),
                     "blocking": kind != "async D2H copy",
                     "wait_us_total": sum(w["wait_us"] for w in g),
                     "wait_us_median": statistics.median(w["wait_us"] for w in g),
                     "gpu_idle_after_us_median": statistics.median(idles) if idles else None,
                     "gpu_idle_after_us_total": sum(idles) if idles else None})
    notes = []
    if not len(tr.frames):
        notes.append(NO_STACKS)
    has_sync_names = any(SYNC.match(r[0]) for r in tr.runtime)
    if tr.platform == "rocm" and not has_sync_names:
        notes.append(NO_SYNC_EVENTS)
    if not tr.runtime:
        notes.append("the trace has no runtime calls (no GPU activity recorded): no waits can "
                     "be seen")
    return {"visible": bool(tr.runtime),
            "with_stacks": len(tr.frames) > 0,
            "blocking": sum(1 for w in ws if w["kind"] != "async D2H copy"),
            "async_copies": sum(1 for w in ws if w["kind"] == "async D2H copy"),
            "by_site": rows, "notes": notes}


class _Stacks:
    """The frames of one trace indexed for call-site lookups: per thread, frame indexes sorted by
    start (outer first), and Python id -> frame index (ids are small consecutive integers)."""

    def __init__(self, fr: Frames) -> None:
        self.fr = fr
        order = sorted(range(len(fr)), key=lambda i: (fr.ts[i], -fr.end[i]))
        per: dict[int, array] = defaultdict(lambda: array("l"))
        for i in order:
            per[fr.key[i]].append(i)
        self.by_key = {fr.keys[k]: (array("d", (fr.ts[i] for i in idx)), idx)
                       for k, idx in per.items()}
        top = max(fr.pyid, default=-1)
        self.by_id = array("l", [-1]) * (top + 1)
        for i, pid in enumerate(fr.pyid):
            if pid >= 0:
                self.by_id[pid] = i

    def site(self, key: tuple, ts: float, end: float) -> str | None:
        """The innermost frame outside torch that encloses [ts, end] (up the `Python parent
        id` chain from the innermost enclosing frame on the thread), or None."""
        got = self.by_key.get(key)
        if got is None:
            return None
        starts, idx = got
        fr = self.fr
        j = bisect.bisect_right(starts, ts) - 1
        inner = -1
        for k in range(j, max(j - 5000, -1), -1):  # the innermost enclosing frame starts last
            i = idx[k]
            if fr.ts[i] <= ts and fr.end[i] >= end:
                inner = i
                break
        first = fr.names[fr.name[inner]] if inner >= 0 else None
        for _ in range(200):
            if inner < 0:
                break
            name = fr.names[fr.name[inner]]
            if not TORCH_FRAME.match(name):
                return name
            parent = fr.parent[inner]
            inner = self.by_id[parent] if 0 <= parent < len(self.by_id) else -1
        return first


def _passes_by_tid(ps: list[Pass]) -> dict:
    by: dict[tuple, list[Pass]] = defaultdict(list)
    for p in ps:
        by[p.tid].append(p)
    return {k: ([p.ts for p in v], v) for k, v in by.items()}


def _phase_at(idx: dict, key: tuple, ts: float) -> str | None:
    if key not in idx:
        return None
    starts, ps = idx[key]
    i = bisect.bisect_right(starts, ts) - 1
    return ps[i].phase if i >= 0 and ps[i].end >= ts else None
