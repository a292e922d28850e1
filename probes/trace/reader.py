"""Stream a torch-profiler (Kineto) Chrome trace into the few compact records `diag trace` needs.

A 200 MB trace holds ~1e6 events; loading it as JSON needs gigabytes. The events are streamed
with ijson (its C backend) from the plain or gzip file and only what the per-phase views read is
kept, as tuples: user annotations, runtime calls, GPU activities, Python frames.
"""

from __future__ import annotations

import gzip
import os
import re
from array import array
from dataclasses import dataclass, field

from diag.errors import DiagError

# Kineto writes these before `traceEvents` (libkineto CuptiActivityProfiler / RoctracerActivityApi
# `addVersionMetadata`); the keys after the list (traceName, baseTimeNanoseconds) are not read.
VERSION_KEYS = ("cupti_version", "cuda_runtime_version", "cuda_driver_version",
                "roctracer_version", "rocprofiler-sdk_version", "hip_runtime_version",
                "hip_driver_version")

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "hip_runtime", "hip_api", "runtime"}
# SGLang 0.5.23 `utils/profile_utils.py` build_step_span_name: `step[{stage} bs={bs}...]`
# stage profiling file names: `-{ForwardMode.name}` (0.5.23 profiler_manager.py:338) and, with
# SGLANG_PROFILE_V2, `-prefill`/`-decode`
STAGE_FILE = re.compile(r"-(EXTEND|DECODE|TARGET_VERIFY|MIXED|IDLE|prefill|decode)"
                        r"\.trace\.json", re.I)
TP_RANK = re.compile(r"-TP-(\d+)")


class Frames:
    """Python frames (`python_function` events, with_stack=True) in flat arrays: a server trace
    holds ~10^6 of them, ~40 bytes each here instead of ~200 as tuples."""

    __slots__ = ("ts", "end", "key", "pyid", "parent", "name", "names", "keys", "_names",
                 "_keys")

    def __init__(self) -> None:
        self.ts, self.end = array("d"), array("d")
        self.key, self.name = array("l"), array("l")
        self.pyid, self.parent = array("q"), array("q")  # -1: none
        self.names: list[str] = []
        self.keys: list[tuple] = []
        self._names: dict[str, int] = {}
        self._keys: dict[tuple, int] = {}

    def add(self, ts: float, end: float, key: tuple, pyid, parent, name: str) -> None:
        self.ts.append(ts)
        self.end.append(end)
        k = self._keys.get(key)
        if k is None:
            k = self._keys[key] = len(self.keys)
            self.keys.append(key)
        self.key.append(k)
        n = self._names.get(name)
        if n is None:
            n = self._names[name] = len(self.names)
            self.names.append(name)
        self.name.append(n)
        self.pyid.append(pyid if isinstance(pyid, int) else -1)
        self.parent.append(parent if isinstance(parent, int) else -1)

    def __len__(self) -> int:
        return len(self.ts)


class TraceReadError(DiagError):
    """A path that is not a readable torch-profiler trace (exit 3, one line)."""


@dataclass(slots=True)
class Trace:
    """What one trace file holds, reduced. Times are microseconds as in the file."""

    path: str
    meta: dict = field(default_factory=dict)
    # (name, ts, end, pid, tid, dur): dur as written (ts + dur loses digits at ~1e12 us)
    annotations: list[tuple] = field(default_factory=list)
    # (name, ts, end, pid, tid, correlation)
    runtime: list[tuple] = field(default_factory=list)
    # (cat, name, ts, end, device, stream, correlation, graph_id or None)
    gpu: list[tuple] = field(default_factory=list)
    frames: Frames = field(default_factory=Frames)
    events: int = 0

    @property
    def rank(self) -> int | None:
        info = self.meta.get("distributedInfo")
        if isinstance(info, dict) and isinstance(info.get("rank"), int):
            return info["rank"]
        m = TP_RANK.search(os.path.basename(self.path))
        return int(m.group(1)) if m else None

    @property
    def stage(self) -> str | None:
        """SGLang's stage profiling names each file `...-{STAGE}.trace.json.gz` (0.5.23
        `managers/scheduler_components/profiler_manager.py:338-358`)."""
        m = STAGE_FILE.search(os.path.basename(self.path))
        return m.group(1) if m else None

    @property
    def platform(self) -> str:
        if any(k in self.meta for k in ("roctracer_version", "rocprofiler-sdk_version",
                                        "hip_runtime_version")):
            return "rocm"
        if any(k in self.meta for k in ("cupti_version", "cuda_runtime_version")):
            return "cuda"
        names = {r[0][:3] for r in self.runtime[:200]}
        return "rocm" if "hip" in names else "cuda" if "cud" in names or "cuL" in names else "cpu"

    @property
    def versions(self) -> dict:
        return {k: self.meta[k] for k in VERSION_KEYS if k in self.meta}


def _open(path: str):
    try:
        f = open(path, "rb")  # noqa: SIM115 (closed by the caller's with)
    except OSError as e:
        raise TraceReadError(f"{path}: cannot read: {e.strerror or e}") from None
    if f.read(2) == b"\x1f\x8b":
        f.seek(0)
        return gzip.GzipFile(fileobj=f, mode="rb")
    f.seek(0)
    return f


def _header(path: str) -> dict:
    """The top-level keys before `traceEvents` (Kineto writes its metadata there)."""
    import ijson

    meta: dict = {}
    with _open(path) as f:
        it = ijson.parse(f, use_float=True)
        for prefix, event, value in it:
            if prefix == "" and event == "start_array":
                break  # a bare event list: not what torch.profiler writes
            if prefix != "" or event != "map_key":
                continue
            if value == "traceEvents":
                return meta
            key = value
            _, event, value = next(it)
            if event not in ("start_map", "start_array"):
                meta[key] = value
                continue
            builder, depth = ijson.ObjectBuilder(), 1
            builder.event(event, value)
            for _, event, value in it:
                builder.event(event, value)
                depth += event in ("start_map", "start_array")
                depth -= event in ("end_map", "end_array")
                if depth == 0:
                    break
            meta[key] = builder.value
    raise TraceReadError(f"{path}: not a torch-profiler trace (no traceEvents list)")


def read(path: str) -> Trace:
    """Read one trace file; TraceReadError (one line) for anything that is not one."""
    import ijson

    if not os.path.exists(path):
        raise TraceReadError(f"{path}: no such file")
    try:
        meta = _header(path)
    except TraceReadError:
        raise
    except (ijson.JSONError, ijson.IncompleteJSONError, EOFError, OSError, ValueError) as e:
        raise TraceReadError(f"{path}: not a JSON trace ({_short(e)})") from None
    tr = Trace(path=path, meta={k: v for k, v in meta.items() if k != "deviceProperties"})
    ann, rt, gpu, frames = tr.annotations, tr.runtime, tr.gpu, tr.frames
    intern: dict[str, str] = {}
    n = 0
    try:
        with _open(path) as f:
            for e in ijson.items(f, "traceEvents.item", use_float=True):
                n += 1
                if not isinstance(e, dict) or e.get("ph") != "X":
                    continue
                cat = e.get("cat")
                try:
                    ts = float(e["ts"])
                    dur = float(e.get("dur", 0.0))
                    end = ts + dur
                except (KeyError, TypeError, ValueError):
                    continue
                name = e.get("name", "")
                name = intern.setdefault(name, name)
                args = e.get("args") or {}
                if cat == "python_function":
                    frames.add(ts, end, (e.get("pid"), e.get("tid")), args.get("Python id"),
                               args.get("Python parent id"), name)
                elif cat in GPU_CATS:
                    gid = args.get("graph id")
                    gpu.append((cat, name, ts, end, args.get("device", e.get("pid")),
                                args.get("stream", e.get("tid")), args.get("correlation"),
                                gid if gid not in (None, 0) else None))
                elif cat in RUNTIME_CATS:
                    rt.append((name, ts, end, e.get("pid"), e.get("tid"),
                               args.get("correlation")))
                elif cat == "user_annotation":
                    ann.append((name, ts, end, e.get("pid"), e.get("tid"), dur))
    except (ijson.JSONError, ijson.IncompleteJSONError, EOFError, OSError, ValueError) as e:
        raise TraceReadError(f"{path}: truncated or malformed trace ({_short(e)})") from None
    if n == 0:
        raise TraceReadError(f"{path}: the trace has no events")
    tr.events = n
    ann.sort(key=lambda t: (t[1], -t[2]))  # outer span first when two start together
    rt.sort(key=lambda t: t[1])
    gpu.sort(key=lambda t: t[2])
    return tr


def _short(e: BaseException) -> str:
    return str(e).splitlines()[0][:120] if str(e) else type(e).__name__
